"""From a capture to the off-CPU model.

A thread is off CPU from its switch-out to its next switch-in, both placed
where the kernel switches: at sched_switch, which fires as the scheduler has
picked the next thread and gives the leaving thread's stack and state. A
thread comes back at the sched_switch that names it as next; when the thread
that left was not recorded (the idle task, another process), perf's record of
the switch-in, less the switch's cost measured in the capture, says when. The
time perf spends between the switch and its record of it (walking stacks,
writing samples) is charged by the kernel to the thread coming in: it counts
as that thread's time on CPU, and is shown apart as the observer's cost,
never as waiting. The wakeup in between, recorded in the waker's context with
the waker's stack, splits the time off CPU into blocked time and run-queue
delay. This needs sched_switch alone, so it works on kernels without
schedstats.

Reading is the slow step, so the window is cut into time slices read in
parallel. Each slice is a small state machine over its own events; waits that
cross a slice boundary leave a tail in one slice and a head in the next, and
the merge joins them, so a slice never needs another slice's events.
"""

from __future__ import annotations

import gc
import heapq
import os
import signal
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context

from offcpu.capture import CaptureInfo
from offcpu.model import (
    BEFORE_WINDOW,
    NEW_THREAD,
    PREEMPTED,
    STACK_LOST,
    SUB_WINDOWS,
    UNKNOWN_STATE,
    WAKER_NOT_RECORDED,
    Link,
    Model,
    Row,
    Thread,
    TimedWait,
    WaitTimes,
    Waker,
)
from offcpu.sampling import MergedKey, SampledRows, Stratum, StratumKey, scale_to_strata, stratum_of
from offcpu.sched_events import (
    SCHED_SWITCH,
    SCHED_WAKING,
    SWITCH_IN,
    SWITCH_OUT,
    THREAD_EXIT,
    THREAD_FORK,
    UNKNOWN_CPU,
    CaptureReader,
    Chain,
    Event,
    Events,
)
from offcpu.stacks import Stack
from offcpu.workers import end_with_parent

DEAD_STATES = ("X", "Z")
INTERRUPT_FRAMES = ("asm_sysvec_", "asm_common_interrupt", "handle_softirqs", "__irq_exit_rcu", "irq_exit")
SYNTHETIC_STACKS = (BEFORE_WINDOW, NEW_THREAD, WAKER_NOT_RECORDED, STACK_LOST)
# How many of a thread's last waits are kept to see what it was waiting for while a
# thread it then woke was waiting for it.
HISTORY = 256
# How many of the longest waits are kept with their times, for a timeline (report perfetto):
# the model keeps sums, and a wait's times only for these.
TIMELINE_WAITS = 4096

UNBOUNDED = 1 << 63  # what a tally counts up to when it counts everything
NO_ROW = -1  # the row number in a thread's history of a wait that has no row (its stack was not taken)
# pid, tid, comm, call chain (as the reader keeps it)
WakerKey = tuple[int, int, str, Chain]
# The key a wait is counted under: tid, call chain (or a synthetic stack), state, waker
RowKey = tuple[int, Chain, str, WakerKey | None]
# The waker of a wait that ended with no wakeup recorded
UNRECORDED_WAKER: WakerKey = (-1, -1, "", WAKER_NOT_RECORDED)


@dataclass(slots=True)
class Wait:
    """A thread off CPU and not yet back."""

    since_ns: int
    stack: Chain  # as the reader keeps it, or one of SYNTHETIC_STACKS
    state: str
    woken_ns: int | None = None
    waker: WakerKey | None = None
    ran_ns: int | None = None  # when the thread came on CPU before it left (None: not in the slice)
    # 1: its stack was taken (perf takes every one); w > 1: taken with probability 1/w, so its
    # row counts it w times; 0: not taken, so it counts in its thread's totals and its stratum only
    weight: int = 1

    def woken(self, time_ns: int, waker: WakerKey) -> None:
        if self.woken_ns is None and self.state != PREEMPTED:
            self.woken_ns, self.waker = time_ns, waker


@dataclass(slots=True)
class Overlap:
    """How long waits of one row overlapped waits of their waker's other row, and how often."""

    ns: int = 0
    count: int = 0

    def __reduce__(self) -> tuple:
        return Overlap, (self.ns, self.count)  # tens of thousands travel from each worker: half the time of the default


@dataclass(slots=True)
class ThreadTotals:
    pid: int | None  # None until an event of the thread's own says which process it is in
    comm: str
    oncpu_ns: int = 0
    offcpu_us: int = 0
    blocked_us: int = 0
    runqueue_us: int = 0
    observer_ns: int = 0
    created_ns: int | None = None
    exited_ns: int | None = None

    def add(self, other: ThreadTotals) -> None:
        self.pid = self.pid if other.pid is None else other.pid
        self.comm = self.comm if other.comm == "?" else other.comm
        self.oncpu_ns += other.oncpu_ns
        self.offcpu_us += other.offcpu_us
        self.blocked_us += other.blocked_us
        self.runqueue_us += other.runqueue_us
        self.observer_ns += other.observer_ns
        self.created_ns = self.created_ns if other.created_ns is None else other.created_ns
        self.exited_ns = self.exited_ns if other.exited_ns is None else other.exited_ns


