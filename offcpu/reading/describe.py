"""What a finished perf.data says about itself, for capture.json: how many events
of each kind, how many perf lost, when the first ones came, whether user stacks
look cut short, and what a recorded switch costs perf on this machine."""

from __future__ import annotations

import os
import stat
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from offcpu import _core
from offcpu.capture import CaptureInfo
from offcpu.errors import OffcpuError
from offcpu.files import PRIVATE
from offcpu.reading.native_reader import NativeReader, open_perf_data, reading, unsupported
from offcpu.reading.sched_events import SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, SWITCH_OUT, THREAD_COMM, Chain, Events
from offcpu.stacks import looks_truncated

STACKS_TO_JUDGE = 2000  # switch-out stacks read to judge whether user stacks are truncated
SWITCHES_TO_TIME = 2000  # switches read to measure perf's cost of one


def describe(perf_data: Path, info: CaptureInfo) -> None:
    """Fill in what capture.json says of perf.data once perf has finished it."""
    info.perf_data_bytes = _made_private(perf_data)
    try:
        with reading(perf_data):
            count_records(open_perf_data(perf_data), info)
    except OffcpuError:  # kept all the same: reading it for a report says what is wrong
        pass
    first = first_events(perf_data)
    info.user_stacks_truncated = first.user_stacks_truncated
    info.switch_cost_ns = first.costs.median_ns
    # A command's events went on as it was exec'd; the others' between offcpu's
    # "enable" and perf's answer to it.
    if info.target.kind == "command" and info.target.pid is None:
        info.target = replace(info.target, pid=first.exec_pid)
    start_ns = first.exec_ns if info.target.kind == "command" and first.exec_ns is not None else first.sample_ns
    if start_ns is not None and start_ns < info.window_start_ns:
        info.window_start_ns = start_ns
        info.duration_actual_s = (info.window_end_ns - info.window_start_ns) / 1e9


def _made_private(perf_data: Path) -> int:
    """Make perf.data its owner's alone (perf makes it readable by others), through the open file,
    never a link put at its name while perf recorded; its size."""
    try:
        fd = os.open(perf_data, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise OffcpuError(f"cannot open {perf_data} ({error.strerror}): something replaced it while perf "
                          "recorded; record again into a directory only you can change") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OffcpuError(f"{perf_data} is no longer a regular file: something replaced it while perf "
                              "recorded; record again into a directory only you can change")
        os.fchmod(fd, PRIVATE)
        return status.st_size
    finally:
        os.close(fd)


def count_records(data: _core.PerfData, info: CaptureInfo) -> None:
    """Fill in how many samples and switch records perf.data holds and how many events
    perf lost (what its LOST records carry, or its LOST_SAMPLES records if they say more),
    from the core's one walk over its records; in `reading` its errors."""
    counts = data.record_counts()
    info.samples = counts["samples"]
    info.switch_records = counts["switch_records"]
    info.lost_events = counts["lost_events"]


@dataclass
class SwitchCosts:
    """What perf's recording adds to a switch between two recorded threads, which the kernel
    charges to the one coming in: its sched_switch sample with the stack (from the
    tracepoint to perf's record of the thread going out), then the switch itself with
    perf's switching of its events and its record of the thread coming in. A switch from
    a thread that was not recorded costs about as much as the second part, and is placed
    that much before perf's record of it."""

    leaving: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid out -> (tid in, the switch's time)
    out: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid in -> (the switch's time, the out record's)
    after_out_ns: list[int] = field(default_factory=list)  # record of it going out -> of the next coming in

    def sched_switch(self, time_ns: int, prev_tid: int, next_tid: int) -> None:
        if prev_tid and next_tid:
            self.leaving[prev_tid] = (next_tid, time_ns)

    def switch_out(self, time_ns: int, tid: int) -> None:
        leaving = self.leaving.pop(tid, None)
        if leaving is not None and leaving[1] <= time_ns:
            next_tid, switched_ns = leaving
            self.out[next_tid] = (switched_ns, time_ns)

    def switch_in(self, time_ns: int, tid: int) -> None:
        out = self.out.pop(tid, None)
        if out is not None and out[1] <= time_ns:
            _, out_ns = out
            self.after_out_ns.append(time_ns - out_ns)

    @property
    def median_ns(self) -> int | None:
        """The switch cost a switch-in from an unrecorded thread is placed by."""
        return _median(self.after_out_ns)



def _median(values: list[int]) -> int | None:
    return round(statistics.median(values)) if values else None


@dataclass
class FirstEvents:
    """What the start of perf.data says (None: not found, or perf.data could not be read)."""

    sample_ns: int | None = None  # the first scheduler sample
    exec_ns: int | None = None  # the first exec (a command's start) and who did it
    exec_pid: int | None = None
    user_stacks_truncated: bool | None = None  # most of the first switch-out stacks stop short
    costs: SwitchCosts = field(default_factory=SwitchCosts)


class _Enough(Exception):
    """The first events have said all they can: stop reading."""


class _FirstEventsSink:
    """Takes what FirstEvents needs from the start of a capture, then stops the reader."""

    def __init__(self) -> None:
        self.first = FirstEvents()
        self.chains: list[Chain] = []
        self.costs = SwitchCosts()

    def _sample(self, time_ns: int) -> None:
        if self.first.sample_ns is None:
            self.first.sample_ns = time_ns
        if len(self.chains) >= STACKS_TO_JUDGE and len(self.costs.after_out_ns) >= SWITCHES_TO_TIME:
            raise _Enough

    def take(self, events: Events) -> None:
        for kind, time_ns, _, pid, tid, other, _, _, chain in events.rows():
            if kind == SCHED_SWITCH:
                if chain and len(self.chains) < STACKS_TO_JUDGE:
                    self.chains.append(chain)
                self.costs.sched_switch(time_ns, tid, other)
                self._sample(time_ns)
            elif kind == SCHED_WAKING:
                self._sample(time_ns)
            elif kind == SWITCH_IN:
                self.costs.switch_in(time_ns, tid)
            elif kind == SWITCH_OUT:
                self.costs.switch_out(time_ns, tid)
            elif kind == THREAD_COMM and other and self.first.exec_ns is None:  # other: renamed by exec
                self.first.exec_ns, self.first.exec_pid = time_ns, pid


def first_events(perf_data: Path) -> FirstEvents:
    """Read the start of a perf.data in the core: up to STACKS_TO_JUDGE switch-out stacks and
    SWITCHES_TO_TIME switches (all of it when it holds fewer). Unknown for a perf.data the core
    cannot read (only perf script can, and it is not run for this)."""
    sink = _FirstEventsSink()
    try:
        if unsupported(perf_data) is not None:
            return FirstEvents()
        reader = NativeReader(perf_data)
        reader.read(sink)
    except _Enough:
        pass
    except (OffcpuError, OSError):  # perf.data perf cannot read: these facts are unknown
        return FirstEvents()
    stacks = reader.stacks(sink.chains)
    sink.first.user_stacks_truncated = looks_truncated(
        [stacks[chain].user_frames for chain in sink.chains if stacks[chain].user_frames])
    sink.first.costs = sink.costs
    return sink.first
