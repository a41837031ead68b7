"""A capture on disk: a directory with perf.data and capture.json.

capture.json says what was recorded and how, so that reports can be read
long after the recording and on another machine.
"""

from __future__ import annotations

import errno
import json
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from offcpu.errors import OffcpuError, more_in
from offcpu.escaping import printable
from offcpu.files import PARTIAL, PRIVATE, read_json, write_whole
from offcpu.stacks import ASLEEP_ALL_WINDOW, Stack

SCHEMA = "offcpu-capture/1"
PERF_DATA = "perf.data"
METADATA = "capture.json"
# Every file offcpu (or perf for it) writes in a capture directory, besides any
# ending in PARTIAL; `offcpu record --force` deletes these and nothing else.
MODEL_FILE = "model.json"  # the report's cache of the model (offcpu.model.loading)
KERNEL_SYMBOLS = "kallsyms"  # the kernel's symbols when it was recorded (offcpu.reading.symbols)
VDSO_IMAGE = "vdso"  # the kernel's vdso when it was recorded (offcpu.reading.symbols)
SNAPSHOT = "snapshot.json"  # the stacks of threads asleep through the recording (offcpu.model.asleep)
# A recording made with BPF instead of perf (docs/capture.md; offcpu.reading.bpf_reader):
BPF_RECORDS = "bpf-records.bin"  # its waits, forks, exits and names
BPF_STACKS = "bpf-stacks.bin"  # its stack table
BPF_MAPS = "bpf-maps.json"  # the memory maps of its processes (offcpu.recording.process_maps)
RUNTIME_STACKS = "runtime-stacks.json"  # its runtimes' stacks read while recording (offcpu.runtime_frames)
PERF_MAPS = "perf-maps.json"  # its processes' perf maps, read at its end (offcpu.recording.perf_maps)
OWN_FILES = (PERF_DATA, f"{PERF_DATA}.old", METADATA, MODEL_FILE, KERNEL_SYMBOLS, VDSO_IMAGE, SNAPSHOT, BPF_RECORDS,
             BPF_STACKS, BPF_MAPS, RUNTIME_STACKS, PERF_MAPS)
# In the directory while offcpu records into it; left there, it marks an unfinished recording.
RECORDING = f"recording{PARTIAL}"
# The most capture.json holds: a few KB, and about 100 bytes for each thread of the target at
# its start (threads_at_start, processes_at_start): room for a million threads
METADATA_MAX = 128 << 20
# perf wakes to read at least a watermark of its buffer (kilobytes), a few hundred times a
# second on a busy recording; spinning, tens of thousands of times, reading nothing (measured)
SPINNING_WAKEUPS_PER_S = 1000
SPINNING_BYTES_PER_WAKEUP = 512