@dataclass
class Tally:
    """Everything that adds up across slices, of the time between `counted_from_ns` and
    `counted_to_ns`: a report of part of a recording reads the events from the start
    (what each thread was doing when the part begins), and counts only that part.
    Rows are numbered in the order they were first counted: links and each thread's
    history name rows by number (ints hash and travel from the workers at a fraction
    of the cost of the keys)."""

    counted_from_ns: int = 0
    counted_to_ns: int = UNBOUNDED
    row_numbers: dict[RowKey, int] = field(default_factory=dict)  # rows of waits of weight 1 (see Wait)
    # A sampling backend's rows of waits of weight w > 1, apart from those of weight 1: only their
    # estimates are scaled to the strata (offcpu.sampling)
    weighted_numbers: dict[RowKey, int] = field(default_factory=dict)
    rows: list[WaitTimes] = field(default_factory=list)  # by row number
    # By row number: its off-CPU time in each of SUB_WINDOWS equal parts of what is counted
    # (none when that is unbounded), for the spread of the findings' shares over time
    by_window: list[list[int]] = field(default_factory=list)
    links: dict[tuple[int, int], Overlap] = field(default_factory=dict)  # waiter's row, waker's row
    threads: dict[int, ThreadTotals] = field(default_factory=dict)
    runqueue_delays_us: Counter[int] = field(default_factory=Counter)
    clipped: int = 0
    unseen_wakeups: int = 0
    # Of a sampling backend's waits (Wait.weight other than 1): how many carry no stack, and how
    # many more the rows count than carry one (w - 1 for each of weight w): perf's have neither
    stackless_waits: int = 0
    stand_in_waits: int = 0
    # A sampling backend's waits of weight other than 1, each counted once, by thread, state and
    # waker: the exact times the weighted rows' estimates are scaled to (offcpu.sampling)
    strata: dict[StratumKey, Stratum] = field(default_factory=dict)
    estimated_switch_ins: int = 0
    half_recorded_switches: int = 0
    # Each thread's last waits (since, back, row number or NO_ROW, weight: tuples, one made per switch), to
    # follow a wakeup to what the waker itself waited for. Not carried across slices: a
    # wait whose waker's waits are in an earlier slice has no links.
    history: dict[int, deque[tuple[int, int, int, int]]] = field(default_factory=dict)
    # The longest waits, a heap of TIMELINE_WAITS at most: (length, since, tid, woken or None,
    # back, ran or None, row number), all in ns, as far as counted
    longest: list[tuple[int, int, int, int | None, int, int | None, int]] = field(default_factory=list)

    def thread(self, tid: int, pid: int | None = None, comm: str | None = None) -> ThreadTotals:
        thread = self.threads.get(tid)
        if thread is None:
            thread = self.threads[tid] = ThreadTotals(pid, comm or "?")
        else:
            thread.pid = pid if pid is not None else thread.pid
            thread.comm = comm or thread.comm
        return thread

    def on_cpu(self, thread: ThreadTotals, from_ns: int, to_ns: int) -> None:
        thread.oncpu_ns += self.counted(from_ns, to_ns)

    def observed(self, thread: ThreadTotals, from_ns: int, to_ns: int) -> None:
        """perf's handling of a switch to `thread`: on CPU for the kernel, the observer's cost for us."""
        thread.observer_ns += self.counted(from_ns, to_ns)

    def counted(self, from_ns: int, to_ns: int) -> int:
        """How much of from_ns..to_ns is counted."""
        if from_ns >= self.counted_from_ns and to_ns <= self.counted_to_ns:  # the usual case, first
            return to_ns - from_ns if to_ns > from_ns else 0
        return max(0, min(to_ns, self.counted_to_ns) - max(from_ns, self.counted_from_ns))

    def row_number(self, key: RowKey, weighted: bool = False) -> int:
        numbers = self.weighted_numbers if weighted else self.row_numbers
        number = numbers.get(key)
        if number is None:
            number = numbers[key] = len(self.rows)
            self.rows.append(WaitTimes())
            if self.counted_to_ns != UNBOUNDED:
                self.by_window.append([0] * SUB_WINDOWS)
        return number

    def row_keys(self) -> list[tuple[RowKey, bool]]:
        """Each row's key, and whether it counts weighted waits, by row number."""
        keys: list[tuple[RowKey, bool]] = [None] * len(self.rows)  # type: ignore[list-item]
        for weighted, numbers in ((False, self.row_numbers), (True, self.weighted_numbers)):
            for key, number in numbers.items():
                keys[number] = (key, weighted)
        return keys

    def add_to_windows(self, windows: list[int], since_ns: int, until_ns: int, offcpu: int) -> None:
        """Add a wait's `offcpu` µs to sub-windows: its usual case first, all of it in one."""
        counted_from_ns = self.counted_from_ns
        span = self.counted_to_ns - counted_from_ns
        window = (since_ns - counted_from_ns) * SUB_WINDOWS // span if span > 0 else 0
        if window >= SUB_WINDOWS - 1:
            windows[SUB_WINDOWS - 1] += offcpu
        elif until_ns <= counted_from_ns + span * (window + 1) // SUB_WINDOWS:
            windows[window] += offcpu
        else:
            self.split(windows, since_ns, until_ns, offcpu)

    def split(self, windows: list[int], since_ns: int, until_ns: int, offcpu: int, weight: int = 1) -> None:
        """Add a wait's `offcpu` µs (since_ns to until_ns, within what is counted; more than 0),
        `weight` times, to sub-windows (its row's, its stratum's). Each part is rounded at the
        edges it crosses, so the parts add up to it."""
        start_ns, span = self.counted_from_ns, self.counted_to_ns - self.counted_from_ns
        first = (since_ns - start_ns) * SUB_WINDOWS // span
        done = 0
        for window in range(first, SUB_WINDOWS):
            edge_ns = start_ns + span * (window + 1) // SUB_WINDOWS
            upto = offcpu if until_ns <= edge_ns or window == SUB_WINDOWS - 1 else round((edge_ns - since_ns) / 1000)
            windows[window] += (upto - done) * weight
            done = upto
            if done == offcpu:
                return

    def add_wait(self, tid: int, wait: Wait, back_ns: int, back_seen: bool = True) -> None:
        """Count one off-CPU interval, from `wait.since_ns` to `back_ns` (when the thread
        came back, or, not `back_seen`, the end of the recording), as far as it is counted.
        The hot path of the engine: one call per switch (no min() or max(): a call each)."""
        since_ns, until_ns = wait.since_ns, back_ns
        counted_from_ns, counted_to_ns = self.counted_from_ns, self.counted_to_ns
        if until_ns < counted_from_ns or since_ns > counted_to_ns:
            return  # all of it outside what is counted
        state = wait.state
        clipped = not back_seen or wait.stack == BEFORE_WINDOW
        if since_ns < counted_from_ns:
            since_ns, clipped = counted_from_ns, True
        if until_ns > counted_to_ns:
            until_ns, clipped = counted_to_ns, True
        offcpu = round((until_ns - since_ns) / 1000)
        woken_ns, waker = wait.woken_ns, wait.waker
        if state == PREEMPTED:
            blocked = 0
        elif woken_ns is not None:
            blocked = round((woken_ns - since_ns) / 1000)
            blocked = blocked if blocked > 0 else 0
            blocked = offcpu if offcpu < blocked else blocked
        else:
            blocked = offcpu
            self.unseen_wakeups += not clipped and state != UNKNOWN_STATE
            if back_seen:
                waker = UNRECORDED_WAKER
        runqueue = offcpu - blocked
        thread = self.threads.get(tid) or self.thread(tid)
        thread.offcpu_us += offcpu
        thread.blocked_us += blocked
        thread.runqueue_us += runqueue
        if woken_ns is not None and back_seen and counted_from_ns <= woken_ns and back_ns <= counted_to_ns:
            self.runqueue_delays_us[runqueue] += 1  # wakeup to running
        if clipped:
            self.clipped += 1
        key = (tid, wait.stack, state, waker)
        weight = wait.weight
        if not weight:  # in its stratum only: no row, no link of its own, no place in the timeline
            self.stackless_waits += 1
            self._count_in_stratum(key, since_ns, until_ns, offcpu, blocked, unsampled=True)
            self._remember(tid, since_ns, until_ns, NO_ROW, 0)
            return
        if weight != 1:
            self._count_in_stratum(key, since_ns, until_ns, offcpu, blocked, unsampled=False)
            number = self._add_sampled(key, since_ns, until_ns, offcpu, blocked, weight)
        else:
            known = self.row_numbers.get(key)
            number = self.row_number(key) if known is None else known
            row = self.rows[number]
            row.offcpu_us += offcpu
            row.blocked_us += blocked
            row.runqueue_us += runqueue
            row.count += 1
            by_window = self.by_window
            if by_window:  # Tally.add_to_windows, inline
                span = counted_to_ns - counted_from_ns
                window = (since_ns - counted_from_ns) * SUB_WINDOWS // span if span > 0 else 0
                if window >= SUB_WINDOWS - 1:
                    by_window[number][SUB_WINDOWS - 1] += offcpu
                elif until_ns <= counted_from_ns + span * (window + 1) // SUB_WINDOWS:
                    by_window[number][window] += offcpu
                else:
                    self.split(by_window[number], since_ns, until_ns, offcpu)
        if woken_ns is not None and waker is not None:
            waker_history = self.history.get(waker[1])
            if waker_history and waker_history[-1][1] > since_ns:  # else its waker ran all along: no link
                self._link(number, since_ns, woken_ns if woken_ns < until_ns else until_ns, waker_history, weight)
        self._remember(tid, since_ns, until_ns, number, weight)
        longest = self.longest
        if len(longest) < TIMELINE_WAITS or until_ns - since_ns > longest[0][0]:
            self._keep_longest((until_ns - since_ns, since_ns, tid, woken_ns, until_ns, wait.ran_ns, number))

    def _count_in_stratum(self, key: RowKey, since_ns: int, until_ns: int, offcpu: int, blocked: int,
                          unsampled: bool) -> None:
        """Count a wait of weight other than 1 once in its stratum; one without a stack (`unsampled`)
        also in what a stratum with none of them needs (see Stratum)."""
        stratum_key = stratum_of(key)
        stratum = self.strata.get(stratum_key)
        if stratum is None:
            stratum = self.strata[stratum_key] = Stratum()
        times = stratum.times
        times.offcpu_us += offcpu
        times.blocked_us += blocked
        times.runqueue_us += offcpu - blocked
        times.count += 1
        if unsampled:
            if self.counted_to_ns != UNBOUNDED and offcpu:
                self.add_to_windows(stratum.unsampled_windows, since_ns, until_ns, offcpu)
            if stratum.unsampled_row is None:
                stratum.unsampled_row = key

    def _add_sampled(self, key: RowKey, since_ns: int, until_ns: int, offcpu: int, blocked: int, weight: int) -> int:
        """Count a wait whose stack was taken with probability 1/`weight` `weight` times in its
        row (Horvitz-Thompson), with its share of the row's variance; returns the row's number."""
        number = self.row_number(key, weighted=True)
        row = self.rows[number]
        row.offcpu_us += offcpu * weight
        row.blocked_us += blocked * weight
        row.runqueue_us += (offcpu - blocked) * weight
        row.count += weight
        row.variance += weight * (weight - 1) * offcpu * offcpu
        if self.by_window and offcpu:
            self.split(self.by_window[number], since_ns, until_ns, offcpu, weight)
        self.stand_in_waits += weight - 1
        return number

    def _keep_longest(self, wait: tuple[int, int, int, int | None, int, int | None, int]) -> None:
        if len(self.longest) < TIMELINE_WAITS:
            heapq.heappush(self.longest, wait)
        else:
            heapq.heappushpop(self.longest, wait)

    def _remember(self, tid: int, since_ns: int, until_ns: int, number: int, weight: int) -> None:
        history = self.history.get(tid)
        if history is None:
            history = self.history[tid] = deque(maxlen=HISTORY)
        history.append((since_ns, until_ns, number, weight))

    def _link(self, row: int, since_ns: int, woken_ns: int, waker_history: deque[tuple[int, int, int, int]],
              weight: int) -> None:
        """While this wait was blocked (since_ns to woken_ns), when was its waker itself off
        CPU (its last waits: `waker_history`), and in which of its rows? Counted `weight`
        times, as the wait is in its row, times the weight of the waker's wait: a pair of
        sampled waits stands for the pairs of both their weights (a waker's wait with no stack
        has no row: the sampled ones stand for it)."""
        links = self.links
        for waker_since_ns, waker_back_ns, waker_row, waker_weight in reversed(waker_history):
            if waker_back_ns <= since_ns:
                break
            if not waker_weight:
                continue
            overlap = ((waker_back_ns if waker_back_ns < woken_ns else woken_ns)
                       - (waker_since_ns if waker_since_ns > since_ns else since_ns))
            if overlap > 0:
                link = links.get((row, waker_row))
                if link is None:
                    link = links[(row, waker_row)] = Overlap()
                pairs = weight * waker_weight
                link.ns += overlap * pairs
                link.count += pairs

    def add(self, other: Tally) -> None:
        numbers = [self.row_number(key, weighted) for key, weighted in other.row_keys()]  # other's rows' numbers here
        for number, times in zip(numbers, other.rows, strict=True):
            self.rows[number].add_times(times)
        for number, windows in zip(numbers, other.by_window, strict=False):  # none when unbounded
            self.by_window[number] = [mine + theirs for mine, theirs in zip(self.by_window[number], windows,
                                                                             strict=True)]
        for (waiter, waker), overlap in other.links.items():
            pair = (numbers[waiter], numbers[waker])
            link = self.links.get(pair)
            if link is None:
                link = self.links[pair] = Overlap()
            link.ns += overlap.ns
            link.count += overlap.count
        for tid, thread in other.threads.items():
            self.thread(tid).add(thread)
        for length, since_ns, tid, woken_ns, back_ns, ran_ns, number in other.longest:
            self._keep_longest((length, since_ns, tid, woken_ns, back_ns, ran_ns, numbers[number]))
        self.runqueue_delays_us.update(other.runqueue_delays_us)
        self.clipped += other.clipped
        self.unseen_wakeups += other.unseen_wakeups
        self.stackless_waits += other.stackless_waits
        self.stand_in_waits += other.stand_in_waits
        for key, stratum in other.strata.items():
            self.strata.setdefault(key, Stratum()).add(stratum)
        self.estimated_switch_ins += other.estimated_switch_ins
        self.half_recorded_switches += other.half_recorded_switches


