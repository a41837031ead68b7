"""What a recording is asked to do, whichever backend records it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offcpu.capture import Target


@dataclass(frozen=True)
class RecordRequest:
    target: Target
    output: Path
    duration_s: float
    max_size: str
    call_graph: str
    mmap_pages: str | None
    enable_schedstats: bool
    snapshot: bool = True  # the stacks of threads asleep through the window, from the live process at its end
    backend: str = "auto"  # "auto", "bpf" or "perf" (offcpu.recording.backends)
    stack_budget: int = 0  # BPF: stacks taken per second per CPU at most (offcpu.recording.bpf_session)
