"""Reading a capture recorded with BPF: its records paired in the core, and its stacks named.

bpf-records.bin holds the records of `struct record` (core/src/bpf/offcpu.bpf.c,
docs/capture.md) one after another, in the order the ring buffer gave them: a wait is
written when it ends, so they are not in time order. The core (core/src/bpf/decode.rs)
reads them a few MB at a time, checks their fields, and makes each wait a sched_switch at
its start (the thread's stack and state), a wakeup when it was woken (the waker's stack)
and a switch-in at its end, which it pairs a time slice at a time in a pool of threads. The
kernel took all three times at the switch and the wakeup themselves, but for a switch the
tracepoint did not report, placed by the thread's run time as the kernel counts it
(`estimated`); no observer's cost is counted.

Stacks were taken for a sample of the waits: a wait whose stacks were taken with
probability 2^-s weighs 2^s, one whose stacks were not weighs 0 and is counted under
STACK_NOT_TAKEN. A call chain travels as (kernel stack id, user stack id, pid, exec
generation, runtime stack id), named here from bpf-stacks.bin, the saved kallsyms and the maps
in bpf-maps.json (offcpu.recording.process_maps) by symbols.Symbolizer, and the runtime's
frames that runtime-stacks.json joins to the wait (offcpu.runtime_frames) after the native ones.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from offcpu import _core, runtime_frames
from offcpu.capture import BPF_RECORDS, BPF_STACKS
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.files import open_regular, read_regular
from offcpu.reading.pairing import SYNTHETIC_STACKS, Paired, ThreadAtStart
from offcpu.reading.sched_events import Chain
from offcpu.recording import perf_maps, process_maps
from offcpu.recording.perf_maps import PerfMap
from offcpu.runtime_frames import RuntimeNames, RuntimeStacks
from offcpu.stacks import STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN, Stack, without_tracing

if TYPE_CHECKING:
    from offcpu.reading.symbols import Symbolizer

# struct record (core/src/bpf/record.rs), as the core lays it out: for the records a live
# recording holds in memory
RECORD = np.dtype({"names": [name for name, _, _ in _core.RECORD_FIELDS],
                   "formats": [code for _, code, _ in _core.RECORD_FIELDS],
                   "offsets": [offset for _, _, offset in _core.RECORD_FIELDS], "itemsize": _core.RECORD_SIZE})
WAIT, FORK, EXIT, COMM = (_core.RECORD_KINDS[kind] for kind in ("wait", "fork", "exit", "comm"))
EXEC = _core.EXEC  # a comm record's state when the name came with an exec
MAPS_NAMED = 5  # processes named in the note on maps not read; the others counted
STACK_ENTRY = struct.Struct("<II")  # bpf-stacks.bin: id, depth, then depth u64 addresses
MAX_STACK_DEPTH = 127  # the addresses of a stack the BPF program takes at most
# The most bpf-stacks.bin is read of: a million stacks 32 frames deep (the recording's table has
# no bound of its own: its stacks are held in user space, core/src/bpf/stack_store.rs)
STACKS_MAX = 1_000_000 * (STACK_ENTRY.size + 8 * 32)
# The most bpf-records.bin is read of: 38 million records, a minute of the busiest recording
# (twice the default --max-size)
RECORDS_MAX = 4 << 30
EFAULT = 14  # a user stack's walk that found no user frames: a kernel thread has none
E2BIG = 7  # a stack that found the stack table full
KERNEL_STACK_UNREADABLE = "[kernel stack could not be read]"
USER_STACK_UNREADABLE = "[user stack could not be read]"
NOT_TAKEN = (STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN)  # the chains of a switch-out's and a waker's stacks not taken
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


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """The core's errors about the records at `path` as one-line OffcpuErrors."""
    try:
        yield
    except _core.PerfDataError as error:
        kind, what = error.args
        raise (OffcpuError(f"cannot read {path} ({what}); record it again with 'offcpu record --backend bpf'")
               if kind == "io" else damaged(path, what)) from None
    except _core.PanicException as panic:
        raise damaged(path, f"offcpu's reader failed on it: {panic}") from None


