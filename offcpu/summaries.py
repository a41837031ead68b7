"""The totals and tables reports show, computed from the model: pure functions,
no formatting."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from offcpu.model import Model, WaitTimes

PERCENTILES = (50, 90, 99)
# Over this share of the events perf recorded left unread, no number can be trusted.
UNREADABLE_BOUND = 0.001


@dataclass(frozen=True)
class Totals:
    wall_us: int
    offcpu_us: int
    blocked_us: int
    runqueue_us: int
    threads: int


@dataclass(frozen=True)
class Observer:
    """perf's own cost: the time its handling of the recorded switches took, which the kernel
    charges to the threads coming in, so that it is part of their time on CPU (never of
    their waits)."""

    us: int
    share: float  # of the threads' time in the window (on CPU plus off CPU, summed), 0-1
    estimated_switch_ins: int  # switch-ins placed by the capture's measured switch cost
    switch_cost_ns: int | None  # that cost, of one switch (None: not measured)


# From this share of the threads' time, perf's own cost is worth a note with what to do.
OBSERVER_NOTE_FROM = 0.03


@dataclass(frozen=True)
class StateTotal:
    state: str
    offcpu_us: int
    blocked_us: int
    runqueue_us: int
    count: int


@dataclass(frozen=True)
class WakerPair:
    """Who woke whom: a waker (thread, interrupt or idle) and the thread it woke."""

    waker_kind: str
    waker_comm: str
    waker_tid: int
    wakee_comm: str
    wakee_tid: int
    wakeups: int
    blocked_us: int  # how long the wakee had waited for these wakeups
    runqueue_us: int  # and then waited for a CPU


@dataclass(frozen=True)
class Lifecycle:
    created: int
    exited: int
    created_per_s: float
    median_life_us: int | None  # of threads both created and exited in the window


def several_processes(model: Model) -> bool:
    """Whether the model's threads belong to more than one process (then tables say which)."""
    return len({thread.pid for thread in model.threads.values()}) > 1


def totals(model: Model) -> Totals:
    threads = model.threads.values()
    return Totals(model.wall_us, sum(t.offcpu_us for t in threads), sum(t.blocked_us for t in threads),
                  sum(t.runqueue_us for t in threads), len(model.threads))


def observer(model: Model) -> Observer:
    threads = model.threads.values()
    whole = sum(t.oncpu_us + t.offcpu_us for t in threads)
    us = sum(t.observer_us for t in threads)
    return Observer(us, us / whole if whole else 0.0, model.estimated_switch_ins, model.capture.switch_cost_ns)


def by_state(model: Model) -> list[StateTotal]:
    """Off-CPU time per switch-out state, most first."""
    sums: dict[str, WaitTimes] = defaultdict(WaitTimes)
    for row in model.rows:
        sums[row.state].add_times(row)
    return sorted((StateTotal(state, times.offcpu_us, times.blocked_us, times.runqueue_us, times.count)
                   for state, times in sums.items()), key=lambda s: -s.offcpu_us)


def waker_pairs(model: Model) -> list[WakerPair]:
    """Recorded wakeups grouped by waker and wakee thread, longest blocked first."""
    sums: dict[tuple[str, str, int, int], WaitTimes] = defaultdict(WaitTimes)
    for row in model.rows:
        if row.waker is None or model.wakers[row.waker].kind == "unrecorded":
            continue
        waker = model.wakers[row.waker]
        sums[(waker.kind, waker.comm, waker.tid, row.tid)].add_times(row)
    pairs = [WakerPair(kind, comm, tid, model.threads[wakee].comm, wakee, times.count, times.blocked_us,
                       times.runqueue_us) for (kind, comm, tid, wakee), times in sums.items()]
    return sorted(pairs, key=lambda pair: -pair.blocked_us)


def runqueue_percentiles(model: Model) -> dict[int, int]:
    """Wakeup-to-run delay (µs) at each percentile, over every wakeup seen with the run after it."""
    delays = sorted(model.runqueue_delays_us.items())
    count = sum(n for _, n in delays)
    if not count:
        return {}
    result = {}
    for percentile in (*PERCENTILES, 100):
        rank = max(1, -(-percentile * count // 100))  # nearest-rank method
        seen = 0
        for delay, n in delays:
            seen += n
            if seen >= rank:
                result[percentile] = delay
                break
    return result


def lifecycle(model: Model) -> Lifecycle:
    threads = model.threads.values()
    created = [t for t in threads if t.created_ns is not None]
    exited = [t for t in threads if t.exited_ns is not None]
    lives = [(t.exited_ns - t.created_ns) // 1000 for t in created if t.exited_ns is not None and t.created_ns]
    window_s = (model.window_end_ns - model.window_start_ns) / 1e9
    return Lifecycle(len(created), len(exited), len(created) / window_s if window_s else 0.0,
                     round(statistics.median(lives)) if lives else None)


def untrusted(model: Model) -> bool:
    """Whether so much of perf.data could not be read (over UNREADABLE_BOUND of its events) that
    no number can be trusted: reports lead with it, and a check cannot check."""
    return model.unreadable_share > UNREADABLE_BOUND


def unreadable_note(model: Model) -> str | None:
    """How much of perf.data could not be read, in a sentence; None when all of it was read."""
    if not model.unreadable_events:
        return None
    said = (f"{model.unreadable_events:,} of the {model.recorded_events:,} events perf recorded "
            f"({model.unreadable_share:.1%}) could not be read and are left out")
    if not untrusted(model):
        return said
    return (f"{said}, so these numbers cannot be trusted: this perf.data (perf {model.capture.perf_version}) holds "
            "what offcpu cannot read; report it to offcpu with the capture")


def caveats(model: Model) -> list[str]:
    """What makes the numbers less than whole, in sentences, for the reports to lead with
    (after the warning that they cannot be trusted, when they cannot: see untrusted)."""
    said = [*model.lacks, *([model.capture.lost_note] if model.capture.lost_note else [])]
    cost = observer(model)
    if cost.share >= OBSERVER_NOTE_FROM:
        said.append(f"perf's handling of the switches took {cost.share:.1%} of the threads' time (counted as time "
                    "on CPU, as the kernel does, not as waiting); on a program that switches this often, record "
                    "for less time, with --call-graph fp rather than dwarf, and compare with an unrecorded run")
    said += model.binary_notes
    unread = unreadable_note(model)
    return said + ([unread] if unread and not untrusted(model) else [])
