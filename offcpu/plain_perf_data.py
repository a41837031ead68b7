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
import struct
from dataclasses import replace
from pathlib import Path

from offcpu import system
from offcpu.capture import METADATA, CaptureInfo, Target
from offcpu.describe import event_counts, first_events
from offcpu.errors import OffcpuError
from offcpu.events import SCHEDSTATS_TRACEPOINTS, SWITCH_TRACEPOINT, WAKING_TRACEPOINTS
from offcpu.model import Model
from offcpu.perf_data import (
    MAGIC,
    MAGIC_SWAPPED,
    SAMPLE,
    SAMPLE_BRANCH_STACK,
    SAMPLE_CALLCHAIN,
    SAMPLE_STACK_USER,
    TYPE_TRACEPOINT,
    Clock,
    PerfData,
    damaged,
    index_records,
    open_perf_data,
)
from offcpu.perf_script import PerfScriptReader

# perf.data's feature sections (perf's HEADER_* bits) read here
FEATURE_OSRELEASE, FEATURE_VERSION, FEATURE_NRCPUS, FEATURE_CMDLINE, FEATURE_SAMPLE_TIME = 4, 5, 7, 11, 21
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
        with path.open("rb") as file:
            return file.read(len(MAGIC)) in (MAGIC, MAGIC_SWAPPED)
    except OSError:  # a directory, or nothing there
        return False


def plain_info(path: Path) -> CaptureInfo:
    """What capture.json would say of a perf.data recorded by perf alone (see lacks() for
    what a capture would have that it has not). OffcpuError when it holds no sched_switch
    with call chains, with what to record instead."""
    perf = system.require_perf()
    data = open_perf_data(path)
    try:
        info = _from_header(data)
    finally:
        data.map.close()
    counts, info.lost_events = event_counts(perf, path)
    info.samples = counts.get("SAMPLE", 0)
    info.switch_records = counts.get("SWITCH", 0) + counts.get("SWITCH_CPU_WIDE", 0)
    info.perf_data_bytes = path.stat().st_size
    first = first_events(PerfScriptReader(perf, path))
    info.user_stacks_truncated = first.user_stacks_truncated
    return info


def _from_header(data: PerfData) -> CaptureInfo:
    names = {data.tracepoints[attr.config].full_name: attr for attr in data.attrs
             if attr.type == TYPE_TRACEPOINT and attr.config in data.tracepoints}
    switch = names.get(SWITCH_TRACEPOINT)
    if switch is None:
        raise OffcpuError(f"{data.path} holds no {SWITCH_TRACEPOINT} events, which off-CPU time comes from "
                          f"(it has {', '.join(names) or 'no tracepoints'}); record with {WHAT_TO_RECORD}")
    if not switch.sample_type & SAMPLE_CALLCHAIN:
        raise OffcpuError(f"{data.path} holds {SWITCH_TRACEPOINT} without call chains, so no wait has a stack; "
                          f"record with -g: {WHAT_TO_RECORD}")
    times = _sample_times(data)
    if times is None:
        raise OffcpuError(f"{data.path} holds no events; record with {WHAT_TO_RECORD}")
    first_ns, last_ns = times
    argv = recorded_command(data) or []
    stacks = "dwarf" if switch.sample_type & SAMPLE_STACK_USER else \
        "lbr" if switch.sample_type & SAMPLE_BRANCH_STACK else "fp"
    seconds = max(last_ns - first_ns, 1) / 1e9
    return CaptureInfo(
        target=_target(argv), perf_command=argv, kernel_release=_string(data, FEATURE_OSRELEASE),
        perf_version=_string(data, FEATURE_VERSION), cpus=_cpus(data), call_graph=stacks,
        events=[{"name": name, "call_graph": bool(attr.sample_type & SAMPLE_CALLCHAIN), "why": "recorded by perf"}
                for name, attr in names.items()],
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


def _sample_times(data: PerfData) -> tuple[int, int] | None:
    """When its first and last samples came (None: it holds none): from its header, unless
    perf skipped the pass that writes it there (--buildid-mmap, -B: it says 0), else from
    the first and last rounds that hold samples and the two rounds after, or before, each
    (perf writes no record earlier than two rounds before its own). Events enabled late
    (-D, --control, as offcpu records) leave the first rounds without samples."""
    if FEATURE_SAMPLE_TIME in data.features:
        try:
            first_ns, last_ns = struct.unpack_from("<QQ", data.map, data.features[FEATURE_SAMPLE_TIME][0])
        except struct.error:
            raise damaged(data.path, "its sample times are damaged") from None
        if first_ns:
            return first_ns, last_ns
    rounds = [*index_records(data).round_starts, data.data_end]
    clock, words = Clock.of(data), data.words

    def times(round_index: int) -> list[int]:
        position, end, found = rounds[round_index], rounds[round_index + 1], []
        while position < end:
            if words[position >> 1] == SAMPLE:
                found.append(clock.time_of(words, data.map, position))
            position += words[(position >> 1) + 3]
        return found

    count = len(rounds) - 1
    first_with = next((index for index in range(count) if times(index)), None)
    if first_with is None:
        return None
    last_with = next(index for index in reversed(range(count)) if times(index))
    first = [time for index in range(first_with, min(first_with + 3, count)) for time in times(index)]
    last = [time for index in range(max(last_with - 2, 0), last_with + 1) for time in times(index)]
    return min(first), max(last)


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
    values = {option: value for option, value in zip(options, [*options[1:], ""], strict=True)}
    pids = values.get("-p") or values.get("--pid")
    if pids:
        numbers = tuple(int(pid) for pid in pids.split(",") if pid.isdecimal())
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


def _string(data: PerfData, feature: int) -> str:
    """A feature section that holds one string (perf's u32 length, then the NUL-padded bytes)."""
    if feature not in data.features:
        return ""
    offset, _ = data.features[feature]
    try:
        (length,) = struct.unpack_from("<I", data.map, offset)
    except struct.error:
        raise damaged(data.path, "a string of its header is damaged") from None
    return bytes(data.map[offset + 4:offset + 4 + length]).rstrip(b"\0").decode(errors="replace")


def recorded_command(data: PerfData) -> list[str] | None:
    """The arguments perf recorded with, from perf.data's header (None when it has none: a
    pipe's): a count, then each argument as a length and as many bytes, NUL-padded."""
    if FEATURE_CMDLINE not in data.features:
        return None
    offset, size = data.features[FEATURE_CMDLINE]
    try:
        (count,), at = struct.unpack_from("<I", data.map, offset), offset + 4
        arguments = []
        for _ in range(count):
            (length,), at = struct.unpack_from("<I", data.map, at), at + 4
            if at + length > offset + size:
                raise struct.error("past its section")
            arguments.append(bytes(data.map[at:at + length]).rstrip(b"\0").decode(errors="replace"))
            at += length
    except struct.error:
        raise damaged(data.path, "the command it was recorded with is damaged") from None
    return arguments


def _cpus(data: PerfData) -> int:
    """The CPUs online when it was recorded (perf's nr_cpus_available, then nr_cpus_online)."""
    if FEATURE_NRCPUS not in data.features:
        return os.cpu_count() or 1
    try:
        _, online = struct.unpack_from("<II", data.map, data.features[FEATURE_NRCPUS][0])
    except struct.error:
        raise damaged(data.path, "its count of CPUs is damaged") from None
    return max(online, 1)


def _schedstats(names: dict) -> str:
    """As capture.json says it: "on" when the file holds schedstats' events, else unknown."""
    return "on" if set(names) & set(SCHEDSTATS_TRACEPOINTS) else "unknown"
