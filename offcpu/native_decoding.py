"""Decoding perf.data's records for the native reader (offcpu.native_reader), a batch
at a time with numpy: about a microsecond a record in a Python loop, a few tenths of
one this way. Python loops only over what is rare (task records, new names, new call
chains) and over the record headers, whose sizes chain them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from mmap import mmap

import numpy as np

from offcpu import perf_data
from offcpu.events import SWITCH_TRACEPOINT, WAKING_TRACEPOINTS
from offcpu.native_reader import (
    COMM_IDS,
    FORK_EXIT_RECORD,
    IDLE_COMM,
    SWITCH_FIELDS,
    THREAD_RECORD_TYPES,
    WAKING_FIELDS,
    NativeReader,
)
from offcpu.perf_data import (
    COMM,
    CONTEXT_USER,
    EXIT,
    FORK,
    MISC_COMM_EXEC,
    MISC_SWITCH_OUT,
    MISC_SWITCH_OUT_PREEMPT,
    SAMPLE,
    SWITCH,
    SWITCH_CPU_WIDE,
    Clock,
    PerfData,
    SampleLayout,
    StateNames,
    release,
)
from offcpu.sched_events import (
    SCHED_SWITCH,
    SCHED_WAKING,
    SWITCH_IN,
    SWITCH_OUT,
    THREAD_COMM,
    THREAD_EXIT,
    THREAD_FORK,
    UNKNOWN_CPU,
    Chain,
    Events,
)


@dataclass(frozen=True)
class Arrays:
    """The file as numpy arrays of little-endian words (views of the memory map, no copy):
    a record's u16 header fields at offset//2 (type, misc, size at +0, +2, +3), its u64
    fields at offset//8 (records are 8-byte aligned from the data start, which is too)."""

    u8: np.ndarray
    u16: np.ndarray
    u32: np.ndarray
    u64: np.ndarray

    @classmethod
    def of(cls, data: PerfData) -> Arrays:
        end = data.data_end
        return cls(*(np.frombuffer(data.map, dtype=dtype, count=end // size)
                     for dtype, size in ((np.uint8, 1), (np.uint16, 2), (np.uint32, 4), (np.uint64, 8))))


ROUNDS_AT_ONCE = 16  # rounds ordered together: numpy's cost per call is paid per group, memory stays bounded


def ordered_records(data: PerfData, arrays: Arrays, clock: Clock, rounds: list[int], first_round: int,
                    stop_after_ns: int | None, handled: frozenset[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The records of `handled` types from round `first_round` on, as (offsets, times)
    arrays, in the order perf processes them: every record is queued by time, and at each
    FINISHED_ROUND perf sends on, sorted by time (equal times in file order), the queued
    records no later than the latest time seen before the previous round ended; the rest
    at the end. With `stop_after_ns`, stops once everything up to that time has been sent
    on. Records that carry no time are not queued. Rounds are ordered ROUNDS_AT_ONCE at a
    time: a record goes out at the first round, from its own on, whose limit reaches it."""
    queued_at = np.empty(0, np.int64)  # records sent on in no round so far
    queued_time = np.empty(0, np.int64)
    latest = 0  # the latest time queued so far
    last_round = len(rounds) - 1
    for group in range(first_round, len(rounds), ROUNDS_AT_ONCE):
        release(data, rounds[first_round], rounds[group])  # records queued from before are read again: fine
        numbers = range(group, min(group + ROUNDS_AT_ONCE, len(rounds)))
        offsets, round_of = _walk(data, rounds, numbers)
        offsets, times, round_of = _timed(data, arrays, clock, offsets, round_of, handled)
        limits, latest = _flush_limits(numbers, times, round_of, latest)
        offsets, times = np.concatenate((queued_at, offsets)), np.concatenate((queued_time, times))
        rounds_of = np.concatenate((np.full(len(queued_at), group), round_of))
        # the round at whose end each record is sent on; past the group: queued for the next
        sent = np.maximum(rounds_of, group + np.searchsorted(limits, times, side="left"))
        if numbers[-1] == last_round:
            sent[sent > last_round] = last_round  # the end of the file sends on the rest
        stop = len(rounds)
        if stop_after_ns is not None:
            beyond = np.flatnonzero(limits > stop_after_ns)
            stop = group + int(beyond[0]) if len(beyond) else stop
        going = sent <= min(numbers[-1], stop)
        order = np.lexsort((offsets[going], times[going], sent[going]))
        yield offsets[going][order], times[going][order]
        if stop < len(rounds) or numbers[-1] == last_round:
            return
        queued_at, queued_time = offsets[~going], times[~going]


def _flush_limits(numbers: range, times: np.ndarray, round_of: np.ndarray, latest: int) -> tuple[np.ndarray, int]:
    """The time up to which perf sends records on at the end of each of these rounds: the
    latest time seen before the round (`latest`: before the first); and the latest after them."""
    limits = np.empty(len(numbers), np.int64)
    for index, number in enumerate(numbers):
        limits[index] = latest
        in_round = times[round_of == number]
        if len(in_round):
            latest = max(latest, int(in_round.max()))
    return limits, latest


def _walk(data: PerfData, rounds: list[int], numbers: range) -> tuple[np.ndarray, np.ndarray]:
    """The offsets of the records of these rounds (FINISHED_ROUND records left out), and
    the round of each. The one loop over records in Python: record sizes chain them."""
    words = data.words
    offsets: list[int] = []
    counts: list[int] = []
    append = offsets.append
    for number in numbers:
        position = rounds[number]
        end = rounds[number + 1] - 8 if number + 1 < len(rounds) else data.data_end
        before = len(offsets)
        while position < end:
            append(position)
            position += words[(position >> 1) + 3]
        counts.append(len(offsets) - before)
    return np.array(offsets, dtype=np.int64), np.repeat(np.array(numbers, dtype=np.int64), counts)


def _timed(data: PerfData, arrays: Arrays, clock: Clock, offsets: np.ndarray, round_of: np.ndarray,
           handled: frozenset[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The records of handled types that carry a time, with their times."""
    kinds = arrays.u16[offsets >> 1]
    sizes = arrays.u16[(offsets >> 1) + 3].astype(np.int64)
    samples = (kinds == SAMPLE) & (sizes >= clock.sample_time + 8)
    others = np.isin(kinds, np.array(sorted(handled - {SAMPLE}), dtype=np.uint16))
    times = np.full(len(offsets), -1, np.int64)
    times[samples] = arrays.u64[(offsets[samples] + clock.sample_time) >> 3].astype(np.int64)
    if clock.uniform is not None:
        others &= sizes >= clock.uniform_size
        time_at = (offsets[others] + sizes[others] - clock.uniform.time_from_end) >> 3
        times[others] = arrays.u64[time_at].astype(np.int64)
    else:
        times[others] = [clock.time_of(data.words, data.map, at) for at in offsets[others].tolist()]
    kept = (samples | others) & (times >= 0)
    return offsets[kept], times[kept], round_of[kept]


@dataclass(frozen=True)
class _SampleEvent:
    """The samples the reader decodes of one event (or of several with the same layout)."""

    switch: bool  # sched_switch, else a wakeup
    ids: np.ndarray | None  # the event ids its samples carry (PERF_SAMPLE_IDENTIFIER); None: the file's only event
    layout: SampleLayout
    fields: dict[str, perf_data.Field]  # the raw data's wanted fields
    fields_end: int  # where the last of them ends in the raw data


@dataclass
class _Columns:
    """The events of one batch while they are decoded, in numpy: one entry per record of the
    batch, `kinds` -1 for the records that are no event."""

    kinds: np.ndarray
    times: np.ndarray
    cpus: np.ndarray
    pids: np.ndarray
    tids: np.ndarray
    others: np.ndarray
    names: np.ndarray  # of objects (str)
    states: np.ndarray  # of objects (str)
    chains: np.ndarray  # of objects (Chain, or None)

    @classmethod
    def empty(cls, times: np.ndarray) -> _Columns:
        count = len(times)
        cpus, pids, tids, others = (np.zeros(count, np.int64) for _ in range(4))
        return cls(np.full(count, -1, np.int64), times, cpus, pids, tids, others,
                   np.full(count, "", dtype=object), np.full(count, "", dtype=object),
                   np.full(count, None, dtype=object))

    def events(self) -> Events:
        kept = np.flatnonzero(self.kinds >= 0)
        return Events(*(column[kept].tolist() for column in (self.kinds, self.times, self.cpus, self.pids, self.tids,
                                                             self.others, self.names, self.states, self.chains)))


class Decoder:
    """The state perf keeps while it reads records in order: each thread's name (perf
    names a thread after its last COMM, a new thread after its parent's, and one it
    never saw ':tid') and each process's exec generation. Records are decoded a batch
    at a time in numpy: Python loops only over what is rare (task records, new names,
    new call chains)."""

    def __init__(self, data: PerfData, reader: NativeReader) -> None:
        self.data, self.reader = data, reader
        self.clock = Clock.of(data)
        self.arrays = Arrays.of(data)
        self.comms: dict[int, str] = {0: IDLE_COMM}  # tid -> name, for threads perf knows a name of
        self.generations: dict[int, int] = {}  # pid -> execs seen
        self.samples, self.states = self._sample_events()
        self.chains = ChainKeys(self.arrays, data.map)
        self.comm_names: dict[bytes, str] = {}  # prev_comm as recorded -> as perf shows it
        self.state_names: dict[int, str] = {}

    def _sample_events(self) -> tuple[list[_SampleEvent], StateNames | None]:
        """How to decode sched_switch's samples and the wakeups', and how perf names prev_state."""
        names = {tracepoint.id: tracepoint for tracepoint in self.data.tracepoints.values()}
        events: list[_SampleEvent] = []
        states: StateNames | None = None
        for attr in self.data.attrs:
            tracepoint = names.get(attr.config) if attr.type == perf_data.TYPE_TRACEPOINT else None
            if tracepoint is None or tracepoint.full_name not in (SWITCH_TRACEPOINT, *WAKING_TRACEPOINTS):
                continue
            switch = tracepoint.full_name == SWITCH_TRACEPOINT
            if switch:
                states = perf_data.state_names(tracepoint.print_fmt)
            fields = {name: tracepoint.fields[name] for name in (SWITCH_FIELDS if switch else WAKING_FIELDS)}
            ids = None if len(self.data.attrs) == 1 else np.array(attr.ids, dtype=np.uint64)
            events.append(_SampleEvent(switch, ids, SampleLayout.of(attr.sample_type), fields,
                                       max(field.offset + field.size for field in fields.values())))
        return events, states

    def replay_tasks_before(self, position: int) -> None:
        """Names and generations as of `position`: the task records before it, in time order."""
        before = [at for at in self.reader.index.task_records if at < position]
        before.sort(key=lambda at: self.clock.time_of(self.data.words, self.data.map, at))
        for at in before:
            kind = self.data.words[at >> 1]
            if kind == COMM:
                self._comm(at)
            elif kind == FORK:
                self._fork(at)
        perf_data.release(self.data, self.data.data_start, position)

    def _comm(self, position: int) -> tuple[int, int, str, bool]:
        mapped = self.data.map
        pid, tid = COMM_IDS.unpack_from(mapped, position + 8)
        end = mapped.find(b"\0", position + 16)
        comm = mapped[position + 16:end].decode(errors="replace")
        self.comms[tid] = comm
        execed = bool(self.data.words[(position >> 1) + 2] & MISC_COMM_EXEC)  # header.misc
        if execed:
            self.generations[pid] = self.generations.get(pid, 0) + 1
        return pid, tid, comm, execed

    def _fork(self, position: int) -> tuple[int, int, int, int]:
        pid, ppid, tid, ptid, _ = FORK_EXIT_RECORD.unpack_from(self.data.map, position + 8)
        # perf drops a thread it knew by this tid (the tid was reused), then names the new
        # one after its parent when the parent's name was ever set
        self.comms.pop(tid, None)
        parent = self.comms.get(ptid)
        if parent is not None and ptid != 0:
            self.comms[tid] = parent
        if pid != ppid:
            self.generations[pid] = 0
        return pid, ppid, tid, ptid

    def comm_of(self, tid: int) -> str:
        comm = self.comms.get(tid)
        return comm if comm is not None else f":{tid}"

    def decode(self, offsets: np.ndarray, times: np.ndarray) -> Events:
        """The records at these offsets, in this order (perf_data.ordered_records), as events."""
        arrays = self.arrays
        kinds = arrays.u16[offsets >> 1]
        sizes = arrays.u16[(offsets >> 1) + 3].astype(np.int64)
        out = _Columns.empty(times)
        chained = [self._samples(event, offsets, sizes, kinds == SAMPLE, out) for event in self.samples]
        chain_rows = np.concatenate([rows for rows, _, _ in chained]) if chained else np.empty(0, np.int64)
        switches = np.flatnonzero((kinds == SWITCH) | (kinds == SWITCH_CPU_WIDE))
        if len(switches):
            self._switch_records(switches, offsets, sizes, out)
        named = np.flatnonzero((out.kinds == SWITCH_IN) | (out.kinds == SCHED_WAKING))
        out.names[named] = self._names(out.tids[named])
        generations = self._generations(out.pids[chain_rows])
        for row in np.flatnonzero(np.isin(kinds, THREAD_RECORD_TYPES)).tolist():
            self._task_record(row, int(kinds[row]), int(offsets[row]), int(sizes[row]), out, named, chain_rows,
                              generations)
        if len(chain_rows):
            starts = np.concatenate([starts for _, starts, _ in chained])
            counts = np.concatenate([counts for _, _, counts in chained])
            out.chains[chain_rows] = self.chains.keys(starts, counts, out.pids[chain_rows], generations)
        return out.events()

    def _samples(self, event: _SampleEvent, offsets: np.ndarray, sizes: np.ndarray, samples: np.ndarray,
                 out: _Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Decode the samples of `event` into `out`; the rows with call chains, where each
        chain's addresses start in the file and how many there are."""
        arrays, layout = self.arrays, event.layout
        if event.ids is not None:
            samples = samples & np.isin(arrays.u64[(offsets >> 3) + 1], event.ids)  # PERF_SAMPLE_IDENTIFIER
        rows = np.flatnonzero(samples)
        at, size = offsets[rows], sizes[rows]
        if layout.callchain is not None:
            has_count = layout.callchain + 8 <= size
            counts = arrays.u64[np.where(has_count, (at + layout.callchain) >> 3, 0)]
            plausible = has_count & (counts <= size.astype(np.uint64))  # else the sample is damaged (below)
            counts = np.where(plausible, counts.astype(np.int64), size)
            raw = layout.callchain + 8 + 8 * counts
        else:
            counts = np.zeros(len(rows), np.int64)
            raw = np.full(len(rows), layout.raw)
        whole = raw + 4 + event.fields_end <= size  # else a damaged sample: its fields would run past its end
        self.reader.skipped += int(len(rows) - whole.sum())
        rows, at, counts, raw = rows[whole], at[whole], counts[whole], raw[whole]
        ids = arrays.u64[(at + layout.tid) >> 3]
        out.pids[rows], out.tids[rows] = _pids_and_tids(ids)
        if layout.cpu is not None:
            out.cpus[rows] = arrays.u32[(at + layout.cpu) >> 2]
        else:
            out.cpus[rows] = UNKNOWN_CPU
        data_at = at + raw + 4  # the raw data, after its size
        fields = event.fields
        if event.switch:
            out.kinds[rows] = SCHED_SWITCH
            out.tids[rows] = _integers(arrays.u8, data_at + fields["prev_pid"].offset, fields["prev_pid"])
            out.others[rows] = _integers(arrays.u8, data_at + fields["next_pid"].offset, fields["next_pid"])
            out.names[rows] = self._prev_comms(data_at + fields["prev_comm"].offset, fields["prev_comm"].size)
            out.states[rows] = self._states(_integers(arrays.u8, data_at + fields["prev_state"].offset,
                                                      fields["prev_state"]))
        else:
            out.kinds[rows] = SCHED_WAKING
            out.others[rows] = _integers(arrays.u8, data_at + fields["pid"].offset, fields["pid"])
        if layout.callchain is None:
            out.chains[rows] = b""
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
        return rows, at + layout.callchain + 8, counts

    def _prev_comms(self, at: np.ndarray, size: int) -> np.ndarray:
        """sched_switch's prev_comm as perf shows it: up to its first NUL, each distinct one
        decoded once."""
        padded = (size + 7) // 8 * 8
        text = np.zeros((len(at), padded), np.uint8)
        text[:, :size] = self.arrays.u8[at[:, None] + np.arange(size)]
        firsts, inverse = _distinct_rows(text.view("<u8"))
        names = []
        for first in firsts.tolist():
            raw = text[first, :size].tobytes()
            name = self.comm_names.get(raw)
            if name is None:
                name = self.comm_names[raw] = raw.split(b"\0", 1)[0].decode(errors="replace")
            names.append(name)
        return _objects(names)[inverse]

    def _states(self, states: np.ndarray) -> np.ndarray:
        """prev_state as perf prints it, each distinct value named once."""
        distinct, inverse = np.unique(states, return_inverse=True)
        names = []
        for state in distinct.tolist():
            name = self.state_names.get(state)
            if name is None:
                name = self.state_names[state] = self.states.name(state)  # type: ignore[union-attr]
            names.append(name)
        return _objects(names)[inverse]

    def _names(self, tids: np.ndarray) -> np.ndarray:
        """The names perf knows these threads by now, each distinct thread looked up once."""
        distinct, inverse = np.unique(tids, return_inverse=True)
        return _objects([self.comm_of(tid) for tid in distinct.tolist()])[inverse]

    def _generations(self, pids: np.ndarray) -> np.ndarray:
        distinct, inverse = np.unique(pids, return_inverse=True)
        return np.array([self.generations.get(pid, 0) for pid in distinct.tolist()], dtype=np.int64)[inverse]

    def _switch_records(self, rows: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, out: _Columns) -> None:
        """PERF_RECORD_SWITCH(_CPU_WIDE): who goes in or out, from the record's sample_id."""
        arrays, uniform = self.arrays, self.clock.uniform
        if uniform is None:  # each record's layout is found by its own id: rare, one at a time
            for row in rows.tolist():
                ids = self._trailer(int(offsets[row]), int(sizes[row]))
                if ids is not None:
                    self._switch(row, int(offsets[row]), *ids, out)
            return
        if uniform.tid_from_end is None:
            self.reader.skipped += len(rows)
            return
        at, end = offsets[rows], offsets[rows] + sizes[rows]
        ids = arrays.u64[(end - uniform.tid_from_end) >> 3]
        out.pids[rows], out.tids[rows] = _pids_and_tids(ids)
        out.cpus[rows] = arrays.u32[(end - uniform.cpu_from_end) >> 2] if uniform.cpu_from_end is not None \
            else UNKNOWN_CPU
        misc = arrays.u16[(at >> 1) + 2]
        leaving = (misc & MISC_SWITCH_OUT) != 0
        out.kinds[rows] = np.where(leaving, SWITCH_OUT, SWITCH_IN)
        out.others[rows] = leaving & ((misc & MISC_SWITCH_OUT_PREEMPT) != 0)

    def _switch(self, row: int, position: int, pid: int, tid: int, cpu: int, out: _Columns) -> None:
        misc = self.data.words[(position >> 1) + 2]
        out.pids[row], out.tids[row], out.cpus[row] = pid, tid, cpu
        out.kinds[row] = SWITCH_OUT if misc & MISC_SWITCH_OUT else SWITCH_IN
        out.others[row] = int(bool(misc & MISC_SWITCH_OUT and misc & MISC_SWITCH_OUT_PREEMPT))

    def _trailer(self, position: int, size: int) -> tuple[int, int, int] | None:
        """The pid, tid and CPU of a record other than a sample, from its sample_id; None
        (counted as skipped) when it has none."""
        end = position + size
        trailer = self.clock.trailer(self.data.map, end)
        if trailer is None or trailer.tid_from_end is None or size < trailer.size + 8:
            self.reader.skipped += 1
            return None
        pid, tid = (int(value) for value in self.arrays.u32[(end - trailer.tid_from_end) >> 2:][:2].view(np.int32))
        cpu = int(self.arrays.u32[(end - trailer.cpu_from_end) >> 2]) if trailer.cpu_from_end is not None \
            else UNKNOWN_CPU
        return pid, tid, cpu

    def _task_record(self, row: int, kind: int, position: int, size: int, out: _Columns, named: np.ndarray,
                     chain_rows: np.ndarray, generations: np.ndarray) -> None:
        """A FORK, EXIT or COMM record, in its place: names and generations change from here
        on, for the events after it in the batch too."""
        ids = self._trailer(position, size)
        if ids is None:
            return
        pid, tid, cpu = ids
        out.cpus[row] = cpu
        renamed = execed_pid = None
        if kind == FORK:
            child_pid, parent_pid, child, parent = self._fork(position)
            out.kinds[row], out.pids[row], out.tids[row], out.others[row] = THREAD_FORK, child_pid, child, parent
            renamed = child
            execed_pid = child_pid if child_pid != parent_pid else None
        elif kind == EXIT:
            exit_pid, _, exit_tid, _, _ = FORK_EXIT_RECORD.unpack_from(self.data.map, position + 8)
            out.kinds[row], out.pids[row], out.tids[row] = THREAD_EXIT, exit_pid, exit_tid
        else:
            comm_pid, renamed, comm, execed = self._comm(position)
            out.kinds[row], out.pids[row], out.tids[row], out.others[row] = THREAD_COMM, pid, tid, int(execed)
            out.names[row] = comm
            execed_pid = comm_pid if execed else None
        if renamed is not None:
            later = named[(named > row) & (out.tids[named] == renamed)]
            out.names[later] = self.comm_of(renamed)
        if execed_pid is not None:
            later = (chain_rows > row) & (out.pids[chain_rows] == execed_pid)
            generations[later] = self.generations.get(execed_pid, 0)


def _pids_and_tids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PERF_SAMPLE_TID's u64s as the pids and tids in them, signed as perf script shows them
    (perf writes -1 where a record has no thread)."""
    pairs = ids.view(np.int32).reshape(-1, 2)
    return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)


def _objects(values: list) -> np.ndarray:
    """A numpy array of these objects as they are (np.array would make rows of tuples)."""
    array = np.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        array[index] = value
    return array


def _integers(u8: np.ndarray, at: np.ndarray, field: perf_data.Field) -> np.ndarray:
    """An integer field of `field.size` bytes at each byte offset `at` (not always aligned)."""
    raw = u8[at[:, None] + np.arange(field.size)]
    return raw.view(f"<{'i' if field.signed else 'u'}{field.size}").ravel().astype(np.int64)


def _distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index of the first of each distinct row of a 2-D matrix, and for each row the
    number of its distinct row in that list (np.unique on rows sorts them as bytes: slower)."""
    if not len(matrix):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.lexsort(matrix.T)
    ordered = matrix[order]
    new = np.ones(len(order), bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


HASH_FACTORS = np.random.default_rng(13).integers(0, 1 << 63, 1 << 13, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
# record sizes are 16 bits: a chain holds fewer than 1 << 13 addresses
SIGNATURE_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


class ChainKeys:
    """Call chains as keys: the raw bytes of their addresses, with the process and its exec
    generation when they hold user addresses (see the module's docstring). Each distinct
    chain is one object, made once: chains are hashed in bulk, and each sample's addresses
    are compared with those of the chain its hash names, so that no two chains ever share a
    key (a sample whose hash names another chain gets a key of its own). The addresses of
    the chains seen are kept (in `pool`): the file's pages behind the reader are let go."""

    def __init__(self, arrays: Arrays, mapped: mmap) -> None:
        self.arrays, self.mapped = arrays, mapped
        # signature -> the key, where its addresses are in the pool, how many, its process and
        # generation (-1 for a chain of kernel addresses only)
        self.known: dict[int, tuple[Chain, int, int, int, int]] = {}
        self.pool = np.empty(1 << 16, np.uint64)
        self.pooled = 0

    def keys(self, starts: np.ndarray, counts: np.ndarray, pids: np.ndarray, generations: np.ndarray) -> np.ndarray:
        """The keys of the chains of `counts` addresses at byte offsets `starts`, of samples
        of processes `pids` at exec generations `generations`."""
        firsts = np.cumsum(counts) - counts
        place = np.arange(int(counts.sum())) - np.repeat(firsts, counts)  # each address's place in its chain
        addresses = self.arrays.u64[np.repeat(starts >> 3, counts) + place]
        user = np.zeros(len(starts), bool)
        user[np.searchsorted(firsts, np.flatnonzero(addresses == CONTEXT_USER), side="right") - 1] = True
        pids = np.where(user, pids, -1)
        generations = np.where(user, generations, -1)
        signatures = np.zeros(len(starts), np.uint64)
        chained = np.flatnonzero(counts)
        if len(chained):
            signatures[chained] = np.add.reduceat(addresses * HASH_FACTORS[place], firsts[chained])
        signatures ^= (counts.astype(np.uint64) * SIGNATURE_MIX[0]) ^ (pids.astype(np.uint64) * SIGNATURE_MIX[1]) \
            ^ (generations.astype(np.uint64) * SIGNATURE_MIX[2])
        distinct, firsts_of, inverse = np.unique(signatures, return_index=True, return_inverse=True)
        starts_of, counts_of = starts[firsts_of].tolist(), counts[firsts_of].tolist()
        pids_of, generations_of = pids[firsts_of].tolist(), generations[firsts_of].tolist()
        known = [self._known(signature, start, count, pid, generation) for signature, start, count, pid, generation
                 in zip(distinct.tolist(), starts_of, counts_of, pids_of, generations_of, strict=True)]
        keys = _objects([key for key, _, _, _, _ in known])[inverse]
        # each sample's chain against the one its signature names, address by address
        named_at, named_counts, named_pids, named_generations = (
            np.array(column, dtype=np.int64)[inverse] for column in list(zip(*known, strict=True))[1:])
        alike = (named_counts == counts) & (named_pids == pids) & (named_generations == generations)
        if alike.all():  # the usual case: all addresses compared at once
            named = self.pool[np.repeat(named_at, counts) + place]
            differing = np.unique(np.searchsorted(firsts, np.flatnonzero(addresses != named), side="right") - 1)
        else:
            differing = np.flatnonzero(~alike)
            for row in np.flatnonzero(alike).tolist():
                first, count, at = int(firsts[row]), int(counts[row]), int(named_at[row])
                if not np.array_equal(self.pool[at:at + count], addresses[first:first + count]):
                    differing = np.append(differing, row)
        for row in differing.tolist():
            keys[row] = self._key(int(starts[row]), int(counts[row]), int(pids[row]), int(generations[row]))
        return keys

    def _known(self, signature: int, start: int, count: int, pid: int, generation: int) -> tuple:
        entry = self.known.get(signature)
        if entry is None:
            if self.pooled + count > len(self.pool):
                self.pool = np.concatenate((self.pool, np.empty(max(len(self.pool), count), np.uint64)))
            self.pool[self.pooled:self.pooled + count] = self.arrays.u64[start >> 3:(start >> 3) + count]
            entry = self.known[signature] = (self._key(start, count, pid, generation), self.pooled, count, pid,
                                             generation)
            self.pooled += count
        return entry

    def _key(self, start: int, count: int, pid: int, generation: int) -> Chain:
        raw = self.mapped[start:start + 8 * count]
        return (pid, generation, raw) if pid >= 0 else raw
