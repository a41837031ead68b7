"""Following a live BPF recording (a bpf_session.Follower): its records taken from memory as
they come and the last --keep seconds of them kept; every --interval, the model and the findings
of the last --window seconds (the same as `report`'s of a capture of those records; built from
each interval paired once, offcpu.live.window), handed to the view; and the flight record written
when asked or when a trigger holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from offcpu.capture import CaptureInfo
from offcpu.diagnosis.findings import Finding, findings
from offcpu.errors import OffcpuError
from offcpu.live.flight import write_capture
from offcpu.live.kept import KeptRecords
from offcpu.live.runtime import LiveRuntime
from offcpu.live.triggers import Trigger
from offcpu.live.window import LiveWindow, joined
from offcpu.model import Model
from offcpu.reading.bpf_reader import RECORD

if TYPE_CHECKING:
    from offcpu import _core
    from offcpu.recording.runtime_stacks import RuntimeSampler

# An interval is paired up to when the waits open were read, this long before its frame: the
# waits that had ended by then have been drained by the frame (the core drains its ring buffer
# every 50 ms, and the follower takes the records every 0.1 s)
LAG_NS = 200_000_000


@dataclass(frozen=True)
class LiveOptions:
    interval_s: float
    window_s: float
    keep_s: float
    keep_bytes: int
    triggers: tuple[Trigger, ...]
    flight_output: Path  # where flight records go: a directory per record in it
    recorded_by: str  # capture.json's recorded_by of a flight record: "top" or "record --keep"


@dataclass
class Frame:
    """What the view shows at an interval."""

    elapsed_s: float
    window_s: float  # the window's length (shorter than --window at first)
    model: Model | None  # None: nothing recorded in the window yet
    findings: list[Finding]
    waits: int  # that ended in the window
    p99_wait_ms: float | None
    kept_s: float
    kept_bytes: int
    kept_dropped: int  # records let go by the byte bound before --keep was up
    flight_records: list[Path] = field(default_factory=list)  # written so far


class Follow:
    def __init__(self, live_directory: Path, options: LiveOptions, on_frame: Callable[[Frame], None] | None,
                 on_flight: Callable[[Path], None] | None = None) -> None:
        """`on_frame`: the view, given each interval's frame (None: no view, and no frame is built
        but for the triggers); `on_flight`: told of each flight record as it is written."""
        self.directory = live_directory
        self.options = options
        self.on_frame = on_frame
        self.on_flight = on_flight
        self.kept = KeptRecords(round(options.keep_s * 1e9), options.keep_bytes)
        self.flight_records: list[Path] = []
        self.flight_asked = ""  # why a flight record is asked for ("SIGUSR1", "key"), until written
        self._holding: set[str] = set()  # the triggers that held at the last interval
        self._recording: _core.BpfRecording | None = None
        self._info: CaptureInfo | None = None
        self._sampler: RuntimeSampler | None = None
        self._next_ns = 0
        self._window: LiveWindow | None = None  # None: no view and no trigger, nothing to build
        self._taken: list[np.ndarray] = []  # since the last frame
        self._open: tuple[int, np.ndarray] | None = None  # when the waits open were read, and those
        self._read_before = 0  # when they were read for the frame before (ns)
        self.last: Frame | None = None

    def start(self, recording: _core.BpfRecording, info: CaptureInfo, sampler: RuntimeSampler) -> None:
        self._recording, self._info, self._sampler = recording, info, sampler
        # the seconds kept, or the window's when longer (the maps kept follow it: they name the window's records)
        sampler.keep_ns = max(self.kept.keep_ns, round(self.options.window_s * 1e9))
        # and the stacks (twice over: a record is kept by its own times, its stacks by when they were read)
        recording.keep_stacks(2 * sampler.keep_ns)
        self._next_ns = info.window_start_ns + round(self.options.interval_s * 1e9)
        if self.on_frame is not None or self.options.triggers:
            self._window = LiveWindow(self.directory, recording, info, LiveRuntime(sampler))

    def tick(self) -> None:
        assert self._recording is not None and self._info is not None, "started first"
        now = time.monotonic_ns()
        if self._window is not None and self._open is None and now >= self._next_ns - LAG_NS:
            self._open = now, _records(self._recording.open_waits())
        taken = self._recording.take_records()
        self.kept.add(taken, now)
        if self._window is not None:
            self._taken.append(_records(taken))
        if self._window is not None and now >= self._next_ns:
            self._next_ns = now + round(self.options.interval_s * 1e9)
            frame = self.frame(now)
            for trigger in self.options.triggers:
                holds = trigger.holds(frame.findings, frame.p99_wait_ms)
                if holds and trigger.text not in self._holding:  # once each time it comes to hold
                    self.flight_asked = self.flight_asked or f"--trigger {trigger.text}"
                self._holding = (self._holding | {trigger.text}) if holds else (self._holding - {trigger.text})
            self.last = frame
            if self.on_frame is not None:
                self.on_frame(frame)
        if self.flight_asked:
            self.write_flight(now)

    def frame(self, now: int) -> Frame:
        """The window's model and findings: the intervals since the last frame paired, and merged
        with those of the window before."""
        assert self._recording is not None and self._info is not None and self._window is not None
        read_ns, open_then = self._open or (now, _records(self._recording.open_waits()))
        # With a runtime's stacks read, the interval before is paired, not this one: its waits'
        # samples have come by now (offcpu.live.runtime)
        held_back = self._sampler is not None and bool(self._sampler.found)
        self._window.add(joined(self._taken), open_then, self._read_before if held_back else read_ns, read_ns)
        self._taken, self._open, self._read_before = [], None, read_ns
        self._window.slide(round(self.options.window_s * 1e9))
        self._window.let_go()
        model = self._window.model()
        waited = self._window.waited_ns()
        kept_from = max(self.kept.first_ns, self._info.window_start_ns)
        return Frame(elapsed_s=(now - self._info.window_start_ns) / 1e9,
                     window_s=0.0 if model is None else model.wall_us / 1e6, model=model,
                     findings=findings(model) if model is not None else [], waits=len(waited),
                     p99_wait_ms=p99_wait_ms(waited), kept_s=(now - kept_from) / 1e9, kept_bytes=self.kept.size,
                     kept_dropped=self.kept.dropped, flight_records=list(self.flight_records))

    def write_flight(self, now: int) -> Path:
        """The records kept, as a capture in a new directory of --flight-output."""
        assert self._recording is not None and self._info is not None
        start = max(self.kept.first_ns, self._info.window_start_ns)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        directory = self.options.flight_output / f"offcpu-flight-{stamp}-{len(self.flight_records) + 1}"
        try:
            directory.mkdir(mode=0o700, parents=True)
            write_capture(directory, self.kept.since(start), self._recording, self._info, (start, now),
                          self.options.recorded_by, live_directory=self.directory)
            if self._sampler is not None:  # the runtimes' frames read meanwhile (Python's, Java's, Ruby's)
                self._sampler.write(directory, start)
        except OSError as error:
            raise OffcpuError(f"cannot write the flight record in {directory} ({error.strerror}); give another "
                              "directory with --flight-output") from None
        self.flight_records.append(directory)
        self.flight_asked = ""
        if self.on_flight is not None:
            self.on_flight(directory)
        return directory


def _records(data: bytes) -> np.ndarray:
    return np.frombuffer(data, RECORD, len(data) // RECORD.itemsize)


def p99_wait_ms(waited_ns: np.ndarray) -> float | None:
    """The 99th percentile (nearest rank) of these off-CPU times (ns); None when there are none."""
    if not len(waited_ns):
        return None
    rank = max(1, -(-99 * len(waited_ns) // 100)) - 1
    return float(np.partition(waited_ns, rank)[rank]) / 1e6
