"""The model of a capture: read from model.json beside perf.data (or a BPF
recording's records), or built (once) from them. A changed perf.data (or records
file) makes the saved model stale."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from offcpu import _core
from offcpu.capture import (
    BPF_RECORDS,
    BPF_STACKS,
    KERNEL_SYMBOLS,
    METADATA,
    MODEL_FILE,
    PERF_DATA,
    VDSO_IMAGE,
    CaptureInfo,
    load,
)
from offcpu.errors import OffcpuError
from offcpu.files import PRIVATE, open_regular, read_json, write_whole
from offcpu.machine import system
from offcpu.model import Model
from offcpu.model.asleep import load as load_snapshot, with_asleep_stacks
from offcpu.model.engine import build_model
from offcpu.reading.native_reader import NativeReader, open_perf_data, reading, unsupported
from offcpu.reading.pairing import CaptureReader
from offcpu.reading.perf_script import PerfScriptReader
from offcpu.reading.plain_perf_data import is_perf_data, lacks, name_target, plain_info
from offcpu.recording.events import SWITCH_TRACEPOINT
from offcpu.workers import child_environment

READERS = (NativeReader.name, PerfScriptReader.name)  # of perf.data; a BPF capture has one reader
BPF_BACKEND = "bpf"  # capture.json's backend for a recording made with BPF (offcpu.reading.bpf_reader)
BPF_READER_NOTE = "recorded with BPF"
RECORD_AGAIN = "record it again with 'offcpu record'"
# Less cannot be cut into one perf script --time slice per CPU, and would show nothing anyway.
MIN_WINDOW_NS = 1_000_000
# perf.data begins with its magic, the header's and an attribute's sizes, then where its
# attributes and its events are (offset and size each): perf's perf_file_header.
PERF_MAGIC = _core.PERF_MAGIC
PERF_HEADER = struct.Struct("<8sQQQQQQ")
HASHED_MAX = 1 << 20  # of perf.data's header, and of its features: never more than this of each
# The most model.json is read of: a model of hundreds of thousands of stacks (a larger one is
# built again, as a stale one is)
MODEL_MAX = 256 << 20
# `perf report --header-only`: one line per event.
EVENT_NAME = re.compile(r"^# event : name = ([^,]+),", re.MULTILINE)


def load_model(directory: Path, window_s: tuple[float, float] | None = None, reader: str | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> Model:
    """The capture's model; `window_s` (seconds from the start of the recording)
    builds a model of that part only, which is not saved; `reader` (one of READERS)
    reads perf.data with that reader instead of the one chosen for it."""
    model = cached_model(directory, window_s, reader)
    return model if model is not None else build(directory, window_s, reader, on_progress)


def cached_model(directory: Path, window_s: tuple[float, float] | None = None,
                 reader: str | None = None) -> Model | None:
    """The model saved beside perf.data, when there is one for this perf.data (read by
    `reader`, when given) and no window is asked for; None when it has to be built (the
    slow part). Never for a perf.data recorded by perf alone: nothing is saved beside it."""
    if is_perf_data(directory):
        return None
    info = load(directory)
    identity = _bpf_identity(directory) if info.backend == BPF_BACKEND else _identity(directory / PERF_DATA)
    cache = directory / MODEL_FILE
    if window_s is not None:
        _window_ns(info, window_s)  # a wrong --time is said before any work
        return None
    if not cache.is_file():
        return None
    model = _read_cache(cache)
    if model is None or model.perf_data != identity or reader not in (None, model.reader):
        return None
    return model


def build(directory: Path, window_s: tuple[float, float] | None = None, reader: str | None = None,
          on_progress: Callable[[int, int], None] | None = None) -> Model:
    """Read perf.data into the model (of `window_s` only, when given); the whole
    capture's is saved as model.json when the directory can be written. `directory`
    may be a perf.data that perf recorded alone (offcpu.reading.plain_perf_data)."""
    plain = is_perf_data(directory)
    info = plain_info(directory) if plain else load(directory)
    if info.backend == BPF_BACKEND:
        return _build_bpf(directory, info, window_s, reader, on_progress)
    perf_data = directory if plain else directory / PERF_DATA
    identity = _identity(perf_data)
    window = _window_ns(info, window_s)
    if info.samples == 0 and not info.threads_at_start:
        raise _nothing_ran(perf_data)
    if not plain:
        _check_same_recording(perf_data, info)
    chosen, why = choose_reader(directory, info, reader)
    model = build_model(chosen, info, window, on_progress)
    with_asleep_stacks(model, load_snapshot(directory))
    model.perf_data = identity
    model.reader, model.reader_note = chosen.name, why
    if isinstance(chosen, NativeReader):
        model.binary_notes = chosen.binary_notes
    if plain:
        name_target(model)
        model.lacks = lacks(info)
    elif window_s is None:
        _save(directory / MODEL_FILE, model)
    return model


def _build_bpf(directory: Path, info: CaptureInfo, window_s: tuple[float, float] | None, reader: str | None,
               on_progress: Callable[[int, int], None] | None) -> Model:
    """build() of a capture recorded with BPF: its records read by offcpu.reading.bpf_reader."""
    from offcpu.reading.bpf_reader import BpfReader  # numpy: only when a BPF capture is read

    if reader is not None:
        raise OffcpuError(f"--reader {reader} reads a perf.data, and {directory} was recorded with BPF (it has "
                          f"{BPF_RECORDS} instead): leave out --reader")
    identity = _bpf_identity(directory)
    window = _window_ns(info, window_s)
    chosen = BpfReader(directory)
    if chosen.count == 0 and not info.threads_at_start:
        raise _nothing_ran(directory / BPF_RECORDS)
    # The kernel timed every switch itself: no switch-in is placed by a measured cost.
    model = build_model(chosen, replace(info, switch_cost_ns=None), window, on_progress)
    with_asleep_stacks(model, load_snapshot(directory))
    if chosen.runtime is not None:  # a Java monitor's owner, as its thread dumps named it
        model.mutex_owners.update(chosen.runtime.last_owners())
    model.perf_data = identity
    model.reader, model.reader_note, model.binary_notes = chosen.name, BPF_READER_NOTE, chosen.binary_notes
    if window_s is None:
        _save(directory / MODEL_FILE, model)
    return model


def _nothing_ran(recorded: Path) -> OffcpuError:
    return OffcpuError(f"{recorded} holds no scheduler event, and no thread of the target was seen when it "
                       "began: nothing ran during the recording; record again while the target is busy")


def _save(cache: Path, model: Model) -> None:
    """Best effort: a capture on read-only media, or a full disk, is reported without a saved model.
    Owner only, as the capture: it holds every thread's name and stacks."""
    try:
        write_whole(cache, json.dumps(model.to_json(), separators=(",", ":")), mode=PRIVATE)
    except OSError:
        pass


