"""The model of a capture: read from model.json beside perf.data (or a BPF
recording's records), or built (once) from them. A changed perf.data (or records
file) makes the saved model stale."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from offcpu.capture import MODEL_FILE, CaptureInfo, load, load_snapshot
from offcpu.errors import OffcpuError
from offcpu.files import PRIVATE, read_json, write_whole
from offcpu.kinds import PERF_DATA_READERS, PLAIN, CaptureKind, PlainPerfData, kind_of
from offcpu.model import Model
from offcpu.model.asleep import with_asleep_stacks
from offcpu.model.engine import build_model
from offcpu.reading.readers import open_reader

READERS = PERF_DATA_READERS  # what --reader chooses from; a BPF capture has one reader
# Less cannot be cut into one perf script --time slice per CPU, and would show nothing anyway.
MIN_WINDOW_NS = 1_000_000
# The most model.json is read of: a model of hundreds of thousands of stacks (a larger one is
# built again, as a stale one is)
MODEL_MAX = 256 << 20


def load_model(directory: Path, window_s: tuple[float, float] | None = None, reader: str | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> Model:
    """The capture's model; `window_s` (seconds from the start of the recording)
    builds a model of that part only, which is not saved; `reader` (one of READERS)
    reads perf.data with that reader instead of the one chosen for it."""
    model = cached_model(directory, window_s, reader)
    return model if model is not None else build(directory, window_s, reader, on_progress)


def cached_model(directory: Path, window_s: tuple[float, float] | None = None,
                 reader: str | None = None) -> Model | None:
    """The model saved beside the recording, when there is one for this recording (read by
    `reader`, when given) and no window is asked for; None when it has to be built (the
    slow part). Never for a perf.data recorded by perf alone: nothing is saved beside it."""
    if PlainPerfData.at(directory):
        return None
    info = load(directory)
    identity = kind_of(info).identity(directory)
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


def capture_at(directory: Path) -> tuple[CaptureKind, CaptureInfo]:
    """The kind of the capture at `directory` and its capture.json (what stands for it, for a
    perf.data that perf recorded alone)."""
    if PlainPerfData.at(directory):
        from offcpu.reading.plain_perf_data import plain_info  # imported for such a file only (5 ms)

        return PLAIN, plain_info(directory)
    info = load(directory)
    return kind_of(info), info


def build(directory: Path, window_s: tuple[float, float] | None = None, reader: str | None = None,
          on_progress: Callable[[int, int], None] | None = None) -> Model:
    """Read the recording into the model (of `window_s` only, when given), with the reader its
    kind chooses (`reader`: the one --reader names); the whole capture's is saved as model.json
    when its kind keeps one and the directory can be written. `directory` may be a perf.data that
    perf recorded alone (offcpu.reading.plain_perf_data)."""
    kind, info = capture_at(directory)
    identity = kind.identity(directory)
    window = _window_ns(info, window_s)
    if kind.holds_nothing(directory, info) and not info.threads_at_start:
        raise _nothing_ran(kind.recorded(directory))
    kind.check(directory, info)
    opened = open_reader(kind, directory, info, reader)
    # The kernel timed every switch itself: no switch-in is placed by a measured cost.
    model = build_model(opened.reader, replace(info, switch_cost_ns=None) if kind.timed_in_kernel else info, window,
                        on_progress)
    with_asleep_stacks(model, load_snapshot(directory))
    model.mutex_owners.update(opened.mutex_owners())
    model.perf_data = identity
    model.reader, model.reader_note, model.binary_notes = opened.reader.name, opened.why, opened.binary_notes()
    if not kind.saves_model:
        name_target(model)
        from offcpu.reading.plain_perf_data import lacks

        model.lacks = lacks(info)
    elif window_s is None:
        _save(directory / MODEL_FILE, model)
    return model


def name_target(model: Model) -> None:
    """Name the recorded process or thread after its events (the command line has only its number)."""
    target = model.capture.target
    if target.comm or target.kind not in ("pid", "tid"):
        return
    threads = [thread for thread in model.threads.values()
               if thread.tid == target.tid or (target.tid is None and thread.pid == target.pid)]
    if threads:  # the process's main thread when it has events, else one of its threads
        named = min(threads, key=lambda thread: (thread.tid != thread.pid, thread.tid))
        model.capture.target = replace(target, comm=named.comm, pid=named.pid)


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


def _read_cache(path: Path) -> Model | None:
    try:
        return Model.from_json(read_json(path, MODEL_MAX))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
        return None  # unreadable, from another version of offcpu, or damaged: build it again


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