@dataclass(frozen=True)
class Target:
    """What perf records, and the command it runs meanwhile (the target itself, alone)."""

    kind: str  # "pid" (processes), "tid", "cgroup", "all" or "command" (the command alone)
    comm: str  # its name: its (first) process's, the cgroup's or unit's, the command's program
    pid: int | None = None  # its process: the first of pids, the thread's, or the command's once it ran
    tid: int | None = None
    command: tuple[str, ...] = ()  # "command": what is recorded; otherwise run while the target is recorded
    pids: tuple[int, ...] = ()  # "pid": every process recorded from the start (perf's --pid list)
    # "cgroup": its path in the cgroup v2 hierarchy, as perf's -G takes it; "pid": the cgroup that
    # holds those processes and no other, when perf records them through it (targets.cgroup_of_only)
    cgroup: str = ""
    unit: str = ""  # the systemd unit whose cgroup that is
    # How a "pid" target's processes were chosen, as given: by pid, with their descendants,
    # by name, by executable
    by_pid: tuple[int, ...] = ()
    by_tree: tuple[int, ...] = ()
    by_comm: str = ""
    by_exe: str = ""
    command_pid: int | None = None  # the command run while the target is recorded, once it ran

    def describe(self) -> str:
        """The target in words, for people (see escaping.printable)."""
        if self.kind == "command":
            return printable(f"command {shlex.join(self.command)}") + (f" (pid {self.pid})" if self.pid else "")
        alongside = printable(f" while {shlex.join(self.command)} ran") if self.command else ""
        return self.recorded() + alongside

    def recorded(self) -> str:
        """What perf records, in words (without the command run meanwhile)."""
        if self.kind == "all":
            return "all CPUs"
        if self.kind == "tid":
            return f"thread {self.tid} of {printable(self.comm)} (pid {self.pid})"
        if self.kind == "cgroup":
            return printable(f"unit {self.unit} (cgroup /{self.cgroup})" if self.unit else f"cgroup /{self.cgroup}")
        if len(self.pids) <= 1 and not (self.by_tree or self.by_comm or self.by_exe):
            return f"{printable(self.comm)} (pid {self.pid})"
        started = f"{len(self.pids)} process{'es' * (len(self.pids) != 1)} at the start"
        through = printable(f", through their cgroup /{self.cgroup}") if self.cgroup else ""
        return f"{printable(', '.join(self._chosen()))} ({started}{through})"

    def _chosen(self) -> list[str]:
        """How the processes were chosen, in words."""
        listed = ", ".join(map(str, self.by_pid))
        trees = ", ".join(map(str, self.by_tree))
        return [words for given, words in (
            (self.by_pid, f"pid{'s' * (len(self.by_pid) > 1)} {listed}"),
            (self.by_tree, f"pid{'s' * (len(self.by_tree) > 1)} {trees} and descendants"),
            (self.by_comm, f"processes named {self.by_comm}"),
            (self.by_exe, f"processes of {self.by_exe}")) if given]

    def perf_args(self) -> list[str]:
        """How `perf record` is told to record this target (the last of its arguments)."""
        by_pid = ["--all-cpus", "--cgroup", self.cgroup] if self.cgroup else \
            ["--pid", ",".join(map(str, self.pids or (self.pid,)))]
        recorded = {"pid": by_pid, "tid": ["--tid", str(self.tid)],
                    "cgroup": ["--all-cpus", "--cgroup", self.cgroup], "all": ["--all-cpus"], "command": []}
        return recorded[self.kind] + (["--", *self.command] if self.command else [])


