"""The reader a capture's kind chooses for it (offcpu.kinds), opened; and what the reader found
beside the events that the model keeps (its notes on the mapped files, a Java monitor's owners)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from offcpu.capture import CaptureInfo
from offcpu.kinds import BPF_READER, NATIVE_READER, PERF_SCRIPT_READER, CaptureKind, ReaderPlan
from offcpu.machine import system
from offcpu.reading.native_reader import NativeReader, unsupported
from offcpu.reading.pairing import CaptureReader


@dataclass
class Opened:
    reader: CaptureReader
    why: str  # why this one, for the report
    # What the reader found that the model keeps, once it has read the stacks: notes on the
    # mapped files, and a Java monitor's owner by its waiter as the thread dumps named it
    binary_notes: Callable[[], list[str]] = list
    mutex_owners: Callable[[], dict[int, int]] = field(default=dict)


def open_reader(kind: CaptureKind, directory: Path, info: CaptureInfo, forced: str | None) -> Opened:
    """The reader of the capture at `directory`, as its kind chooses it (`forced`: --reader)."""
    plan = kind.reader(directory, forced, unsupported)
    return OPENERS[plan.reader](kind, plan, info)


def _native(kind: CaptureKind, plan: ReaderPlan, info: CaptureInfo) -> Opened:
    reader = NativeReader(plan.path, plan.kernel_symbols, plan.vdso)
    return Opened(reader, plan.why, lambda: reader.binary_notes)


def _perf_script(kind: CaptureKind, plan: ReaderPlan, info: CaptureInfo) -> Opened:
    from offcpu.reading.perf_script import PerfScriptReader  # the core's reader is the usual one

    perf = system.require_perf()
    kind.check_readable(perf, plan.path, info)
    return Opened(PerfScriptReader(perf, plan.path), plan.why)


def _bpf(kind: CaptureKind, plan: ReaderPlan, info: CaptureInfo) -> Opened:
    from offcpu.reading.bpf_reader import BpfReader  # numpy: only when a BPF capture is read

    reader = BpfReader(plan.path)
    runtime = reader.runtime
    return Opened(reader, plan.why, lambda: reader.binary_notes,
                  lambda: runtime.last_owners() if runtime is not None else {})


OPENERS: dict[str, Callable[[CaptureKind, ReaderPlan, CaptureInfo], Opened]] = {
    NATIVE_READER: _native, PERF_SCRIPT_READER: _perf_script, BPF_READER: _bpf}
