"""The engine's pairing, in the compiled core (core/src/engine/), for every reader.

The core turns each time slice's events into off-CPU intervals and adds them up, then joins
the slices: what it hands back (Paired) is the model's inputs, offcpu.model.engine.to_model makes
the model of them. It knows names, states and call chains by number (ids): the native
reader's and the BPF reader's are numbered in the core as it decodes perf.data or the records;
perf script's text, decoded in Python, is numbered here (Keys), in forked workers a slice each,
and the core pairs the slices' events once they are back. What every reader offers the engine
is CaptureReader, here.
"""

from __future__ import annotations

import gc
import os
import signal
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, cast

from offcpu import _core
from offcpu.reading.sched_events import Chain, Events, EventSink
from offcpu.stacks import BEFORE_WINDOW, NEW_THREAD, STACK_LOST, WAKER_NOT_RECORDED, Stack

# The stacks the engine stands in where none was recorded, by their ids (after None, no chain)
SYNTHETIC_STACKS = (BEFORE_WINDOW, NEW_THREAD, WAKER_NOT_RECORDED, STACK_LOST)
assert _core.SEEDED_CHAINS == 1 + len(SYNTHETIC_STACKS)
BATCH = 1 << 16  # events handed to the core at a time
# What the core is handed of a thread when recording began: tid, name, state
ThreadAtStart = tuple[int, str, str]


@dataclass
class Paired:
    """What the core paired: its tally, how many events could not be read, and what the ids in
    the tally stand for: names, states and chains by id (chains: None, then SYNTHETIC_STACKS,
    then the reader's own keys)."""

    tally: _core.Tally
    skipped: int
    names: list[str]
    states: list[str]
    chains: list[Chain | None]


class CaptureReader(Protocol):
    """Decodes one perf.data. `name` says which reader it is ("native", "perf-script")."""

    name: str
    skipped: int  # how many events (records) could not be decoded, left out and counted

    def pair(self, slices: list[tuple[int, int]], window: tuple[int, int], at_start: list[tuple[int, str, str]],
             counted: tuple[int, int], switch_cost_ns: int,
             on_done: Callable[[int], None] | None = None) -> Paired:
        """The events of each of `slices` (first, last ns, both included) paired in the core,
        and the slices joined: the tally of the `counted` part of `window`. `at_start`: the
        target's threads when recording began (tid, comm, state); `on_done(slices done)` as
        they are."""

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        """`count` consecutive slices of start_ns..end_ns (both included) that hold about as
        many events each, as far as the reader can tell, for workers to read in parallel."""

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        """The frames of each chain handed to a sink, named once each."""


class Table:
    """Keys numbered in the order they were first seen."""

    def __init__(self, seeds: tuple[Hashable, ...]) -> None:
        self.keys: list[Hashable] = list(seeds)
        self.ids: dict[Hashable, int] = {key: number for number, key in enumerate(seeds)}

    def ids_of(self, column: list) -> list[int]:
        ids, keys = self.ids, self.keys
        numbered = list(map(ids.get, column))  # (in C: a loop in Python cost most of a live frame)
        if None in numbered:  # keys not seen before: numbered in order, then the column again
            for key in column:
                if key not in ids:
                    ids[key] = len(keys)
                    keys.append(key)
            numbered = list(map(ids.__getitem__, column))
        return numbered  # type: ignore[return-value]

@dataclass
class Keys:
    """A reading's names, states and chains as the core's ids."""

    names: Table = field(default_factory=lambda: Table(tuple(_core.NAMES)))
    states: Table = field(default_factory=lambda: Table(tuple(_core.STATES)))
    chains: Table = field(default_factory=lambda: Table((None, *SYNTHETIC_STACKS)))

    def adopt(self, other: Keys) -> tuple[list[int], list[int], list[int]]:
        """Take in the keys of another Keys (a worker's); returns its names', states' and
        chains' ids here, by their ids there."""
        return (self.names.ids_of(other.names.keys), self.states.ids_of(other.states.keys),
                self.chains.ids_of(other.chains.keys))