@dataclass
class Head:
    """A thread whose first event in a slice is its return to CPU: it was off when the slice began."""

    back_ns: int
    woken_ns: int | None
    waker: WakerKey | None
    record_ns: int  # perf's record of it being in: the switch to it may be at the end of an earlier slice
    estimated: bool  # back_ns is the record less the capture's switch cost


@dataclass
class SliceResult:
    start_ns: int
    end_ns: int
    totals: Tally
    heads: dict[int, Head]
    tails: dict[int, Wait]  # still off CPU at the end of the slice
    running_at_end: set[int]
    seen: set[int]
    early_wakeups: dict[int, tuple[int, WakerKey]]  # threads woken in a slice with no other event of theirs
    # A thread's first wait of the slice, with no waker and nothing of the thread before it:
    # a wakeup racing its switch-out may be at the end of an earlier slice.
    deferred: list[tuple[int, Wait, int]]  # tid, wait, back on CPU
    first_tails: set[int]  # tails that are such a first wait
    racing_at_end: dict[int, tuple[int, WakerKey]]
    active: set[int]  # threads that woke others before any switch of theirs in the slice
    incoming_at_end: dict[int, int]  # switches to threads whose record of being in is in a later slice
    unreadable_events: int


class SliceBuilder:
    """The per-slice state machine: which threads are on CPU, which wait, since when."""

    def __init__(self, start_ns: int, end_ns: int, counted: tuple[int, int] | None = None,
                 switch_cost_ns: int = 0) -> None:
        """`switch_cost_ns`: the capture's measured time from a switch to perf's record of the
        thread coming in, for switches from threads that were not recorded."""
        self.start_ns, self.end_ns = start_ns, end_ns
        self.totals = Tally(*counted) if counted else Tally()
        self.switch_cost_ns = switch_cost_ns
        self.running: dict[int, int] = {}
        self.waiting: dict[int, Wait] = {}
        self.seen: set[int] = set()
        self.heads: dict[int, Head] = {}
        self.head_wakeups: dict[int, tuple[int, WakerKey]] = {}
        # Wakeups of threads still on CPU, on their way to sleep: the waker saw them
        # sleeping, waits for the switch-out to finish, then makes them runnable.
        self.racing_wakeups: dict[int, tuple[int, WakerKey]] = {}
        self.active: set[int] = set()
        self.first_waits: dict[int, Wait] = {}
        self.deferred: list[tuple[int, Wait, int]] = []
        self.incoming: dict[int, int] = {}  # tid -> the sched_switch that names it next, until it is in
        self.cpu_switched: dict[int, int] = {}  # cpu -> the last switch recorded there
        # CPUs whose last recorded thread exited (perf records nothing of it after its exit
        # record): the next thread in pays no cost of perf's there -> since when
        self.after_exit: dict[int, int] = {}
        self.weight = 1  # of the wait the switch being read begins (see Events.weights)

    def take(self, events: Events) -> None:
        """The events of this slice (perf script --time selects samples only, and a reader
        may hand over records from around the slice: those are left out). offcpu's hottest
        loop, once per event: the common path of each kind inline, the state in locals."""
        start_ns, end_ns = self.start_ns, self.end_ns
        running, incoming, after_exit, cpu_switched = self.running, self.incoming, self.after_exit, self.cpu_switched
        leave, back, waking = self._leave, self._back, self._waking
        rows = self._weighed(events) if events.weights else events.rows()
        for kind, time_ns, cpu, pid, tid, other, name, state, chain in rows:
            if time_ns < start_ns or time_ns > end_ns:
                continue
            if kind == SWITCH_OUT:
                if tid in running:  # it lost its sched_switch: see _lost_switch_out
                    self._lost_switch_out(time_ns, cpu, pid, tid, bool(other))
            elif kind == SWITCH_IN:
                if tid:
                    switched_ns = incoming.pop(tid, None)
                    if switched_ns is not None and switched_ns <= time_ns:  # the sched_switch naming it
                        back(tid, switched_ns, pid, name, time_ns, False)
                    else:
                        self._unnamed_switch_in(time_ns, cpu, pid, tid, name)
                    cpu_switched[cpu] = time_ns
            elif kind == SCHED_SWITCH:
                if after_exit:
                    after_exit.pop(cpu, None)
                if tid:  # tid 0 is the idle task, not a thread
                    leave(tid, time_ns, cpu, chain, state, pid, name)
                if other:
                    incoming[other] = time_ns
                cpu_switched[cpu] = time_ns
            elif kind == SCHED_WAKING:
                waking(name, pid, tid, other, chain, time_ns)
            elif kind == THREAD_FORK:
                parent = self.totals.threads.get(other)
                self._created(tid, time_ns, pid, parent.comm if parent else None)  # it has its creator's name
            elif kind == THREAD_EXIT:
                self._exited(tid, time_ns, pid, None)
                if cpu != UNKNOWN_CPU:
                    after_exit[cpu] = time_ns
            # THREAD_COMM: names come with every switch and wakeup

    def _weighed(self, events: Events) -> Iterator[Event]:
        """The rows of events that carry weights, each switch's weight set for _leave as it is
        read: a sampling backend's, apart so that perf's pay nothing for it."""
        for row, weight in zip(events.rows(), events.weights, strict=True):
            self.weight = weight if row[0] == SCHED_SWITCH else 1
            yield row
        self.weight = 1

    def _lost_switch_out(self, time_ns: int, cpu: int, pid: int, tid: int, preempt: bool) -> None:
        """Switch-outs come from sched_switch, with their stacks and states, just before perf's
        record of the switch; a thread still on CPU at the record lost its sched_switch (perf
        lost events): it left now, with no stack, runnable if preempted, else in a state perf
        did not record."""
        self.totals.half_recorded_switches += 1
        self._leave(tid, time_ns, cpu, STACK_LOST, PREEMPTED if preempt else UNKNOWN_STATE, pid, None)

    def _unnamed_switch_in(self, record_ns: int, cpu: int, pid: int, tid: int, comm: str) -> None:
        """A switch-in that no recorded sched_switch names (a task-bound sched_switch fires
        only for the thread leaving, see recording.perf_command.perf_record_argv; or the
        thread that left was not recorded: the idle task, another process): at perf's
        record, less the capture's switch cost unless that thread had exited (its last
        switch costs perf nothing)."""
        if self.after_exit.pop(cpu, None) is not None or not self.switch_cost_ns:
            self._back(tid, record_ns, pid, comm, record_ns, False)
            return
        self.totals.estimated_switch_ins += 1
        wait = self.waiting.get(tid)
        if wait is not None:
            earliest = wait.woken_ns or wait.since_ns
        else:  # off CPU since before the slice: the merge keeps it after that wait's start (see Head)
            woken = self.head_wakeups.get(tid)
            earliest = woken[0] if woken else 0
        self._back(tid, max(record_ns - self.switch_cost_ns, earliest), pid, comm, record_ns, True)

    def _unseen_switch_in(self, tid: int, leave_ns: int, cpu: int, pid: int, comm: str) -> None:
        """A thread leaves a CPU while its last wait is open: perf recorded neither the switch
        that brought it back nor its record of being in (seen after a thread exits, when the
        exiting thread's last switch and wakeups go unrecorded). It came in after its wakeup,
        if one was seen, and after the last switch recorded on this CPU."""
        wait = self.waiting[tid]
        back_ns = max(wait.woken_ns or wait.since_ns, self.cpu_switched.get(cpu, wait.since_ns))
        self.totals.estimated_switch_ins += 1
        self._back(tid, min(back_ns, leave_ns), pid, comm, min(back_ns, leave_ns), True)

    def _leave(self, tid: int, time_ns: int, cpu: int, chain: Chain, state: str, pid: int,
               comm: str | None) -> None:
        totals = self.totals
        thread = totals.threads.get(tid)  # totals.thread(tid, pid, comm), inline (see _back)
        if thread is None:
            thread = totals.thread(tid, pid, comm)
        else:
            thread.pid = pid
            if comm:
                thread.comm = comm
        switched_ns = self.incoming.pop(tid, None)
        if switched_ns is not None:
            wait = self.waiting.get(tid)
            if wait is not None and switched_ns >= wait.since_ns:
                # back at the switch to it, whose record of it being in perf lost
                totals.half_recorded_switches += 1
                self._back(tid, switched_ns, pid, comm or thread.comm, switched_ns, False)
        elif tid in self.waiting and tid not in self.running:
            self._unseen_switch_in(tid, time_ns, cpu, pid, comm or thread.comm)
        first = tid not in self.seen
        since_ns = ran_ns = self.running.pop(tid, None)
        if since_ns is None and first:
            since_ns = self.start_ns  # on CPU since the slice began
        if since_ns is not None:
            if since_ns >= totals.counted_from_ns and time_ns <= totals.counted_to_ns:  # Tally.on_cpu, inline
                if time_ns > since_ns:
                    thread.oncpu_ns += time_ns - since_ns
            else:
                totals.on_cpu(thread, since_ns, time_ns)
        racing = self.racing_wakeups.pop(tid, None) if self.racing_wakeups else None
        if first:
            self.seen.add(tid)
            if racing is None:
                racing = self.head_wakeups.pop(tid, None)  # it was on CPU when woken: a racing wakeup too
        if state in DEAD_STATES:
            return  # its last switch: the thread is gone, not waiting
        wait = self.waiting[tid] = Wait(time_ns, chain, state, None, None, ran_ns, self.weight)
        if racing is not None:
            wait.woken(*racing)  # woken before it was off: all of the gap is run-queue delay
        elif first and tid not in self.active:
            self.first_waits[tid] = wait

    def _back(self, tid: int, time_ns: int, pid: int, comm: str, record_ns: int, estimated: bool) -> None:
        if tid in self.running:
            return  # already on CPU: a duplicate switch record
        if self.racing_wakeups:
            self.racing_wakeups.pop(tid, None)
        totals = self.totals
        # totals.thread(tid, pid, comm), inline: with _leave's, twice per switch, and a call each
        # was 8% of the engine's time
        thread = totals.threads.get(tid)
        if thread is None:
            thread = totals.thread(tid, pid, comm)
        else:
            thread.pid = pid
            if comm:
                thread.comm = comm
        if time_ns >= totals.counted_from_ns and record_ns <= totals.counted_to_ns:  # Tally.observed, inline
            if record_ns > time_ns:
                thread.observer_ns += record_ns - time_ns
        else:
            totals.observed(thread, time_ns, record_ns)
        wait = self.waiting.pop(tid, None)
        if wait is not None:
            if self.first_waits and self.first_waits.pop(tid, None) is wait and wait.waker is None:
                self.deferred.append((tid, wait, time_ns))
            else:
                totals.add_wait(tid, wait, time_ns)
        elif tid not in self.seen:
            woken_ns, waker = self.head_wakeups.pop(tid, (None, None))
            self.heads[tid] = Head(time_ns, woken_ns, waker, record_ns, estimated)
        self.seen.add(tid)
        self.running[tid] = time_ns

    def _waking(self, comm: str, pid: int, tid: int, woken: int, chain: Chain, time_ns: int) -> None:
        if self.racing_wakeups:
            self.racing_wakeups.pop(tid, None)  # the waker ran on: it was not on its way to sleep
        if tid not in self.seen:
            self.head_wakeups.pop(tid, None)
            self.active.add(tid)
        wait = self.waiting.get(woken)
        if wait is not None:
            if wait.woken_ns is None and wait.state != PREEMPTED:  # Wait.woken, inline
                wait.woken_ns, wait.waker = time_ns, (pid, tid, comm, chain)
        elif woken in self.running:
            self.racing_wakeups.setdefault(woken, (time_ns, (pid, tid, comm, chain)))
        elif woken not in self.seen and woken not in self.head_wakeups:
            self.head_wakeups[woken] = (time_ns, (pid, tid, comm, chain))

    def _created(self, tid: int, time_ns: int, pid: int, comm: str | None) -> None:
        for state in (self.running, self.waiting, self.first_waits, self.racing_wakeups, self.head_wakeups):
            state.pop(tid, None)  # a reused tid: nothing of the old thread carries over
        thread = self.totals.thread(tid, pid, comm)
        thread.created_ns, thread.exited_ns = time_ns, None
        self.seen.add(tid)
        # Runnable from birth: the wait for its first run is run-queue delay.
        self.waiting[tid] = Wait(time_ns, NEW_THREAD, PREEMPTED)

    def _exited(self, tid: int, time_ns: int, pid: int, comm: str | None) -> None:
        """perf writes its exit record on CPU, in the exiting thread. Its last switch-out
        is not recorded for a task-bound recording, so its time on CPU ends here."""
        thread = self.totals.thread(tid, pid, comm)
        thread.exited_ns = time_ns
        if tid in self.running:
            self.totals.on_cpu(thread, self.running.pop(tid), time_ns)
        elif tid not in self.seen:
            self.totals.on_cpu(thread, self.start_ns, time_ns)
        self.seen.add(tid)

    def finish(self, skipped: int) -> SliceResult:
        """What the slice found; `skipped`: what its reader could not decode."""
        for tid, since in self.running.items():
            self.totals.on_cpu(self.totals.thread(tid), since, self.end_ns)
        self.totals.history = {}  # of this slice only: it does not travel
        early = {tid: wakeup for tid, wakeup in self.head_wakeups.items() if tid not in self.seen}
        first_tails = {tid for tid, wait in self.first_waits.items() if self.waiting.get(tid) is wait}
        return SliceResult(self.start_ns, self.end_ns, self.totals, self.heads, self.waiting, set(self.running),
                           self.seen, early, self.deferred, first_tails, self.racing_wakeups, self.active,
                           self.incoming, skipped)


