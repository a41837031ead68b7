"""The window `offcpu top` shows, kept up to date at a cost a busy server affords: each
interval's records are paired once, in the core, into a slice of that interval alone
(counted on its own); the window's model is the slices it holds merged (`_core.merge`,
which places each slice's sub-windows in the window's); each call chain is named once for
the whole recording. Building the window anew from its records each frame took about 1 s
at 25,000 waits a second (docs/benchmarks.md)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from offcpu import _core
from offcpu.capture import BPF_MAPS, BPF_STACKS, CaptureInfo
from offcpu.kinds import BPF_READER, BPF_READER_WHY
from offcpu.model import Model
from offcpu.model.engine import to_model
from offcpu.model.wakeups import from_interrupt
from offcpu.reading.bpf_reader import COMM, EXEC, FORK, NOT_TAKEN, RECORD, WAIT, read_stack_table, stack_of
from offcpu.reading.pairing import SYNTHETIC_STACKS, Paired
from offcpu.reading.sched_events import Chain
from offcpu.recording.process_maps import process_gone
from offcpu.runtime_frames import NO_RUNTIME_STACK
from offcpu.stacks import Stack

if TYPE_CHECKING:
    from offcpu.live.runtime import LiveRuntime
    from offcpu.reading.symbols import Symbolizer

RECORD_BYTES = np.dtype((np.void, RECORD.itemsize))  # a record as its bytes
# New chains numbered before those no slice of the window holds go (and the rest are numbered
# anew): the core's table of them would otherwise keep every chain of the recording, some 300
# bytes each, 120-150 new a second on a whole machine where new programs start
CHAINS_BEFORE_LETTING_GO = 50_000


@dataclass(frozen=True)
class Interval:
    first_ns: int
    last_ns: int  # both included
    paired: _core.Slice
    waited_ns: np.ndarray  # the off-CPU time of each wait that began before the interval's end and ended in it


class LiveWindow:
    def __init__(self, directory: Path, recording: _core.BpfRecording, info: CaptureInfo,
                 runtime: LiveRuntime | None = None) -> None:
        """`runtime`: the runtimes' samples and stacks, joined to the waits (None: native frames only)."""
        self.directory = directory
        self.recording = recording
        self.info = info
        self.runtime = runtime
        self.held = _core.HeldRecords()  # names, states and chains by id, for the whole recording
        self.chains: list[Chain | None] = [None, *SYNTHETIC_STACKS]  # the chains by id, as far as known
        self.chains_kept = 0  # the chains numbered when the unused last went
        self.intervals: deque[Interval] = deque()
        self.paired_to = info.window_start_ns  # the next interval begins here
        self.carried = np.zeros(0, RECORD)  # taken records with an event after paired_to
        self.begins = np.zeros(0, RECORD)  # the forks and execs of processes so far: their exec generations
        self.mentioned: dict[int, int] = {}  # pid: the end of the last interval with a record of it or its wakeup
        self.named: dict[Chain, Stack] = {}
        self.by_interrupt: dict[int, bool] = {}  # whether a kernel stack (by id) is an interrupt's handler
        self.table: dict[int, tuple[int, ...]] = {}  # the stack table, as last saved
        self.symbolizer: Symbolizer | None = None  # kept: it names each address once, each file read once
        self.maps_seen: tuple[int, int] | None = None  # the maps file it has (modified, size)
        self.notes: dict[str, None] = {}  # what naming the chains found (of the mapped files), in order
        self.unreadable = 0  # records of a kind this offcpu does not know, since the last interval

    def add(self, taken: np.ndarray, open_then: np.ndarray, last: int, read: int | None = None) -> None:
        """Pair what happened up to `last` (ns) into an interval: `taken`, the records taken since
        the last call (every one, as they come), and `open_then`, the waits open at `read` (`last`
        unless given; not before it), read long enough before the last of `taken` was taken that
        every wait that had ended by `read` is in `taken` (a wait in both counts once). The waits
        that began in the interval join the runtimes' samples read from its start to `read`."""
        read = last if read is None else read
        self._mention(taken, open_then, last)
        kinds = taken["kind"]
        self.unreadable += int(np.count_nonzero((kinds < WAIT) | (kinds > COMM)))
        began = rows_of(taken, _begins(taken))
        if len(began):
            self.begins = joined([self.begins, began])
        held = joined([self.carried, taken])
        if last <= self.paired_to:
            self.carried = held
            return
        ended = rows_of(held, held["kind"] == WAIT)
        still_open = rows_of(open_then, ~_among(_wait_keys(open_then), _wait_keys(ended)))
        # the forks and execs once each (in `begins`: the decoder counts a process's generations from them)
        records = joined([self.begins, rows_of(held, ~_begins(held)), still_open])
        self._interrupts_alone(records)
        first = self.paired_to
        samples = self.runtime.samples(first, read) if self.runtime is not None else None
        paired = self.held.slice(records.tobytes(), first, last, self.unreadable, samples)
        self.unreadable = 0
        back, since = ended["back_ns"].astype(np.int64), ended["since_ns"].astype(np.int64)
        waited = (back - since)[(back >= first) & (back <= last) & (since != 0)]
        self.intervals.append(Interval(first, last, paired, waited))
        self.paired_to = last + 1
        # what happens after `last` is of the next interval (a wait's end, its wakeup, a fork...)
        self.carried = rows_of(held, np.maximum(np.maximum(held["since_ns"], held["woken_ns"]), held["back_ns"])
                               > last)

    def _interrupts_alone(self, records: np.ndarray) -> None:
        """A wakeup made by an interrupt's handler with its kernel frames alone: the user stack under
        them is of whatever thread the interrupt came in (on a busy machine, a new stack at almost
        every timer's wakeup, each to be named), and says nothing of the wakeup (model.wakeups).
        Its records' waker user stacks are let go (as by BpfReader's chains, a kernel stack alone),
        judged once for each kernel stack, with no work for each wakeup in Python."""
        kernel, user = records["waker_kernel_stack"], records["waker_user_stack"]
        with_user = (records["kind"] == WAIT) & (kernel >= 0) & (user >= 0)
        new = set(np.unique(kernel[with_user]).tolist()) - self.by_interrupt.keys()
        if new:
            table, symbolizer = self._stack_table(new), self._symbolizer()
            for stack_id in new:
                stack = stack_of(_kernel_alone(stack_id), table, symbolizer)
                self.by_interrupt[stack_id] = stack_id in table and from_interrupt(stack.frames[:stack.kernel_frames])
        handlers = [stack_id for stack_id, handler in self.by_interrupt.items() if handler]
        user[with_user & np.isin(kernel, handlers)] = _core.NOT_TAKEN

    def _stack_table(self, ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """The recording's stack table, saved again when it lacks one of these stack ids."""
        if not set(ids) <= self.table.keys():
            (self.directory / BPF_STACKS).unlink(missing_ok=True)  # the core makes its file anew
            self.recording.save_stacks(str(self.directory / BPF_STACKS))
            self.table = read_stack_table(self.directory / BPF_STACKS)
        return self.table

    def slide(self, window_ns: int) -> None:
        """Let go of the oldest intervals while those after them still cover the last `window_ns`:
        the window is at least --window once that much was recorded, and less than one interval
        more (intervals are as long as the frames were late: a loaded machine's are uneven)."""
        while len(self.intervals) > 1 and self.intervals[1].first_ns <= self.paired_to - window_ns:
            self.intervals.popleft()

    def _mention(self, taken: np.ndarray, open_then: np.ndarray, last: int) -> None:
        """The processes these records (and those carried to the interval) are of, or woken by: in
        the interval up to `last` (the records carried are paired there, not before)."""
        parts = [records[field] for records in (self.carried, taken, open_then) for field in ("pid", "waker_pid")]
        pids = np.unique(np.concatenate(parts))
        self.mentioned.update(dict.fromkeys(pids[pids != 0].tolist(), last))

    def let_go(self) -> None:
        """Bounded memory, however long it runs: what the window no longer needs goes, the forks
        and execs of processes gone and the chains no slice holds. (The chains' names the window
        no longer uses went at its last model: stacks.)"""
        if not self.intervals:
            return
        self._let_go_of_begins()
        if len(self.chains) - _core.SEEDED_CHAINS > self.chains_kept + CHAINS_BEFORE_LETTING_GO:
            self.chains_kept = self.held.let_go_of_chains([interval.paired for interval in self.intervals])
            self.chains = [None, *SYNTHETIC_STACKS]  # numbered anew: the next model asks for them all

    def _let_go_of_begins(self) -> None:
        """The forks and execs from before the window of processes that no record of the window
        is of or was woken by, once a later fork gave their pid to another process, or the
        process is gone (/proc). (The flight record counts generations from the records it
        keeps, not from these.) The generations after them are counted again from those left, so
        what was named by those processes' generations (their chains, their addresses) goes too,
        named again from their maps filed anew."""
        horizon = self.intervals[0].first_ns
        self.mentioned = {pid: seen for pid, seen in self.mentioned.items() if seen >= horizon}
        rows = np.flatnonzero((self.begins["since_ns"] < horizon) & ~np.isin(self.begins["pid"], list(self.mentioned)))
        pids, since = self.begins["pid"][rows].tolist(), self.begins["since_ns"][rows].tolist()
        forks = (self.begins["kind"][rows] == FORK).tolist()
        latest: dict[int, int] = {}  # of each of those processes, its last fork among those rows
        for pid, at, fork in zip(pids, since, forks, strict=True):
            if fork:
                latest[pid] = max(latest.get(pid, 0), at)
        gone = {pid for pid in set(pids) if process_gone(pid)}
        drop = [row for row, pid, at in zip(rows.tolist(), pids, since, strict=True)
                if pid in gone or at < latest.get(pid, 0)]
        if not drop:
            return
        renumbered = set(self.begins["pid"][drop].tolist())
        self.begins = rows_of(self.begins, np.setdiff1d(np.arange(len(self.begins)), drop))
        self.named = {chain: stack for chain, stack in self.named.items()
                      if not (isinstance(chain, tuple) and chain[2] in renumbered)}
        if self.symbolizer is not None:
            self.symbolizer.names = {key: name for key, name in self.symbolizer.names.items()
                                     if key[0] not in renumbered}
        self.maps_seen = None  # the maps filed again by the generations as they are now counted

    def waited_ns(self) -> np.ndarray:
        """The off-CPU time of each wait that ended in the window."""
        return np.concatenate([interval.waited_ns for interval in self.intervals] or [np.zeros(0, np.int64)])

    def model(self) -> Model | None:
        """The model of the window's intervals (None: none paired yet)."""
        if not self.intervals:
            return None
        start, end = self.intervals[0].first_ns, self.intervals[-1].last_ns
        tally, skipped = _core.merge([interval.paired for interval in self.intervals], (start, end), [], (start, end))
        names, states, chains = self.held.keys(NOT_TAKEN, len(self.chains) - _core.SEEDED_CHAINS)
        self.chains += chains
        paired = Paired(tally, skipped, names, states, self.chains)
        info = replace(self.info, window_start_ns=start, window_end_ns=end, ended_by="kept", threads_at_start={},
                       processes_at_start={}, duration_actual_s=(end - start) / 1e9)
        model = to_model(paired, self, info, start, end)  # type: ignore[arg-type]  # (it asks only stacks())
        model.reader, model.reader_note, model.binary_notes = BPF_READER, BPF_READER_WHY, list(self.notes)
        return model

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        """The frames of each chain (to_model's reader): named once each, those not yet named
        from the stack table as it stands and the maps the live recording keeps. (A busy machine
        brings new ones every second.)"""
        chains = list(chains)
        new = [chain for chain in chains if chain not in self.named]
        if new:
            table = self._stack_table(_stack_ids(new))
            symbolizer = self._symbolizer()
            self.named.update((chain, stack_of(chain, table, symbolizer, self.runtime)) for chain in new)
            self.notes.update(dict.fromkeys(symbolizer.notes))
        self.named = {chain: self.named[chain] for chain in chains}  # the rest are named again if they come back
        return dict(self.named)

    def _symbolizer(self) -> Symbolizer:
        """The symbolizer, with the processes' maps as the live recording last wrote them."""
        from offcpu.reading.symbols import Symbolizer, TaskHistory
        from offcpu.recording import perf_maps, process_maps
        from offcpu.recording.perf_maps import PerfMap

        status = (self.directory / BPF_MAPS).stat()
        if self.symbolizer is None or self.maps_seen != (status.st_mtime_ns, status.st_size):
            self.maps_seen = status.st_mtime_ns, status.st_size
            generations = _core.ExecGenerations(self.begins.tobytes())
            maps = TaskHistory.of_snapshots(process_maps.load(self.directory) or [], generations.at)
            if self.symbolizer is not None:
                self.symbolizer.history = maps
            else:
                self.symbolizer = Symbolizer.of_bpf_capture(self.directory, maps, {
                    process.pid: PerfMap.parse(process.text) for process in perf_maps.load(self.directory)
                    if process.text})
        return self.symbolizer


def _begins(records: np.ndarray) -> np.ndarray:
    """Which records began a program: a fork that made a process, an exec."""
    kinds = records["kind"]
    return ((kinds == FORK) & (records["pid"] == records["tid"])) | ((kinds == COMM) & (records["state"] == EXEC))


def _stack_ids(chains: Iterable[Chain]) -> set[int]:
    """The ids in the stack table of the chains' kernel and user stacks (negative ids: none taken)."""
    return {part for chain in chains if isinstance(chain, tuple) for part in chain[:2] if part >= 0}


def _kernel_alone(kernel: int) -> Chain:
    """The chain of a kernel stack with no user frames (as BpfReader's chains make it)."""
    return kernel, _core.NOT_TAKEN, 0, 0, NO_RUNTIME_STACK


def _among(keys: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Whether each of `keys` (a few: the waits open) is among `others` (every wait taken), with
    `others` searched rather than sorted (np.isin sorts both)."""
    if not len(keys) or not len(others):
        return np.zeros(len(keys), bool)
    distinct = np.unique(keys)
    at = np.minimum(np.searchsorted(distinct, others), len(distinct) - 1)
    return np.isin(keys, distinct[at[distinct[at] == others]])


def _wait_keys(records: np.ndarray) -> np.ndarray:
    """A wait's identity, its thread and when it began, hashed to 64 bits."""
    with np.errstate(over="ignore"):
        return records["since_ns"].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + records["tid"].astype(np.uint64)


def rows_of(records: np.ndarray, which: np.ndarray) -> np.ndarray:
    """records[which] (a mask or indices), copied as whole records (numpy copies a structured
    array field by field, ten times slower)."""
    return records.view(RECORD_BYTES)[which].view(RECORD)


def joined(parts: list[np.ndarray]) -> np.ndarray:
    """The records of `parts`, one after the other (np.concatenate, copied as whole records)."""
    return np.concatenate([part.view(RECORD_BYTES) for part in parts] or [np.zeros(0, RECORD_BYTES)]).view(RECORD)
