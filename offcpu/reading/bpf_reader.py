"""Reading a capture recorded with BPF: its records turned into the events the engine
reads from perf.data, and its stacks named.

bpf-records.bin holds the records of `struct record` (core/src/bpf/offcpu.bpf.c,
docs/capture.md) one after another, in the order the ring buffer gave them: a wait is
written when it ends, so they are not in time order. Each wait becomes a sched_switch
at its start (the thread's stack and state), a wakeup when it was woken (the waker's
stack) and a switch-in at its end. The kernel took all three times at the switch and
the wakeup themselves, but for a switch the tracepoint did not report, placed by the
thread's run time as the kernel counts it (`estimated`); no observer's cost is counted.

Stacks were taken for a sample of the waits: a wait whose stacks were taken with
probability 2^-s weighs 2^s (Events.weights), one whose stacks were not weighs 0 and
is counted under STACK_NOT_TAKEN. A call chain travels as (kernel stack id, user stack
id, pid, exec generation, runtime stack id), named from bpf-stacks.bin, the saved kallsyms
and the maps in bpf-maps.json (offcpu.recording.process_maps) by symbols.Symbolizer, and
the runtime's frames that runtime-stacks.json joins to the wait (offcpu.runtime_frames)
after the native ones.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from offcpu import _core, runtime_frames
from offcpu._core import state_letter
from offcpu.capture import BPF_RECORDS, BPF_STACKS
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.files import open_regular, read_regular
from offcpu.reading.pairing import Paired, ThreadAtStart, pair_decoded
from offcpu.reading.sched_events import (
    SCHED_SWITCH,
    SCHED_WAKING,
    SWITCH_IN,
    THREAD_COMM,
    THREAD_EXIT,
    THREAD_FORK,
    UNKNOWN_CPU,
    Chain,
    Events,
    EventSink,
)
from offcpu.recording import perf_maps, process_maps
from offcpu.recording.perf_maps import PerfMap
from offcpu.runtime_frames import NO_RUNTIME_STACK, RuntimeStacks
from offcpu.stacks import STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN, Stack, without_tracing

if TYPE_CHECKING:
    from offcpu.reading.symbols import Symbolizer

# struct record (core/src/bpf/record.rs), as the core lays it out
RECORD = np.dtype({"names": [name for name, _, _ in _core.RECORD_FIELDS],
                   "formats": [code for _, code, _ in _core.RECORD_FIELDS],
                   "offsets": [offset for _, _, offset in _core.RECORD_FIELDS], "itemsize": _core.RECORD_SIZE})
# A record as its bytes: numpy copies a structured array field by field, ten times slower
RECORD_BYTES = np.dtype((np.void, RECORD.itemsize))
WAIT, FORK, EXIT, COMM = (_core.RECORD_KINDS[kind] for kind in ("wait", "fork", "exit", "comm"))
# A wait's `estimated` bits: its switch-out or switch-in was not reported to the tracepoint, and
# was placed by the thread's time on CPU as the kernel counts it
ESTIMATED_SINCE, ESTIMATED_BACK = 1, 2
MAPS_NAMED = 5  # processes named in the note on maps not read; the others counted
TASK_EVENTS = np.array([-1, -1, THREAD_FORK, THREAD_EXIT, THREAD_COMM])  # by record kind
STACK_ENTRY = struct.Struct("<II")  # bpf-stacks.bin: id, depth, then depth u64 addresses
# The BPF program's stack table: at most MAX_STACKS stacks of MAX_STACK_DEPTH addresses each
MAX_STACKS, MAX_STACK_DEPTH = 16384, 127
STACKS_MAX = MAX_STACKS * (STACK_ENTRY.size + 8 * MAX_STACK_DEPTH)  # the most bpf-stacks.bin holds
# The most bpf-records.bin is read of: 38 million records, a minute of the busiest recording
# (twice the default --max-size, and more than a report holds in memory on most machines)
RECORDS_MAX = 4 << 30
# What a record's fields can be, the kernel's limits: a pid or tid at most PID_MAX_LIMIT, a CPU's
# number below NR_CPUS (8,192 at most: this leaves room), a weight of 2^MAX_SHIFT at most
# (the BPF program's), a time of CLOCK_MONOTONIC in nanoseconds (an int64)
PID_MAX_LIMIT = 1 << 22
CPUS_MAX = 1 << 16
MAX_WEIGHT_SHIFT = 20
EFAULT = 14  # a user stack's walk that found no user frames: a kernel thread has none
E2BIG = 7  # a stack that found the stack table full
EXEC = 1  # a comm record's state when the name came with an exec
KERNEL_STACK_UNREADABLE = "[kernel stack could not be read]"
USER_STACK_UNREADABLE = "[user stack could not be read]"
# At one time, the order in which one thread goes through them: made, back on CPU, off
# again, woken (a wakeup that came before the switch-out is placed at it), renamed, gone.
ORDER = np.zeros(7, np.int8)  # by kind: its rank at one time
ORDER[[THREAD_FORK, SWITCH_IN, SCHED_SWITCH, SCHED_WAKING, THREAD_COMM, THREAD_EXIT]] = np.arange(6)
BATCH = 1 << 16  # events handed to the sink at a time
LANGUAGES = {"CPython": "Python", "HotSpot": "Java", "MRI": "Ruby"}  # whose frames a runtime's are
RUNTIME_NOTED_NS = 10_000_000  # the waits whose runtime frames the notes count: 10 ms or more

def read_stack_table(path: Path) -> dict[int, tuple[int, ...]]:
    """bpf-stacks.bin: each stack id's addresses, innermost first. A stack cut short at the
    end of the file is left out (its waits' stacks could not be read)."""
    try:
        raw = read_regular(path, STACKS_MAX)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise _unreadable(path, error) from None
    table = {}
    at = 0
    while at + STACK_ENTRY.size <= len(raw):
        stack_id, depth = STACK_ENTRY.unpack_from(raw, at)
        at += STACK_ENTRY.size
        if depth > MAX_STACK_DEPTH:
            raise damaged(path, f"a stack of {depth:,} frames, more than the {MAX_STACK_DEPTH} the BPF program takes")
        if at + 8 * depth > len(raw):
            break
        table[stack_id] = struct.unpack_from(f"<{depth}Q", raw, at)
        at += 8 * depth
    return table


def damaged(path: Path, what: str) -> OffcpuError:
    return OffcpuError(f"the capture is damaged: {path} holds {what}; record it again with "
                       "'offcpu record --backend bpf'")


def _unreadable(path: Path, error: OSError) -> OffcpuError:
    """Why a file of the capture cannot be read, and what to do."""
    if error.errno in (errno.EACCES, errno.EPERM):
        return OffcpuError(f"cannot read {path} ({error.strerror}); report as the user who recorded it")
    return OffcpuError(f"cannot read {path} ({error.strerror}); record it again with 'offcpu record --backend bpf'")


def _check_fields(path: Path, records: np.ndarray) -> None:
    """An OffcpuError naming the first field of a record of a known kind that holds what the
    kernel never gives (a damaged or crafted file), before any of it is read as a number."""
    kinds = records["kind"]
    known, waits = (kinds >= WAIT) & (kinds <= COMM), kinds == WAIT
    limits = [(known, name, PID_MAX_LIMIT) for name in ("pid", "tid", "waker_pid", "waker_tid")]
    limits += [(known, "cpu", CPUS_MAX - 1), (waits, "weight_shift", MAX_WEIGHT_SHIFT), (kinds == COMM, "state", EXEC)]
    limits += [(waits, name, (1 << 63) - 1) for name in ("since_ns", "woken_ns", "back_ns")]
    for rows, name, most in limits:
        values = records[name][rows]  # one column of the rows: not a copy of the records
        if len(values) and (largest := int(values.max())) > most:
            raise damaged(path, f"a record whose {name} is {largest:,}, more than the {most:,} it can be")


class Generations:
    """Each process's exec generation at a time: how many times a program began in it (a fork
    that made it, an exec) before then, as the records say. User addresses mean what the
    maps of that generation say."""

    def __init__(self, records: np.ndarray) -> None:
        kind, pid = records["kind"], records["pid"]
        begins = rows_of(records, ((kind == FORK) & (pid == records["tid"]))
                         | ((kind == COMM) & (records["state"] == EXEC)))
        self.starts: dict[int, np.ndarray] = {}
        for process in np.unique(begins["pid"]).tolist():
            self.starts[process] = np.sort(begins["since_ns"][begins["pid"] == process])

    def at(self, pid: int, time_ns: int) -> int:
        starts = self.starts.get(pid)
        return 0 if starts is None else int(np.searchsorted(starts, np.uint64(time_ns)))

    def of(self, pids: np.ndarray, times: np.ndarray) -> np.ndarray:
        """`at` of each pid and time."""
        generations = np.zeros(len(pids), np.int64)
        if not self.starts:
            return generations
        order = np.argsort(pids, kind="stable")
        ordered = pids[order]
        for pid, starts in self.starts.items():
            rows = order[np.searchsorted(ordered, pid, "left"):np.searchsorted(ordered, pid, "right")]
            generations[rows] = np.searchsorted(starts, times[rows])
        return generations


class BpfReader:
    """A CaptureReader for a capture recorded with BPF (its directory holds BPF_RECORDS).
    Made in the parent process, it travels to the workers without its records: each maps
    the file anew."""

    name = "bpf"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / BPF_RECORDS
        try:
            with open_regular(self.path) as file:
                size = os.fstat(file.fileno()).st_size
        except OSError as error:
            raise _unreadable(self.path, error) from None
        if size > RECORDS_MAX:
            raise OffcpuError(f"{self.path} holds {size:,} bytes, more than the {RECORDS_MAX:,} a report reads; "
                              "record for less time (--duration, --max-size)")
        self.count = size // RECORD.itemsize
        self.cut_short = size % RECORD.itemsize != 0  # a last record written in part
        self.skipped = 0
        self.binary_notes: list[str] = []  # what stacks() found of the stacks and the mapped files
        self.counting_slice: int | None = None  # the first time slice's start: it counts what was not read
        self._records: np.ndarray | None = None
        _check_fields(self.path, self.records)
        self.runtime: RuntimeStacks | None = runtime_frames.load(directory)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_records": None}  # a memory map does not travel; it is made again

    @property
    def records(self) -> np.ndarray:
        if self._records is None:
            self._records = self._mapped() if self.count else np.zeros(0, RECORD)
        return self._records

    def _mapped(self) -> np.ndarray:
        """The records, mapped from the regular file at the path (the map outlives the file's closing)."""
        try:
            with open_regular(self.path) as file:
                return np.memmap(file, RECORD, "r", shape=(self.count,))
        except OSError as error:
            raise _unreadable(self.path, error) from None
        except ValueError:  # shorter than when it was first opened
            raise damaged(self.path, "fewer records than it did when the report began") from None

    def unreadable(self) -> int:
        """Records that could not be read: of a kind this offcpu does not know, or cut short."""
        kinds = self.records["kind"]
        return int(np.count_nonzero((kinds < WAIT) | (kinds > COMM))) + self.cut_short

    def _waits(self, *names: str) -> dict[str, np.ndarray]:
        """These columns of the wait records: a copy of the fields asked for, not of whole
        records (of a long recording, hundreds of MB)."""
        waits = self.records["kind"] == WAIT
        return {name: self.records[name][waits] for name in names}

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None:
        first, last = time_slice or (0, (1 << 64) - 1)
        if time_slice is None or first == self.counting_slice:
            self.skipped += self.unreadable()
        columns = self.events(first, last)
        for start in range(0, len(columns["time"]), BATCH):
            part = {name: column[start:start + BATCH].tolist() for name, column in columns.items()}
            sink.take(Events(part["kind"], part["time"], part["cpu"], part["pid"], part["tid"], part["other"],
                             part["name"], part["state"], part["chain"], part["weight"]))

    def events(self, first: int, last: int) -> dict[str, np.ndarray]:
        """The columns of the events from `first` to `last` ns (both included), in time order."""
        records = self.records
        waits = rows_of(records, self._slice_waits(first, last))
        generations = Generations(records)
        parts = [self._switches(waits, self._runtime_stacks(waits["tid"], waits["since_ns"], waits["back_ns"]),
                                 first, last, generations),
                 self._wakeups(waits, first, last, generations),
                 self._switch_ins(waits, first, last), self._task_events(records, first, last)]
        columns = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        order = np.lexsort((ORDER[columns["kind"]], columns["time"]))
        return {name: column[order] for name, column in columns.items()}

    def _slice_waits(self, first: int, last: int) -> np.ndarray:
        """The rows of the waits with an event from `first` to `last`: their switch-out, their
        wakeup (placed no earlier than the switch-out) or their switch-in (the parts choose among
        them). A slice copies its own waits, not every wait of the recording."""
        records = self.records
        since = records["since_ns"]

        def within(times: np.ndarray) -> np.ndarray:
            return (times >= first) & (times <= last)

        return np.flatnonzero((records["kind"] == WAIT) & (
            within(since) | within(np.maximum(records["woken_ns"], since)) | within(records["back_ns"])))

    def _runtime_stacks(self, tids: np.ndarray, since: np.ndarray, back: np.ndarray) -> np.ndarray:
        """Each wait's runtime stack id (NO_RUNTIME_STACK where no sample joined it)."""
        if self.runtime is None:
            return np.full(len(tids), NO_RUNTIME_STACK, np.int64)
        return runtime_frames.join(tids, since, back, self.runtime.tids, self.runtime.times, self.runtime.stack_ids)

    def _switches(self, waits: np.ndarray, runtime: np.ndarray, first: int, last: int,
                  generations: Generations) -> dict[str, np.ndarray]:
        """A sched_switch at each wait's start, when it began in the recording."""
        since = waits["since_ns"]
        chosen = (since > 0) & (since >= first) & (since <= last)
        rows = rows_of(waits, chosen)
        kernel, user = rows["kernel_stack"], rows["user_stack"]
        taken = (kernel != _core.NOT_TAKEN) | (user != _core.NOT_TAKEN)
        weights = np.where(taken, np.left_shift(1, rows["weight_shift"].astype(np.int64)), 0)
        chains = self._chains(kernel, user, rows["pid"], rows["since_ns"], generations, STACK_NOT_TAKEN,
                              runtime[chosen])
        return _part(SCHED_SWITCH, rows["since_ns"], UNKNOWN_CPU, rows["pid"], rows["tid"], 0,
                     self._names(rows["comm"]), self._states(rows), chains, weights)

    def _wakeups(self, waits: np.ndarray, first: int, last: int, generations: Generations) -> dict[str, np.ndarray]:
        """A wakeup of each woken wait, in the waker: at the wait's start when it came before
        (while the thread was on its way off CPU: all of the wait is then run-queue delay)."""
        woken = waits["woken_ns"]
        at = np.maximum(woken, waits["since_ns"])
        chosen = (woken > 0) & (at >= first) & (at <= last)
        rows, at = rows_of(waits, chosen), at[chosen]
        chains = self._chains(rows["waker_kernel_stack"], rows["waker_user_stack"], rows["waker_pid"],
                              rows["woken_ns"], generations, WAKER_STACK_NOT_TAKEN)
        return _part(SCHED_WAKING, at, UNKNOWN_CPU, rows["waker_pid"], rows["waker_tid"], rows["tid"],
                     self._names(rows["waker_comm"]), self._blank(len(rows)), chains, 1)

    def _switch_ins(self, waits: np.ndarray, first: int, last: int) -> dict[str, np.ndarray]:
        """A switch-in at each wait's end, when it ended in the recording."""
        back = waits["back_ns"]
        rows = rows_of(waits, (back > 0) & (back >= first) & (back <= last))
        return _part(SWITCH_IN, rows["back_ns"], rows["cpu"], rows["pid"], rows["tid"], 0, self._names(rows["comm"]),
                     self._blank(len(rows)), self._no_chains(len(rows)), 1)

    def _task_events(self, records: np.ndarray, first: int, last: int) -> dict[str, np.ndarray]:
        """Forks (`other`: the creating thread), exits and names (`other`: 1 when by exec)."""
        kind, since = records["kind"], records["since_ns"]
        rows = rows_of(records, (kind >= FORK) & (kind <= COMM) & (since >= first) & (since <= last))
        kinds = TASK_EVENTS[rows["kind"]]
        others = np.where(rows["kind"] == FORK, rows["waker_tid"], np.where(rows["kind"] == COMM, rows["state"], 0))
        return _part(kinds, rows["since_ns"], rows["cpu"], rows["pid"], rows["tid"], others,
                     self._names(rows["comm"]), self._blank(len(rows)), self._no_chains(len(rows)), 1)

    def _chains(self, kernel: np.ndarray, user: np.ndarray, pids: np.ndarray, times: np.ndarray,
                generations: Generations, not_taken: str, runtime: np.ndarray | None = None) -> np.ndarray:
        """Each stack's chain: (kernel id, user id, pid, generation, runtime stack id), the pid and
        generation 0 without user frames (kernel addresses mean the same in every process) nor
        runtime frames; `not_taken` where no stack was taken."""
        taken = (kernel != _core.NOT_TAKEN) | (user != _core.NOT_TAKEN)
        if not taken.any():
            return self._column("chains", [not_taken], np.zeros(len(kernel), np.intp))
        runtime = np.full(len(kernel), NO_RUNTIME_STACK, np.int64) if runtime is None else runtime
        kernel, user, pids, times, runtime = kernel[taken], user[taken], pids[taken], times[taken], runtime[taken]
        has_user = (user >= 0) | (runtime != NO_RUNTIME_STACK)
        pids = np.where(has_user, pids, 0).astype(np.int64)
        generation = np.where(has_user, generations.of(pids, times), 0)
        first, inverse = _distinct_rows(_pair(kernel, user), _pair(pids, generation), runtime)
        distinct: list[Hashable] = list(zip(kernel[first].tolist(), user[first].tolist(), pids[first].tolist(),
                                            generation[first].tolist(), runtime[first].tolist(), strict=True))
        codes = np.full(len(taken), len(distinct), np.intp)  # not_taken: the last
        codes[taken] = inverse
        return self._column("chains", [*distinct, not_taken], codes)

    def _names(self, comms: np.ndarray) -> np.ndarray:
        """Thread names, each distinct one decoded once (told apart as 64-bit numbers: strings sort slower)."""
        numbers = np.ascontiguousarray(comms).view(np.uint64).reshape(len(comms), comms.itemsize // 8)
        first, inverse = _distinct_rows(*numbers.T)
        return self._column("names", [name.decode(errors="replace") for name in comms[first].tolist()], inverse)

    def _states(self, rows: np.ndarray) -> np.ndarray:
        """Each switch-out's state letter, each distinct (state, exit state, preempted) named once."""
        if not len(rows):
            return self._blank(0)
        first, inverse = _distinct_rows(rows["state"], rows["exit_state"], rows["preempted"])
        return self._column("states", [state_letter(state, exit_state, bool(preempted)) for state, exit_state, preempted
                                       in zip(rows["state"][first].tolist(), rows["exit_state"][first].tolist(),
                                              rows["preempted"][first].tolist(), strict=True)], inverse)

    def _blank(self, count: int) -> np.ndarray:
        return self._column("states", [""], np.zeros(count, np.intp))

    def _no_chains(self, count: int) -> np.ndarray:
        return self._column("chains", [None], np.zeros(count, np.intp))

    def _column(self, keys: str, distinct: list[Hashable], inverse: np.ndarray) -> np.ndarray:
        """Each event's name, state or chain (`keys`: "names", "states" or "chains"), its number
        in `distinct` given: an object array of them (a reader that numbers them for the core,
        HeldRecords, gives their numbers instead)."""
        table = np.empty(len(distinct), object)
        table[:] = distinct
        return table[inverse]

    def pair(self, slices: list[tuple[int, int]], window: tuple[int, int], at_start: list[ThreadAtStart],
             counted: tuple[int, int], switch_cost_ns: int, on_done: Callable[[int], None] | None = None) -> Paired:
        return pair_decoded(self, slices, window, at_start, counted, switch_cost_ns, on_done)

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        """Cut where equal shares of the events' times fall."""
        self.counting_slice = start_ns
        waits = self._waits("since_ns", "woken_ns", "back_ns")
        times = np.concatenate([waits["since_ns"], waits["woken_ns"], waits["back_ns"]])
        times = np.sort(times[(times >= start_ns) & (times <= end_ns)])
        bounds = [start_ns]
        for part in range(1, count if len(times) else 1):
            cut = int(times[len(times) * part // count])
            if bounds[-1] < cut < end_ns:
                bounds.append(cut)
        bounds.append(end_ns + 1)
        return [(first, after - 1) for first, after in zip(bounds, bounds[1:], strict=False)]

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        from offcpu.reading.symbols import Symbolizer, TaskHistory

        table = read_stack_table(self.directory / BPF_STACKS)
        snapshots = process_maps.load(self.directory)
        maps = TaskHistory.of_snapshots(snapshots or [], Generations(self.records).at)
        processes = perf_maps.load(self.directory)
        symbolizer = Symbolizer.of_bpf_capture(self.directory, maps, {
            process.pid: PerfMap.parse(process.text) for process in processes if process.text})
        named = {chain: stack_of(chain, table, symbolizer, self.runtime) for chain in chains}
        with_user = (chain for chain in named if isinstance(chain, tuple) and chain[1] >= 0)
        unmapped = {(pid, generation) for _, _, pid, generation, _ in with_user} - maps.mappings.keys()
        self.binary_notes = [*self._unreadable_note(table), *self._unseen_switches_note(),
                             *_maps_note(snapshots, [self._process_name(pid) for pid in sorted(
                                 {pid for pid, _ in unmapped})]), *symbolizer.notes, *self._runtime_notes(),
                             *perf_maps.notes(processes, symbolizer.perf_map_named)]
        return named

    def _runtime_notes(self) -> list[str]:
        """Which runtime was found in which process, how its frames were read, and how many of its
        waits of RUNTIME_NOTED_NS or more (whose stacks were taken) carry them."""
        if self.runtime is None:
            return []
        waits = self._waits("tid", "pid", "since_ns", "back_ns", "kernel_stack", "user_stack")
        joined = self._runtime_stacks(waits["tid"], waits["since_ns"], waits["back_ns"]) != NO_RUNTIME_STACK
        since, back = waits["since_ns"].astype(np.int64), waits["back_ns"].astype(np.int64)
        taken = (waits["kernel_stack"] != _core.NOT_TAKEN) | (waits["user_stack"] != _core.NOT_TAKEN)
        long_enough = taken & (since > 0) & ((back == 0) | (back - since >= RUNTIME_NOTED_NS))
        notes = []
        for process in self.runtime.processes:
            runtime = printable(f"{process.runtime} {process.version}" if process.version else process.runtime)
            error, reader = printable(process.error or ""), printable(process.reader)
            if process.error is not None and process.reads == process.failed:
                notes.append(f"{runtime} was found in process {process.pid}, but its frames could not be read with "
                             f"{reader}: {error}; its stacks are native only")
                continue
            mine = long_enough & (waits["pid"] == process.pid)
            carry = int(np.count_nonzero(mine & joined))
            failed = f" ({process.failed:,} of its {process.reads:,} reads failed: {error})" if process.failed else ""
            interval_ms = process.interval_ms or self.runtime.interval_ms
            notes.append(f"{printable(LANGUAGES.get(process.runtime, process.runtime))} frames of process "
                         f"{process.pid} ({runtime}) were read with {reader} every {interval_ms} ms{failed}: "
                         f"{carry:,} of {int(np.count_nonzero(mine)):,} waits of {RUNTIME_NOTED_NS // 1_000_000} ms or "
                         "more carry them; the others' stacks are native only")
        return notes

    def _unseen_switches_note(self) -> list[str]:
        """How many switches the tracepoint did not report, and what that changed, in a sentence
        (none when none)."""
        estimated = self._waits("estimated")["estimated"]
        unseen = int(np.count_nonzero(estimated & ESTIMATED_SINCE) + np.count_nonzero(estimated & ESTIMATED_BACK))
        if not unseen:
            return []
        placed = self.records[np.flatnonzero(self.records["kind"] == WAIT)[estimated != 0]]
        one = len(placed) == 1
        ms = int(np.sum(placed["back_ns"].astype(np.int64) - placed["since_ns"].astype(np.int64))) / 1e6
        return [f"the kernel did not report {unseen:,} of the threads' switches to offcpu: the "
                f"{'wait' if one else f'{len(placed):,} waits'} {'it' if unseen == 1 else 'they'} began or ended "
                f"({ms:,.1f} ms off CPU{'' if one else ' in all'}) {'was' if one else 'were'} timed from the threads' "
                "time on CPU as the kernel counts it instead, so every thread's total stays whole"]

    def _process_name(self, pid: int) -> str:
        """A process as 'pid (name)', by its main thread's last name recorded (else any thread's)."""
        mine = self.records["pid"] == pid
        comms = self.records["comm"][mine]
        main = comms[self.records["tid"][mine] == pid]
        comm = main if len(main) else comms
        return f"{pid} ({printable(comm[-1].decode(errors='replace'))})" if len(comm) else str(pid)

    def _unreadable_note(self, table: dict[int, tuple[int, ...]]) -> list[str]:
        """How many stacks taken could not be read, in a sentence (none when all could)."""
        names = ("kernel_stack", "user_stack", "waker_kernel_stack", "waker_user_stack")
        waits = self._waits(*names)
        ids = np.concatenate([waits[name] for name in names])
        count = len(waits["kernel_stack"])
        user = np.zeros(len(ids), bool)
        user[count:2 * count] = user[3 * count:] = True
        no_user_frames = user & (ids == -EFAULT)
        taken = (ids != _core.NOT_TAKEN) & ~no_user_frames
        read = taken & (ids >= 0) & np.isin(ids, np.fromiter(table, np.int64, len(table)))
        failed = int(np.count_nonzero(taken & ~read))
        if not failed:
            return []
        full = int(np.count_nonzero(taken & (ids == -E2BIG)))
        why = [f"{full:,} found the stack table full: record fewer processes, or for less time"] if full else []
        why += [f"the walk of {failed - full:,} failed"] if failed > full else []
        return [f"{failed:,} of the {int(np.count_nonzero(taken)):,} stacks taken could not be read "
                f"({'; '.join(why)}): they are shown as [kernel stack could not be read] or [user stack could not "
                "be read]"]


def stack_of(chain: Chain, table: dict[int, tuple[int, ...]], symbolizer: Symbolizer,
           runtime: RuntimeStacks | None = None) -> Stack:
    """The frames of a chain: the kernel's, then the user's (native, then the runtime's),
    innermost first."""
    if isinstance(chain, str):
        return Stack((chain,), 0)  # STACK_NOT_TAKEN or WAKER_STACK_NOT_TAKEN
    kernel, user, pid, generation, runtime_stack = cast(tuple[int, int, int, int, int], chain)
    frames: list[str] = []
    if kernel in table:
        frames += [symbolizer.kernel_name(address) for address in table[kernel]]
    elif kernel != _core.NOT_TAKEN:
        frames.append(KERNEL_STACK_UNREADABLE)
    kernel_frames = len(frames)
    if user in table:
        frames += [symbolizer.user_name(pid, generation, address) for address in table[user]]
    elif user not in (_core.NOT_TAKEN, -EFAULT):
        frames.append(USER_STACK_UNREADABLE)
    if runtime is not None and 0 <= runtime_stack < len(runtime.stacks):
        name = runtime.runtime_of(pid)
        frames += [frame.name(name) for frame in runtime.stacks[runtime_stack]]
    return without_tracing(Stack(tuple(frames), kernel_frames))


def _maps_note(snapshots: list | None, unmapped: list[str]) -> list[str]:
    """What the user frames lack for want of memory maps: of every process, or of `unmapped` ones."""
    if snapshots is None:
        return ["the capture holds no readable bpf-maps.json (the memory maps of its processes): user frames are "
                "shown as [unknown]"]
    if not unmapped:
        return []
    one = len(unmapped) == 1
    named = ", ".join(unmapped[:MAPS_NAMED]) + (f" and {len(unmapped) - MAPS_NAMED:,} more"
                                                if len(unmapped) > MAPS_NAMED else "")
    return [f"the functions of process{'' if one else 'es'} {named} in {'its' if one else 'their'} own code and "
            f"libraries are shown as [unknown] in some of {'its' if one else 'their'} waits: "
            f"{'it' if one else 'they'} ended, or ran another program, before offcpu read {'its' if one else 'their'} "
            "memory maps"]


def rows_of(records: np.ndarray, which: np.ndarray) -> np.ndarray:
    """records[which] (a mask or indices), copied as whole records."""
    return records.view(RECORD_BYTES)[which].view(RECORD)


def joined(parts: list[np.ndarray]) -> np.ndarray:
    """The records of `parts`, one after the other (np.concatenate, copied as whole records)."""
    return np.concatenate([part.view(RECORD_BYTES) for part in parts] or [np.zeros(0, RECORD_BYTES)]).view(RECORD)


def _pair(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Two 32-bit columns as one 64-bit one (signed values by their bits)."""
    return (high.astype(np.int64).astype(np.uint64) << np.uint64(32)) | (low.astype(np.int64).astype(np.uint64)
                                                                         & np.uint64(0xFFFFFFFF))


def _distinct_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct row of these integer columns, and each row's number among
    them: a 1-D unique per column, numbered anew after each (a unique of rows sorts them as bytes,
    several times slower)."""
    codes = np.zeros(len(columns[0]), np.int64)
    for column in columns:
        distinct, inverse = np.unique(column, return_inverse=True)
        codes = np.unique(codes * len(distinct) + inverse.reshape(-1), return_inverse=True)[1].reshape(-1)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _part(kind: int | np.ndarray, times: np.ndarray, cpu: int | np.ndarray, pids: np.ndarray, tids: np.ndarray,
          other: int | np.ndarray, names: np.ndarray, states: np.ndarray, chains: np.ndarray,
          weight: int | np.ndarray) -> dict[str, np.ndarray]:
    """Columns of events of one part, integers as int64 (broadcast where one value is given)."""
    count = len(times)

    def column(value: int | np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(value, np.int64), (count,))

    return {"kind": column(kind), "time": column(times.astype(np.int64)), "cpu": column(cpu),
            "pid": column(pids.astype(np.int64)), "tid": column(tids.astype(np.int64)), "other": column(other),
            "name": names, "state": states, "chain": chains, "weight": column(weight)}
