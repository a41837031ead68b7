"""Reading perf.data directly: its records decoded into batches of events for an
EventSink, in the order and with the values `perf script` shows
(offcpu.perf_script.script_argv), by offcpu.native_decoding.

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
from pathlib import Path

from offcpu import perf_data
from offcpu.errors import OffcpuError
from offcpu.events import SWITCH_TRACEPOINT, WAKING_TRACEPOINTS
from offcpu.perf_data import COMM, EXIT, FORK, SAMPLE, SWITCH, SWITCH_CPU_WIDE, PerfData, SampleLayout, Tracepoint
from offcpu.sched_events import Chain, EventSink
from offcpu.stacks import Stack

SWITCH_FIELDS = ("prev_comm", "prev_pid", "prev_state", "next_pid")
WAKING_FIELDS = ("pid",)  # the woken thread
TEXT_FIELDS = ("prev_comm",)  # char arrays; the other fields are integers
ORDERED_TYPES = frozenset({SAMPLE, SWITCH, SWITCH_CPU_WIDE, COMM, FORK, EXIT})
THREAD_RECORD_TYPES = (COMM, FORK, EXIT)
FORK_EXIT_RECORD = struct.Struct("<iiiiQ")  # FORK and EXIT: pid, ppid, tid, ptid (signed, as perf shows them), time
COMM_IDS = struct.Struct("<ii")
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
            return ("perf.data's samples carry counter values (PERF_SAMPLE_READ), "
                    "which the native reader does not decode")
        if not attr.sample_type & perf_data.SAMPLE_TID:
            return "perf.data's samples do not say their thread (PERF_SAMPLE_TID), which the native reader needs"
        if not attr.sample_id_all or not attr.sample_type & perf_data.SAMPLE_TIME:
            return "perf.data's records carry no time stamps (sample_id_all), which the native reader needs"
    if len(data.attrs) > 1 and not all(attr.sample_type & perf_data.SAMPLE_IDENTIFIER for attr in data.attrs):
        return "perf.data's events are not told apart by PERF_SAMPLE_IDENTIFIER, which the native reader needs"
    if len({SampleLayout.of(attr.sample_type).time for attr in data.attrs}) > 1:
        return "perf.data's events lay out their times differently, which the native reader does not decode"
    names = {tracepoint.full_name: tracepoint for tracepoint in data.tracepoints.values()}
    switch = names.get(SWITCH_TRACEPOINT)
    if switch is None:
        return "perf.data holds no sched:sched_switch format in its tracing data, which the native reader needs"
    if perf_data.state_names(switch.print_fmt) is None:
        return "perf.data's sched_switch prints prev_state in a way the native reader does not decode"
    wanted_fields = ((SWITCH_TRACEPOINT, SWITCH_FIELDS), *((waking, WAKING_FIELDS) for waking in WAKING_TRACEPOINTS))
    for name, wanted in wanted_fields:
        tracepoint = names.get(name)
        if tracepoint is not None and not _decodable(tracepoint, wanted):
            return f"perf.data's {name} format lacks the fields the native reader needs ({', '.join(wanted)})"
    return None


def _decodable(tracepoint: Tracepoint, wanted: tuple[str, ...]) -> bool:
    """Whether the format has the wanted fields, integers of 1, 2, 4 or 8 bytes but the
    names (char arrays)."""
    return all(name in tracepoint.fields and (name in TEXT_FIELDS or tracepoint.fields[name].size in (1, 2, 4, 8))
               for name in wanted)


class NativeReader:
    """A CaptureReader for perf.data written by `offcpu record` (see unsupported()).
    Made in the parent process, it survives fork: each worker maps the file anew."""

    name = "native"

    def __init__(self, path: Path, kernel_symbols: Path | None = None, vdso: Path | None = None) -> None:
        data = perf_data.open_perf_data(path)
        reason = _unsupported(data)
        if reason is not None:
            raise OffcpuError(f"cannot read {path} directly: {reason}")
        self.path = path
        self.kernel_symbols = kernel_symbols
        self.vdso = vdso
        self.index = perf_data.index_records(data)
        if self.index.compressed:
            raise OffcpuError(f"cannot read {path} directly: perf.data holds compressed records (perf record -z), "
                              "which the native reader does not decode")
        self.skipped = self.index.unknown
        self.binary_notes: list[str] = []  # what stacks() found of the mapped files (symbols.Symbolizer.notes)
        self._data: PerfData | None = None
        data.map.close()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_data": None}  # a memory map does not travel; it is made again

    @property
    def data(self) -> PerfData:
        if self._data is None:
            self._data = perf_data.open_perf_data(self.path)
        return self._data

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None:
        # Imported here: numpy only when perf.data is read directly (0.1 s of every start otherwise).
        from offcpu.native_decoding import Decoder, ordered_records
        data = self.data
        decoder = Decoder(data, self)
        rounds = self.index.round_starts
        first_round = perf_data.round_for_time(data, decoder.clock, rounds, time_slice[0]) if time_slice else 0
        decoder.replay_tasks_before(rounds[first_round])
        for offsets, times in ordered_records(data, decoder.arrays, decoder.clock, rounds, first_round,
                                              time_slice[1] if time_slice else None, ORDERED_TYPES):
            events = decoder.decode(offsets, times)
            if len(events):
                sink.take(events)

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        return perf_data.balanced_slices(self.data, self.index.round_starts, start_ns, end_ns, count)

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        from offcpu.symbols import Symbolizer, TaskHistory  # ELF and demangling: only when chains are named

        history = TaskHistory.replay(self.data, self.index.task_records)
        symbolizer = Symbolizer.of_perf_data(self.data, history, self.kernel_symbols, self.vdso)
        named = {chain: symbolizer.stack(chain) for chain in chains}
        self.binary_notes = symbolizer.notes
        return named
