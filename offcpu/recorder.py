"""Bounded `perf record` sessions on the scheduler tracepoints.

The flow: check everything that can be checked up front, start perf with
events disabled, enable them, wait for the duration (or the target's exit,
or Ctrl-C / SIGTERM / SIGHUP), disable, let perf finish its file, describe the
capture in capture.json. Whatever happens, perf is ended and any sysctl
offcpu changed is put back; once perf has left a complete perf.data, no
signal throws the capture away.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import resource
import select
import shlex
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from offcpu import limits, system, targets
from offcpu.capture import METADATA, PERF_DATA, RECORDING, CaptureInfo, Target, is_capture, own_files, save
from offcpu.describe import describe
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.events import EventPlan, plan_events
from offcpu.perf_process import ACK_TIMEOUT_S, CONTROL_PLACEHOLDER, PerfProcess
from offcpu.symbols import save_kernel_symbols

TICK_S = 0.1
LOOK_EVERY_S = 1.0  # how often the target's threads and maps are held against its limits, and strays looked for
START_ATTEMPTS = 3  # perf started anew when a process offcpu listed exited before perf began
PROCESS_GONE = "No such process"  # what perf says of a process it was given that has exited
COMMAND_EXITED = "command exited"
MIN_FREE_BYTES = 32 << 20
CAPTURED_LINE = "Captured and wrote"  # perf record's last line, once perf.data is complete
WRITTEN_LINE = re.compile(rf"{CAPTURED_LINE} ([\d.]+) MB")
SIZE_LIMIT_LINE = "size limit reached"  # perf record stopping at --max-size
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class RecordRequest:
    target: Target
    output: Path
    duration_s: float
    max_size: str
    call_graph: str
    mmap_pages: str | None
    enable_schedstats: bool


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: end the recording as Ctrl-C would."""

    def __init__(self, signal_name: str = "SIGTERM") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def record(request: RecordRequest, on_tick: Callable[[float], None]) -> CaptureInfo:
    """Record `request.target` into `request.output`; `on_tick(elapsed_s)` shows progress.
    When no capture comes of it, the files it wrote in `request.output` are removed."""
    perf = system.require_perf()
    version = system.perf_version(perf)
    if version is None:
        raise OffcpuError(f"'{perf} --version' failed, so perf cannot run; {system.PERF_INSTALL_HINT}")
    allowed, why = system.may_trace()
    if not allowed:
        raise OffcpuError(why)
    tracefs = system.ensure_tracefs()
    perf_data = request.output / PERF_DATA
    with _Interrupts() as interrupts:  # before any sysctl is changed
        try:
            with _schedstats_enabled(request.enable_schedstats) as schedstats:
                plan = plan_events(tracefs, schedstats)
                info = CaptureInfo(
                    target=request.target, perf_command=[], kernel_release=system.kernel_release(),
                    perf_version=version, cpus=os.cpu_count() or 1, call_graph=request.call_graph,
                    events=[asdict(event) for event in plan.events],
                    events_skipped=[asdict(s) for s in plan.skipped],
                    duration_requested_s=request.duration_s, schedstats=schedstats,
                    limits=_limits_of(request.target),
                )
                perf_process = _start(perf, request, plan, info)
                try:
                    _run(perf_process, request, info, on_tick, interrupts)
                finally:
                    interrupts.hold()
                    # perf ends by itself once its command has exited, with the command's status
                    perf_process.stop(let_finish=_ended_by_command(info))
                    _stopped_at_max_size(perf_process, info)
                    _stopped_for_the_target(perf_process, info)
                    if not _ended_by_command(info):
                        perf_process.end_command_group()
            info.perf_command = perf_process.argv
            _check_perf_result(perf_process, request, perf_data)
        except BaseException:
            interrupts.hold()
            _discard(request.output)
            raise
        # perf left a complete perf.data: from here on the capture is kept, whatever arrives.
        # SIG_IGN (not only held) so that perf report and perf script inherit it.
        with _signals_ignored():
            info.command_exit_status = _command_exit_status(perf_process, info)
            describe(perf, perf_data, info)
            _save_kernel_symbols(request.output)
            _save(request.output, info)
    return info


