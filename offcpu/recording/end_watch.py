"""How a recording waits for its end: the duration, the target's exit, the exit of the
command run alongside it, or perf's; meanwhile it keeps the target's snapshot nearest
its limits and the processes of its name that perf cannot record."""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from offcpu.capture import CaptureInfo, Target
from offcpu.errors import OffcpuError
from offcpu.machine import limits
from offcpu.recording import targets
from offcpu.recording.perf_process import PerfProcess

TICK_S = 0.1
LOOK_EVERY_S = 1.0  # how often the target's threads and maps are held against its limits, and strays looked for
COMMAND_EXITED = "command exited"
PERF_SPINNING = "perf spinning"
# perf 6.1 spins once one of several processes it records by pid has exited: it takes a whole
# CPU (3.9-5.5 s of system time in 4 s here) and reads next to nothing. A recording that reads
# events costs perf a few percent of a CPU and grows perf.data by tens of KB a second or more;
# perf busy writing a flood of events grows it by MBs. So: over half a CPU, while perf.data grows
# by less than a MB a second, at two looks in a row, is a spin, and the recording ends there.
SPIN_CPU_SHARE = 0.5
SPIN_BYTES_PER_S = 1 << 20
SPIN_LOOKS = 2
SIZE = re.compile(r"^(\d+)([BKMG])$")  # as perf record --max-size takes it: a unit, in capitals
SIZE_UNITS = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def wait_for_end(recorder_end: Callable[[], str | None], duration_s: float, info: CaptureInfo,
                 on_tick: Callable[[float], None], spin: SpinWatch | None = None,
                 on_look: Callable[[], None] | None = None) -> str:
    """Until the duration ends, the target or its command exits, or the recorder ends
    (`recorder_end` says how: perf exited, the capture reached its size), or perf spins
    (`spin`; PERF_SPINNING: it would take a CPU from the recorded processes until the end);
    meanwhile keeps in info.limits_peak the target's snapshot nearest its limits (threads
    come and go), and in info.unrecorded_processes the processes of its name or executable
    that the recording does not follow; `on_look` is called at each look (every
    LOOK_EVERY_S)."""
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
                ended = recorder_end()
                if ended:
                    return ended
                if elapsed >= duration_s:
                    return "duration"
                if time.monotonic() >= next_look:
                    if spin is not None and spin.spinning():
                        return PERF_SPINNING
                    peak = _nearer_the_limits(peak, target)
                    if strays is not None:
                        strays.look()
                    if on_look is not None:
                        on_look()
                    next_look = time.monotonic() + LOOK_EVERY_S
                ended = watch.ended(min(TICK_S, duration_s - elapsed))
                if ended:
                    return ended
    finally:
        info.limits_peak = peak.to_json() if peak else None
        info.unrecorded_processes = {str(pid): comm for pid, comm in sorted(strays.found.items())} if strays else {}


@dataclass(frozen=True)
class PerfGauge:
    """perf's CPU time and perf.data's size at a moment."""

    at_s: float
    cpu_s: float
    data_bytes: int


class SpinWatch:
    """Whether perf spins (see SPIN_CPU_SHARE), from its CPU time and perf.data's size at each look."""

    def __init__(self, perf_process: PerfProcess, perf_data: Path) -> None:
        self.perf_process, self.perf_data = perf_process, perf_data
        self.last = self._gauge()
        self.looks_spinning = 0

    def _gauge(self) -> PerfGauge:
        try:
            size = self.perf_data.stat().st_size
        except OSError:
            size = 0
        return PerfGauge(time.monotonic(), self.perf_process.cpu_time_s() or 0.0, size)

    def spinning(self) -> bool:
        then, now = self.last, self._gauge()
        self.last = now
        elapsed = max(now.at_s - then.at_s, 1e-3)
        spun = now.cpu_s - then.cpu_s >= SPIN_CPU_SHARE * elapsed and \
            now.data_bytes - then.data_bytes < SPIN_BYTES_PER_S * elapsed
        self.looks_spinning = self.looks_spinning + 1 if spun else 0
        return self.looks_spinning >= SPIN_LOOKS


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


def size_in_bytes(size: str) -> int:
    """A --max-size (checked by the command line: see SIZE) in bytes."""
    shape = SIZE.match(size)
    return int(shape[1]) * SIZE_UNITS[shape[2]] if shape else 0
