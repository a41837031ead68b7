"""A perf.data that perf recorded alone (perf record, perf sched record), without
'offcpu record': what capture.json would say of it, read from its header and
its events, and what it lacks that a capture has, said once in every report.

Such a file has no threads seen at the start, no saved kernel symbols and no
measured switch cost; it may lack wakeups (no blocked/run-queue split, no
wakers) and switch records (a thread's return is seen only at a recorded
sched_switch that names it). Its model is built each time: nothing is written
beside a file offcpu did not make.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from offcpu import _core
from offcpu.capture import METADATA, CaptureInfo, Target
from offcpu.errors import OffcpuError
from offcpu.files import open_regular
from offcpu.machine import system
from offcpu.model import Model
from offcpu.reading.describe import count_records, first_events
from offcpu.reading.native_reader import open_perf_data, reading
from offcpu.reading.perf_script import PerfScriptReader
from offcpu.recording.events import SCHEDSTATS_TRACEPOINTS, SWITCH_TRACEPOINT, WAKING_TRACEPOINTS

# perf.data's feature sections (perf's HEADER_* bits) read here
FEATURE_OSRELEASE, FEATURE_VERSION = 4, 5
# perf_event_attr.sample_type bits
SAMPLE_CALLCHAIN, SAMPLE_BRANCH_STACK, SAMPLE_STACK_USER = 1 << 5, 1 << 11, 1 << 13
MAGIC = _core.PERF_MAGIC
MAGIC_SWAPPED = MAGIC[::-1]
# perf record's options that take a value as the next argument (the rest are flags)
VALUED_OPTIONS = frozenset({
    "-e", "--event", "-p", "--pid", "-t", "--tid", "-o", "--output", "-c", "--count", "-F", "--freq", "-m",
    "--mmap-pages", "-C", "--cpu", "-G", "--cgroup", "-u", "--uid", "--call-graph", "--filter", "-r", "--realtime",
    "-D", "--delay", "-k", "--clockid", "-j", "--branch-filter", "--max-size", "--affinity", "--user-regs",
    "--intr-regs", "--exclude-perf", "--switch-output-event", "--control", "-z", "--compression-level",
})
WHAT_TO_RECORD = "perf record -g -e sched:sched_switch -e sched:sched_waking -p PID (or 'offcpu record')"


def is_perf_data(path: Path) -> bool:
    """Whether `path` is a perf.data recorded by perf alone: a file that begins as a perf.data
    does, and not the one of a capture directory (which is reported as its capture)."""
    if (path.parent / METADATA).is_file():
        return False
    try:
        with open_regular(path) as file:
            return file.read(len(MAGIC)) in (MAGIC, MAGIC_SWAPPED)
    except OSError:  # a directory, nothing there, or no regular file
        return False


def plain_info(path: Path) -> CaptureInfo:
    """What capture.json would say of a perf.data recorded by perf alone (see lacks() for
    what a capture would have that it has not). OffcpuError when it holds no sched_switch
    with call chains, with what to record instead."""
    perf = system.require_perf()
    with reading(path):
        data = open_perf_data(path)
        info = _from_header(path, data)
        count_records(data, info)
    info.perf_data_bytes = path.stat().st_size
    first = first_events(PerfScriptReader(perf, path))
    info.user_stacks_truncated = first.user_stacks_truncated
    return info


def _from_header(path: Path, data: _core.PerfData) -> CaptureInfo:
    names = dict(data.tracepoint_events())
    switch = names.get(SWITCH_TRACEPOINT)
    if switch is None:
        raise OffcpuError(f"{path} holds no {SWITCH_TRACEPOINT} events, which off-CPU time comes from "
                          f"(it has {', '.join(names) or 'no tracepoints'}); record with {WHAT_TO_RECORD}")
    if not switch & SAMPLE_CALLCHAIN:
        raise OffcpuError(f"{path} holds {SWITCH_TRACEPOINT} without call chains, so no wait has a stack; "
                          f"record with -g: {WHAT_TO_RECORD}")
    times = data.sample_times()
    if times is None:
        raise OffcpuError(f"{path} holds no events; record with {WHAT_TO_RECORD}")
    first_ns, last_ns = times
    argv = data.command_line() or []
    stacks = "dwarf" if switch & SAMPLE_STACK_USER else "lbr" if switch & SAMPLE_BRANCH_STACK else "fp"
    seconds = max(last_ns - first_ns, 1) / 1e9
    return CaptureInfo(
        target=_target(argv), perf_command=argv, kernel_release=data.feature_string(FEATURE_OSRELEASE),
        perf_version=data.feature_string(FEATURE_VERSION), cpus=max(data.cpus_online() or os.cpu_count() or 1, 1),
        call_graph=stacks,
        events=[{"name": name, "call_graph": bool(sample_type & SAMPLE_CALLCHAIN), "why": "recorded by perf"}
                for name, sample_type in names.items()],
        events_skipped=[], duration_requested_s=seconds, schedstats=_schedstats(names), limits=None,
        window_start_ns=first_ns, window_end_ns=max(last_ns, first_ns + 1), duration_actual_s=seconds,
        ended_by="perf exited")


def name_target(model: Model) -> None:
    """Name the recorded process or thread after its events (the command line has only its number)."""
    target = model.capture.target
    if target.comm or target.kind not in ("pid", "tid"):
        return
    threads = [thread for thread in model.threads.values()
               if thread.tid == target.tid or (target.tid is None and thread.pid == target.pid)]
    if threads:  # the process's main thread when it has events, else one of its threads
        named = min(threads, key=lambda thread: (thread.tid != thread.pid, thread.tid))
        model.capture.target = replace(target, comm=named.comm, pid=named.pid)


def lacks(info: CaptureInfo) -> list[str]:
    """What the recording lacks that a capture of 'offcpu record' has, and what follows, in sentences."""
    lacks = []
    recorded = {event["name"] for event in info.events}
    if not recorded & set(WAKING_TRACEPOINTS):
        lacks.append("perf.data holds no wakeups (sched:sched_waking or sched_wakeup): off-CPU time is not split "
                     "into blocked time and time waiting for a CPU (all of it counts as blocked, but a preempted "
                     "thread's), and no wait has a waker")
    if not info.switch_records and info.target.kind == "all":
        lacks.append("perf.data holds no switch records (perf record --switch-events): waits are timed from "
                     "sched_switch alone, which a recording of every CPU has for every switch")
    elif not info.switch_records:
        lacks.append("perf.data holds no switch records (perf record --switch-events): waits are timed from "
                     "sched_switch alone, and a thread switched in from one not recorded (the idle task, another "
                     "process) is not seen to come back: such a wait is left out (-a or --switch-events records "
                     "them)")
    if info.kernel_release == system.kernel_release():
        lacks.append("perf.data comes with no copy of the kernel's symbols: kernel frames are named from this "
                     f"machine's, which runs the kernel that recorded it ({info.kernel_release})")
    else:
        lacks.append(f"perf.data comes with no copy of the kernel's symbols, and this machine runs kernel "
                     f"{system.kernel_release()}, not the recorded {info.kernel_release}: kernel frames are "
                     "[unknown]")
    return lacks


def _target(argv: list[str]) -> Target:
    """What perf recorded, from its command line: -p, -t, -G or -a, and a command run meanwhile."""
    options, command = _split_command(argv)
    command_comm = os.path.basename(command[0]) if command else ""
    values = dict(zip(options, [*options[1:], ""], strict=False))  # each option and the word after it
    pids = values.get("-p") or values.get("--pid") or ""
    numbers = tuple(int(pid) for pid in pids.split(",") if pid.isdecimal())
    if numbers:
        return Target("pid", "", numbers[0], pids=numbers, command=tuple(command))
    tid = values.get("-t") or values.get("--tid")
    if tid and tid.split(",")[0].isdecimal():
        return Target("tid", "", tid=int(tid.split(",")[0]), command=tuple(command))
    cgroup = values.get("-G") or values.get("--cgroup")
    if cgroup:
        return Target("cgroup", cgroup, cgroup=cgroup.lstrip("/"), command=tuple(command))
    sched = "sched" in argv[:argv.index("record")] if "record" in argv else False  # perf sched record: -a
    whole = sched or "--all-cpus" in options or any(option[1:2] != "-" and "a" in option[1:] for option in options
                                           if option.startswith("-") and option not in VALUED_OPTIONS)
    if whole or not command:
        return Target("all", "all", command=tuple(command))
    return Target("command", command_comm, command=tuple(command))


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """perf record's options (after 'record'), and the command it ran (perf stops at the
    first argument that is no option)."""
    rest = argv[argv.index("record") + 1:] if "record" in argv else []
    at = 0
    while at < len(rest):
        word = rest[at]
        if word == "--":
            return rest[:at], rest[at + 1:]
        if not word.startswith("-") or word == "-":
            return rest[:at], rest[at:]
        at += 2 if word in VALUED_OPTIONS else 1
    return rest, []


def _schedstats(names: dict) -> str:
    """As capture.json says it: "on" when the file holds schedstats' events, else unknown."""
    return "on" if set(names) & set(SCHEDSTATS_TRACEPOINTS) else "unknown"