@dataclass
class CaptureInfo:
    target: Target
    perf_command: list[str]
    kernel_release: str
    perf_version: str
    cpus: int
    call_graph: str
    events: list[dict]  # {"name", "call_graph", "why"}
    events_skipped: list[dict]  # {"name", "why"}
    duration_requested_s: float
    schedstats: str  # as it was while recording: "absent", "off" or "on"
    # offcpu.machine.limits.LimitsSnapshot.to_json() at the start, of the target's process nearest its
    # limits (None for -a, and for a command: not started yet)
    limits: dict | None
    window_start_ns: int = 0  # CLOCK_MONOTONIC, the clock perf.data's timestamps use
    window_end_ns: int = 0
    started_at: str = ""  # wall clock, ISO 8601
    ended_at: str = ""
    duration_actual_s: float = 0.0
    # "duration", "target exited", "command exited" (a command run while the target was recorded),
    # "perf exited", "SIGINT", "SIGTERM", "SIGHUP", "max size", "perf spinning" (ended early: see spin_note)
    ended_by: str = ""
    target_exited: bool = False
    # A command's exit status, -N when signal N killed it; None when it did not end by
    # itself (the recording ended first) and when there was none
    command_exit_status: int | None = None
    # The recording ended the command, which (or what it started) did not end within a grace
    # after SIGTERM: it was killed (SIGKILL)
    command_killed: bool = False
    # What the recording sent the command it ran when it ended while the command still ran (cut
    # short by the duration, the size limit, an interrupt or the target's exit): ["SIGTERM"], with
    # "SIGKILL" after when it outlived the grace; empty when the command ended by itself or there was none
    command_cut_short: list[str] = field(default_factory=list)
    # The target's threads when the events were enabled, {tid: [comm, state letter]}
    # (state as in /proc/PID/stat): threads that block throughout have no events.
    # Empty for -a (and in captures made before this field).
    threads_at_start: dict[str, list] = field(default_factory=dict)
    # {tid: pid} of threads_at_start: the process each was of (perf.data says it only with
    # a thread's events). Empty in captures made before this field.
    processes_at_start: dict[str, int] = field(default_factory=dict)
    # The snapshot nearest the limits, of those taken each second while recording
    # (a thread-per-request server grows); None for -a or when none could be taken.
    limits_peak: dict | None = None
    # {pid: comm} of processes of the name or executable asked for (--comm, --exe) that
    # started while recording outside the recorded processes: perf could not record them.
    unrecorded_processes: dict[str, str] = field(default_factory=dict)
    # {pid: command line} of the recorded processes whose name another of them shares, as they
    # showed it when the recording ended (or began, for those gone by then): a server's process
    # title (PostgreSQL's backends') tells its processes apart. Empty in older captures.
    process_titles: dict[str, str] = field(default_factory=dict)
    # The recorded processes' cgroups (Cgroup.to_json(), offcpu.machine.cgroups), read at the start
    # and the end: CPU limits and throttling, memory.high events, pids limits. Empty in older captures.
    cgroups: list[dict] = field(default_factory=list)
    samples: int = 0
    switch_records: int = 0
    lost_events: int = 0
    perf_data_bytes: int = 0
    user_stacks_truncated: bool | None = None  # None: no user stacks to judge
    # The median time from a switch to perf's record of the thread coming in, where both are
    # recorded: what a switch-in from an unrecorded thread (idle, another process) is placed
    # before perf's record of it. None: not measured (a capture of every CPU has no need).
    switch_cost_ns: int | None = None
    # How often perf woke to read its buffers ("Woken up N times"), and its CPU time from its
    # start to the window's end (user and system); None: not known (older captures)
    perf_wakeups: int | None = None
    perf_cpu_s: float | None = None
    # What recorded it, as offcpu.kinds names it: perf (perf.data) or offcpu's BPF programs
    # (bpf-records.bin, bpf-stacks.bin), and why that one (offcpu.recording.backends)
    backend: str = "perf"
    backend_why: str = ""
    # A BPF recording's own counts (waits, sampled, waker_stacks, lost_records, lost_waits,
    # stack_errors, unseen_switches, missed_runs, bytes_written, stacks_held: the distinct stacks in its
    # table) and its stack budget (stacks_per_second per CPU, long_wait_ns): see core/src/bpf/offcpu.bpf.c
    # and core/src/bpf/stack_store.rs. None for perf.
    bpf: dict | None = None
    # What wrote it: "record", or a flight recorder's keeping of the last seconds ("top", "record --keep")
    recorded_by: str = "record"
    schema: str = field(default=SCHEMA)

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def lost_share(self) -> float:
        """The share of the events the recording meant to keep that it lost (0-1)."""
        return self.lost_events / max(self.samples + self.switch_records + self.lost_events, 1)

    @property
    def whole_run(self) -> bool:
        """Whether the recording holds its command's whole run: it ended as the command exited."""
        ended = "target exited" if self.target.kind == "command" else "command exited"
        return bool(self.target.command) and self.ended_by == ended and not self.command_cut_short

    @property
    def cut_short_note(self) -> str | None:
        """That the command was still running when the recording ended, why, and what it was
        sent; None when it ended by itself."""
        if not self.command_cut_short:
            return None
        at = _CUT_SHORT_AT.get(self.ended_by, f"when {self.ended_by} ended it")
        if self.ended_by == "duration":
            at = f"at its {self.duration_requested_s:g} s limit (--duration)"
        sent = ", then ".join(self.command_cut_short)
        return (f"the command {printable(shlex.join(self.target.command))} was still running {at}, and was sent "
                f"{sent}: what it did after is not recorded, so this is part of its run")

    @property
    def spin_note(self) -> str | None:
        """What it means when perf spun instead of waiting for events; None when it did not."""
        if self.perf_wakeups is None or self.perf_wakeups < SPINNING_WAKEUPS_PER_S * self.duration_actual_s or \
                self.perf_data_bytes > SPINNING_BYTES_PER_WAKEUP * self.perf_wakeups:
            return None
        cpu = f": it used {self.perf_cpu_s:.1f} s of CPU in {self.duration_actual_s:.1f} s, taken from the recorded " \
              "threads and the machine" if self.perf_cpu_s is not None else ""
        ended = f", so offcpu ended the recording after {self.duration_actual_s:.1f} s of the " \
                f"{self.duration_requested_s:g} s asked" if self.ended_by == "perf spinning" else ""
        return (f"perf spun instead of waiting for events (it woke {self.perf_wakeups:,} times{cpu}); perf 6.1 "
                f"does once one of several processes it records by pid has exited{ended}: record the cgroup that "
                "holds them (--cgroup) or the whole machine (-a) instead" + more_in("perf-spins"))

    def mmap_pages(self) -> int | None:
        """The ring buffer's pages per CPU asked of perf (--mmap-pages), None when perf chose."""
        options = self.perf_command[:self.perf_command.index("--")] if "--" in self.perf_command else self.perf_command
        for option, value in zip(options, options[1:], strict=False):  # each option and what follows it
            if option in ("--mmap-pages", "-m") and value.isdecimal():
                return int(value)
        return None

    @classmethod
    def from_json(cls, data: dict) -> CaptureInfo:
        """TypeError when `data` does not describe a capture."""
        target = data.get("target", {})
        if not isinstance(target, dict):
            raise TypeError(f"target is {type(target).__name__}, expected an object")
        _check_types(data, cls)
        _check_types(target, Target)
        target_fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                                         for key, value in target.items()}
        info = cls(**{**data, "target": Target(**target_fields)})
        _check_values(info)
        return info


