"""A recording with offcpu's BPF programs (offcpu._core), from start to end.

The programs time every wait of the target's threads in the kernel and send one
record per wait, so the cost of recording is a few hash-map updates per switch and
the stack walks the budget allows (see core/src/bpf/offcpu.bpf.c). The target is
filtered in the kernel: the processes (and with --pid, --tree, --comm, --exe and a
command, those they start), one thread, a cgroup and the cgroups below it, or all.
A command is forked by offcpu and held before its exec until the programs record
it. The programs and maps are held by file descriptors and never pinned: they
leave with offcpu however it ends.

A live recording (`offcpu top`, `offcpu record --keep`) goes the same way, with a
Follower that takes its records from memory as they come, instead of a capture
written at the end.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from offcpu.capture import BPF_RECORDS, BPF_STACKS, CaptureInfo, Target
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.machine import system
from offcpu.recording import perf_maps, targets
from offcpu.recording.backends import Backend, BpfRefused
from offcpu.recording.end_watch import size_in_bytes, wait_for_end
from offcpu.recording.interrupts import Interrupts, Terminated
from offcpu.recording.perf_process import end_group, signals_sent
from offcpu.recording.process_maps import MapsRecorder
from offcpu.recording.request import RecordRequest
from offcpu.recording.runtime_stacks import RuntimeSampler
from offcpu.recording.session import (
    command_ended,
    limits_of,
    note_cgroups_at_end,
    note_threads_at_start,
    now_iso,
    save_kernel_files,
    save_snapshot_of,
)

if TYPE_CHECKING:
    from offcpu import _core

# The tracepoints the programs attach to (tp_btf), for capture.json's events.
TRACEPOINTS = ("sched:sched_switch", "sched:sched_waking", "sched:sched_process_fork", "sched:sched_process_exit",
               "sched:sched_process_exec", "task:task_rename")
# A wait blocked this long takes its waker's stack whatever the budget says: the waits
# that hold threads back longest keep what ended them.
LONG_WAIT_NS = 1_000_000
EXEC_FAILED = 127


class Follower(Protocol):
    """What follows a live recording: started once its target is recorded (the capture
    directory is then its own to write in: the maps and kernel files are there), and
    ticked every end_watch.TICK_S until the recording ends."""

    def start(self, recording: _core.BpfRecording, info: CaptureInfo, sampler: RuntimeSampler) -> None: ...

    def tick(self) -> None: ...


class BpfSession:
    """A recording with the BPF programs, in the lifecycle offcpu.recording.recorder runs: the
    programs loaded with the kernel's filter for the target and a command held before its exec
    until they record it (record); the command ended and its status (ended); the programs'
    own counts as capture.json's (describe). With a `follower`, the records go to it as they
    come and none are written (request.output holds what it needs meanwhile)."""

    def __init__(self, request: RecordRequest, backend: Backend, on_tick: Callable[[float], None],
                 follower: Follower | None = None) -> None:
        self.request, self.backend, self.on_tick, self.follower = request, backend, on_tick, follower
        self.command: HeldCommand | None = None
        self.recording: _core.BpfRecording | None = None
        self.sampler: RuntimeSampler | None = None

    def record(self, interrupts: Interrupts) -> CaptureInfo:
        """Until the records and the stack table are written (BpfRefused: the kernel refused the
        programs)."""
        from offcpu import _core  # the compiled core: loaded only to record with it

        request = self.request
        records, stacks = request.output / BPF_RECORDS, request.output / BPF_STACKS
        info = _new_info(request, self.backend)
        if request.target.command:
            self.command = command = HeldCommand(request.target.command)
        else:
            command = None
        filter_kind, ids, cgroups = _kernel_filter(info.target, command)
        try:
            self.recording = recording = _core.BpfRecording(
                "" if self.follower else str(records), filter_kind, ids, cgroups,
                info.target.kind in ("pid", "command"), request.stack_budget, LONG_WAIT_NS)
        except _core.BpfError as error:
            raise BpfRefused(printable(str(error))) from None
        except OSError as error:
            raise _not_written(request.output, error) from None
        info.window_start_ns = time.monotonic_ns()
        maps = MapsRecorder(request.output)
        if command is not None:
            # Its maps until its exec are offcpu's, forked: they name the frames of its waits between
            # the word to go and the exec
            with contextlib.suppress(OSError):
                maps.update([command.pid])
            command.go()
            info.target = replace(info.target, pid=command.pid) if info.target.kind == "command" else \
                replace(info.target, command_pid=command.pid)
        # The runtimes' stacks (CPython's), read while their threads are off CPU (from the window's start on)
        self.sampler = sampler = RuntimeSampler(request.output)
        on_tick = self.on_tick
        if self.follower is not None:
            save_kernel_files(request.output)
            self.follower.start(recording, info, sampler)
            maps.keep_ns = sampler.keep_ns  # the maps of processes gone longer ago go (the follower set it)
            on_tick = _with_follower(on_tick, self.follower)
        switches_at_start = _run(request, info, on_tick, interrupts, maps, recording, sampler, self.follower is None)
        try:
            counters = recording.counters() if self.follower else recording.finish(str(stacks))
        except OSError as error:
            raise _not_written(request.output, error) from None
        info.bpf = {**counters, "stacks_per_second": request.stack_budget, "long_wait_ns": LONG_WAIT_NS}
        with contextlib.suppress(OSError):  # and of the wakers in the records drained last
            maps.update(recording.new_wakers())
        if switches_at_start and not info.target_exited and self.follower is None:
            save_snapshot_of(request.output, switches_at_start, info, sampler.frames_by_thread(),
                             sampler.owners_by_thread())
        return info

    def abandon(self) -> None:
        if self.sampler is not None:
            self.sampler.stop(write=False)
        if self.command is not None:
            self.command.end()
        self.recording = None  # its programs detach as it goes

    def ended(self, info: CaptureInfo) -> None:
        command = self.command
        if command is not None:
            running = command.running()
            info.command_killed = command.end()
            if running:
                info.command_cut_short = signals_sent(info.command_killed)
            if info.ended_by == command_ended(info.target):  # it ended the recording: its status counts
                info.command_exit_status = command.exit_status

    def describe(self, info: CaptureInfo) -> None:
        """capture.json's counts, from the programs' own."""
        counts = info.bpf or {}
        info.samples = counts.get("waits", 0)
        info.lost_events = counts.get("lost_records", 0) + counts.get("lost_waits", 0) + counts.get("missed_runs", 0)
        info.perf_data_bytes = counts.get("bytes_written", 0)
        info.switch_cost_ns = 0  # every switch is timed where it happens


def _with_follower(on_tick: Callable[[float], None], follower: Follower) -> Callable[[float], None]:
    def tick(elapsed_s: float) -> None:
        on_tick(elapsed_s)
        follower.tick()
    return tick


def _new_info(request: RecordRequest, backend: Backend) -> CaptureInfo:
    return CaptureInfo(
        target=request.target, perf_command=[], kernel_release=system.kernel_release(), perf_version="",
        cpus=os.cpu_count() or 1, call_graph="fp",
        events=[{"name": name, "call_graph": name == "sched:sched_switch", "why": "timed in the kernel"}
                for name in TRACEPOINTS],
        events_skipped=[], duration_requested_s=request.duration_s, schedstats="off",
        limits=limits_of(request.target), backend=backend.kind.name, backend_why=backend.why,
    )


def _not_written(output: Path, error: OSError) -> OffcpuError:
    """A file of the capture that the core could not make or write, said in one line (no capture
    comes of it: what was written is removed, as when perf cannot write perf.data)."""
    where = printable(str(output))
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return OffcpuError(f"the disk holding {where} is full ({error.strerror}); free space or record elsewhere "
                           "with -o")
    if error.errno == errno.EROFS:
        return OffcpuError(f"{where} is on a read-only file system; choose another directory with -o")
    name = printable(str(error.filename or output))
    if error.errno == errno.EEXIST:
        return OffcpuError(f"{name} was made or replaced by something else while offcpu recorded there (offcpu never "
                           "writes through it); record into a directory only you can write, with -o")
    return OffcpuError(f"cannot write {name} ({error.strerror}); choose another directory with -o")


def _kernel_filter(target: Target, command: HeldCommand | None) -> tuple[str, list[int], list[int]]:
    """What the programs record: the filter's kind, its ids (processes or a thread) and cgroups."""
    if target.kind == "all":
        return "all", [], []
    if target.kind == "tid" and target.tid is not None:
        return "thread", [target.tid], []
    if target.kind == "cgroup":
        return "cgroups", [], _cgroup_ids(targets.cgroup_directory(target))
    if target.kind == "command" and command is not None:
        return "processes", [command.pid], []
    return "processes", list(targets.processes_now(target)), []