def _start(perf: str, request: RecordRequest, plan: EventPlan, info: CaptureInfo) -> PerfProcess:
    """Start perf, and but for a command alone, wait until its events are open (and off).
    perf fails when a process it was given has exited by then: when offcpu listed the
    processes (a tree's descendants, processes of a name), they are listed again and perf
    started anew; a process given by its pid that is gone is an error."""
    for _ in range(START_ATTEMPTS):
        perf_process = PerfProcess(perf_record_argv(perf, request, info.target, plan),
                                   command_stdin=bool(info.target.command))
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
        if info.target.kind != "pid" or not any(PROCESS_GONE in line for line in perf_process.stderr):
            raise _perf_failure(perf_process.stderr, request)
        info.target = targets.processes_target(info.target)  # says which pid given is gone
        info.limits = _limits_of(info.target)
    roots = ",".join(map(str, info.target.by_tree))
    instead = f"--pid {roots} (which records what they start from then on) or " if roots else ""
    raise OffcpuError(f"processes of {info.target.recorded()} kept exiting before perf could start recording them "
                      f"({START_ATTEMPTS} tries): record {instead}the cgroup that holds them (--cgroup) instead")


def perf_record_argv(perf: str, request: RecordRequest, target: Target, plan: EventPlan) -> list[str]:
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
    return argv + target.perf_args()


def _run(perf_process: PerfProcess, request: RecordRequest, info: CaptureInfo,
         on_tick: Callable[[float], None], interrupts: _Interrupts) -> None:
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
    info.started_at = _now()
    try:
        threads = targets.threads_now(info.target)
        info.threads_at_start, info.processes_at_start = threads.states, threads.processes
        info.ended_by = _wait_for_end(perf_process, request.duration_s, info, on_tick)
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
        info.ended_at = _now()
    # Without perf's answer the events may have run on: the window ends where offcpu
    # decided to stop, and the engine leaves out whatever came after it.
    info.window_end_ns = disabled_ns or noticed_ns
    info.duration_actual_s = (info.window_end_ns - info.window_start_ns) / 1e9
    if info.target.command and info.ended_by == "perf exited":
        info.ended_by = _command_ended(info.target)  # perf ends when its command does
    info.target_exited = info.ended_by == "target exited"


def _command_ended(target: Target) -> str:
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
    if target.command and any(CAPTURED_LINE in line for line in perf_process.stderr):
        status = perf_process.returncode
        raise OffcpuError(printable(f"{shlex.join(target.command)} ended (exit status {status}) before perf's events "
                                    "were on, so nothing was recorded while it ran; give a command that runs "
                                    "while the target is recorded"))
    raise _perf_failure(perf_process.stderr, request)


def _ended_by_command(info: CaptureInfo) -> bool:
    """Whether the recording ended as its command exited by itself: not when offcpu
    stopped perf (perf then ends the command) nor when perf stopped at --max-size."""
    return bool(info.target.command) and info.ended_by in (_command_ended(info.target), "perf exited")


def _command_exit_status(perf_process: PerfProcess, info: CaptureInfo) -> int | None:
    """perf exits with its command's status, or dies by the signal that killed it
    (-N as a returncode), when the command ended the recording."""
    if not _ended_by_command(info) or not perf_process.ended_itself:
        return None
    return perf_process.returncode


def _wait_for_end(perf_process: PerfProcess, duration_s: float, info: CaptureInfo,
                  on_tick: Callable[[float], None]) -> str:
    """Until the duration ends, the target or its command exits, or perf does; meanwhile
    keeps in info.limits_peak the target's snapshot nearest its limits (threads come and
    go), and in info.unrecorded_processes the processes of its name or executable that
    perf cannot record."""
    target = info.target
    start = time.monotonic()
    next_look = start
    peak: limits.LimitsSnapshot | None = None
    strays = targets.Strays(target) if target.by_comm or target.by_exe else None
    try:
        with _EndWatch(target) as watch:
            while True:
                elapsed = time.monotonic() - start
                on_tick(min(elapsed, duration_s))
                ended = watch.ended(0)
                if ended:
                    return ended
                if perf_process.exited():
                    return "perf exited"
                if elapsed >= duration_s:
                    return "duration"
                if time.monotonic() >= next_look:
                    peak = _nearer_the_limits(peak, target)
                    if strays is not None:
                        strays.look()
                    next_look = time.monotonic() + LOOK_EVERY_S
                ended = watch.ended(min(TICK_S, duration_s - elapsed))
                if ended:
                    return ended
    finally:
        info.limits_peak = peak.to_json() if peak else None
        info.unrecorded_processes = {str(pid): comm for pid, comm in sorted(strays.found.items())} if strays else {}


