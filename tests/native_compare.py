"""Comparing the native reader with perf script, event by event: a sink that keeps
what it is handed, and perf script's own text of the same perf.data as the reference."""

from __future__ import annotations

import io
import itertools
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from offcpu.reading.native_reader import NativeReader
from offcpu.reading.perf_script import PerfScriptReader, script_argv
from offcpu.reading.sched_events import KIND_NAMES, Chain, Events
from offcpu.stacks import Stack

CHAINED = ("sched_switch", "sched_waking")  # the events whose last argument is a call chain


class KeepingSink:
    """Every event, as (kind's name, time, cpu, pid, tid, other, name, state, chain)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def take(self, events: Events) -> None:
        self.events += [(KIND_NAMES[kind], *rest) for kind, *rest in events.rows()]


def script_events(perf: str, perf_data: Path) -> tuple[list[tuple], dict[Chain, Stack]]:
    """What perf script shows, through offcpu's parser of its text, with each chain's frames."""
    done = subprocess.run(script_argv(perf, perf_data), capture_output=True, text=True, errors="replace", check=True)
    sink = KeepingSink()
    reader = PerfScriptReader(perf, perf_data)
    reader.decode(io.StringIO(done.stdout), sink)
    return sink.events, reader.stacks(event[-1] for event in sink.events if event[0] in CHAINED)


def native_events(perf_data: Path, time_slice: tuple[int, int] | None = None,
                  kernel_symbols: Path | None = None) -> tuple[list[tuple], NativeReader]:
    reader = NativeReader(perf_data, kernel_symbols)
    sink = KeepingSink()
    reader.read(sink, time_slice)
    return sink.events, reader


def named(events: list[tuple], stacks: dict[Chain, Stack]) -> list[tuple]:
    return [(*event[:-1], stacks[event[-1]]) if event[0] in CHAINED else event for event in events]


def as_perf_shows_missing(stack: Stack, missing: list[str]) -> Stack:
    """The documented difference: frames of a file that is gone are [file+0xoffset] here,
    [unknown] in perf script."""
    names = {Path(sentence.split(" is gone", 1)[0]).name for sentence in missing if " is gone" in sentence}
    frames = tuple("[unknown]" if (found := re.fullmatch(r"\[(.+)\+0x[0-9a-f]+\]", frame)) and found[1] in names
                   else frame for frame in stack.frames)
    return Stack(frames, stack.kernel_frames)


class ShownAsPerfShowsMissing:
    """The native reader, with the frames of files that are gone as perf script shows them."""

    def __init__(self, reader: NativeReader) -> None:
        self.reader = reader

    def __getattr__(self, name: str):
        return getattr(self.reader, name)

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        stacks = self.reader.stacks(chains)
        return {chain: as_perf_shows_missing(stack, self.reader.binary_notes) for chain, stack in stacks.items()}


def first_difference(perf: str, perf_data: Path, kernel_symbols: Path | None = None,
                     ties_in_any_order: bool = False) -> str | None:
    """None when the native reader hands the sink what perf script shows, else where they part.
    `kernel_symbols`: a saved kallsyms, for a perf.data that names no kernel build id.
    `ties_in_any_order`: events of the same nanosecond may come in another order than perf
    script's (no thread's events are ordered by that)."""
    expected, expected_stacks = script_events(perf, perf_data)
    got, reader = native_events(perf_data, kernel_symbols=kernel_symbols)
    stacks = reader.stacks({event[-1] for event in got if event[0] in CHAINED})
    stacks = {chain: as_perf_shows_missing(stack, reader.binary_notes) for chain, stack in stacks.items()}
    mine, theirs = named(got, stacks), named(expected, expected_stacks)
    if ties_in_any_order:
        if any(later[1] < earlier[1] for earlier, later in itertools.pairwise(mine)):
            return "the native reader's events are not in time order"
        mine, theirs = [sorted(events, key=lambda event: (event[1], repr(event))) for events in (mine, theirs)]
    pairs = itertools.zip_longest(mine, theirs)
    for number, (native, script) in enumerate(pairs):
        if native != script:
            return f"event {number} of {len(expected)}: native {native}, perf script {script}"
    return None


def model_difference(capture: Path, slices: int) -> str | None:
    """None when both readers give the same model of a capture, read in `slices` slices
    (folded lines, thread totals, wakers, links), else the first thing that differs."""
    from offcpu.capture import load
    from offcpu.kinds import kind_of
    from offcpu.machine.system import require_perf
    from offcpu.model.engine import threads_at_start, to_model
    from offcpu.model.stackview import StackView, folded
    from offcpu.model.summaries import waker_pairs
    from offcpu.reading.readers import open_reader

    info = load(capture)
    window = (info.window_start_ns, info.window_end_ns)
    seen: dict[str, dict[str, Any]] = {}
    for name in ("native", "perf-script"):
        # perf script straight, not as offcpu chooses it: a capture recorded on another kernel is
        # refused there (perf names kernel frames from this one's symbols), and here both readers
        # name them from this machine's alike
        reader = (ShownAsPerfShowsMissing(cast(NativeReader, open_reader(kind_of(info), capture, info, name).reader))
                  if name == "native" else PerfScriptReader(require_perf(), capture / "perf.data"))
        paired = reader.pair(reader.time_slices(*window, slices), window, threads_at_start(info), window,
                             info.switch_cost_ns or 0)
        model = to_model(paired, reader, info, *window)
        links = sorted((tuple(model.rows[link.waiter_row].__dict__.values()),
                        tuple(model.rows[link.waker_row].__dict__.values()),
                        link.overlap_us, link.count) for link in model.links)
        seen[name] = {"folded": dict(folded(model, StackView())),
                      "threads": {tid: thread for tid, thread in model.threads.items()},
                      "wakers": waker_pairs(model), "links": len(links), "skipped": model.unreadable_events}
    for part in seen["native"]:
        if seen["native"][part] != seen["perf-script"][part]:
            mine, theirs = seen["native"][part], seen["perf-script"][part]
            if isinstance(mine, dict):
                key = next(key for key in sorted(set(mine) | set(theirs), key=str) if mine.get(key) != theirs.get(key))
                return f"{part} differ at {key}: native {mine.get(key)}, perf script {theirs.get(key)}"
            return f"{part} differ: native {mine}, perf script {theirs}"
    return None
