"""The scheduler events a capture holds, as every reader hands them to the engine.

A reader (perf script's text, or perf.data read directly) decodes a capture
into calls on an EventSink, in time order, and knows how to turn the call
chains it handed over into frames afterwards. Call chains travel as opaque,
hashable keys (the raw text perf script printed, or the raw addresses of
perf.data): the engine counts time per chain first, and the reader names
only the distinct chains, once each, at the end.

Times are CLOCK_MONOTONIC nanoseconds (perf.data's clock); a pid is a process
(thread group) id and a tid a thread id; tid 0 is a CPU's idle task.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Protocol

from offcpu.stacks import Stack

Chain = Hashable  # a call chain as its reader keeps it; () or "" when the event has none
UNKNOWN_CPU = -1  # the CPU of a record perf wrote without one (a task-bound recording without --sample-cpu)


class EventSink(Protocol):
    """What the engine does with each event. Readers call these in time order."""

    def sched_switch(self, time_ns: int, cpu: int, pid: int, tid: int, prev_comm: str, prev_state: str,
                     next_tid: int, chain: Chain) -> None:
        """sched:sched_switch, on `cpu`, in the context of the thread leaving it (`tid`, of process
        `pid`): its name, its state as perf prints prev_state without a trailing '+' ("S",
        "D", "R", "X", ...), the thread coming in (0: the idle task) and the leaving
        thread's call chain."""

    def sched_waking(self, time_ns: int, pid: int, tid: int, comm: str, woken_tid: int, chain: Chain) -> None:
        """sched:sched_waking (or sched_wakeup), in the waker's context: the waker (`tid`;
        0 when the idle task woke it, from an interrupt), its name, the thread it woke and
        the waker's call chain."""

    def switch_in(self, time_ns: int, cpu: int, pid: int, tid: int, comm: str) -> None:
        """PERF_RECORD_SWITCH(_CPU_WIDE) IN: `tid` is back on `cpu` (perf writes it once the
        switch is done, in the incoming thread's context)."""

    def switch_out(self, time_ns: int, cpu: int, pid: int, tid: int, preempt: bool) -> None:
        """PERF_RECORD_SWITCH(_CPU_WIDE) OUT: `tid` is leaving `cpu` (perf writes it after
        the sched_switch tracepoint's sample, just before the switch); `preempt` when it
        was still runnable."""

    def fork(self, time_ns: int, pid: int, tid: int, ppid: int, ptid: int) -> None:
        """PERF_RECORD_FORK: thread `tid` of process `pid` was created by `ptid` of `ppid`."""

    def exit(self, time_ns: int, cpu: int, pid: int, tid: int) -> None:
        """PERF_RECORD_EXIT: thread `tid` of process `pid` exited, on `cpu` (perf writes it in the
        exiting thread, and records nothing of the thread after it)."""

    def comm(self, time_ns: int, pid: int, tid: int, comm: str, exec: bool) -> None:
        """PERF_RECORD_COMM: `tid` took the name `comm` (`exec`: by exec'ing a program)."""


class CaptureReader(Protocol):
    """Decodes one perf.data. `name` says which reader it is ("native", "perf-script")."""

    name: str
    skipped: int  # how many events (records) could not be decoded, left out and counted

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None:
        """Every event in time order into `sink`; with `time_slice` (first, last ns, both
        included), at least the samples in it: records outside it may come too, and the
        sink leaves out what it does not want."""

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        """`count` consecutive slices of start_ns..end_ns (both included) that hold about as
        many events each, as far as the reader can tell, for workers to read in parallel."""

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        """The frames of each chain handed to a sink, named once each."""