def _identity(perf_data: Path) -> dict:
    """What ties a saved model to its perf.data: its size and a hash of all perf wrote in it
    but the events (its header, the events' attributes with ids of their own, and at the end
    its features: the command line, the time of its first and last sample...), a few KB
    whatever its size. Not its modification time: a copy is the same recording."""
    try:
        with open_regular(perf_data) as file:
            size = os.fstat(file.fileno()).st_size
            header = file.read(PERF_HEADER.size)
            digest = hashlib.sha256(header)
            if len(header) == PERF_HEADER.size and header.startswith(PERF_MAGIC):
                data_offset, data_size = PERF_HEADER.unpack(header)[-2:]
                digest.update(file.read(min(max(data_offset - PERF_HEADER.size, 0), HASHED_MAX)))
                file.seek(min(data_offset + data_size, size))  # a damaged header may point anywhere
                digest.update(file.read(HASHED_MAX))
    except FileNotFoundError:
        raise OffcpuError(f"{perf_data} is missing; {RECORD_AGAIN}") from None
    except OSError as error:
        raise OffcpuError(f"cannot read {perf_data} ({error.strerror}); {RECORD_AGAIN}") from None
    if size == 0:
        raise OffcpuError(f"{perf_data} is empty; {RECORD_AGAIN}")
    return {"size": size, "sha256_of_header": digest.hexdigest()}


def _bpf_identity(directory: Path) -> dict:
    """What ties a saved model to a BPF recording: the size of its records and a hash of their
    first and last bytes and of its stack table, a few MB at most whatever its size."""
    try:
        digest = hashlib.sha256()
        with open_regular(directory / BPF_RECORDS) as file:
            size = os.fstat(file.fileno()).st_size
            digest.update(file.read(HASHED_MAX))
            file.seek(max(size - HASHED_MAX, 0))
            digest.update(file.read(HASHED_MAX))
        with open_regular(directory / BPF_STACKS) as file:
            digest.update(file.read(HASHED_MAX))
    except FileNotFoundError as error:
        raise OffcpuError(f"{error.filename} is missing; {RECORD_AGAIN}") from None
    except OSError as error:
        raise OffcpuError(f"cannot read {error.filename} ({error.strerror}); {RECORD_AGAIN}") from None
    return {"size": size, "sha256_of_ends": digest.hexdigest()}


def _read_cache(path: Path) -> Model | None:
    try:
        return Model.from_json(read_json(path, MODEL_MAX))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
        return None  # unreadable, from another version of offcpu, or damaged: build it again


def choose_reader(directory: Path, info: CaptureInfo, forced: str | None) -> tuple[CaptureReader, str]:
    """The reader for this capture and why it was chosen: perf.data read directly, unless
    it holds what only perf script decodes (dwarf stacks to unwind, a pipe's records...)
    or `forced` names the other. `directory` may be a perf.data perf recorded alone."""
    plain = is_perf_data(directory)
    perf_data = directory if plain else directory / PERF_DATA
    if forced == PerfScriptReader.name:
        return _perf_script_reader(perf_data, info), "--reader perf-script"
    reason = unsupported(perf_data)
    if reason is None:
        kernel_symbols, vdso = (None, None) if plain else (
            path if path.is_file() else None for path in (directory / KERNEL_SYMBOLS, directory / VDSO_IMAGE))
        native = NativeReader(perf_data, kernel_symbols, vdso)
        return native, "--reader native" if forced else "perf.data read directly"
    if forced == NativeReader.name:
        raise OffcpuError(f"--reader native cannot read {perf_data}: {reason}; leave out --reader, and perf script "
                          "reads it")
    return _perf_script_reader(perf_data, info), f"read with perf script: {reason}"