def _cgroup_ids(directory: Path) -> list[int]:
    """The ids of a cgroup v2 and of those below it (a cgroup's id is its directory's inode)."""
    ids = [directory.stat().st_ino]
    for below, subdirectories, _ in os.walk(directory):
        ids += [(Path(below) / name).stat().st_ino for name in subdirectories]
    return ids


def _run(request: RecordRequest, info: CaptureInfo, on_tick: Callable[[float], None], interrupts: Interrupts,
         maps: MapsRecorder, recording: _core.BpfRecording, sampler: RuntimeSampler,
         bounded: bool = True) -> dict[int, int]:
    """Wait for the end; fills in the window, the threads at the start and how it ended, and
    keeps the maps of the processes recorded and of the wakers (those whose stacks the recording
    first took as wakers since it was last asked). It ends when the records reach --max-size
    (when `bounded`: a live recording's go to its follower, never to disk), as perf's recording
    does, or when they can no longer be written (finish says why).
    Returns the context switch counts of the target's threads at the start, for the
    snapshot of those that never ran (taken once the programs are detached: eu-stack's
    stops of the process would be recorded)."""
    from offcpu import _core

    info.started_at = now_iso()
    switches_at_start: dict[int, int] = {}
    limit = size_in_bytes(request.max_size)

    def full() -> str | None:
        if recording.size_limit_reached_ns() is not None:
            return "max size"
        return None if recording.writing() else "writing failed"

    wakers: set[int] = set()

    def maps_now() -> None:
        """The maps of the processes recorded now and of the wakers seen, outside the target too, while
        they live: user frames are named from them. The records are held to --max-size less the
        room that the waits still open at the end take (a record for each thread recorded)."""
        with contextlib.suppress(OSError):
            recorded = _recorded_processes(info.target)
            threads = 1 if info.target.kind == "tid" else _threads_of(recorded)
            if bounded:
                recording.set_size_limit(max(limit - _core.RECORD_SIZE * threads, 0))
            maps.update(sorted({*recorded, *wakers}))
            sampler.offer(recorded)

    def tick(elapsed_s: float) -> None:
        """Progress, and the maps of the wakers first seen since the last tick: read at once, as a
        waker outside the target may not live until the next look."""
        on_tick(elapsed_s)
        new = recording.new_wakers()
        if new:
            wakers.update(new)
            with contextlib.suppress(OSError):
                maps.update(new)

    maps_now()
    try:
        switches_at_start = note_threads_at_start(request, info)
        sampler.start()
        info.ended_by = wait_for_end(full, request.duration_s, info, tick, on_look=maps_now)
    except Terminated as terminated:
        info.ended_by = terminated.signal_name
    except KeyboardInterrupt:
        info.ended_by = "SIGINT"
    finally:
        interrupts.hold()
        try:
            sampler.stop()
            maps.add(sampler.reader_maps)
        except OSError as error:
            raise _not_written(request.output, error) from None
        reached = recording.size_limit_reached_ns()  # the records end there, if they reached --max-size
        info.window_end_ns = time.monotonic_ns() if reached is None else reached
        info.ended_at = now_iso()
        note_cgroups_at_end(info)
        maps_now()
        try:  # at the end: a JIT's perf map grows while its program runs
            perf_maps.save(request.output, _recorded_processes(info.target))
        except OSError as error:
            raise _not_written(request.output, error) from None
    info.duration_actual_s = (info.window_end_ns - info.window_start_ns) / 1e9
    info.target_exited = info.ended_by == "target exited"
    return switches_at_start


