"""Reading perf.data directly, in the compiled core (offcpu._core.PerfData, core/src/perf/):
its records decoded in the order and with the values `perf script` shows
(offcpu.reading.perf_script.script_argv), and paired there, a time slice in each of the core's threads,
with no event handed to Python (read() hands them over, to compare with perf script).

A call chain is the raw bytes of its u64 addresses, with the process and its exec generation
when it holds user addresses (their meaning depends on the process's memory maps);
symbols.Symbolizer names each distinct chain once, after the engine has counted time per chain.

The core walks every record header once, when the file is first read: a time slice then decodes
only its own rounds, and the task records (names, forks, exits, maps) of the whole file are known
whichever slice they are in. This is the one module that opens perf.data in the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from offcpu import _core
from offcpu.errors import OffcpuError
from offcpu.reading.pairing import SYNTHETIC_STACKS, Paired, ThreadAtStart
from offcpu.reading.sched_events import Chain, Events, EventSink
from offcpu.stacks import Stack


def damaged(path: Path, what: str) -> OffcpuError:
    return OffcpuError(f"{path} is not a readable perf.data ({what}); record it again with 'offcpu record'")


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """The core's errors about `path` as one-line OffcpuErrors; a panic of the core too (a crate's
    assertion on a file it did not expect), which is no finding."""
    try:
        yield
    except _core.PerfDataError as error:
        kind, what = error.args
        raise (OffcpuError(f"cannot read {path}: {what}") if kind == "io" else damaged(path, what)) from None
    except _core.PanicException as panic:
        raise damaged(path, f"offcpu's reader failed on it: {panic}") from None


def open_perf_data(path: Path) -> _core.PerfData:
    """The perf.data at `path`, its header read; an OffcpuError when it is not one."""
    with reading(path):
        return _core.PerfData(str(path))


def unsupported(path: Path) -> str | None:
    """Why the native reader cannot read `path` as perf script would (one sentence for
    the report; read it with perf script instead), or None when it can. A file that
    is not a readable perf.data at all raises OffcpuError."""
    return open_perf_data(path).unsupported()


class NativeReader:
    """A CaptureReader for perf.data written by `offcpu record` (see unsupported())."""

    name = "native"

    def __init__(self, path: Path, kernel_symbols: Path | None = None, vdso: Path | None = None) -> None:
        data = open_perf_data(path)
        reason = data.unsupported()
        if reason is not None:
            raise OffcpuError(f"cannot read {path} directly: {reason}")
        self.path = path
        self.kernel_symbols = kernel_symbols
        self.vdso = vdso
        with reading(path):
            self.skipped = data.unknown_records()
        self.binary_notes: list[str] = []  # what stacks() found of the mapped files (symbols.Symbolizer.notes)
        self.data = data

    def pair(self, slices: list[tuple[int, int]], window: tuple[int, int], at_start: list[ThreadAtStart],
             counted: tuple[int, int], switch_cost_ns: int, on_done: Callable[[int], None] | None = None) -> Paired:
        with reading(self.path):
            tally, skipped, names, states, chains = self.data.pair(slices, window, at_start, counted,
                                                                   switch_cost_ns, on_done)
        return Paired(tally, skipped, names, states, [None, *SYNTHETIC_STACKS, *chains])

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None:
        def take(*columns: list) -> None:
            sink.take(Events(*columns))

        with reading(self.path):
            self.skipped += self.data.read(take, time_slice)

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        with reading(self.path):
            return self.data.time_slices(start_ns, end_ns, count)

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        from offcpu.reading.symbols import Symbolizer, TaskHistory  # ELF and demangling: only when chains are named

        with reading(self.path):
            history = TaskHistory.replay(self.data.task_records())
        symbolizer = Symbolizer.of_perf_data(self.data.build_ids(), history, self.kernel_symbols, self.vdso)
        named = {chain: symbolizer.stack(chain) for chain in chains}
        self.binary_notes = symbolizer.notes
        return named