def read_slice(reader: CaptureReader, start_ns: int, end_ns: int, counted: tuple[int, int],
               switch_cost_ns: int) -> SliceResult:
    builder = SliceBuilder(start_ns, end_ns, counted, switch_cost_ns)
    skipped_before = reader.skipped
    # Reading makes millions of objects and no reference cycles: the cyclic collector would
    # only walk them over and over (2-6% of a slice's time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        reader.read(builder, (start_ns, end_ns))
    finally:
        if collecting:
            gc.enable()
    return builder.finish(reader.skipped - skipped_before)


def merge(slices: list[SliceResult], window_start_ns: int, window_end_ns: int,
          at_start: dict[int, tuple[str, str]], counted: tuple[int, int] | None = None) -> tuple[Tally, int]:
    """Join the slices (of the recording's window, in time order); returns the tally of
    the `counted` part of it (default: all) and the count of unreadable events. `at_start` holds
    the threads of the target when recording began (comm, state)."""
    totals = Tally(*counted) if counted else Tally()
    pending: dict[int, Wait] = {}
    running: set[int] = set()
    seen: set[int] = set()
    racing: dict[int, tuple[int, WakerKey]] = {}  # wakeups of threads on their way to sleep
    incoming: dict[int, int] = {}  # switches to threads not yet recorded as in
    for piece in slices:
        _switched_before(piece, incoming, pending, totals)
        for tid, (woken_ns, waker) in piece.early_wakeups.items():
            if tid in pending:
                pending[tid].woken(woken_ns, waker)
        for tid, head in piece.heads.items():
            wait = pending.pop(tid, None)
            if wait is None and (tid in seen | running or (at_start and tid not in at_start)):
                continue  # its switch-out (or birth) was not recorded: do not invent a wait
            wait = wait or Wait(window_start_ns, BEFORE_WINDOW, at_start.get(tid, ("", UNKNOWN_STATE))[1])
            if head.woken_ns is not None and head.waker is not None:
                wait.woken(head.woken_ns, head.waker)
            totals.add_wait(tid, wait, head.back_ns)
        for tid, wait, back_ns in piece.deferred:
            if tid in racing:
                wait.woken(*racing[tid])
            totals.add_wait(tid, wait, back_ns)
        for tid in piece.first_tails & racing.keys():
            piece.tails[tid].woken(*racing[tid])
        for tid in running - piece.seen:
            totals.on_cpu(totals.thread(tid), piece.start_ns, piece.end_ns)  # on CPU through the whole slice
        totals.add(piece.totals)
        for tid in piece.seen - piece.heads.keys():
            pending.pop(tid, None)  # its return was lost: do not invent a wait longer than it was
        pending.update(piece.tails)
        running = (running - piece.seen) | piece.running_at_end
        seen |= piece.seen
        racing = {tid: wakeup for tid, wakeup in racing.items() if tid not in piece.seen | piece.active}
        racing.update(piece.racing_at_end)
        incoming = {tid: time_ns for tid, time_ns in incoming.items() if tid not in piece.seen}
        incoming.update(piece.incoming_at_end)
    for tid, wait in pending.items():
        totals.add_wait(tid, wait, window_end_ns, back_seen=False)
    _add_quiet_threads(totals, at_start, seen, window_start_ns, window_end_ns)
    return totals, sum(piece.unreadable_events for piece in slices)


