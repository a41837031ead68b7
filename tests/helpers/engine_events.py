"""Small event sequences in the engine's own form (events handed to its sink one at a time),
paired and made a model; times are microseconds from the window's start (the helpers turn them
into nanoseconds). Thread 11 and 12 are threads of process 10; tid 0 is the idle task."""

from __future__ import annotations

from collections.abc import Iterable

from offcpu.capture import CaptureInfo, Target
from offcpu.model import Model
from offcpu.model.engine import to_model
from offcpu.reading.pairing import Decoded, Paired, ThreadAtStart, pair_pieces
from offcpu.reading.sched_events import SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, THREAD_EXIT, UNKNOWN_CPU, Chain, Events
from offcpu.stacks import STACK_NOT_TAKEN, Stack

US = 1000
WINDOW_US = 10_000
CPU = 0


class NamedChains:
    """The reader's half the engine needs after counting: chains here are frame names
    joined by ';', leaf first, all of them the kernel's."""

    name = "test"
    skipped = 0

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        return {chain: Stack(tuple(str(chain).split(";")), len(str(chain).split(";"))) for chain in chains}


def info(switch_cost_ns: int | None = None) -> CaptureInfo:
    return CaptureInfo(target=Target("pid", "test", pid=10), perf_command=[], kernel_release="", perf_version="",
                       cpus=2, call_graph="fp", events=[], events_skipped=[], duration_requested_s=0.01,
                       schedstats="absent", limits=None, window_start_ns=0, window_end_ns=WINDOW_US * US,
                       switch_cost_ns=switch_cost_ns)


class Feed:
    """A slice's events, handed over one at a time, for the core to pair; counting the part of
    the window `counted` (None: all of it, unbounded)."""

    def __init__(self, switch_cost_us: int, counted: tuple[int, int] | None = None) -> None:
        self.switch_cost_ns, self.counted = switch_cost_us * US, counted
        self.builder = Decoded(0, WINDOW_US * US)

    def _one(self, *event: object, weight: int | None = None) -> None:
        """`weight`: the event's, as a sampling backend gives it (None: none, as perf's readers)."""
        events = Events.of([event])  # type: ignore[list-item]
        if weight is not None:
            events.weights = [weight]
        self.builder.take(events)

    def sched_switch(self, time_ns: int, cpu: int, pid: int, tid: int, prev_comm: str, prev_state: str,
                     next_tid: int, chain: Chain, weight: int | None = None) -> None:
        chain = STACK_NOT_TAKEN if weight == 0 else chain  # as the BPF reader gives a wait without a stack
        self._one(SCHED_SWITCH, time_ns, cpu, pid, tid, next_tid, prev_comm, prev_state, chain, weight=weight)

    def sched_waking(self, time_ns: int, pid: int, tid: int, comm: str, woken_tid: int, chain: Chain) -> None:
        self._one(SCHED_WAKING, time_ns, UNKNOWN_CPU, pid, tid, woken_tid, comm, "", chain)

    def switch_in(self, time_ns: int, cpu: int, pid: int, tid: int, comm: str) -> None:
        self._one(SWITCH_IN, time_ns, cpu, pid, tid, 0, comm, "", None)

    def exit(self, time_ns: int, cpu: int, pid: int, tid: int) -> None:
        self._one(THREAD_EXIT, time_ns, cpu, pid, tid, 0, "", "", None)


def paired(events: Feed, pieces: list[Decoded], at_start: list[ThreadAtStart] | None = None) -> Paired:
    return pair_pieces(pieces, (0, WINDOW_US * US), at_start or [], events.counted, events.switch_cost_ns)


def model(events: Feed, switch_cost_ns: int | None = None) -> Model:
    """`switch_cost_ns`: the capture's, as capture.json says it."""
    return to_model(paired(events, [events.builder]), NamedChains(), info(switch_cost_ns),  # type: ignore[arg-type]
                    0, WINDOW_US * US)


def builder(switch_cost_us: int = 0) -> Feed:
    return Feed(switch_cost_us)


def switch(events: Feed, at_us: int, prev: int, state: str, next_tid: int, chain: str,
           in_after_us: int = 0, cpu: int = CPU, weight: int | None = None) -> None:
    """sched_switch from `prev` to `next_tid` (the wait it begins of `weight`, when sampled),
    then perf's record of `next_tid` being in."""
    events.sched_switch(at_us * US, cpu, 10 if prev else 0, prev, f"t{prev}", state, next_tid, chain, weight)
    if next_tid:
        events.switch_in((at_us + in_after_us) * US, cpu, 10, next_tid, f"t{next_tid}")


def row_of(result: Model, tid: int, stack: str):  # type: ignore[no-untyped-def]
    [row] = [row for row in result.rows if row.tid == tid and ";".join(result.stacks[row.stack].frames) == stack]
    return row
