"""How a recording waits for its end: the duration, the target's exit, the exit of the
command run alongside it, or perf's; meanwhile it keeps the target's snapshot nearest
its limits and the processes of its name that perf cannot record."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable

from offcpu import limits, targets
from offcpu.capture import CaptureInfo, Target
from offcpu.errors import OffcpuError
from offcpu.recording.perf_process import PerfProcess

TICK_S = 0.1
LOOK_EVERY_S = 1.0  # how often the target's threads and maps are held against its limits, and strays looked for
COMMAND_EXITED = "command exited"


def wait_for_end(perf_process: PerfProcess, duration_s: float, info: CaptureInfo,
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
        with EndWatch(target) as watch:
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


class EndWatch:
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

    def __enter__(self) -> EndWatch:
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