def _switched_before(piece: SliceResult, incoming: dict[int, int], pending: dict[int, Wait], totals: Tally) -> None:
    """Threads whose first event in the slice is perf's record of being in: they came back
    at the switch to them in an earlier slice, when there was one; else no earlier than
    their wait in an earlier slice began, or their wakeup, when their return was placed by
    the switch cost."""
    for tid, head in piece.heads.items():
        switched_ns = incoming.get(tid)
        thread = totals.thread(tid)
        if switched_ns is not None and switched_ns < head.back_ns <= head.record_ns:
            totals.on_cpu(thread, switched_ns, head.back_ns)
            totals.observed(thread, switched_ns, head.back_ns)
            totals.estimated_switch_ins -= head.estimated
            head.back_ns = switched_ns
            continue
        wait = pending.get(tid)
        if head.estimated and wait is not None and head.back_ns < (wait.woken_ns or wait.since_ns):
            earliest = wait.woken_ns or wait.since_ns
            thread.oncpu_ns -= totals.counted(head.back_ns, earliest)
            thread.observer_ns -= totals.counted(head.back_ns, earliest)
            head.back_ns = earliest


def _add_quiet_threads(totals: Tally, at_start: dict[int, tuple[str, str]], seen: set[int],
                       window_start_ns: int, window_end_ns: int) -> None:
    """Threads of the target with no event at all: they neither left nor came back to a
    CPU, so they spent the whole window as they began it, off CPU unless runnable."""
    for tid, (comm, state) in at_start.items():
        if tid in seen:
            continue
        thread = totals.thread(tid, comm=comm)
        if state == PREEMPTED:
            totals.on_cpu(thread, window_start_ns, window_end_ns)
        else:
            totals.add_wait(tid, Wait(window_start_ns, BEFORE_WINDOW, state), window_end_ns, back_seen=False)


