"""A recording with perf, from start to end (PerfSession, in the lifecycle that
offcpu.recording.recorder runs for every backend), and what recording with either backend
shares: the threads and cgroups at the start, the snapshot of those that never ran, the
capture's files kept or discarded."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

from offcpu.capture import METADATA, PERF_DATA, CaptureInfo, Target, of_capture, own_files, save, save_snapshot
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.machine import cgroups, limits, system
from offcpu.machine.running_kernel import save_kernel_symbols, save_vdso
from offcpu.recording import snapshot, targets
from offcpu.recording.backends import Backend
from offcpu.recording.end_watch import COMMAND_EXITED, SpinWatch, wait_for_end
from offcpu.recording.events import EventPlan, plan_events
from offcpu.recording.interrupts import Interrupts, Terminated
from offcpu.recording.perf_command import (
    CAPTURED_LINE,
    PROCESS_GONE,
    SIZE_LIMIT_LINE,
    perf_failure,
    perf_record_argv,
    wakeups,
)
from offcpu.recording.perf_process import ACK_TIMEOUT_S, PerfProcess, signals_sent
from offcpu.recording.request import RecordRequest
from offcpu.recording.schedstats import schedstats_enabled

START_ATTEMPTS = 3  # perf started anew when a process offcpu listed exited before perf began


class PerfSession:
    """A recording with perf, in the lifecycle offcpu.recording.recorder runs: perf and the
    machine checked up front, then (record) perf started with its events disabled, enabled, the
    end waited for, disabled, perf's file finished; once it is complete, the command's status
    (ended) and what perf.data says of itself (describe)."""

    def __init__(self, request: RecordRequest, backend: Backend, on_tick: Callable[[float], None],
                 describe_perf_data: Callable[[Path, CaptureInfo], None]) -> None:
        self.request, self.backend, self.on_tick = request, backend, on_tick
        self.describe_perf_data = describe_perf_data
        self.perf, self.version = _perf_that_may_trace()
        self.tracefs = system.ensure_tracefs()
        self.perf_process: PerfProcess | None = None

    def record(self, interrupts: Interrupts) -> CaptureInfo:
        """Until perf has left a complete perf.data; whatever happens, perf is ended and any
        sysctl offcpu changed is put back."""
        request = self.request
        with schedstats_enabled(request.enable_schedstats) as schedstats:
            plan = plan_events(self.tracefs, schedstats)
            info = _new_info(request, plan, self.version, schedstats)
            info.backend, info.backend_why = self.backend.kind.name, self.backend.why
            perf_process = self.perf_process = _start(self.perf, request, plan, info)
            try:
                _run(perf_process, request, info, self.on_tick, interrupts)
            finally:
                interrupts.hold()
                # perf ends by itself once its command has exited, with the command's status
                perf_process.stop(let_finish=_ended_by_command(info))
                _stopped_at_max_size(perf_process, info)
                _stopped_for_the_target(perf_process, info)
                if not _ended_by_command(info):
                    perf_process.end_command_group()
                info.command_killed = perf_process.killed_command
                if info.target.command and not _ended_by_command(info):  # perf ended it as it ended
                    info.command_cut_short = signals_sent(info.command_killed)
                info.perf_wakeups = wakeups(perf_process.stderr)
        info.perf_command = perf_process.argv
        _check_perf_result(perf_process, request, request.output / PERF_DATA)
        return info

    def abandon(self) -> None:
        """perf was ended as record() left: nothing more to end."""

    def ended(self, info: CaptureInfo) -> None:
        if self.perf_process is not None:
            info.command_exit_status = _command_exit_status(self.perf_process, info)

    def describe(self, info: CaptureInfo) -> None:
        self.describe_perf_data(self.request.output / PERF_DATA, info)


def _perf_that_may_trace() -> tuple[str, str]:
    """perf and its version, once it is known that perf runs and may trace here."""
    perf = system.require_perf()
    version = system.perf_version(perf)
    if version is None:
        raise OffcpuError(f"'{perf} --version' failed, so perf cannot run; {system.PERF_INSTALL_HINT}")
    allowed, why = system.may_trace()
    if not allowed:
        raise OffcpuError(why)
    return perf, version


def _new_info(request: RecordRequest, plan: EventPlan, perf_version: str, schedstats: str) -> CaptureInfo:
    """capture.json as it is known before perf starts."""
    return CaptureInfo(
        target=request.target, perf_command=[], kernel_release=system.kernel_release(),
        perf_version=perf_version, cpus=os.cpu_count() or 1, call_graph=request.call_graph,
        events=[asdict(event) for event in plan.events],
        events_skipped=[asdict(s) for s in plan.skipped],
        duration_requested_s=request.duration_s, schedstats=schedstats,
        limits=limits_of(request.target),
    )


def _start(perf: str, request: RecordRequest, plan: EventPlan, info: CaptureInfo) -> PerfProcess:
    """Start perf, and but for a command alone, wait until its events are open (and off).
    perf fails when a process it was given has exited by then: when offcpu listed the
    processes (a tree's descendants, processes of a name), they are listed again and perf
    started anew; a process given by its pid that is gone is an error."""
    for _ in range(START_ATTEMPTS):
        perf_process = PerfProcess(perf_record_argv(perf, info.perf_version, request, info.target, plan),
                                   has_command=bool(info.target.command))
        if info.target.kind == "command":
            return perf_process
        try:
            perf_process.wait_until_ready()
        except BaseException:  # Ctrl-C, or perf too slow to start
            perf_process.stop()
            raise
        if not perf_process.exited():
            return perf_process
        perf_process.stop()
        if targets.has_ended(info.target):
            raise _exited_as_perf_started(info.target)
        if info.target.kind != "pid" or not any(PROCESS_GONE in line for line in perf_process.stderr):
            raise perf_failure(perf_process.stderr, request)
        info.target = targets.processes_target(info.target)  # says which pid given is gone
        info.limits = limits_of(info.target)
    roots = ",".join(map(str, info.target.by_tree))
    instead = f"--pid {roots} (which records what they start from then on) or " if roots else ""
    raise OffcpuError(f"processes of {info.target.recorded()} kept exiting before perf could start recording them "
                      f"({START_ATTEMPTS} tries): record {instead}the cgroup that holds them (--cgroup) instead")


def _run(perf_process: PerfProcess, request: RecordRequest, info: CaptureInfo,
         on_tick: Callable[[float], None], interrupts: Interrupts) -> None:
    """Enable, wait for the end, disable; fills in the window, the threads at
    the start and how it ended."""
    if info.target.kind == "command":
        # None when perf has exited already: the command failed to start (said once perf's
        # file is judged), or ran and ended before offcpu saw it (its pid is in perf.data)
        info.target = replace(info.target, pid=perf_process.wait_for_command())
        info.window_start_ns = time.monotonic_ns()  # after the exec: made exact from perf.data later
    else:
        info.window_start_ns = _enable(perf_process, request, info.target)
        if info.target.command:  # perf started it as its events opened, before they went on
            info.target = replace(info.target, command_pid=perf_process.command_pid())
    info.started_at = now_iso()
    switches_at_start: dict[int, int] = {}
    try:
        switches_at_start = note_threads_at_start(request, info)
        spin = SpinWatch(perf_process, request.output / PERF_DATA) if len(info.target.pids) > 1 else None
        info.ended_by = wait_for_end(lambda: "perf exited" if perf_process.exited() else None, request.duration_s,
                                     info, on_tick, spin)
    except Terminated as terminated:
        info.ended_by = terminated.signal_name
    except KeyboardInterrupt:
        info.ended_by = "SIGINT"
    finally:
        interrupts.hold()  # the recording is over: nothing may cut its end short
        noticed_ns = time.monotonic_ns()
        # perf stops reading its control pipe once its target or command is gone: no answer would come.
        gone = info.ended_by in ("target exited", COMMAND_EXITED, "perf exited")
        disabled_ns = None if gone else perf_process.command("disable")
        info.perf_cpu_s = perf_process.cpu_time_s()
        info.ended_at = now_iso()
        note_cgroups_at_end(info)
    # Without perf's answer the events may have run on: the window ends where offcpu
    # decided to stop, and the engine leaves out whatever came after it.
    info.window_end_ns = disabled_ns or noticed_ns
    info.duration_actual_s = (info.window_end_ns - info.window_start_ns) / 1e9
    if info.target.command and info.ended_by == "perf exited":
        info.ended_by = command_ended(info.target)  # perf ends when its command does
    info.target_exited = info.ended_by == "target exited"
    if switches_at_start and not info.target_exited:
        save_snapshot_of(request.output, switches_at_start, info)


def note_threads_at_start(request: RecordRequest, info: CaptureInfo) -> dict[int, int]:
    """The target's threads and process titles as the recording starts, into `info`; their
    context switch counts, for the snapshot of those that will not run (none asked or for -a)."""
    threads = targets.threads_now(info.target)
    info.threads_at_start, info.processes_at_start = threads.states, threads.processes
    info.process_titles = targets.process_titles(info.target)
    note_cgroups_at_start(info)
    if request.snapshot and info.target.kind != "all":
        return snapshot.switch_counts(map(int, threads.states))
    return {}


def note_cgroups_at_start(info: CaptureInfo) -> None:
    """The cgroups of the target's processes (of every process, for the whole machine: the lowest
    pids, up to cgroups.MAX_PROCESSES) with their limits and counters, as the recording starts."""
    pids = targets.process_table() if info.target.kind == "all" else targets.processes_now(info.target)
    with contextlib.suppress(OSError):  # no mounts to read: no cgroups to say
        info.cgroups = [cgroup.to_json() for cgroup in cgroups.read_at_start(pids, system.proc_text(cgroups.MOUNTS))]


def note_cgroups_at_end(info: CaptureInfo) -> None:
    """The counters of the cgroups read at the start, as the recording ends (what grew between is the
    recording's)."""
    with contextlib.suppress(OSError):
        info.cgroups = [cgroup.to_json() for cgroup in
                        cgroups.read_at_end(of_capture(info.cgroups), system.proc_text(cgroups.MOUNTS))]


def command_ended(target: Target) -> str:
    """How a recording ends when its command exits: the target's end when it is the target."""
    return "target exited" if target.kind == "command" else COMMAND_EXITED


def _stopped_at_max_size(perf_process: PerfProcess, info: CaptureInfo) -> None:
    """Once perf has ended: when it stopped at --max-size (and ended its command), say so."""
    if any(SIZE_LIMIT_LINE in line for line in perf_process.stderr):
        info.ended_by, info.target_exited = "max size", False


def _stopped_for_the_target(perf_process: PerfProcess, info: CaptureInfo) -> None:
    """Once perf has ended: perf ends its command (SIGTERM) when the target it records has
    exited, and offcpu can see the command's end first (the target's last thread still
    exiting): then the target ended the recording, not the command."""
    if (info.ended_by == COMMAND_EXITED and perf_process.ended_itself
            and perf_process.returncode == -signal.SIGTERM and targets.has_ended(info.target)):
        info.ended_by, info.target_exited = "target exited", True


def _enable(perf_process: PerfProcess, request: RecordRequest, target: Target) -> int:
    """Switch perf's events on; when they were."""
    enabled_ns = perf_process.command("enable")
    if enabled_ns is not None:
        return enabled_ns
    if not perf_process.exited():
        raise OffcpuError(f"perf did not switch its events on within {ACK_TIMEOUT_S:.0f} s: the machine is too busy "
                          "for it to answer; record again when it is less loaded")
    if targets.has_ended(target):  # perf ends once its target has exited, before or after it says so
        raise _exited_as_perf_started(target)
    if target.command and any(CAPTURED_LINE in line for line in perf_process.stderr):
        status = perf_process.returncode
        raise OffcpuError(printable(f"{shlex.join(target.command)} ended (exit status {status}) before perf's events "
                                    "were on, so nothing was recorded while it ran; give a command that runs "
                                    "while the target is recorded"))
    raise perf_failure(perf_process.stderr, request)


def _exited_as_perf_started(target: Target) -> OffcpuError:
    return OffcpuError(f"{target.recorded()} exited as perf started, before its events were on, so nothing of it was "
                       "recorded; record it while it runs")


def _ended_by_command(info: CaptureInfo) -> bool:
    """Whether the recording ended as its command exited by itself: not when offcpu
    stopped perf (perf then ends the command) nor when perf stopped at --max-size."""
    return bool(info.target.command) and info.ended_by in (command_ended(info.target), "perf exited")


def _command_exit_status(perf_process: PerfProcess, info: CaptureInfo) -> int | None:
    """perf exits with its command's status, or dies by the signal that killed it
    (-N as a returncode), when the command ended the recording."""
    if not _ended_by_command(info) or not perf_process.ended_itself:
        return None
    return perf_process.returncode


def limits_of(target: Target) -> dict | None:
    """The limits of the target's process nearest them, before perf starts (none for a command yet)."""
    snapshot = limits.nearest(targets.processes_now(target)) if target.kind != "command" else None
    return snapshot.to_json() if snapshot else None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _check_perf_result(perf_process: PerfProcess, request: RecordRequest, perf_data: Path) -> None:
    """perf ended; fail unless it left a complete file."""
    written = perf_data.is_file() and perf_data.stat().st_size > 0
    if request.target.command:
        # perf exits with its command's status (or dies by the command's signal):
        # judge it by the file it finished instead.
        complete = written and any(CAPTURED_LINE in line for line in perf_process.stderr)
    else:
        complete = written and perf_process.returncode in (0, -signal.SIGINT, -signal.SIGTERM)
    if not complete:
        raise perf_failure(perf_process.stderr, request)


def discard(output: Path) -> None:
    """No capture came of it: remove what offcpu and perf wrote in `output`."""
    try:
        for path in own_files(output):
            path.unlink(missing_ok=True)
    except OSError:
        pass  # the directory is gone or unreadable: nothing more to do


def save_capture(output: Path, info: CaptureInfo) -> None:
    try:
        save(output, info)
    except OSError as error:
        raise OffcpuError(f"cannot write {output / METADATA} ({error.strerror}); perf.data is complete "
                          f"in {output}: free space and record again") from None


def save_snapshot_of(directory: Path, switches_at_start: dict[int, int], info: CaptureInfo,
                     runtime_frames: dict[int, tuple[str, ...]] | None = None,
                     runtime_owners: dict[int, int | None] | None = None) -> None:
    """The stacks of the target's threads that did not run in the window, taken now (best
    effort: without them such threads are shown with no stack, as before). `runtime_frames`:
    the runtime's frames (a Python program's) read of threads while recording, by thread, put
    after the native frames of those that never ran (read in the window, they are of the one
    wait such a thread was in); `runtime_owners`: of those waiting to lock a Java monitor, its
    owner as the JVM named it, in place of glibc's mutex owner (their futex is no mutex's)."""
    taken = snapshot.take(switches_at_start, {int(tid): pid for tid, pid in info.processes_at_start.items()})
    frames, owners = runtime_frames or {}, runtime_owners or {}
    if frames or owners:
        taken = replace(taken, threads=tuple(
            replace(thread, user_frames=thread.user_frames + frames.get(thread.tid, ()),
                    mutex_owner=owners.get(thread.tid) if thread.tid in owners else thread.mutex_owner)
            for thread in taken.threads))
    with contextlib.suppress(OSError):
        save_snapshot(directory, taken)


def save_kernel_files(directory: Path) -> None:
    """The kernel's symbols and vdso travel with the capture, so that its frames can be named on
    another machine or after a reboot. Without the symbols (kernel.kptr_restrict), kernel frames
    are named from this kernel's own when it is the same; the vdso (8 KiB) is saved as perf.data
    names it without a build id, and a report elsewhere would have only its own kernel's."""
    with contextlib.suppress(OffcpuError):
        save_kernel_symbols(directory)
    with contextlib.suppress(OSError):
        save_vdso(directory)