class BpfReader:
    """A CaptureReader for a capture recorded with BPF (its directory holds BPF_RECORDS): the
    records walked once by the core when it is made (a record holding what the kernel never
    gives is an OffcpuError), then paired there."""

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
        self.skipped = 0
        self.binary_notes: list[str] = []  # what stacks() found of the stacks and the mapped files
        with _reading(self.path):
            self.records = _core.BpfRecords(str(self.path))
        self.runtime: RuntimeStacks | None = runtime_frames.load(directory)

    def _samples(self) -> tuple[list[int], list[int], list[int]] | None:
        """The runtimes' samples as the core joins them to the waits: threads, times, stack ids."""
        if self.runtime is None:
            return None
        return self.runtime.tids.tolist(), self.runtime.times.tolist(), self.runtime.stack_ids.tolist()

    def pair(self, slices: list[tuple[int, int]], window: tuple[int, int], at_start: list[ThreadAtStart],
             counted: tuple[int, int], switch_cost_ns: int, on_done: Callable[[int], None] | None = None) -> Paired:
        with _reading(self.path):
            tally, skipped, names, states, chains = self.records.pair(
                slices, window, at_start, counted, switch_cost_ns, self._samples(), NOT_TAKEN, on_done)
        self.skipped = skipped
        return Paired(tally, skipped, names, states, [None, *SYNTHETIC_STACKS, *chains])

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        """Cut where equal shares of the events' times fall."""
        with _reading(self.path):
            return self.records.time_slices(start_ns, end_ns, count)

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        from offcpu.reading.symbols import Symbolizer, TaskHistory

        table = read_stack_table(self.directory / BPF_STACKS)
        snapshots = process_maps.load(self.directory)
        maps = TaskHistory.of_snapshots(snapshots or [], self.records.generation)
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
        samples = self._samples()
        assert samples is not None
        with _reading(self.path):
            counts = {pid: (waits, joined) for pid, waits, joined in
                      self.records.runtime_counts(samples, RUNTIME_NOTED_NS)}
        notes = []
        for process in self.runtime.processes:
            runtime = printable(f"{process.runtime} {process.version}" if process.version else process.runtime)
            error, reader = printable(process.error or ""), printable(process.reader)
            if process.error is not None and process.reads == process.failed:
                notes.append(f"{runtime} was found in process {process.pid}, but its frames could not be read with "
                             f"{reader}: {error}; its stacks are native only")
                continue
            mine, carry = counts.get(process.pid, (0, 0))
            failed = f" ({process.failed:,} of its {process.reads:,} reads failed: {error})" if process.failed else ""
            interval_ms = process.interval_ms or self.runtime.interval_ms
            notes.append(f"{printable(LANGUAGES.get(process.runtime, process.runtime))} frames of process "
                         f"{process.pid} ({runtime}) were read with {reader} every {interval_ms} ms{failed}: "
                         f"{carry:,} of {mine:,} waits of {RUNTIME_NOTED_NS // 1_000_000} ms or "
                         "more carry them; the others' stacks are native only")
        return notes

    def _unseen_switches_note(self) -> list[str]:
        """How many switches the tracepoint did not report, and what that changed, in a sentence
        (none when none)."""
        since, back, waits, ns = self.records.estimated()
        unseen = since + back
        if not unseen:
            return []
        one = waits == 1
        ms = ns / 1e6
        return [f"the kernel did not report {unseen:,} of the threads' switches to offcpu: the "
                f"{'wait' if one else f'{waits:,} waits'} {'it' if unseen == 1 else 'they'} began or ended "
                f"({ms:,.1f} ms off CPU{'' if one else ' in all'}) {'was' if one else 'were'} timed from the threads' "
                "time on CPU as the kernel counts it instead, so every thread's total stays whole"]

    def _process_name(self, pid: int) -> str:
        """A process as 'pid (name)', by its main thread's last name recorded (else any thread's)."""
        name = self.records.process_name(pid)
        return str(pid) if name is None else f"{pid} ({printable(name)})"

    def _unreadable_note(self, table: dict[int, tuple[int, ...]]) -> list[str]:
        """How many stacks taken could not be read, in a sentence (none when all could)."""
        taken_by_id = dict(self.records.taken_stacks())
        taken = sum(taken_by_id.values())
        failed = taken - sum(count for stack_id, count in taken_by_id.items() if stack_id >= 0 and stack_id in table)
        if not failed:
            return []
        full = taken_by_id.get(-E2BIG, 0)
        why = [f"{full:,} found the stack table full: record fewer processes, or for less time"] if full else []
        why += [f"the walk of {failed - full:,} failed"] if failed > full else []
        return [f"{failed:,} of the {taken:,} stacks taken could not be read "
                f"({'; '.join(why)}): they are shown as [kernel stack could not be read] or [user stack could not "
                "be read]"]


def stack_of(chain: Chain, table: dict[int, tuple[int, ...]], symbolizer: Symbolizer,
           runtime: RuntimeNames | None = None) -> Stack:
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
