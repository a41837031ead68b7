"""The totals and tables reports show, computed from the model: pure functions,
no formatting."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from offcpu.kinds import kind_of, lost_note
from offcpu.model import Model, Thread, WaitTimes
from offcpu.model.wakeups import cause_of_waker

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
    their waits). It is said against that time on CPU, not their whole time: threads that
    wait most of the time lose little of their whole time to perf, but work bound by their
    CPU time gets that much less of it done. What perf does elsewhere (its stack walks at
    the wakeups, in the wakers' time; its own process writing perf.data) is not in it, so
    it is the least a recording costs."""

    us: int
    oncpu_us: int  # the threads' time on CPU, summed; `us` is part of it
    share_of_oncpu: float  # us / oncpu_us, 0-1
    estimated_switch_ins: int  # switch-ins placed by the capture's measured switch cost
    switch_cost_ns: int | None  # that cost, of one switch (None: not measured)

    @property
    def said(self) -> str:
        """'12.7 ms, 5.3% of their time on CPU (work bound by it: at least 5.3% slower while recorded)'."""
        return (f"{self.us / 1000:,.1f} ms, {self.share_of_oncpu:.1%} of their time on CPU (work bound by it: at "
                f"least {self.share_of_oncpu:.1%} slower while recorded)")


# From this share of the threads' time on CPU, perf's own cost is worth a note with what to do.
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
    """Who woke whom: a thread and the thread it woke, or what else ended the wakee's waits
    (a timer, a device, the network or another interrupt) in whichever thread it came."""

    waker_kind: str  # Waker.kind: "thread", "interrupt" or "idle"
    waker_comm: str  # "" when not a thread
    waker_tid: int  # 0 when not a thread
    wakee_comm: str
    wakee_tid: int
    wakeups: int
    blocked_us: int  # how long the wakee had waited for these wakeups
    runqueue_us: int  # and then waited for a CPU
    ended_by: str = ""  # not a thread: what ended the waits (waits.TIMER, DEVICE, NETWORK or INTERRUPT)


@dataclass(frozen=True)
class Lifecycle:
    created: int
    exited: int
    created_per_s: float
    median_life_us: int | None  # of threads both created and exited in the window


def several_processes(model: Model) -> bool:
    """Whether the model's threads belong to more than one process (then tables say which)."""
    return len({thread.pid for thread in model.threads.values()}) > 1


def thread_names(model: Model, threads: Sequence[Thread]) -> list[str]:
    """Each of `threads` by name, as the threads tables show it: its comm, or where threads of
    several processes share that comm (PostgreSQL's backends are all `postgres`), its process's
    title when the recording kept one (capture.json's process_titles)."""
    processes = defaultdict(set)
    for thread in model.threads.values():
        processes[thread.comm].add(thread.pid)
    titles = model.capture.process_titles
    return [titles.get(str(thread.pid), thread.comm) if len(processes[thread.comm]) > 1 else thread.comm
            for thread in threads]


def totals(model: Model) -> Totals:
    threads = model.threads.values()
    return Totals(model.wall_us, sum(t.offcpu_us for t in threads), sum(t.blocked_us for t in threads),
                  sum(t.runqueue_us for t in threads), len(model.threads))


def observer(model: Model) -> Observer:
    threads = model.threads.values()
    oncpu = sum(t.oncpu_us for t in threads)
    us = sum(t.observer_us for t in threads)
    return Observer(us, oncpu, us / oncpu if oncpu else 0.0, model.estimated_switch_ins,
                    model.capture.switch_cost_ns)


def by_state(model: Model) -> list[StateTotal]:
    """Off-CPU time per switch-out state, most first."""
    sums: dict[str, WaitTimes] = defaultdict(WaitTimes)
    for row in model.rows:
        sums[row.state].add_times(row)
    return sorted((StateTotal(state, times.offcpu_us, times.blocked_us, times.runqueue_us, times.count)
                   for state, times in sums.items()), key=lambda s: -s.offcpu_us)


