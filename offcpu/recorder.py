"""Bounded `perf record` sessions on the scheduler tracepoints.

The flow: check everything that can be checked up front, start perf with
events disabled, enable them, wait for the duration (or the target's exit,
or Ctrl-C / SIGTERM), disable, let perf finish its file, describe the
capture in capture.json. Whatever happens, perf is ended and any sysctl
offcpu changed is put back.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from offcpu import limits, system
from offcpu.capture import PERF_DATA, CaptureInfo, Target, save
from offcpu.errors import OffcpuError
from offcpu.events import EventPlan, plan_events
from offcpu.perf_process import CONTROL_PLACEHOLDER, PerfProcess
from offcpu.perf_script import read_stacks
from offcpu.stacks import looks_truncated

TICK_S = 0.1
MIN_FREE_BYTES = 32 << 20
STACKS_TO_JUDGE = 2000  # switch-out stacks read to judge whether user stacks are truncated


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
    """SIGTERM arrived: end the recording as Ctrl-C would."""


def record(request: RecordRequest, on_tick: Callable[[float], None]) -> CaptureInfo:
    """Record `request.target` into `request.output`; `on_tick(elapsed_s)` shows progress."""
    perf = system.require_perf()
    version = system.perf_version(perf)
    if version is None:
        raise OffcpuError(f"'{perf} --version' failed, so perf cannot run; {system.PERF_INSTALL_HINT}")
    allowed, why = system.may_trace()
    if not allowed:
        raise OffcpuError(why)
    tracefs = system.ensure_tracefs()
    with _schedstats_enabled(request.enable_schedstats) as schedstats:
        plan = plan_events(tracefs, schedstats)
        argv = perf_record_argv(perf, request, plan)
        info = CaptureInfo(
            target=request.target, perf_command=argv, kernel_release=system.kernel_release(),
            perf_version=version, cpus=os.cpu_count() or 1, call_graph=request.call_graph,
            events=[asdict(event) for event in plan.events], events_skipped=[asdict(s) for s in plan.skipped],
            duration_requested_s=request.duration_s, schedstats=schedstats,
            limits=_limits_of(request.target.pid),
        )
        previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            perf_process = PerfProcess(argv)
            try:
                _run(perf_process, request, info, on_tick)
            finally:
                with _signals_ignored():
                    perf_process.stop()
        finally:
            signal.signal(signal.SIGTERM, previous_sigterm)
    info.perf_command = perf_process.argv
    _check_perf_result(perf_process, request.output / PERF_DATA)
    _describe_data(perf, request.output / PERF_DATA, info)
    save(request.output, info)
    return info


def perf_record_argv(perf: str, request: RecordRequest, plan: EventPlan) -> list[str]:
    argv = [
        perf, "record", "-o", str(request.output / PERF_DATA), "--max-size", request.max_size,
        "--call-graph", request.call_graph, "-k", "CLOCK_MONOTONIC",
        "-D", "-1", f"--control={CONTROL_PLACEHOLDER}", *plan.perf_args(),
    ]
    if request.mmap_pages:
        argv += ["--mmap-pages", request.mmap_pages]
    # Switch records give the moment each thread comes back on CPU: a task-bound
    # sched_switch fires only for the task leaving, and system-wide ones out of
    # the idle task are not always delivered (seen on 6.18); switch records are.
    argv.append("--switch-events")
    target = request.target
    if target.kind == "pid":
        argv += ["--pid", str(target.pid)]
    elif target.kind == "tid":
        argv += ["--tid", str(target.tid)]
    elif target.kind == "all":
        argv.append("--all-cpus")
    else:
        argv += ["--", *target.command]
    return argv


def _run(perf_process: PerfProcess, request: RecordRequest, info: CaptureInfo,
         on_tick: Callable[[float], None]) -> None:
    """Enable, wait for the end, disable; fills in the window and how it ended."""
    perf_process.wait_until_ready()
    if perf_process.exited():
        raise _perf_failure(perf_process.stderr, request)
    info.window_start_ns = perf_process.command("enable")
    info.started_at = _now()
    if request.target.kind == "command":
        info.target = Target(**{**asdict(request.target), "pid": _child_of(perf_process.pid)})
    watched_pid = info.target.pid if request.target.kind != "all" else None
    try:
        info.ended_by = _wait_for_end(perf_process, request.duration_s, watched_pid, on_tick)
    except Terminated:
        info.ended_by = "SIGTERM"
    except KeyboardInterrupt:
        info.ended_by = "SIGINT"
    finally:
        noticed_ns = time.monotonic_ns()
        with _signals_ignored():
            disabled_ns = perf_process.command("disable")
            info.ended_at = _now()
    # perf stops reading its control pipe once its target is gone, so a late
    # acknowledgement would stretch the window past the last event.
    info.window_end_ns = noticed_ns if info.ended_by in ("target exited", "perf exited") else disabled_ns
    info.duration_actual_s = (info.window_end_ns - info.window_start_ns) / 1e9
    info.target_exited = info.ended_by == "target exited"
    if info.ended_by == "perf exited" and any("size limit reached" in line for line in perf_process.stderr):
        info.ended_by = "max size"


def _wait_for_end(perf_process: PerfProcess, duration_s: float, watched_pid: int | None,
                  on_tick: Callable[[float], None]) -> str:
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        on_tick(min(elapsed, duration_s))
        if watched_pid is not None and not limits.process_exists(watched_pid):
            return "target exited"
        if perf_process.exited():
            return "perf exited"
        if elapsed >= duration_s:
            return "duration"
        time.sleep(min(TICK_S, duration_s - elapsed))


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Cleanup that a second Ctrl-C must not cut short."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
        path.write_text("1")
    except OSError as error:
        raise OffcpuError(f"cannot enable kernel.sched_schedstats ({error.strerror}); run as root") from None
    try:
        yield "on"
    finally:
        path.write_text("0")


def _limits_of(pid: int | None) -> dict | None:
    return limits.snapshot(pid).to_json() if pid is not None else None


def _child_of(pid: int) -> int | None:
    """The command perf started (its only child)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _check_perf_result(perf_process: PerfProcess, perf_data: Path) -> None:
    """perf ended; fail unless it left a file that perf can read."""
    clean_ends = (0, -signal.SIGINT, -signal.SIGTERM)
    if perf_process.returncode not in clean_ends or not perf_data.is_file() or perf_data.stat().st_size == 0:
        raise _perf_failure(perf_process.stderr, None)