def _recorded_processes(target: Target) -> list[int]:
    """The processes the programs record now: all, or the target's and their descendants."""
    table = targets.process_table()
    if target.kind == "all":
        return list(table)
    roots = [target.pid] if target.kind == "tid" and target.pid else targets.processes_now(target)
    return sorted({pid for root in roots for pid in (root, *targets.descendants(root, table))})


def _threads_of(processes: list[int]) -> int:
    count = 0
    for pid in processes:
        with contextlib.suppress(OSError):
            count += len(os.listdir(f"/proc/{pid}/task"))
    return count


class HeldCommand:
    """A command forked before the recording starts and held before its exec until the
    programs record it (go), in a session of its own, as perf runs its command."""

    def __init__(self, argv: tuple[str, ...]) -> None:
        self._go_read, self._go_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: nothing here may raise
            os.close(self._go_write)
            try:
                os.setsid()
                if os.read(self._go_read, 1) == b"g":
                    os.execvp(argv[0], list(argv))
            finally:
                os._exit(EXEC_FAILED)
        os.close(self._go_read)
        self.exit_status: int | None = None

    def go(self) -> None:
        os.write(self._go_write, b"g")
        os.close(self._go_write)
        self._go_write = -1

    def running(self) -> bool:
        """Whether the command has not exited yet (it is not reaped here)."""
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def end(self) -> bool:
        """End what is left of the command (its session's group: SIGTERM, then SIGKILL after
        a grace) and reap it; whether anything had to be killed."""
        if self._go_write != -1:  # never let go: it exits without running
            os.close(self._go_write)
            self._go_write = -1
        killed = end_group(self.pid)  # its leader, if it exited, is a zombie until reaped here
        with contextlib.suppress(ChildProcessError):
            _, status = os.waitpid(self.pid, 0)
            self.exit_status = os.waitstatus_to_exitcode(status)
        return killed