class _EndWatch:
    """Tells when the target has ended (every process it started with, its thread, the
    last process of its cgroup) or the command run alongside it has: a pidfd tells a
    process's exit at once; a thread's or a cgroup's end is looked for after each wait."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._poll = select.poll()
        self._meaning: dict[int, str] = {}  # pidfd -> what its process's exit means
        self._processes = target.pids if target.kind == "pid" else \
            (target.pid,) if target.kind == "command" and target.pid is not None else ()
        self._processes_left = 0

    def __enter__(self) -> _EndWatch:
        for pid in self._processes:
            self._processes_left += self._watch(pid, "target exited")
        if self.target.command_pid is not None:
            self._watch(self.target.command_pid, COMMAND_EXITED)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for fd in self._meaning:
            os.close(fd)

    def _watch(self, pid: int, meaning: str) -> bool:
        """Whether `pid` was there to watch."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        self._meaning[fd] = meaning
        self._poll.register(fd, select.POLLIN)
        return True

    def ended(self, timeout_s: float) -> str | None:
        """Wait up to `timeout_s` for an end; how it ended, or None."""
        command_exited = False
        for fd, _ in self._poll.poll(timeout_s * 1000):
            self._poll.unregister(fd)
            if self._meaning[fd] == COMMAND_EXITED:
                command_exited = True
            else:
                self._processes_left -= 1
        # The target's end first: once it has exited, perf ends the command.
        if self._processes and self._processes_left == 0:
            return "target exited"
        if self.target.kind in ("tid", "cgroup") and targets.has_ended(self.target):
            return "target exited"
        return COMMAND_EXITED if command_exited else None


def _nearer_the_limits(peak: limits.LimitsSnapshot | None, target: Target) -> limits.LimitsSnapshot | None:
    """Of `peak` and the target's snapshot now, the one nearer its limits."""
    try:
        now = limits.nearest(targets.processes_now(target))
    except OffcpuError:
        return peak  # unreadable now: the loop notices an exit
    return now if peak is None or (now is not None and now.highest_share() >= peak.highest_share()) else peak


class _Interrupts:
    """SIGINT, SIGTERM and SIGHUP while offcpu records. The first one raises
    (KeyboardInterrupt; Terminated for SIGTERM and SIGHUP): it ends the
    recording, or stops offcpu before perf records. Any later one, and any
    after hold(), is ignored, so that ending perf, putting sysctls back and
    finishing the capture are never cut short. SIGTERM or SIGHUP ignored when
    offcpu started (nohup) stays ignored; SIGINT ends a recording however
    offcpu was started, as it ends perf: a shell starts a background job
    (`offcpu record ... &`) with SIGINT ignored, and a script that later
    sends it one means it."""

    def __init__(self) -> None:
        self.raising = True
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def __enter__(self) -> _Interrupts:
        for sig in INTERRUPTS:
            if sig == signal.SIGINT or signal.getsignal(sig) != signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def hold(self) -> None:
        """From now on, ignore them."""
        self.raising = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.raising:
            return
        self.raising = False
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signal.Signals(signum).name)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Work that no signal may cut short; processes started meanwhile inherit SIG_IGN."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def _schedstats_enabled(wanted: bool) -> Iterator[str]:
    """Yield the schedstats state while recording; turn it on for the
    recording only when asked, and put it back on every way out."""
    state = system.schedstats_state()
    if not wanted or state != "off":
        yield state
        return
    path = Path("/proc/sys/kernel/sched_schedstats")
    try:
        try:
            path.write_text("1")
        except OSError as error:
            raise OffcpuError(f"cannot enable kernel.sched_schedstats ({error.strerror}); run as root") from None
        yield "on"
    finally:  # also when writing "1" failed part way: "0" is what it was
        with _signals_ignored():
            _schedstats_off(path)


def _schedstats_off(path: Path) -> None:
    try:
        path.write_text("0")
    except OSError as error:
        if system.schedstats_state() == "on":
            raise OffcpuError(f"could not turn kernel.sched_schedstats back off ({error.strerror}); "
                              "run 'sysctl kernel.sched_schedstats=0'") from None


def _limits_of(target: Target) -> dict | None:
    """The limits of the target's process nearest them, before perf starts (none for a command yet)."""
    snapshot = limits.nearest(targets.processes_now(target)) if target.kind != "command" else None
    return snapshot.to_json() if snapshot else None


def _now() -> str:
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
        raise _perf_failure(perf_process.stderr, request)


def _discard(output: Path) -> None:
    """No capture came of it: remove what offcpu and perf wrote in `output`."""
    try:
        for path in own_files(output):
            path.unlink(missing_ok=True)
    except OSError:
        pass  # the directory is gone or unreadable: nothing more to do


def _save(output: Path, info: CaptureInfo) -> None:
    try:
        save(output, info)
    except OSError as error:
        raise OffcpuError(f"cannot write {output / METADATA} ({error.strerror}); perf.data is complete "
                          f"in {output}: free space and record again") from None


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


def _open_files_limit() -> str:
    """What limits the files perf may open: it raises its soft limit to the hard one."""
    return f"ulimit -Hn is {resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,}"


