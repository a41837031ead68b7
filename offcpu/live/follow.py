"""Following a live BPF recording (a bpf_session.Follower): its records taken from memory as
they come and the last --keep seconds of them kept; every --interval, the model and the findings
of the last --window seconds (the same as `report`'s, of a capture of those records), handed to
the view; and the flight record written when asked or when a trigger holds."""

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
from offcpu.live.triggers import Trigger
from offcpu.model import Model
from offcpu.model.loading import build
from offcpu.reading.bpf_reader import WAIT

if TYPE_CHECKING:
    from offcpu import _core


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
        self._next_ns = 0
        self.last: Frame | None = None

    def start(self, recording: _core.BpfRecording, info: CaptureInfo) -> None:
        self._recording, self._info = recording, info
        self._next_ns = info.window_start_ns + round(self.options.interval_s * 1e9)

    def tick(self) -> None:
        assert self._recording is not None and self._info is not None, "started first"
        now = time.monotonic_ns()
        self.kept.add(self._recording.take_records(), now)
        if now >= self._next_ns and (self.on_frame is not None or self.options.triggers):
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
        """The window's model and findings, from a capture of its records in the live directory."""
        assert self._recording is not None and self._info is not None
        start = max(now - round(self.options.window_s * 1e9), self._info.window_start_ns)
        records = self.kept.since(start)
        model = None
        if len(records):
            write_capture(self.directory, records, self._recording, self._info, (start, now), self.options.recorded_by)
            model = build(self.directory)
        kept_from = max(self.kept.first_ns, self._info.window_start_ns)
        return Frame(elapsed_s=(now - self._info.window_start_ns) / 1e9, window_s=(now - start) / 1e9, model=model,
                     findings=findings(model) if model is not None else [], waits=_ended_waits(records),
                     p99_wait_ms=p99_wait_ms(records), kept_s=(now - kept_from) / 1e9, kept_bytes=self.kept.size,
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
        except OSError as error:
            raise OffcpuError(f"cannot write the flight record in {directory} ({error.strerror}); give another "
                              "directory with --flight-output") from None
        self.flight_records.append(directory)
        self.flight_asked = ""
        if self.on_flight is not None:
            self.on_flight(directory)
        return directory


def _ended_waits(records: np.ndarray) -> int:
    return int(np.count_nonzero((records["kind"] == WAIT) & (records["back_ns"] != 0)))


def p99_wait_ms(records: np.ndarray) -> float | None:
    """The 99th percentile (nearest rank) of the off-CPU time of the waits that ended among `records`
    (those that began in the recording); None when there are none."""
    waits = records[(records["kind"] == WAIT) & (records["back_ns"] != 0) & (records["since_ns"] != 0)]
    if not len(waits):
        return None
    times = np.sort(waits["back_ns"] - waits["since_ns"])
    return float(times[max(1, -(-99 * len(times) // 100)) - 1]) / 1e6