def _perf_script_reader(perf_data: Path, info: CaptureInfo) -> PerfScriptReader:
    perf = system.require_perf()
    _check_readable(perf, perf_data, info)
    return PerfScriptReader(perf, perf_data)


def _check_readable(perf: str, perf_data: Path, info: CaptureInfo) -> None:
    """Fail early, with the fix, on a perf.data this machine cannot turn into a model."""
    if info.kernel_release != system.kernel_release():
        raise OffcpuError(
            f"this capture was recorded on kernel {info.kernel_release} and this machine runs "
            f"{system.kernel_release()}: perf would name its kernel frames wrongly; report it on the "
            "machine that recorded it (the model it saves there travels with the capture)")
    done = subprocess.run([perf, "report", "--header-only", "-i", str(perf_data)], capture_output=True,
                          encoding="utf-8", errors="replace", env=child_environment())
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["unreadable"])[-1]
        raise OffcpuError(f"perf cannot read {perf_data} ({reason}): it is truncated or not a perf.data; "
                          f"{RECORD_AGAIN}")
    if SWITCH_TRACEPOINT not in EVENT_NAME.findall(done.stdout):
        raise OffcpuError(f"{perf_data} was recorded without {SWITCH_TRACEPOINT}, which off-CPU time comes from; "
                          f"{RECORD_AGAIN}, which records it")


def _check_same_recording(perf_data: Path, info: CaptureInfo) -> None:
    """perf.data must be the recording capture.json describes, as its own header says: the
    command perf recorded with (which names the target) and its events. Another recording's
    perf.data would be read with this one's target, window and threads. (A file that is no
    perf.data its header can be read from is left to the reader to refuse.)"""
    try:
        data = open_perf_data(perf_data)
    except OffcpuError:
        return
    with reading(perf_data):
        command = data.command_line()
    events = {name for name, _ in data.tracepoint_events()}
    if events and SWITCH_TRACEPOINT not in events:
        raise OffcpuError(f"{perf_data} was recorded without {SWITCH_TRACEPOINT}, which off-CPU time comes from; "
                          f"{RECORD_AGAIN}, which records it")
    if command is not None and command != info.perf_command:
        raise OffcpuError(f"{perf_data} is another recording than the one {METADATA} beside it describes (perf "
                          f"recorded it with another command); keep each perf.data with its own {METADATA}, or "
                          f"{RECORD_AGAIN}")
    missing = [event["name"] for event in info.events if events and event["name"] not in events]
    if missing:
        raise OffcpuError(f"{METADATA} lists the events {', '.join(missing)}, which perf did not record in "
                          f"{perf_data}; it was edited or damaged: {RECORD_AGAIN}")
    if info.perf_command[-len(info.target.perf_args()):] != info.target.perf_args():
        raise OffcpuError(f"{METADATA} names the target {info.target.describe()}, which is not what perf recorded "
                          f"in {perf_data}; it was edited or damaged: {RECORD_AGAIN}")


def _window_ns(info: CaptureInfo, window_s: tuple[float, float] | None) -> tuple[int, int] | None:
    if window_s is None:
        return None
    start_s, end_s = window_s
    length_s = (info.window_end_ns - info.window_start_ns) / 1e9
    if end_s <= start_s:
        raise OffcpuError(f"--time {_shown(start_s)},{_shown(end_s)}: END must come after START (seconds from the "
                          "start of the recording)")
    if end_s <= 0 or start_s >= length_s:
        raise OffcpuError(f"--time {_shown(start_s)},{_shown(end_s)} is outside the recording, which lasted "
                          f"{length_s:.2f} s")
    # A part that overlaps the recording is the part of it that it covers, from its start at most.
    start_ns = info.window_start_ns + round(max(start_s, 0) * 1e9)
    end_ns = info.window_end_ns if end_s >= length_s else min(info.window_start_ns + round(end_s * 1e9),
                                                              info.window_end_ns)
    if end_ns - start_ns < MIN_WINDOW_NS:
        raise OffcpuError(f"--time {_shown(start_s)},{_shown(end_s)} covers {(end_ns - start_ns) / 1e6:.3g} ms of "
                          f"the recording, which lasted {length_s:.2f} s; give a window of at least "
                          f"{MIN_WINDOW_NS / 1e6:g} ms")
    return start_ns, end_ns


def _shown(seconds: float) -> str:
    """Seconds as the user gave them, to the nanosecond: 0.5, 0.500000001, 2."""
    return f"{seconds:.9f}".rstrip("0").rstrip(".") if abs(seconds) < 1e15 else f"{seconds:g}"
