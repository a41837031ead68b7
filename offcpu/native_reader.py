"""Reading perf.data directly: its records decoded into EventSink calls, in the
order and with the values `perf script` shows (offcpu.perf_script.script_argv).

A call chain travels as the raw bytes of its u64 addresses, with the process and
its exec generation when it holds user addresses (their meaning depends on the
process's memory maps); symbols.Symbolizer names each distinct chain once, after
the engine has counted time per chain.

The reader walks every record header once when it is made (offcpu.perf_data.Index):
a time slice then decodes only its own rounds, and the task records (names, forks,
exits, maps) of the whole file are known whichever slice they are in.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from offcpu import perf_data
from offcpu.errors import OffcpuError
from offcpu.perf_data import (COMM, EXIT, FORK, LOST, MISC_COMM_EXEC, MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT,
                              SAMPLE, SWITCH, SWITCH_CPU_WIDE, USER_MARKER, Clock, PerfData, SampleLayout,
                              StateNames, Tracepoint)
from offcpu.sched_events import (SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, SWITCH_OUT, THREAD_COMM, THREAD_EXIT, THREAD_FORK,
                                  UNKNOWN_CPU, Chain, Events, EventSink)
from offcpu.stacks import Stack
from offcpu.symbols import Symbolizer, TaskHistory

SWITCH_EVENT = "sched:sched_switch"
WAKING_EVENTS = ("sched:sched_waking", "sched:sched_wakeup")
SWITCH_FIELDS = ("prev_comm", "prev_pid", "prev_state", "next_pid")  # in the order of the format
WAKING_FIELDS = ("pid",)  # the woken thread
ORDERED_TYPES = frozenset({SAMPLE, SWITCH, SWITCH_CPU_WIDE, COMM, FORK, EXIT})
TASK_FIELDS = struct.Struct("<IIIIQ")  # FORK and EXIT: pid, ppid, tid, ptid, time
COMM_IDS = struct.Struct("<II")
U32 = struct.Struct("<I")
IDLE_COMM = "swapper"  # perf's name for the idle task (tid 0)

def unsupported(path: Path) -> str | None:
    """Why the native reader cannot read `path` as perf script would (one sentence for
    the report; read it with perf script instead), or None when it can. A file that
    is not a readable perf.data at all raises OffcpuError."""
    data = perf_data.open_perf_data(path)
    try:
        return _unsupported(data)
    finally:
        data.map.close()


def _unsupported(data: PerfData) -> str | None:
    if perf_data.is_swapped(data):
        return "perf.data was written on a machine of the other byte order, which the native reader does not decode"
    if data.pipe:
        return "perf.data was written through a pipe (perf record -o -), which the native reader does not decode"
    if perf_data.FEATURE_COMPRESSED in data.features:
        return "perf.data holds compressed records (perf record -z), which the native reader does not decode"
    for attr in data.attrs:
        if attr.sample_type & perf_data.SAMPLE_STACK_USER:
            return ("perf.data has user stacks to unwind (--call-graph dwarf), which the native reader does not "
                    "decode")
        if attr.sample_type & perf_data.SAMPLE_BRANCH_STACK:
            return "perf.data has branch stacks (--call-graph lbr), which the native reader does not decode"
        if attr.sample_type & perf_data.SAMPLE_READ:
            return "perf.data's samples carry counter values (PERF_SAMPLE_READ), which the native reader does not decode"
        if not attr.sample_type & perf_data.SAMPLE_TID:
            return "perf.data's samples do not say their thread (PERF_SAMPLE_TID), which the native reader needs"
        if not attr.sample_id_all or not attr.sample_type & perf_data.SAMPLE_TIME:
            return "perf.data's records carry no time stamps (sample_id_all), which the native reader needs"
    if len(data.attrs) > 1 and not all(attr.sample_type & perf_data.SAMPLE_IDENTIFIER for attr in data.attrs):
        return "perf.data's events are not told apart by PERF_SAMPLE_IDENTIFIER, which the native reader needs"
    if len({SampleLayout.of(attr.sample_type).time for attr in data.attrs}) > 1:
        return "perf.data's events lay out their times differently, which the native reader does not decode"
    names = {tracepoint.full_name: tracepoint for tracepoint in data.tracepoints.values()}
    switch = names.get(SWITCH_EVENT)
    if switch is None:
        return "perf.data holds no sched:sched_switch format in its tracing data, which the native reader needs"
    if perf_data.state_names(switch.print_fmt) is None:
        return "perf.data's sched_switch prints prev_state in a way the native reader does not decode"
    for name, wanted in ((SWITCH_EVENT, SWITCH_FIELDS), *((waking, WAKING_FIELDS) for waking in WAKING_EVENTS)):
        tracepoint = names.get(name)
        if tracepoint is not None and (not all(field in tracepoint.fields for field in wanted)
                                       or RawFields.of(tracepoint, wanted) is None):
            return f"perf.data's {name} format lacks the fields the native reader needs ({', '.join(wanted)})"
    return None


@dataclass(frozen=True)
class RawFields:
    """A struct that unpacks the wanted fields of a tracepoint's raw data, in the order asked
    (None when the format places them in another order)."""

    unpack: struct.Struct

    @classmethod
    def of(cls, tracepoint: Tracepoint, names: tuple[str, ...]) -> RawFields | None:
        fields = [tracepoint.fields[name] for name in names]
        if any(later.offset < earlier.offset + earlier.size for earlier, later in zip(fields, fields[1:])):
            return None
        layout, at = "<", 0
        for field in fields:
            layout += f"{field.offset - at}x" if field.offset > at else ""
            layout += _code(field)
            at = field.offset + field.size
        return cls(struct.Struct(layout))


def _code(field: perf_data.Field) -> str:
    integer = {1: "b", 2: "h", 4: "i", 8: "q"}.get(field.size)
    if integer is None:
        return f"{field.size}s"  # a char array
    return integer if field.signed else integer.upper()


class NativeReader:
    """A CaptureReader for perf.data written by `offcpu record` (see unsupported()).
    Made in the parent process, it survives fork: each worker maps the file anew."""

    name = "native"

    def __init__(self, path: Path, kernel_symbols: Path | None = None) -> None:
        data = perf_data.open_perf_data(path)
        reason = _unsupported(data)
        if reason is not None:
            raise OffcpuError(f"cannot read {path} directly: {reason}")
        self.path = path
        self.kernel_symbols = kernel_symbols
        self.index = perf_data.index_records(data)
        if self.index.compressed:
            raise OffcpuError(f"cannot read {path} directly: perf.data holds compressed records (perf record -z), "
                              "which the native reader does not decode")
        self.skipped = self.index.unknown
        self.lost_events = self._lost(data)
        self.missing_binaries: list[str] = []  # sentences, one per binary stacks() could not read
        self._data: PerfData | None = None
        data.map.close()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_data": None}  # a memory map does not travel; it is made again

    @property
    def data(self) -> PerfData:
        if self._data is None:
            self._data = perf_data.open_perf_data(self.path)
        return self._data

    def _lost(self, data: PerfData) -> int:
        """The events LOST and LOST_SAMPLES records say perf lost."""
        total = 0
        for position in self.index.lost_records:
            kind = data.words[position >> 1]
            at = position + (16 if kind == LOST else 8)  # LOST: id then count; LOST_SAMPLES: count
            total += int.from_bytes(data.map[at:at + 8], "little")
        return total

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None:
        data = self.data
        decoder = _Decoder(data, sink, self)
        rounds = self.index.round_starts
        first_round = perf_data.round_for_time(data, decoder.clock, rounds, time_slice[0]) if time_slice else 0
        decoder.replay_tasks_before(rounds[first_round])
        for batch in perf_data.ordered_keys(data, decoder.clock, rounds, first_round,
                                               time_slice[1] if time_slice else None, ORDERED_TYPES):
            decoder.emit(batch)

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        return perf_data.balanced_slices(self.data, self.index.round_starts, start_ns, end_ns, count)

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        history = TaskHistory.replay(self.data, self.index.task_records)
        symbolizer = Symbolizer(self.data, history, self.kernel_symbols)
        named = {chain: symbolizer.stack(chain) for chain in chains}
        self.missing_binaries = symbolizer.missing
        return named


class _Decoder:
    """The state perf keeps while it reads records in order: each thread's name (perf
    names a thread after its last COMM, a new thread after its parent's, and one it
    never saw ':tid') and each process's exec generation."""

    def __init__(self, data: PerfData, sink: EventSink, reader: NativeReader) -> None:
        self.data, self.sink, self.reader = data, sink, reader
        self.clock = Clock.of(data)
        self.comms: dict[int, str] = {0: IDLE_COMM}  # tid -> name, for threads perf knows a name of
        self.generations: dict[int, int] = {}  # pid -> execs seen
        self.events = self._events()

    def _events(self) -> dict[int, tuple]:
        """Per event id: what kind of sample it is and where its fields are (a tuple
        because the hot loop reads it for every sample: whether it is sched_switch (else
        a wakeup), the tid's offset, the CPU's, the call chain's, the raw data's, its fields)."""
        names = {tracepoint.id: tracepoint for tracepoint in self.data.tracepoints.values()}
        events: dict[int, tuple] = {}
        states: StateNames | None = None
        for attr in self.data.attrs:
            tracepoint = names.get(attr.config) if attr.type == perf_data.TYPE_TRACEPOINT else None
            if tracepoint is None or tracepoint.full_name not in (SWITCH_EVENT, *WAKING_EVENTS):
                continue
            layout = SampleLayout.of(attr.sample_type)
            is_switch = tracepoint.full_name == SWITCH_EVENT
            if is_switch:
                states = perf_data.state_names(tracepoint.print_fmt)
                fields = RawFields.of(tracepoint, SWITCH_FIELDS)
            else:
                fields = RawFields.of(tracepoint, WAKING_FIELDS)
            entry = (is_switch, layout.tid, layout.cpu, layout.callchain, layout.raw, fields)
            for event_id in attr.ids:
                events[event_id] = entry
            if len(self.data.attrs) == 1:
                events[-1] = entry
        self.states = states
        return events

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
        pid, ppid, tid, ptid, _ = TASK_FIELDS.unpack_from(self.data.map, position + 8)
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

    def emit(self, batch: list[int]) -> None:
        """The records of these ordering keys (perf_data.ordered_keys) into the sink.
        The hot loop: locals for everything it reads per record, u64 fields read as
        words of the file, names of comms and states converted once each."""
        data, sink = self.data, self.sink
        words, quads, mapped, base = data.words, data.quads, data.map, data.data_start
        events, comms, generations, states = self.events, self.comms, self.generations, self.states
        uniform = self.clock.uniform
        single = events.get(-1)
        comm_names: dict[bytes, str] = {}
        state_text: dict[int, str] = {}
        out = Events()
        add = out.add
        shift, mask, low = perf_data.TIME_SHIFT, perf_data.OFFSET_MASK, 0xFFFF_FFFF
        sample, switch_cpu_wide, switch = SAMPLE, SWITCH_CPU_WIDE, SWITCH
        switched_out, preempted, user_marker = MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT, USER_MARKER
        for key in batch:
            time = key >> shift
            position = base + (key & mask)
            word = position >> 1
            kind = words[word]
            if kind == sample:
                event = single or events.get(quads[(position >> 3) + 1])  # PERF_SAMPLE_IDENTIFIER
                if event is None:
                    continue
                is_switch, tid_at, cpu_at, chain_at, raw_at, fields = event
                size = words[word + 3]
                ids = quads[(position + tid_at) >> 3]
                pid, tid = ids & low, ids >> 32
                if chain_at is not None:
                    count = quads[(position + chain_at) >> 3] if chain_at + 8 <= size else size
                    raw_at = chain_at + 8 + 8 * count
                    chain = mapped[position + chain_at + 8:position + raw_at]
                    chain_key: Chain = (pid, generations.get(pid, 0), chain) if user_marker in chain else chain
                else:
                    chain_key = b""
                if raw_at + 4 + fields.unpack.size > size:  # a damaged sample: its fields would run past its end
                    self.reader.skipped += 1
                    continue
                values = fields.unpack.unpack_from(mapped, position + raw_at + 4)
                cpu = words[(position + cpu_at) >> 1] if cpu_at is not None else UNKNOWN_CPU
                if is_switch:  # fields: prev_comm, prev_pid, prev_state, next_pid (see _events)
                    raw_comm, prev_pid, state, next_pid = values
                    comm = comm_names.get(raw_comm)
                    if comm is None:
                        comm = comm_names[raw_comm] = raw_comm.split(b"\0", 1)[0].decode(errors="replace")
                    name = state_text.get(state)
                    if name is None:
                        name = state_text[state] = states.name(state)  # type: ignore[union-attr]
                    add(SCHED_SWITCH, time, cpu, pid, prev_pid, next_pid, comm, name, chain_key)
                else:
                    name = comms.get(tid)
                    add(SCHED_WAKING, time, cpu, pid, tid, values[0], name if name is not None else f":{tid}",
                        chain=chain_key)
                continue
            end = position + words[word + 3]
            trailer = uniform or self.clock.trailer(mapped, end)
            if trailer is None or trailer.tid_from_end is None or end - position < trailer.size + 8:
                self.reader.skipped += 1
                continue
            ids = quads[(end - trailer.tid_from_end) >> 3]
            pid, tid = ids & low, ids >> 32
            cpu = words[(end - trailer.cpu_from_end) >> 1] if trailer.cpu_from_end is not None else UNKNOWN_CPU
            if kind == switch_cpu_wide or kind == switch:
                misc = words[word + 2]
                if misc & switched_out:
                    add(SWITCH_OUT, time, cpu, pid, tid, int(bool(misc & preempted)))
                else:
                    name = comms.get(tid)
                    add(SWITCH_IN, time, cpu, pid, tid, name=name if name is not None else f":{tid}")
            elif kind == FORK:
                child_pid, _, child, parent = self._fork(position)
                add(THREAD_FORK, time, cpu, child_pid, child, parent)
            elif kind == EXIT:
                exit_pid, _, exit_tid, _, _ = TASK_FIELDS.unpack_from(mapped, position + 8)
                add(THREAD_EXIT, time, cpu, exit_pid, exit_tid)
            elif kind == COMM:
                _, _, comm, execed = self._comm(position)
                add(THREAD_COMM, time, cpu, pid, tid, int(execed), comm)
        sink.take(out)
