"""A capture on disk: a directory with perf.data and capture.json.

capture.json says what was recorded and how, so that reports can be read
long after the recording and on another machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from offcpu.errors import OffcpuError

SCHEMA = "offcpu-capture/1"
PERF_DATA = "perf.data"
METADATA = "capture.json"


@dataclass(frozen=True)
class Target:
    kind: str  # "pid", "tid", "all" or "command"
    comm: str
    pid: int | None = None
    tid: int | None = None
    command: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "all":
            return "all CPUs"
        if self.kind == "command":
            return f"command '{' '.join(self.command)}'" + (f" (pid {self.pid})" if self.pid else "")
        if self.kind == "tid":
            return f"thread {self.tid} of {self.comm} (pid {self.pid})"
        return f"{self.comm} (pid {self.pid})"


@dataclass
class CaptureInfo:
    target: Target
    perf_command: list[str]
    kernel_release: str
    perf_version: str
    cpus: int
    call_graph: str
    events: list[dict]  # {"name", "call_graph", "why"}
    events_skipped: list[dict]  # {"name", "why"}
    duration_requested_s: float
    schedstats: str  # as it was while recording: "absent", "off" or "on"
    limits: dict | None  # offcpu.limits.LimitsSnapshot.to_json() at the start
    window_start_ns: int = 0  # CLOCK_MONOTONIC, the clock perf.data's timestamps use
    window_end_ns: int = 0
    started_at: str = ""  # wall clock, ISO 8601
    ended_at: str = ""
    duration_actual_s: float = 0.0
    ended_by: str = ""  # "duration", "target exited", "SIGINT", "SIGTERM", "max size"
    target_exited: bool = False
    samples: int = 0
    switch_records: int = 0
    lost_events: int = 0
    perf_data_bytes: int = 0
    user_stacks_truncated: bool | None = None  # None: no user stacks to judge
    schema: str = field(default=SCHEMA)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CaptureInfo:
        target = data.get("target", {})
        return cls(**{**data, "target": Target(**{**target, "command": tuple(target.get("command", ()))})})


def save(directory: Path, info: CaptureInfo) -> None:
    path = directory / METADATA
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(info.to_json(), indent=2) + "\n")
    partial.replace(path)  # a reader never sees half a file


def load(directory: Path) -> CaptureInfo:
    """Read a capture directory, with a fix-it message for whatever is missing."""
    if not directory.is_dir():
        raise OffcpuError(f"{directory} is not a capture directory; make one with 'offcpu record -o {directory} ...'")
    path = directory / METADATA
    if not path.is_file():
        raise OffcpuError(f"{directory} has no {METADATA}: it was not made by 'offcpu record' or the recording did not finish")
    try:
        data = json.loads(path.read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        return CaptureInfo.from_json(data)
    except (ValueError, TypeError) as error:
        raise OffcpuError(f"{path} is not a capture description offcpu can read ({error}); record it again") from None