# When a recording that ended its command did, by how it ended (but the duration, said with its limit)
_CUT_SHORT_AT = {"max size": "when the capture reached its size limit (--max-size)",
                 "target exited": "when the target exited", "SIGINT": "when Ctrl-C (SIGINT) ended the recording",
                 "SIGTERM": "when a SIGTERM ended the recording", "SIGHUP": "when a SIGHUP ended the recording"}


# What each annotation of CaptureInfo and Target allows in JSON.
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "int | None": (int, type(None)),
    "bool | None": (bool, type(None)), "dict | None": (dict, type(None)), "float | None": (int, float, type(None)),
    "list[str]": (list,), "list[dict]": (list,), "dict[str, list]": (dict,), "dict[str, str]": (dict,),
    "dict[str, int]": (dict,),
    "tuple[str, ...]": (list, tuple), "tuple[int, ...]": (list, tuple),
}


def _check_types(data: dict, kind: type) -> None:
    """TypeError naming the first field whose JSON value has the wrong type (a
    hand-edited or damaged capture.json), before any number is computed from it."""
    for item in fields(kind):
        if item.name not in data or item.name == "target":
            continue
        value, allowed = data[item.name], JSON_TYPES.get(str(item.type), (object,))
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise TypeError(f"{item.name} is {json.dumps(value)[:40]}, not {item.type}")


# The least each count and time of capture.json can be.
AT_LEAST = {"cpus": 1, "samples": 0, "switch_records": 0, "lost_events": 0, "perf_data_bytes": 0,
            "window_start_ns": 0, "duration_actual_s": 0}
TARGET_KINDS = ("pid", "tid", "cgroup", "all", "command")


def _check_values(info: CaptureInfo) -> None:
    """ValueError naming the first value that cannot be (a hand-edited or damaged capture.json),
    before anything is said or computed from it: a count below zero, a target that is none,
    threads, events or limits that are not what offcpu wrote."""
    _check_numbers(info)
    _check_target(info.target)
    _check_lists(info)


def _check_numbers(info: CaptureInfo) -> None:
    for name, least in AT_LEAST.items():
        if getattr(info, name) < least:
            raise ValueError(f"{name} is {getattr(info, name)}, less than {least}")
    if info.duration_requested_s <= 0:
        raise ValueError(f"duration_requested_s is {info.duration_requested_s}, not a duration")
    if info.window_end_ns <= info.window_start_ns:
        raise ValueError(f"its window, {info.window_start_ns} to {info.window_end_ns} ns, is empty")


def _check_target(target: Target) -> None:
    numbers = (target.pid, target.tid, target.command_pid, *target.pids, *target.by_pid, *target.by_tree)
    cgroup_kinds = ("cgroup", "pid") if target.cgroup else ("pid", "tid", "all", "command")  # see Target.cgroup
    if target.kind not in TARGET_KINDS or (target.kind == "command" and not target.command) or \
            target.kind not in cgroup_kinds or \
            any(not isinstance(number, int) or number < 1 for number in numbers if number is not None) or \
            not all(isinstance(word, str) for word in target.command):
        raise ValueError(f"target is {json.dumps(asdict(target))[:80]}, not processes, a thread, a cgroup, a command "
                         "or all CPUs")