def waker_kind(tid: int, stack: Stack) -> str:
    """"interrupt" when the wakeup came from an interrupt's handler (in whatever thread it
    interrupted), "idle" when the idle task woke it otherwise, "unrecorded" when no wakeup was
    recorded, else "thread"."""
    if stack.frames == (WAKER_NOT_RECORDED,):
        return "unrecorded"
    if any(frame.startswith(INTERRUPT_FRAMES) for frame in stack.frames[:stack.kernel_frames]):
        return "interrupt"
    return "idle" if tid == 0 else "thread"


def threads_at_start(info: CaptureInfo) -> dict[int, tuple[str, str]]:
    """The target's threads when recording began: tid -> (comm, state)."""
    return {int(tid): (comm, state) for tid, (comm, state) in info.threads_at_start.items()}


def build_model(reader: CaptureReader, info: CaptureInfo, window: tuple[int, int] | None = None,
                on_progress: Callable[[int, int], None] | None = None) -> Model:
    """Read perf.data in parallel time slices and build the model of `window` (default: the
    capture's). Part of a recording is read from its start, to know where each thread was
    when the part begins, up to the part's end."""
    start_ns, end_ns = window or (info.window_start_ns, info.window_end_ns)
    slices = reader.time_slices(info.window_start_ns, end_ns, os.cpu_count() or 1)
    counted, switch_cost_ns = (start_ns, end_ns), info.switch_cost_ns or 0
    results: dict[int, SliceResult] = {}

    def done(index: int, result: SliceResult) -> None:
        results[index] = result
        if on_progress:
            on_progress(len(results), len(slices))

    # The last slice is read in this process, the others in forked workers: a process fewer
    # to start, and a slice fewer to send back.
    with ProcessPoolExecutor(max_workers=max(1, len(slices) - 1), mp_context=get_context("fork"),
                             initializer=end_with_parent, initargs=(os.getpid(), signal.SIGKILL)) as pool:
        futures = {pool.submit(read_slice, reader, first, last, counted, switch_cost_ns): index
                   for index, (first, last) in enumerate(slices[:-1])}
        done(len(slices) - 1, read_slice(reader, *slices[-1], counted, switch_cost_ns))
        for future in as_completed(futures):
            done(futures[future], future.result())
    totals, skipped = merge([results[index] for index in range(len(slices))], info.window_start_ns, end_ns,
                            threads_at_start(info), (start_ns, end_ns))
    return to_model(totals, reader, info, start_ns, end_ns, skipped)


