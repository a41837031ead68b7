"""The scheduler events a capture holds, as every reader hands them to the engine.

A reader (perf script's text, BPF records, or perf.data read directly) decodes a
capture into batches of events (Events), in time order, handed to an EventSink one
batch at a time; has them paired by the compiled core (offcpu.reading.pairing, whose
CaptureReader says what a reader offers; the native reader's events never leave the core);
and knows how to turn the call chains into frames afterwards. A batch is a set of columns,
one entry per event: a capture holds millions of events, and columns travel in bulk where a
call per event would cost more than the work on it.

Call chains travel as opaque, hashable keys (the raw text perf script printed,
or the raw addresses of perf.data): the engine counts time per chain first,
and the reader names only the distinct chains, once each, at the end.

Times are CLOCK_MONOTONIC nanoseconds (perf.data's clock); a pid is a process
(thread group) id and a tid a thread id; tid 0 is a CPU's idle task.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from offcpu import _core

Chain = Hashable  # a call chain as its reader keeps it; () or "" when the event has none
# The CPU of a record perf wrote without one (a task-bound recording without --sample-cpu)
UNKNOWN_CPU = _core.UNKNOWN_CPU

# The kinds of event (Events.kinds), as the core's engine numbers them:
SCHED_SWITCH = _core.SCHED_SWITCH  # sched:sched_switch, in the context of the thread leaving the CPU
SCHED_WAKING = _core.SCHED_WAKING  # sched:sched_waking (or sched_wakeup), in the waker's context
# PERF_RECORD_SWITCH(_CPU_WIDE) IN: perf writes it once a switch is done, in the thread coming in
SWITCH_IN = _core.SWITCH_IN
# PERF_RECORD_SWITCH(_CPU_WIDE) OUT: after the sched_switch tracepoint's sample, just before the switch
SWITCH_OUT = _core.SWITCH_OUT
THREAD_FORK = _core.THREAD_FORK  # PERF_RECORD_FORK: a thread was created
# PERF_RECORD_EXIT: a thread exited (perf writes it in the exiting thread, and nothing of it after)
THREAD_EXIT = _core.THREAD_EXIT
THREAD_COMM = _core.THREAD_COMM  # PERF_RECORD_COMM: a thread took a name
KIND_NAMES = ("sched_switch", "sched_waking", "switch_in", "switch_out", "fork", "exit", "comm")
# One event as a row: kind, time, cpu, pid, tid, other, name, state, chain (see Events)
Event = tuple[int, int, int, int, int, int, str, str, "Chain | None"]


@dataclass(slots=True)
class Events:
    """Events in time order, as columns of equal length: event i is of kind kinds[i], at
    times[i], on CPU cpus[i] (UNKNOWN_CPU when perf did not record it), in thread tids[i]
    of process pids[i]. The other columns depend on the kind (0, "" or None where unused):

    - SCHED_SWITCH: tid is the thread leaving (prev_pid; pid its process), `other` the thread
      coming in (next_pid; 0: the idle task), `name` prev_comm, `state` prev_state as perf
      prints it without a trailing '+' ("S", "D", "R", "X", ...), `chain` the leaving
      thread's call chain.
    - SCHED_WAKING: tid is the waker (0 when the idle task woke it, from an interrupt),
      `other` the thread it woke, `name` the waker's name, `chain` the waker's call chain.
    - SWITCH_IN: tid is back on the CPU; `name` is its name.
    - SWITCH_OUT: tid is leaving the CPU; `other` is 1 when it was preempted (still runnable).
    - THREAD_FORK: tid (of process pid) was created by thread `other`.
    - THREAD_EXIT: tid (of process pid) exited.
    - THREAD_COMM: tid took the name `name`; `other` is 1 when by exec'ing a program.

    `weights` is empty when every wait's stack was taken (perf's readers). A backend that
    takes the stacks of a sample of waits gives one entry per event, of which only a
    SCHED_SWITCH's means something: the weight of the wait it begins. w >= 1: the wait's
    stack was taken with probability 1/w, and its stack's times count it w times before
    they are scaled to its stratum's (offcpu.model.sampling); 0: its stack was not taken, and
    the wait counts in its thread's totals (which stay exact) and its stratum's.
    """

    kinds: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    cpus: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    others: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    chains: list[Chain | None] = field(default_factory=list)
    # How many waits each event stands for, where the recording sampled stacks (a BPF
    # recording: a sched_switch of a wait whose stack was taken with probability 2^-s weighs
    # 2^s, one whose stack was not taken 0); empty: every event weighs 1.
    weights: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, rows: list[Event]) -> Events:
        """The events of these rows, for readers that decode one event at a time (a tuple
        each: a call per event to add to nine columns costs several times more)."""
        return cls(*map(list, zip(*rows, strict=True))) if rows else cls()

    def __len__(self) -> int:
        return len(self.kinds)

    def rows(self) -> Iterator[Event]:
        """Each event as a row: what the sinks' loops unpack (a tuple per event is what
        makes them fast)."""
        return zip(self.kinds, self.times, self.cpus, self.pids, self.tids, self.others, self.names, self.states,
                   self.chains, strict=True)


class EventSink(Protocol):
    """What the engine does with the events. Readers hand them over in time order."""

    def take(self, events: Events) -> None:
        """The next batch of events (a reader chooses how many: a round of perf.data, a
        chunk of perf script's text)."""