def _check_lists(info: CaptureInfo) -> None:
    for tid, state in info.threads_at_start.items():
        if not (tid.isdecimal() and isinstance(state, list) and len(state) == 2
                and all(isinstance(item, str) for item in state)):
            raise ValueError(f"threads_at_start holds {json.dumps({tid: state})[:60]}, not a tid and its [comm, state]")
    if not all(tid.isdecimal() and isinstance(pid, int) and not isinstance(pid, bool) and pid > 0
               for tid, pid in info.processes_at_start.items()):
        raise ValueError("processes_at_start holds something other than tids and the pids of their processes")
    for name, names in (("unrecorded_processes", info.unrecorded_processes), ("process_titles", info.process_titles)):
        if not all(pid.isdecimal() and isinstance(text, str) for pid, text in names.items()):
            raise ValueError(f"{name} holds something other than pids and their names")
    for name, items, item_fields in (("events", info.events, EVENT_FIELDS),
                                     ("events_skipped", info.events_skipped, SKIPPED_FIELDS)):
        if not all(isinstance(item, dict) and _typed(item, item_fields) for item in items):
            raise ValueError(f"{name} holds something other than events as offcpu writes them")
    of_capture(info.cgroups)  # ValueError when they are not what offcpu wrote
    for name, snapshot in (("limits", info.limits), ("limits_peak", info.limits_peak)):
        if snapshot is not None and not _limits_snapshot(snapshot):
            raise ValueError(f"{name} is not a snapshot of the target's limits as offcpu writes it")


Fields = dict[str, type | tuple[type, ...]]  # a JSON object's keys and the types of their values
EVENT_FIELDS: Fields = {"name": str, "call_graph": bool, "why": str}
SKIPPED_FIELDS: Fields = {"name": str, "why": str}
LIMIT_FIELDS: Fields = {"name": str, "used": int, "limit": (int, type(None)), "what": str,
                        "share": (int, float, type(None))}


def _typed(item: dict, fields: Fields) -> bool:
    """Whether each of `fields` of `item` has its type (JSON's true is no number)."""
    return all(isinstance(item.get(name), kind) and (kind is bool or not isinstance(item.get(name), bool))
               for name, kind in fields.items())


def _limits_snapshot(snapshot: dict) -> bool:
    """Whether `snapshot` is offcpu.machine.limits.LimitsSnapshot.to_json(), as the findings read it."""
    limits = snapshot.get("limits")
    return isinstance(snapshot.get("threads"), int) and isinstance(limits, list) and all(
        isinstance(item, dict) and _typed(item, LIMIT_FIELDS) for item in limits)


def save(directory: Path, info: CaptureInfo) -> None:
    """Owner only: it holds the command line, whose arguments may be secrets."""
    write_whole(directory / METADATA, json.dumps(info.to_json(), indent=2) + "\n", mode=PRIVATE)


def is_capture(directory: Path) -> bool:
    """Whether `directory` holds a capture.json that offcpu wrote (its schema)."""
    try:
        data = read_json(directory / METADATA, METADATA_MAX)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def own_files(directory: Path) -> list[Path]:
    """The files of `directory` that offcpu wrote there (see OWN_FILES)."""
    return [path for path in directory.iterdir()
            if (path.name in OWN_FILES or path.name.endswith(PARTIAL)) and not path.is_dir()]


def is_file_of(path: Path, directory: Path) -> bool:
    """Whether `path` names one of the files offcpu keeps in `directory` (see OWN_FILES), by
    whatever links, whether it exists yet or not."""
    resolved = path.resolve()
    return resolved.parent == directory.resolve() and (resolved.name in OWN_FILES or resolved.name.endswith(PARTIAL))


def load(directory: Path) -> CaptureInfo:
    """Read a capture directory, with a fix-it message for whatever is missing or cannot be read."""
    try:
        return _load(directory)
    except OSError as error:  # a directory or capture.json the user may not read (a capture is its owner's)
        raise OffcpuError(f"cannot read {directory} ({error.strerror}): a capture is readable by the user who "
                          "recorded it only; report as that user (sudo), or give a capture you can read") from None