def waker_pairs(model: Model) -> list[WakerPair]:
    """Recorded wakeups grouped by waker and wakee thread, longest blocked first. A wakeup
    from an interrupt (or the idle task) is grouped by what it was, a timer's expiry or a
    device's, not by the thread it happened to interrupt: that thread woke no one."""
    sums: dict[tuple[str, str, int, int, str], WaitTimes] = defaultdict(WaitTimes)
    for row in model.rows:
        if row.waker is None or model.wakers[row.waker].kind == "unrecorded":
            continue
        waker = model.wakers[row.waker]
        if waker.kind == "thread":
            sums[(waker.kind, waker.comm, waker.tid, row.tid, "")].add_times(row)
        else:
            ended_by = cause_of_waker(waker, model.stacks[waker.stack], same_service=False)
            sums[(waker.kind, "", 0, row.tid, ended_by)].add_times(row)
    pairs = [WakerPair(kind, comm, tid, model.threads[wakee].comm, wakee, times.count, times.blocked_us,
                       times.runqueue_us, ended_by) for (kind, comm, tid, wakee, ended_by), times in sums.items()]
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
    import statistics  # here: with fractions and decimal, 2 ms of every report's start

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
    kind = kind_of(model.capture)
    said = (f"{model.unreadable_events:,} of the {model.recorded_events:,} {kind.unreadable_units} recorded "
            f"({model.unreadable_share:.1%}) could not be read and are left out")
    if not untrusted(model):
        return said
    return (f"{said}, so these numbers cannot be trusted: {kind.unreadable_holder(model.capture)} what offcpu "
            "cannot read; report it to offcpu with the capture")


def sampling_note(model: Model) -> str | None:
    """How many waits carry a stack, when their stacks were sampled (None when all do)."""
    if not model.sampled:
        return None
    return (f"stacks were taken for {model.stacked_waits:,} of the {model.waits:,} waits, a sample that keeps the "
            "recording's cost down (--stack-budget): the time shown per stack is an estimate, ± one standard error; "
            "each thread's time is exact")


@dataclass(frozen=True)
class Caveat:
    """A sentence the reports lead with, on what the numbers or the stacks lack."""

    text: str
    # It changes a number the reader would act on (waits missing, times not split, the
    # recording's own cost): said as a warning (in red), the others as notes
    warns: bool


def caveats(model: Model) -> list[Caveat]:
    """What makes the numbers or the stacks less than whole, for the reports to lead with
    (after the warning that they cannot be trusted, when they cannot: see untrusted)."""
    # a command cut short: what it did after is not in the numbers
    warnings = [*model.lacks, *(note for note in (model.capture.cut_short_note, lost_note(model.capture),
                                                  model.capture.spin_note) if note)]
    cost = observer(model)
    if cost.share_of_oncpu >= OBSERVER_NOTE_FROM:
        warnings.append(f"perf's handling of the switches took {cost.share_of_oncpu:.1%} of the threads' time on "
                        "CPU, and its stack walks at wakeups and its own process take more: throughput bound by "
                        "their CPU time is lower by at least as much while recording; on a program that switches "
                        "this often, record for less time, with --call-graph fp rather than dwarf, and compare with "
                        "an unrecorded run")
    unread = unreadable_note(model)
    if unread and not untrusted(model):
        warnings.append(unread)
    notes = [note for note in [sampling_note(model), *model.binary_notes] if note]
    if model.asleep_threads:
        one = model.asleep_threads == 1
        notes.append(f"{model.asleep_threads:,} thread{'' if one else 's'} did not run during the recording: "
                     f"{'its stack is the one it' if one else 'their stacks are those they'} slept in at its end, "
                     "read from the live process")
    return [*(Caveat(text, True) for text in warnings), *(Caveat(text, False) for text in notes)]