def _perf_failure(stderr: list[str], request: RecordRequest | None) -> OffcpuError:
    text = "\n".join(stderr)
    written = WRITTEN_LINE.search(text)
    if request is not None and SIZE_LIMIT_LINE in text and written:  # it stopped there before the recording began
        return _too_small(request.max_size, written[1])
    for pattern, explain in PERF_FAILURES:
        if pattern.search(text):
            return OffcpuError(f"perf record failed: {explain()}")
    if request is not None and request.target.command and "failed to start" in text.lower():
        return OffcpuError(f"could not start {request.target.command[0]}: check the command and its path")
    last = next((line.strip() for line in reversed(stderr) if line.strip()), "no message")
    return OffcpuError(f"perf record failed: {last}")


def _too_small(max_size: str, written_mb: str) -> OffcpuError:
    """--max-size was reached by what perf writes before any event (the target's threads and maps)."""
    room = 1 << math.ceil(math.log2(max(2 * float(written_mb), 1)))  # as much again for events, a round number
    return OffcpuError(f"--max-size {max_size} is too small to hold anything: perf wrote {written_mb} MB about the "
                       f"target's threads and memory maps before any event; give more than that, such as {room}M")


def _save_kernel_symbols(directory: Path) -> None:
    """The kernel's symbols travel with the capture, so that its kernel frames can be named
    on another machine or after a reboot; without them (kernel.kptr_restrict), they are
    named from this kernel's own when it is the same."""
    try:
        save_kernel_symbols(directory)
    except OffcpuError:
        pass


@contextmanager
def output_taken(directory: Path, force: bool) -> Iterator[None]:
    """Hold `directory` while offcpu records into it. It is locked, so that a second offcpu
    fails (exit 2) instead of both writing one perf.data, and marked (RECORDING) until the
    capture is whole, so that what an offcpu that was killed leaves is known for an
    unfinished recording. An existing capture or unfinished recording is replaced only
    with --force, and then only offcpu's files are deleted; any other directory must be
    empty. A directory made here and left empty is removed."""
    created = _made(directory)
    with _locked(directory):
        marker = directory / RECORDING
        try:
            if not created:
                _clear_for_capture(directory, force)
            _check_free_space(directory)
            try:
                directory.chmod(0o700)  # its files are the owner's alone too: capture.json holds the command line
                marker.write_text(f"offcpu (pid {os.getpid()}) records here; once it ends this file goes, unless "
                                  "the recording was not finished\n")
            except OSError as error:
                raise _not_writable(directory, error) from None
            yield
        except BaseException:
            if not (directory / PERF_DATA).exists():  # nothing of a recording is left: nothing to mark
                marker.unlink(missing_ok=True)
            if created:
                _remove_if_empty(directory)
            raise
        marker.unlink()


def _made(directory: Path) -> bool:
    """Make `directory` unless it exists; whether it was made here."""
    try:
        directory.mkdir(parents=True)
        return True
    except FileExistsError:
        if not directory.is_dir():
            raise OffcpuError(f"{directory} exists and is not a directory; choose another with -o") from None
        return False
    except OSError as error:
        raise _not_writable(directory, error) from None


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` (the kernel releases it however offcpu ends)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise _not_writable(directory, error) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OffcpuError(f"another offcpu is recording into {directory}; wait for it to end or choose another "
                              "directory with -o") from None
        yield
    finally:
        os.close(fd)


def _not_writable(directory: Path, error: OSError) -> OffcpuError:
    return OffcpuError(f"cannot write to {directory} ({error.strerror}); choose another directory with -o")


def _check_free_space(directory: Path) -> None:
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE_BYTES:
        raise OffcpuError(f"only {free >> 20} MiB free where {directory} is; free space or record elsewhere with -o")


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # not empty (a capture, or something else): keep it


def _clear_for_capture(directory: Path, force: bool) -> None:
    if is_capture(directory) or (directory / RECORDING).exists():
        if not force:
            what = ("a capture" if is_capture(directory) else
                    f"an unfinished recording (its offcpu was stopped before it wrote {METADATA})")
            raise OffcpuError(f"{directory} already holds {what}; pass --force to replace it or choose another "
                              "directory with -o")
        for path in own_files(directory):
            path.unlink()
    elif (directory / PERF_DATA).exists():
        raise OffcpuError(f"{directory} holds a {PERF_DATA} that offcpu did not record (no offcpu {METADATA}); "
                          "move it away or choose another directory with -o")
    elif any(directory.iterdir()):
        raise OffcpuError(f"{directory} exists and is not a capture directory; choose another with -o")
