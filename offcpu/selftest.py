"""What recording costs on this machine, measured: a short recording of two threads
handing a token back and forth through a pipe (perf bench sched pipe), and what perf
added to each of their switches."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from offcpu.capture import Target
from offcpu.describe import first_events
from offcpu.errors import OffcpuError
from offcpu.perf_script import PerfScriptReader
from offcpu.recording.backends import Backend
from offcpu.recording.session import RecordRequest, record

ROUND_TRIPS = 5000  # about a tenth of a second of switching, recorded
# A program switching this often a second, for the cost in words.
BUSY_SWITCHES_PER_S = 50_000


@dataclass(frozen=True)
class RecordedSwitch:
    """The median of what perf added to a switch between two recorded threads."""

    whole_ns: int
    sample_ns: int  # of which its sched_switch sample with the stack

    def share_at(self, switches_per_s: int) -> float:
        """The share of a CPU a program switching this often a second loses to recording."""
        return self.whole_ns * switches_per_s / 1e9

    def words(self) -> str:
        return (f"one switch costs perf {self.whole_ns / 1000:.1f} µs here (its sched_switch sample with the stack "
                f"{self.sample_ns / 1000:.1f} µs, then the switch and its records "
                f"{(self.whole_ns - self.sample_ns) / 1000:.1f} µs): a program switching {BUSY_SWITCHES_PER_S:,} "
                f"times a second would lose about {self.share_at(BUSY_SWITCHES_PER_S):.0%} of a CPU to recording")


def recorded_switch(perf: str) -> RecordedSwitch:
    """Record a ping-pong the way `offcpu record -- COMMAND` does and measure its switches.
    OffcpuError when it cannot be recorded or measured."""
    directory = Path(tempfile.mkdtemp(prefix="offcpu-selftest-"))
    try:
        command = ("sh", "-c", f"exec {shlex.quote(perf)} bench sched pipe -T -l {ROUND_TRIPS} >/dev/null")
        request = RecordRequest(Target("command", "sched-pipe", command=command), directory / "capture", 30.0,
                                "64M", "fp", None, False)
        (directory / "capture").mkdir()
        record(request, Backend("perf", "the self-test measures perf"), on_tick=lambda elapsed: None)
        costs = first_events(PerfScriptReader(perf, directory / "capture" / "perf.data")).costs
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if costs.whole_ns is None or costs.sample_median_ns is None:
        raise OffcpuError("the self-test's recording holds no switch between its two threads")
    return RecordedSwitch(costs.whole_ns, costs.sample_median_ns)