PERF_FAILURES = (
    (re.compile(r"No space left on device"), "the disk is full; free space or record elsewhere with -o"),
    (re.compile(r"Permission denied|No permission|perf_event_paranoid|Access to performance monitoring"),
     system.permission_hint(system.read_int_sysctl("kernel.perf_event_paranoid"))),
    (re.compile(r"No such process|Couldn't create thread"), "the target process does not exist (any more)"),
    (re.compile(r"Read-only file system"), "the output directory is on a read-only file system; choose another with -o"),
)


def _perf_failure(stderr: list[str], request: RecordRequest | None) -> OffcpuError:
    text = "\n".join(stderr)
    for pattern, explanation in PERF_FAILURES:
        if pattern.search(text):
            return OffcpuError(f"perf record failed: {explanation}")
    if request is not None and request.target.kind == "command" and "failed to start" in text.lower():
        return OffcpuError(f"could not start {request.target.command[0]}: check the command and its path")
    last = next((line.strip() for line in reversed(stderr) if line.strip()), "no message")
    return OffcpuError(f"perf record failed: {last}")


def _describe_data(perf: str, perf_data: Path, info: CaptureInfo) -> None:
    os.chmod(perf_data, 0o600)
    info.perf_data_bytes = perf_data.stat().st_size
    counts = _event_counts(perf, perf_data)
    info.samples = counts.get("SAMPLE", 0)
    info.switch_records = counts.get("SWITCH", 0) + counts.get("SWITCH_CPU_WIDE", 0)
    info.lost_events = counts.get("LOST", 0) + counts.get("LOST_SAMPLES", 0)
    info.user_stacks_truncated = _user_stacks_truncated(perf, perf_data)


def _event_counts(perf: str, perf_data: Path) -> dict[str, int]:
    """Record counts by type from `perf report --stats` (its aggregated part)."""
    done = subprocess.run([perf, "report", "-i", str(perf_data), "--stats"], capture_output=True, text=True)
    counts: dict[str, int] = {}
    for line in done.stdout.split("Aggregated stats:")[-1].splitlines():
        match = re.match(r"\s*(\w+) events:\s+(\d+)", line)
        if match and match[1] not in counts:
            counts[match[1]] = int(match[2])
    return counts


def _user_stacks_truncated(perf: str, perf_data: Path) -> bool | None:
    stacks = read_stacks(perf, perf_data, "sched:sched_switch", STACKS_TO_JUDGE)
    return looks_truncated([stack.user_frames for stack in stacks if stack.user_frames])


def prepare_output(directory: Path, force: bool) -> None:
    """Create the capture directory; refuse to overwrite without --force."""
    if directory.exists():
        is_capture = (directory / PERF_DATA).exists() or (directory / "capture.json").exists()
        if is_capture and not force:
            raise OffcpuError(f"{directory} already holds a capture; pass --force to replace it or choose -o")
        if not is_capture and any(directory.iterdir()):
            raise OffcpuError(f"{directory} exists and is not a capture directory; choose another with -o")
        if is_capture:
            shutil.rmtree(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".offcpu-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise OffcpuError(f"cannot write to {directory} ({error.strerror}); choose another directory with -o") from None
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE_BYTES:
        raise OffcpuError(f"only {free >> 20} MiB free where {directory} is; free space or record elsewhere with -o")
