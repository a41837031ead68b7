"""The `perf record` command line a recording runs, and what perf's complaints about it
mean for the user."""

from __future__ import annotations

import math
import re
import resource
from collections.abc import Callable

from offcpu.capture import PERF_DATA, Target
from offcpu.errors import OffcpuError
from offcpu.machine import system
from offcpu.recording.events import EventPlan
from offcpu.recording.perf_process import CONTROL_PLACEHOLDER
from offcpu.recording.request import RecordRequest

CAPTURED_LINE = "Captured and wrote"  # perf record's last line, once perf.data is complete
WRITTEN_LINE = re.compile(rf"{CAPTURED_LINE} ([\d.]+) MB")
WOKEN_LINE = re.compile(r"Woken up (\d+) times")  # how often perf woke to read its buffers
SIZE_LIMIT_LINE = "size limit reached"  # perf record stopping at --max-size
PROCESS_GONE = "No such process"  # what perf says of a process it was given that has exited


def perf_record_argv(perf: str, perf_version: str, request: RecordRequest, target: Target,
                     plan: EventPlan) -> list[str]:
    argv = [
        perf, "record", "-o", str(request.output / PERF_DATA), "--max-size", request.max_size,
        "--call-graph", request.call_graph, "-k", "CLOCK_MONOTONIC", f"--control={CONTROL_PLACEHOLDER}",
        *plan.perf_args(),
    ]
    # Events start off and offcpu switches them on, except for a command alone: perf runs
    # it once its events are open and they switch on as it execs, so that none of
    # its threads is created, and no short command ends, before the recording.
    # (Running the command through a program that waits for a word and then execs
    # it would do too, but perf 6.1 cannot unwind dwarf stacks after a second exec.)
    # A command run while another target is recorded starts as perf's events open,
    # a moment before offcpu switches them on.
    if target.kind != "command":
        argv += ["-D", "-1"]
    if request.mmap_pages:
        argv += ["--mmap-pages", request.mmap_pages]
    # Switch records give the moment each thread comes back on CPU: a task-bound
    # sched_switch fires only for the task leaving, and system-wide ones out of
    # the idle task are not always delivered (seen on 6.18); switch records are.
    # ... on the CPU they are on (a task-bound recording leaves it out of its switch
    # records otherwise): what ran there before tells what a switch-in cost.
    argv += ["--switch-events", "--sample-cpu"]
    # Each mapped file's build id in its MMAP2 record, so that a report elsewhere, or after
    # a rebuild, names user frames only from the very same file (perf.data's BUILD_ID
    # section held the kernel's alone); perf then skips its pass for build ids at the end.
    if system.records_build_ids_in_mmaps(perf_version):
        argv += ["--buildid-mmap"]
    return argv + target.perf_args()


# perf's complaint, and what to do about it (read when a failure is explained)
PERF_FAILURES: tuple[tuple[re.Pattern[str], Callable[[], str]], ...] = (
    (re.compile(r"No space left on device"), lambda: "the disk is full; free space or record elsewhere with -o"),
    (re.compile(r"Permission denied|No permission|perf_event_paranoid|Access to performance monitoring"),
     lambda: system.permission_hint(system.read_int_sysctl("kernel.perf_event_paranoid"))),
    (re.compile(r"No such process|Couldn't create thread"), lambda: "the target process does not exist (any more)"),
    (re.compile(r"Too many events are opened"),
     lambda: "perf opens each event once for each thread of the target, and the target's threads need more files "
             f"than perf may open ({_open_files_limit()}); record fewer processes, or the cgroup that holds them "
             "(--cgroup), whose events are opened once a CPU"),
    (re.compile(r"Read-only file system"),
     lambda: "the output directory is on a read-only file system; choose another with -o"),
)


def wakeups(stderr: list[str]) -> int | None:
    """How often perf woke to read its buffers, as it says once it has ended."""
    for line in stderr:
        said = WOKEN_LINE.search(line)
        if said:
            return int(said[1])
    return None


def _open_files_limit() -> str:
    """What limits the files perf may open: it raises its soft limit to the hard one."""
    return f"ulimit -Hn is {resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,}"


def perf_failure(stderr: list[str], request: RecordRequest) -> OffcpuError:
    """What went wrong, from what perf said (`stderr`), and what to do about it."""
    text = "\n".join(stderr)
    written = WRITTEN_LINE.search(text)
    if SIZE_LIMIT_LINE in text and written:  # it stopped there before the recording began
        return _too_small(request.max_size, written[1])
    for pattern, explain in PERF_FAILURES:
        if pattern.search(text):
            return OffcpuError(f"perf record failed: {explain()}")
    if request.target.command and "failed to start" in text.lower():
        return OffcpuError(f"could not start {request.target.command[0]}: check the command and its path")
    last = next((line.strip() for line in reversed(stderr) if line.strip()), "no message")
    return OffcpuError(f"perf record failed: {last}")


def _too_small(max_size: str, written_mb: str) -> OffcpuError:
    """--max-size was reached by what perf writes before any event (the target's threads and maps)."""
    room = 1 << math.ceil(math.log2(max(2 * float(written_mb), 1)))  # as much again for events, a round number
    return OffcpuError(f"--max-size {max_size} is too small to hold anything: perf wrote {written_mb} MB about the "
                       f"target's threads and memory maps before any event; give more than that, such as {room}M")