@dataclass
class Decoded:
    """A slice's events, numbered by its own Keys, in compact columns (they travel from a worker)."""

    first: int
    last: int
    keys: Keys = field(default_factory=Keys)
    columns: list[array] = field(default_factory=lambda: [array("q") for _ in range(10)])
    skipped: int = 0

    def take(self, events: Events) -> None:
        """An EventSink: the events, numbered."""
        keys = self.keys
        count = len(events)
        for column, values in zip(self.columns, (
                events.kinds, events.times, events.cpus, events.pids, events.tids, events.others,
                keys.names.ids_of(events.names), keys.states.ids_of(events.states),
                keys.chains.ids_of(events.chains), events.weights or [1] * count), strict=True):
            column.extend(values)

    def batches(self, renumbered: tuple[list[int], list[int], list[int]]) -> Iterator[list[list[int]]]:
        """The columns, BATCH events at a time, names, states and chains by their ids in
        `renumbered` (see Keys.adopt)."""
        names, states, chains = renumbered
        for start in range(0, len(self.columns[0]), BATCH):
            kinds, times, cpus, pids, tids, others, name, state, chain, weights = (
                column[start:start + BATCH].tolist() for column in self.columns)
            yield [kinds, times, cpus, pids, tids, others, [names[i] for i in name], [states[i] for i in state],
                   [chains[i] for i in chain], weights]


class EventReader(Protocol):
    """A reader that decodes a capture into Events in Python (CaptureReader)."""

    skipped: int

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None: ...


def decode(reader: EventReader, time_slice: tuple[int, int]) -> Decoded:
    """One slice's events, as `reader` decodes them (in a worker)."""
    decoded = Decoded(*time_slice)
    skipped_before = reader.skipped
    # Decoding makes millions of objects and no reference cycles: the cyclic collector would
    # only walk them over and over.
    collecting = gc.isenabled()
    gc.disable()
    try:
        reader.read(decoded, time_slice)
    finally:
        if collecting:
            gc.enable()
    decoded.skipped = reader.skipped - skipped_before
    return decoded


def pair_decoded(reader: EventReader, slices: list[tuple[int, int]], window: tuple[int, int],
                 at_start: list[ThreadAtStart], counted: tuple[int, int], switch_cost_ns: int,
                 on_done: Callable[[int], None] | None = None) -> Paired:
    """Pair what `reader` decodes, a slice in each of forked workers (the last in this process:
    a process fewer to start), in the core."""
    from concurrent.futures import ProcessPoolExecutor, as_completed  # not for the native reader's reports
    from multiprocessing import get_context

    from offcpu.workers import end_with_parent

    decoded: dict[int, Decoded] = {}

    def done(index: int, result: Decoded) -> None:
        decoded[index] = result
        if on_done:
            on_done(len(decoded))

    with ProcessPoolExecutor(max_workers=max(1, len(slices) - 1), mp_context=get_context("fork"),
                             initializer=end_with_parent, initargs=(os.getpid(), signal.SIGKILL)) as pool:
        futures = {pool.submit(decode, reader, time_slice): index for index, time_slice in enumerate(slices[:-1])}
        done(len(slices) - 1, decode(reader, slices[-1]))
        for future in as_completed(futures):
            done(futures[future], future.result())
    return pair_pieces([decoded[index] for index in range(len(slices))], window, at_start, counted, switch_cost_ns)


def pair_pieces(pieces: list[Decoded], window: tuple[int, int], at_start: list[ThreadAtStart],
                counted: tuple[int, int] | None, switch_cost_ns: int) -> Paired:
    """Pair decoded slices (of `window`, in time order) in the core and join them: the tally of
    the `counted` part of the window (None: all of it)."""
    keys = Keys()
    slices = []
    for piece in pieces:
        paired = _core.Slice(piece.first, piece.last, counted, switch_cost_ns)
        for batch in piece.batches(keys.adopt(piece.keys)):
            paired.take(*batch)
        paired.finish(piece.skipped)
        slices.append(paired)
    names = keys.names.ids_of([name for _, name, _ in at_start])
    states = keys.states.ids_of([state for _, _, state in at_start])
    threads = [(tid, name, state) for (tid, _, _), name, state in zip(at_start, names, states, strict=True)]
    tally, skipped = _core.merge(slices, window, threads, counted)
    return Paired(tally, skipped, cast(list[str], keys.names.keys), cast(list[str], keys.states.keys),
                  keys.chains.keys)