def to_model(totals: Tally, reader: CaptureReader, info: CaptureInfo, start_ns: int, end_ns: int,
             skipped: int) -> Model:
    """Number the distinct stacks and wakers; the reader names each call chain once. Chains
    that differ only in addresses (other call sites in the same functions) are one stack.
    A sampling backend's weighted rows are then scaled to their strata (offcpu.sampling)."""
    keys = totals.row_keys()
    unsampled_keys = [stratum.unsampled_row for stratum in totals.strata.values() if stratum.unsampled_row]
    chains = {chain for (_, chain, _, waker) in [key for key, _ in keys] + unsampled_keys
              for chain in (chain, waker[3] if waker else None)}
    named = reader.stacks(chain for chain in chains if chain is not None and chain not in SYNTHETIC_STACKS)
    chain_ids: dict[Chain, int] = {}
    stack_ids: dict[Stack, int] = {}
    waker_ids: dict[Waker, int] = {}

    def stack_of(chain: Chain) -> Stack:
        return Stack((chain,), 0) if chain in SYNTHETIC_STACKS else named[chain]  # type: ignore[return-value]

    def stack_id(chain: Chain) -> int:
        if chain not in chain_ids:
            chain_ids[chain] = stack_ids.setdefault(stack_of(chain), len(stack_ids))
        return chain_ids[chain]

    waker_of: dict[WakerKey, int] = {}  # rows share wakers: each is made and looked up once
    waker_identities: dict[int | None, tuple[int, int, str] | None] = {None: None}  # waker id -> pid, tid, comm

    def waker_id(key: WakerKey | None) -> int | None:
        if key is None:
            return None
        number = waker_of.get(key)
        if number is None:
            pid, tid, comm, chain = key
            waker = Waker(waker_kind(tid, stack_of(chain)), pid, tid, comm, stack_id(chain))
            number = waker_of[key] = waker_ids.setdefault(waker, len(waker_ids))
            waker_identities[number] = (pid, tid, comm)
        return number

    def merged_key(key: RowKey) -> MergedKey:
        tid, chain, state, waker = key
        return tid, stack_id(chain), state, waker_id(waker)

    rows_by_kind = SampledRows()
    row_of: list[tuple[MergedKey, bool]] = []  # by the tally's row number
    for (key, weighted), times, windows in zip(keys, totals.rows, totals.by_window or [[]] * len(keys), strict=True):
        row_of.append((merged_key(key), weighted))
        rows_by_kind.add(*row_of[-1], times, windows)
    stacked_waits = sum(times.count for times in totals.rows) - totals.stand_in_waits  # (a wait of weight w counts w)
    factors = scale_to_strata(rows_by_kind, totals.strata, merged_key,
                              lambda key: (key[0], key[2], waker_identities[key[3]]))
    merged, merged_windows = rows_by_kind.merged()
    row_index = {key: index for index, key in enumerate(merged)}
    rows = [Row(*key, times.offcpu_us, times.blocked_us, times.runqueue_us, times.count,
                merged_windows.get(key, []), times.variance)
            for key, times in merged.items()]
    links: dict[tuple[int, int], Overlap] = {}
    for (waiter_row, waker_row), overlap in totals.links.items():
        (waiter, waiter_weighted), (waker, waker_weighted) = row_of[waiter_row], row_of[waker_row]
        factor = (factors.get(waiter, 1.0) if waiter_weighted else 1.0) * \
            (factors.get(waker, 1.0) if waker_weighted else 1.0)
        link = links.setdefault((row_index[waiter], row_index[waker]), Overlap())
        link.ns += round(overlap.ns * factor)
        link.count += round(overlap.count * factor)
    stacks, wakers = list(stack_ids), list(waker_ids)  # in the order they were numbered
    waited = {row.tid for row in rows}

    def inside(ns: int | None) -> int | None:
        return ns if ns is not None and start_ns <= ns <= end_ns else None

    def pid_of(tid: int, t: ThreadTotals) -> int:
        # a thread with no event of its own (blocked throughout) is of the process it was of
        # when recording began; perf.data cannot say
        return t.pid if t.pid is not None else info.processes_at_start.get(str(tid), tid)

    threads = {tid: Thread(tid, pid_of(tid, t), t.comm, round(t.oncpu_ns / 1000), t.offcpu_us,
                           t.blocked_us, t.runqueue_us, inside(t.created_ns), inside(t.exited_ns),
                           round(t.observer_ns / 1000))
               for tid, t in totals.threads.items()
               if t.oncpu_ns or tid in waited or inside(t.created_ns) or inside(t.exited_ns)}
    timeline = sorted(TimedWait(tid, row_index[row_of[number][0]], since_ns, woken_ns, back_ns, ran_ns)
                      for _, since_ns, tid, woken_ns, back_ns, ran_ns, number in totals.longest)
    return Model(info, start_ns, end_ns, stacks, wakers, rows, threads, totals.runqueue_delays_us,
                 [Link(waiter, waker, round(link.ns / 1000), link.count) for (waiter, waker), link in links.items()],
                 totals.clipped, totals.unseen_wakeups, skipped, totals.estimated_switch_ins,
                 totals.half_recorded_switches, timeline=timeline, waits=stacked_waits + totals.stackless_waits,
                 stacked_waits=stacked_waits, sampled=bool(totals.stackless_waits or totals.stand_in_waits))
