"""The flight record: the records a live recording kept, the last seconds, written as an ordinary
BPF capture ([capture](../../docs/capture.md)) that every `report` format reads."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from offcpu.capture import (
    BPF_MAPS,
    BPF_RECORDS,
    BPF_STACKS,
    KERNEL_SYMBOLS,
    VDSO_IMAGE,
    CaptureInfo,
    save,
)
from offcpu.files import PRIVATE, write_whole
from offcpu.reading.bpf_reader import RECORD

if TYPE_CHECKING:
    from offcpu import _core

# What the live recording keeps in its own directory for every capture made of it: the
# processes' maps (kept up to date while it records) and the kernel's files
SHARED = (BPF_MAPS, KERNEL_SYMBOLS, VDSO_IMAGE)


def write_capture(directory: Path, records: np.ndarray, recording: _core.BpfRecording, info: CaptureInfo,
                  window: tuple[int, int], recorded_by: str, live_directory: Path) -> None:
    """A capture of `records` and of the waits open now (cut at the window's end, as a
    recording's end cuts them) into `directory`, which exists: the stack table as it stands,
    capture.json with `window` (CLOCK_MONOTONIC ns) as its window, and the files the live
    recording keeps in `live_directory`. OSError when a file cannot be written."""
    open_now = recording.open_waits()
    whole = np.concatenate([records, np.frombuffer(open_now, RECORD, len(open_now) // RECORD.itemsize)])
    write_whole(directory / BPF_RECORDS, whole.tobytes(), mode=PRIVATE)
    recording.save_stacks(str(directory / BPF_STACKS))
    for name in SHARED:  # only offcpu's user reads them, as a recording's own (other processes' maps, kernel addresses)
        with contextlib.suppress(FileNotFoundError):  # no kallsyms where the kernel hides its symbols
            write_whole(directory / name, (live_directory / name).read_bytes(), mode=PRIVATE)
    start_ns, end_ns = window
    waits = int(np.count_nonzero(whole["kind"] == 1))
    save(directory, replace(info, window_start_ns=start_ns, window_end_ns=end_ns,
                            duration_requested_s=(end_ns - start_ns) / 1e9, duration_actual_s=(end_ns - start_ns) / 1e9,
                            ended_by="kept", recorded_by=recorded_by, samples=waits,
                            perf_data_bytes=whole.nbytes, threads_at_start={}, processes_at_start={}))