def _load(directory: Path) -> CaptureInfo:
    if directory.is_file() and (directory.parent / METADATA).is_file():
        raise OffcpuError(f"{directory} is a file of a capture; give the capture directory, {directory.parent}")
    if not directory.is_dir():
        raise OffcpuError(f"{directory} is not a capture directory; make one with 'offcpu record -o {directory} ...'")
    path = directory / METADATA
    if not path.is_file():
        raise OffcpuError(f"{directory} has no {METADATA}: it was not made by 'offcpu record' "
                          "or the recording did not finish")
    try:
        data = read_json(path, METADATA_MAX)
        if not isinstance(data, dict):
            raise TypeError(f"it holds a JSON {type(data).__name__}, not an object")
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        return CaptureInfo.from_json(data)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM):
            raise  # said by load()
        raise OffcpuError(f"cannot read {path} ({error.strerror}); record it again") from None
    except (ValueError, TypeError) as error:
        raise OffcpuError(f"{path} is not a capture description offcpu can read ({error}); record it again") from None


# snapshot.json: the threads asleep through the recording, read at its end (offcpu.recording.snapshot)
# and given to the model (offcpu.model.asleep)

SNAPSHOT_SCHEMA = "offcpu-snapshot/1"
# The most snapshot.json is read of: a few KB for each thread asleep (its stacks), for
# thousands of threads
SNAPSHOT_MAX = 64 << 20


@dataclass(frozen=True)
class AsleepThread:
    """A thread that did not switch during the recording, as it was at its end."""

    tid: int
    pid: int
    comm: str
    state: str  # as in /proc/PID/stat: S, D...
    wchan: str  # the kernel function it sleeps in
    syscall: str  # /proc/PID/task/TID/syscall: the system call's number and arguments
    kernel_frames: tuple[str, ...]  # leaf first
    user_frames: tuple[str, ...]  # leaf first; empty when they could not be read
    # For a wait in a futex: the thread glibc records as the owner of the mutex that futex is
    # the lock word of (its __owner field); meaningful when the stack waits in pthread_mutex_lock
    # (claims.Claims.mutex_owners keeps those alone)
    mutex_owner: int | None = None

    @property
    def stack(self) -> Stack:
        """Its stack as the model keeps stacks, leaf first, below the label that says where it came from."""
        return Stack(self.kernel_frames + self.user_frames + (ASLEEP_ALL_WINDOW,), len(self.kernel_frames))


@dataclass(frozen=True)
class Snapshot:
    threads: tuple[AsleepThread, ...] = ()
    user_stacks: str = ""  # what read the user stacks ("eu-stack"), or why none were read
    # Why no snapshot could be taken at the end of the recording (empty when one was): the
    # recording is kept all the same, and its reports say that this is missing
    failed: str = ""
    schema: str = field(default=SNAPSHOT_SCHEMA)

    @property
    def failed_note(self) -> str | None:
        """What a capture whose snapshot failed lacks, in a sentence (None when it did not fail)."""
        if not self.failed:
            return None
        return (f"the stacks of threads that did not run during the recording could not be read at its end "
                f"({self.failed}): such threads are shown off CPU all the recording, with no stack")


def save_snapshot(directory: Path, snapshot: Snapshot) -> None:
    """Owner only, as the rest of the capture: it holds every thread's name and stacks."""
    write_whole(directory / SNAPSHOT, json.dumps(asdict(snapshot)) + "\n", mode=PRIVATE)


def load_snapshot(directory: Path) -> Snapshot:
    """The capture's snapshot; an empty one when there is none or it cannot be read (a
    capture made with --no-snapshot, or before snapshots, or damaged)."""
    try:
        data = read_json(directory / SNAPSHOT, SNAPSHOT_MAX)
        if not isinstance(data, dict) or data.get("schema") != SNAPSHOT_SCHEMA or \
                not isinstance(data.get("threads"), list):
            return Snapshot()
        said = [data.get(name, "") for name in ("user_stacks", "failed")]
        if not all(isinstance(words, str) for words in said):
            return Snapshot()
        return Snapshot(tuple(_asleep_thread(item) for item in data["threads"]), *said)
    except (OSError, ValueError):
        return Snapshot()


# The JSON type of each field of AsleepThread (JSON's true is no number: see _typed)
THREAD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "tid": int, "pid": int, "comm": str, "state": str, "wchan": str, "syscall": str, "kernel_frames": list,
    "user_frames": list, "mutex_owner": (int, type(None))}


def _asleep_thread(item: Any) -> AsleepThread:
    """A thread of snapshot.json; ValueError unless each field has its type (a damaged file)."""
    if not isinstance(item, dict) or not all(
            isinstance(item.get(name), kind) and not isinstance(item.get(name), bool)
            for name, kind in THREAD_FIELDS.items()):
        raise ValueError("a thread of the snapshot is not one as offcpu writes it")
    frames = {name: tuple(item[name]) for name in ("kernel_frames", "user_frames")}
    if not all(isinstance(frame, str) for stack in frames.values() for frame in stack):
        raise ValueError("a stack of the snapshot holds something other than frames")
    return AsleepThread(**{**{name: item[name] for name in THREAD_FIELDS}, **frames})


# -- the recorded processes' cgroups (capture.json's "cgroups"; read by offcpu.machine.cgroups) --

V2 = ""  # the controllers /proc/PID/cgroup names for the v2 hierarchy


@dataclass(frozen=True)
class Counters:
    """What a cgroup's files said at one moment; None: the file is absent, or (a limit) there is none."""

    cpu_quota_us: int | None = None  # CPU time its threads may take per period, all CPUs together
    cpu_period_us: int | None = None
    nr_periods: int | None = None  # periods in which its threads were runnable
    nr_throttled: int | None = None  # of those, the periods in which the quota ran out
    throttled_ns: int | None = None  # how long its run queues were held off (v2's throttled_usec in ns)
    memory_high: int | None = None  # times memory.high throttled its allocations (v2)
    pids_max: int | None = None
    pids_current: int | None = None

    @property
    def cpus(self) -> float | None:
        """Its CPU limit in CPUs (quota over period)."""
        if self.cpu_quota_us is None or not self.cpu_period_us:
            return None
        return self.cpu_quota_us / self.cpu_period_us


@dataclass(frozen=True)
class Cgroup:
    """A cgroup of the recorded processes, read at the start and at the end of the recording."""

    controllers: str  # its hierarchy's, as /proc/PID/cgroup names them ("cpu,cpuacct"; V2: "")
    path: str  # under its hierarchy, as /proc/PID/cgroup shows it: "/kubepods/pod1/c1"
    pids: tuple[int, ...] = ()  # the processes read whose own cgroup it is (those below it not counted)
    start: Counters | None = None
    end: Counters | None = None  # None: gone by the end

    def describe(self) -> str:
        """'/offcpu-quota (v1 cpu)', '/system.slice/x.service (v2)'."""
        return f"{self.path} ({'v2' if self.controllers == V2 else 'v1 ' + self.controllers})"

    def holds(self, path: str) -> bool:
        """Whether a process whose cgroup is `path` (in this hierarchy) is in this cgroup or below it."""
        return path == self.path or path.startswith(self.path.rstrip("/") + "/")

    @property
    def throttled_periods(self) -> int:
        return _grown(self.start, self.end, "nr_throttled")

    @property
    def periods(self) -> int:
        return _grown(self.start, self.end, "nr_periods")

    @property
    def throttled_ns(self) -> int:
        """How long the kernel held it off between the start and the end: it was throttled when this grew."""
        return _grown(self.start, self.end, "throttled_ns")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Cgroup:
        """ValueError when `data` is not what to_json wrote."""
        if not isinstance(data, dict) or not isinstance(data.get("controllers"), str) or \
                not isinstance(data.get("path"), str) or not _integers(data.get("pids", [])):
            raise ValueError("not a cgroup as offcpu writes it")
        return cls(data["controllers"], data["path"], tuple(data.get("pids", [])),
                   _counters(data.get("start")), _counters(data.get("end")))


def _integers(values: object) -> bool:
    return isinstance(values, (list, tuple)) and all(isinstance(value, int) and not isinstance(value, bool)
                                            for value in values)


def _counters(data: object) -> Counters | None:
    if data is None:
        return None
    names = [item.name for item in fields(Counters)]
    if not isinstance(data, dict) or set(data) - set(names) or not all(
            value is None or (isinstance(value, int) and not isinstance(value, bool)) for value in data.values()):
        raise ValueError("not a cgroup's counters as offcpu writes them")
    return Counters(**data)


def _grown(start: Counters | None, end: Counters | None, name: str) -> int:
    before, after = getattr(start, name, None), getattr(end, name, None)
    return max(after - before, 0) if before is not None and after is not None else 0


def of_capture(data: list[dict]) -> list[Cgroup]:
    """capture.json's cgroups (ValueError when they are not what offcpu wrote)."""
    return [Cgroup.from_json(item) for item in data]
