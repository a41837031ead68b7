"""Findings: what holds a model's threads back, named, with its evidence and its fix.

Pure functions over the model. Every wait is first classified by what ended it and
where it waited (offcpu.diagnosis.waits), then claimed by at most one finding (offcpu.diagnosis.claims):
no microsecond is in two findings. Each rule is data (id, title, remedy) plus a
function that turns its claimed waits into matches; `findings` runs every rule in
RULES and ranks what they found, worst first.

What a finding counts (its `offcpu_us`) is the whole off-CPU time of its waits: the
time blocked until the wakeup and then the time waiting for a CPU (a thread that had
not blocked would not have lost its CPU); summaries say both parts. `runqueue`
counts the time threads were preempted while they still had work.

Shares: `share_of_wall` is that time over the wall time of the threads it is about
(each one's on-CPU plus off-CPU time, and never less than one thread's whole window,
so that one short-lived thread's wait does not look like a process-wide problem);
`share_of_offcpu` is its share of all off-CPU time, idle time (threads waiting for
work) left out for every rule but `idle`.

Each finding names where its threads waited (the wait site: its heaviest stacks),
where they were let go (the release site: the wakers' stacks at the wakeups), who let
them go, and what those wakers were themselves waiting for meanwhile (the chain).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from offcpu import _core
from offcpu.diagnosis.claims import (
    DEADLOCK,
    FUTEX_UNKNOWN,
    HANDOFF,
    IDLE,
    IDLE_MEAN_WAIT_US,
    IO_WAIT,
    LOCK_CONTENTION,
    LOCK_FINDINGS,
    MMAP_LOCK,
    PTHREAD_MUTEX,
    RUNQUEUE,
    SERIALIZATION,
    STACK_CACHE_LOCK,
    STUCK,
    THREAD_CHURN,
    Claims,
    Root,
)
from offcpu.diagnosis.locktable import LockTable, default_table, lock_table
from offcpu.diagnosis.waits import CAUSE_WORDS, NEW, PEER, PREEMPTED_CAUSE, Waits
from offcpu.model import BEFORE_WINDOW, SUB_WINDOWS, WAKER_STACK_NOT_TAKEN, WHOLE_WINDOW, Model, Row
from offcpu.model.stackview import StackView, of_threads
from offcpu.model.summaries import runqueue_percentiles
from offcpu.stacks import drawn_alone, reading

# Severity from share_of_wall. On the examples (2 CPUs, 1 s): the pathologies'
# findings carry 20-80% of their threads' time, the same programs' secondary
# effects (madvise at thread exit, a pool's queue lock) 0.2-15%, idle programs'
# stray waits < 1%.
CRITICAL_FROM = 0.20
WARNING_FROM = 0.05
REPORT_FROM = 0.01  # below this share a finding is noise and is left out (unless a rule raises its floor)
SEVERITIES = ("info", "warning", "critical")
EVIDENCE_STACKS = 3
CHAIN_STEPS = 3  # the chain's and the roots' parts shown, the largest
WAKERS = 3

# thread_limits: a limit used this much is worth a finding, a warning, critical.
LIMIT_INFO_FROM = 0.5
LIMIT_WARNING_FROM = 0.8  # offcpu.machine.limits.WARN_FROM, doctor's "near"
LIMIT_CRITICAL_FROM = 0.95

DWARF_HINT = "record with --call-graph dwarf to see the callers"
GENERIC_FUTEX = "futex"  # the lock table's name for a futex its stack says nothing more of
STACK_CACHE = "glibc stack cache lock"  # the lock table's name for it
LOCK_REMEDY = ("Hold the lock for less time or less often: move work out of the critical section, split the data so "
               "threads do not share one lock (per-thread or per-CPU state merged at the end, striped locks), or use "
               "atomics for simple counters. The wait site shows who waits, the release site who held it.")


# -- what rules see and return --------------------------------------------------------

def total(rows: Iterable[Row]) -> int:
    return sum(row.offcpu_us for row in rows)


def blocked(rows: Iterable[Row]) -> int:
    return sum(row.blocked_us for row in rows)


@dataclass(frozen=True)
class Evidence:
    frames: tuple[str, ...]  # root first
    kernel_frames: int  # the last this many frames are the kernel's
    state: str  # the waits' switch-out state ("" for a release site)
    offcpu_us: int  # the waits' time off CPU (for a release site: of the waits let go there, until then)
    count: int
    variance: int = 0  # of offcpu_us when it is an estimate (Row.variance; µs²); 0 for a release site


@dataclass(frozen=True)
class WakerShare:
    """Who let a finding's waits go: a pool of threads, or what else ended them."""

    who: str
    wakeups: int
    blocked_us: int


@dataclass(frozen=True)
class ChainStep:
    """Part of a finding's blocked time, and what the threads that ended those waits were
    themselves doing meanwhile: waiting somewhere, or running."""

    what: str
    us: int
    share: float  # of the finding's blocked time that peers ended


@dataclass(frozen=True)
class RootShare:
    """Part of a finding's blocked time by what it came down to: following each wait's waker
    to what that waker was itself waiting for, and on, to a thread on CPU, a device, a
    timer or work from outside."""

    what: str
    us: int
    share: float  # of the finding's blocked time that peers ended


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # "info", "warning" or "critical"
    title: str
    summary: str
    offcpu_us: int
    blocked_us: int  # of offcpu_us, until the wakeups (the rest: waiting for a CPU after them)
    share_of_wall: float
    share_of_offcpu: float
    threads: int
    evidence: tuple[Evidence, ...]  # the wait site: the stacks its waits were in, heaviest first
    remedy: str
    confidence: str  # "high" or "low"
    confidence_reason: str
    subject: str = ""  # which lock or pool, for findings that can be there several times
    release_sites: tuple[Evidence, ...] = ()  # the wakers' stacks at the wakeups
    wakers: tuple[WakerShare, ...] = ()
    chain: tuple[ChainStep, ...] = ()
    roots: tuple[RootShare, ...] = ()
    # The standard error of share_of_wall, from its spread over the window's sub-windows
    share_uncertainty: float = 0.0
    # The severity the share reaches by more than its uncertainty (severity when it is 0):
    # a lower one says the finding is near the limit of its severity, and may fall below it
    # in another run
    settled_severity: str = "info"


@dataclass(frozen=True)
class Match:
    """What a rule found: the rows it is about and its sentence."""

    rows: list[Row]
    summary: str
    confidence: str = "high"
    confidence_reason: str = ""
    floor: str = "info"  # lowest severity, whatever the share
    cap: str = "critical"  # highest severity
    threads: int | None = None  # counted from the rows unless given
    subject: str = ""
    title: str = ""  # instead of the rule's
    remedy: str = ""  # instead of the rule's


class Context:
    """The model with what every rule needs computed once: classes, claims, totals."""

    def __init__(self, model: Model, table: LockTable | None = None) -> None:
        self.model = model
        self.waits = Waits(model, table or default_table())
        self.claims = Claims(model, self.waits)
        self.wall_by_tid = {tid: t.oncpu_us + t.offcpu_us for tid, t in model.threads.items()}
        self.offcpu_us = sum(t.offcpu_us for t in model.threads.values())
        self.idle_rows = self.claims.rows(IDLE)
        self.idle_us = total(self.idle_rows)

    def share_of_wall(self, us: int, rows: list[Row]) -> float:
        """`us` over the wall time of the threads of `rows`, at least one whole window."""
        wall = max(sum(self.wall_by_tid[tid] for tid in {row.tid for row in rows}), self.model.wall_us)
        return us / wall if wall > 0 else 0.0

    def share_uncertainty(self, rows: list[Row]) -> float:
        """The standard error of share_of_wall(total(rows), rows), from how the share spreads
        over the model's sub-windows (see share_uncertainty); 0 when the rows do not say."""
        if not rows or any(len(row.windows) != SUB_WINDOWS for row in rows):
            return 0.0
        parts = [sum(row.windows[window] for row in rows) for window in range(SUB_WINDOWS)]
        walls = [0.0] * SUB_WINDOWS
        for tid in {row.tid for row in rows}:
            for window, presence in enumerate(self.presence[tid]):
                walls[window] += self.wall_by_tid[tid] * presence
        # as share_of_wall, of at least one whole window
        present, whole = sum(walls), max(sum(walls), self.model.wall_us)
        walls = [wall * whole / present for wall in walls] if present else [whole / SUB_WINDOWS] * SUB_WINDOWS
        return share_uncertainty(parts, walls)

    @cached_property
    def presence(self) -> dict[int, list[float]]:
        """Each thread's time in the window, as the share of it in each sub-window: spread evenly
        from its creation (or the window's start) to its exit (or the window's end)."""
        start, end = self.model.window_start_ns, self.model.window_end_ns
        edges = [start + (end - start) * window // SUB_WINDOWS for window in range(SUB_WINDOWS + 1)]
        found = {}
        for tid, thread in self.model.threads.items():
            born, gone = thread.created_ns or start, thread.exited_ns or end
            spans = [max(0, min(gone, edges[window + 1]) - max(born, edges[window])) for window in range(SUB_WINDOWS)]
            found[tid] = [span / sum(spans) for span in spans] if sum(spans) else [1 / SUB_WINDOWS] * SUB_WINDOWS
        return found

    def truncated(self) -> bool:
        return bool(self.model.capture.user_stacks_truncated)

    @cached_property
    def row_number(self) -> dict[int, int]:
        """Each row's number in the model, by the row's id (rows are dataclasses, not hashable)."""
        return {id(row): number for number, row in enumerate(self.model.rows)}

    @cached_property
    def root_shares(self) -> dict[int, dict[str, float]]:
        """What each peer-ended row's blocked time came down to (see _root_shares): the same
        for every finding, so worked out once."""
        return _root_shares(self)


def share_uncertainty(parts: list[int], walls: list[float]) -> float:
    """The standard error of a share sum(parts) / sum(walls) measured in sub-windows (a part
    and the wall time it is of, in each), from the spread of the sub-windows: the ratio
    estimator's, sqrt(n / (n - 1) * sum((part - share * wall)^2)) / sum(walls). With equal
    walls it is the standard deviation of the sub-windows' shares over the square root of
    their number."""
    whole = sum(walls)
    if len(parts) < 2 or whole <= 0:
        return 0.0
    share = sum(parts) / whole
    spread = sum((part - share * wall) ** 2 for part, wall in zip(parts, walls, strict=True))
    return math.sqrt(len(parts) / (len(parts) - 1) * spread) / whole


def us_text(us: float) -> str:
    if us >= 1_000_000:
        return f"{us / 1e6:.1f} s"
    if us >= 1000:
        return f"{us / 1000:.1f} ms"
    return f"{us:.0f} µs"


def pct(share: float) -> str:
    return f"{share:.0%}" if share >= 0.01 else f"{share:.1%}"


def tids(rows: Iterable[Row]) -> int:
    return len({row.tid for row in rows})


def counted(n: int, noun: str) -> str:
    """'1 thread', '2,048 threads'."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def threads_text(rows: Iterable[Row]) -> str:
    return counted(tids(rows), "thread")


def spent_text(rows: list[Row], ctx: Context) -> str:
    """'spent 5.7 s (64% of their time; 2.1 s until woken, 3.6 s more waiting for a CPU)'."""
    us = total(rows)
    woken = blocked(rows)
    split = f"; {us_text(woken)} until woken, {us_text(us - woken)} more waiting for a CPU" if us - woken else ""
    return f"spent {us_text(us)} ({pct(ctx.share_of_wall(us, rows))} of {their(rows)} time{split})"


def spent_on_a_lock_text(rows: list[Row], ctx: Context) -> str:
    """'spent 5.7 s (2.1 s until woken, 24% of their time; 3.6 s more waiting for a CPU)': a
    lock's share is of the time blocked on it (see LOCK_FINDINGS)."""
    us = total(rows)
    woken = blocked(rows)
    share = f"{pct(ctx.share_of_wall(woken, rows))} of {their(rows)} time"
    if us == woken:
        return f"spent {us_text(us)} ({share})"
    return f"spent {us_text(us)} ({us_text(woken)} until woken, {share}; {us_text(us - woken)} more waiting for a CPU)"


def their(rows: Iterable[Row]) -> str:
    return "its" if tids(rows) == 1 else "their"


def times_text(rows: Iterable[Row]) -> str:
    n = sum(row.count for row in rows)
    return "once" if n == 1 else f"{n:,} times"


# -- the rules ------------------------------------------------------------------------

def detect_mmap_lock(ctx: Context) -> list[Match]:
    rows = ctx.claims.rows(MMAP_LOCK)
    if not rows:
        return []
    return [Match(rows, f"{threads_text(rows)} {spent_on_a_lock_text(rows, ctx)} waiting {times_text(rows)} for the "
                        f"process's memory-map lock (mmap_lock), which mmap, munmap, mprotect, madvise and page "
                        f"faults all take.", subject="mmap_lock")]


def detect_stack_cache_lock(ctx: Context) -> list[Match]:
    rows = ctx.claims.rows(STACK_CACHE_LOCK)
    if not rows:
        return []
    summary = (f"{threads_text(rows)} {spent_on_a_lock_text(rows, ctx)} waiting {times_text(rows)} for glibc's stack "
               f"cache lock, which every thread creation and exit takes.")
    guessed = ctx.claims.guessed(STACK_CACHE_LOCK)
    if total(guessed) * 2 > total(rows):
        life = ctx.claims.lifecycle
        return [Match(rows, summary.replace("for glibc's stack cache lock", "for a glibc-internal lock, most "
                                            "likely its stack cache lock"),
                      confidence="low",
                      confidence_reason=f"the stacks stop at __lll_lock_wait_private (user stacks truncated); with "
                                        f"{life.created_per_s:,.0f} threads created a second it is most likely the "
                                        f"stack cache lock: {DWARF_HINT}", subject=STACK_CACHE)]
    return [Match(rows, summary, subject=STACK_CACHE)]


def detect_lock_contention(ctx: Context) -> list[Match]:
    """A finding per lock the lock table names (glibc's mutexes, a runtime's or a server's)."""
    matches = []
    for name in ctx.claims.keys(LOCK_CONTENTION):
        rows = ctx.claims.rows(LOCK_CONTENTION, name)
        lock = next(site.lock for site in ctx.waits.sites if site is not None and site.lock.name == name)
        what = lock.what or name
        summary = f"{threads_text(rows)} {spent_on_a_lock_text(rows, ctx)} waiting {times_text(rows)} for {what}"
        if lock.retry:
            summary += (": they sleep and try again, so a timer ends their waits, not the holder; meanwhile "
                        f"{_holders(ctx, rows)}")
        matches.append(Match(rows, summary + ".", subject=name, title=f"Threads wait for a lock: {name}",
                             remedy=lock.remedy or LOCK_REMEDY,
                             confidence_reason=f"which lock is not shown (user stacks truncated): {DWARF_HINT}"
                             if ctx.truncated() and name == PTHREAD_MUTEX else ""))
    return matches


def detect_deadlock(ctx: Context) -> list[Match]:
    """A finding per cycle of threads asleep all the window, each waiting for a mutex the
    next holds (glibc's owner of each, read at the window's end)."""
    matches = []
    for deadlock in ctx.claims.deadlocks:
        tids_of = set(deadlock.cycle + deadlock.behind)
        rows = [row for row in ctx.claims.rows(DEADLOCK) if row.tid in tids_of]
        if not rows:
            continue
        first, *others = deadlock.cycle
        holder = ctx.claims.mutex_owners
        links = [f"{_thread_words(ctx, first)} waits for a mutex "
                 + (f"held by {_thread_words(ctx, holder[first])}" if others else "it holds itself")]
        links += [f"which waits for one held by {_thread_words(ctx, holder[tid])}" for tid in others]
        behind = (f"; {counted(len(deadlock.behind), 'more thread')} wait{'s' * (len(deadlock.behind) == 1)} "
                  f"behind them ({', '.join(_thread_words(ctx, tid) for tid in deadlock.behind)})"
                  if deadlock.behind else "")
        summary = (f"{threads_text(rows)} waited all {us_text(ctx.model.wall_us)} of the recording and none of "
                   f"them ran: {', '.join(links)}{behind}.")
        matches.append(Match(rows, summary, floor="critical", subject=_thread_words(ctx, deadlock.cycle[0])))
    return matches


def detect_stuck(ctx: Context) -> list[Match]:
    """A finding per lock that threads waited for all the window, never woken (no deadlock shown)."""
    matches = []
    for name in ctx.claims.keys(STUCK):
        rows = ctx.claims.rows(STUCK, name)
        lock = next(site.lock for site in ctx.waits.sites if site is not None and site.lock.name == name)
        owners = ctx.claims.mutex_owners
        holders = sorted({owners[row.tid] for row in rows if row.tid in owners})
        held = f", held by {', '.join(_holder_words(ctx, tid) for tid in holders)}" if holders else ""
        summary = (f"{threads_text(rows)} waited all {us_text(ctx.model.wall_us)} of the recording for "
                   f"{lock.what or name}{held}, and made no progress.")
        matches.append(Match(rows, summary, floor="warning", subject=name, title=f"Threads stuck on a lock: {name}"))
    return matches


def _holder_words(ctx: Context, tid: int) -> str:
    """'left (13107), itself asleep all the recording (a sleep: ...)', or 'left (13107), which ran 3.0 ms
    meanwhile'."""
    thread = ctx.model.threads.get(tid)
    if thread is None:
        return _thread_words(ctx, tid)
    whole = [index for index, row in enumerate(ctx.model.rows)
             if row.tid == tid and row.waker is None and row.offcpu_us >= WHOLE_WINDOW * ctx.model.wall_us]
    site = ctx.waits.sites[ctx.model.rows[whole[0]].stack] if whole else None
    if whole:
        where = f" ({site.lock.what or site.lock.name})" if site else ""
        return f"{_thread_words(ctx, tid)}, itself asleep all the recording{where}"
    return f"{_thread_words(ctx, tid)}, which ran {us_text(thread.oncpu_us)} meanwhile"


def _thread_words(ctx: Context, tid: int) -> str:
    """'right (30467)', or the tid alone for a thread the model does not know."""
    thread = ctx.model.threads.get(tid)
    return f"{thread.comm} ({tid})" if thread else f"thread {tid}"


def _holders(ctx: Context, rows: list[Row]) -> str:
    """What the other threads of the waiters' pools did while those retried: they held the lock."""
    pools = {ctx.waits.pool_of(row.tid) for row in rows}
    tids_of = {tid for pool in pools for tid in ctx.claims.pools[pool].tids}
    oncpu = sum(ctx.model.threads[tid].oncpu_us for tid in tids_of)
    io = total(row for row in ctx.claims.rows(IO_WAIT) if row.tid in tids_of)
    return (f"their pool{'s' if len(pools) > 1 else ''} ({', '.join(sorted(pools))}) ran {us_text(oncpu)} on CPU "
            f"and waited {us_text(io)} for disk I/O, holding it")


def detect_serialization(ctx: Context) -> list[Match]:
    """A finding per pool whose threads take turns, or wait behind one another's disk or lock."""
    matches = []
    for name in ctx.claims.keys(SERIALIZATION):
        rows = ctx.claims.rows(SERIALIZATION, name)
        pool = ctx.claims.pools[name]
        summary = (f"{threads_text(rows)} of {name} {spent_text(rows, ctx)} waiting {times_text(rows)} for each "
                   f"other (each wait ended by another of them); on average {pool.busy_threads:.1f} of its "
                   f"{len(pool.tids)} threads had work (were not waiting for work or time) and they ran on "
                   f"{pool.parallelism:.1f} CPUs of {pool.cpus}")
        root = _roots(ctx, rows)
        if root.held_back:
            blocked_us = max(blocked(rows), 1)
            held = []
            if root.io_us + root.lock_us:
                held.append(f"waiting for a disk or a lock {pct((root.io_us + root.lock_us) / blocked_us)}")
            if root.queued_us:
                held.append(f"in line behind another of them {pct(root.queued_us / blocked_us)}")
            summary += f"; the threads that let them go were {', and '.join(held)} of that time"
        elif pool.held_to_fewer_cpus:
            summary += ": they take turns, as on one lock"
        site = ctx.waits.sites[_heaviest_stack(rows)]
        site_words = f" at {site.lock.name}" if site is not None and site.lock.name != GENERIC_FUTEX else ""
        matches.append(Match(rows, summary + ".", subject=name, title=f"Threads take turns{site_words}: {name}",
                             confidence="low" if ctx.truncated() and site is None else "high",
                             confidence_reason=f"the stacks do not show which lock or queue (user stacks truncated): "
                                               f"{DWARF_HINT}" if ctx.truncated() and site is None else ""))
    return matches


def _roots(ctx: Context, rows: list[Row]) -> Root:
    """What the wakers of these rows' waits did meanwhile, all together."""
    index = ctx.row_number
    whole = Root()
    for row in rows:
        root = ctx.claims.roots.get(index[id(row)])
        if root is not None:
            whole.add(root)
    return whole


def _heaviest_stack(rows: list[Row]) -> int:
    by_stack: dict[int, int] = defaultdict(int)
    for row in rows:
        by_stack[row.stack] += row.offcpu_us
    return max(by_stack, key=by_stack.__getitem__)


def detect_handoff(ctx: Context) -> list[Match]:
    matches = []
    for name in ctx.claims.keys(HANDOFF):
        rows = ctx.claims.rows(HANDOFF, name)
        pool = ctx.claims.pools[name]
        rate = sum(row.count for row in rows) / max(ctx.model.wall_us / 1e6, 1e-9)
        site = ctx.waits.sites[_heaviest_stack(rows)]
        through = f" through a {site.lock.name}" if site is not None and site.lock.kind == "handoff" else ""
        turns = (f"; they take turns, on {pool.parallelism:.1f} CPUs of {pool.cpus}" if pool.held_to_fewer_cpus
                 else "")
        matches.append(Match(rows, f"{threads_text(rows)} of {name} handed work to each other{through} "
                                   f"{rate:,.0f} times a second and {spent_text(rows, ctx)} waiting for it{turns}: "
                                   f"this is how the program is built, not a lock; at high rates its cost is the "
                                   f"switches.", subject=name, cap="info"))
    return matches


def detect_thread_churn(ctx: Context) -> list[Match]:
    life = ctx.claims.lifecycle
    if not ctx.claims.churning or life.median_life_us is None:
        return []
    rows = ctx.claims.rows(THREAD_CHURN)
    us = total(rows)
    busy = ctx.offcpu_us - ctx.idle_us
    paths = "waiting for their first run, and in creating and ending them" if ctx.truncated() else \
        "waiting for their first run, and in creating, joining and ending them"
    return [Match(rows, f"{counted(life.created, 'thread')} were created ({life.created_per_s:,.0f} a second) and "
                        f"lived {us_text(life.median_life_us)} (median); they spent {us_text(us)} off CPU {paths} "
                        f"({pct(us / busy if busy > 0 else 0.0)} of the off-CPU time that was not waiting for work; "
                        f"waits for the stack cache lock aside), and more on CPU setting up and tearing down each "
                        f"thread.",
                  floor="warning", threads=life.created,
                  confidence="low" if ctx.truncated() else "high",
                  confidence_reason=f"waits in pthread_join are not told apart from other futex waits (user stacks "
                                    f"truncated): {DWARF_HINT}" if ctx.truncated() else "")]


def detect_futex_unknown(ctx: Context) -> list[Match]:
    unknown = ctx.claims.rows(FUTEX_UNKNOWN)
    if not unknown:
        return []
    return [Match(unknown, f"{threads_text(unknown)} {spent_text(unknown, ctx)} in "
                           f"{counted(sum(row.count for row in unknown), 'futex wait')} that no recorded thread ended, "
                           f"and whose stacks stop in libc: they may be waits for a lock or for work (a condition "
                           f"variable, a join, a semaphore), so they are neither counted as contention nor as waits "
                           f"for work.",
                  cap="info", confidence="low",
                  confidence_reason="user stacks stop at libc's futex wrapper (glibc built without frame "
                                    f"pointers): {DWARF_HINT}")]


def detect_runqueue(ctx: Context) -> list[Match]:
    rows = ctx.claims.rows(RUNQUEUE)
    if not rows:
        return []
    us = total(rows)
    delay = runqueue_percentiles(ctx.model)
    after_wakeup = (f"; after their wakeups, threads waited {us_text(delay[50])} (median), {us_text(delay[99])} "
                    f"(p99), up to {us_text(delay[100])} for a CPU, which the findings of the waits they were "
                    f"woken from count" if delay else "")
    waiting = sum(row.runqueue_us for row in ctx.model.rows) / max(ctx.model.wall_us, 1)
    were, they = ("was", "it") if tids(rows) == 1 else ("were", "they")
    return [Match(rows, f"{threads_text(rows)} {were} preempted while {they} still had work for {us_text(us)} "
                        f"({pct(ctx.share_of_wall(us, rows))} of {their(rows)} time){after_wakeup}; on average "
                        f"{waiting:.1f} runnable threads waited for the {ctx.model.capture.cpus} CPUs.")]


def detect_io_wait(ctx: Context) -> list[Match]:
    rows = ctx.claims.rows(IO_WAIT)
    if not rows:
        return []
    return [Match(rows, f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for disk I/O "
                        f"(reads, writeback, fsync or the journal).")]


def detect_thread_limits(ctx: Context) -> list[Match]:
    capture = ctx.model.capture
    snapshots = [("at the start of the recording", capture.limits), ("during the recording", capture.limits_peak)]
    when, snapshot = max(((when, snapshot) for when, snapshot in snapshots if snapshot),
                         key=lambda item: _highest_share(item[1]), default=("", None))
    limits = [item for item in (snapshot or {}).get("limits", [])
              if item.get("share") is not None and item["share"] >= LIMIT_INFO_FROM]
    if not snapshot or not limits:
        return []
    worst = max(item["share"] for item in limits)
    floor = "critical" if worst >= LIMIT_CRITICAL_FROM else "warning" if worst >= LIMIT_WARNING_FROM else "info"
    used = "; ".join(f"{item['used']:,} of {item['limit']:,} {item['what']} ({item['name']}, {item['share']:.0%})"
                     for item in sorted(limits, key=lambda item: -item["share"]))
    return [Match([], f"{when.capitalize()} the process was near the limits on threads and memory maps: {used}; "
                      f"at the limit, creating a thread fails with 'Resource temporarily unavailable'.",
                  floor=floor, cap=floor, threads=snapshot.get("threads", 0))]


def _highest_share(snapshot: dict) -> float:
    return max((item["share"] for item in snapshot.get("limits", []) if item.get("share") is not None), default=0.0)


def detect_idle(ctx: Context) -> list[Match]:
    rows = ctx.idle_rows
    if not rows:
        return []
    us = total(rows)
    quiet = tids(row for row in rows if ctx.model.stacks[row.stack].frames == (BEFORE_WINDOW,))
    unwoken = "" if not quiet else " (not woken at all: idle, or stuck, which looks the same)" \
        if quiet == tids(rows) else f" ({quiet:,} of them not woken at all: idle, or stuck, which looks the same)"
    return [Match(rows, f"{threads_text(rows)}{unwoken} spent {us_text(us)} ({pct(ctx.share_of_wall(us, rows))} of "
                        f"{their(rows)} time) waiting for work or for time to pass: woken by a timer, the network, "
                        f"a thread outside their service, or a peer that was itself waiting for work (or handing it "
                        f"over less than {1_000_000 // IDLE_MEAN_WAIT_US} times a second); this is not contention "
                        f"and is left out of the other findings' shares.",
                  cap="info")]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    remedy: str
    detect: Callable[[Context], list[Match]]


RULES: tuple[Rule, ...] = (
    Rule(DEADLOCK, "Threads are deadlocked",
         "Threads that each hold a mutex another of them waits for never go on. Take locks in one order "
         "everywhere (or all at once: std::scoped_lock, std::lock), or take the second with a timeout "
         "(pthread_mutex_timedlock) and back off. The stacks show where each thread waits; `gdb -p PID` and "
         "`thread apply all bt full` show which locks each holds.",
         detect_deadlock),
    Rule(STUCK, "Threads stuck on a lock",
         "A thread that waits for a lock for the whole recording makes no progress. Find what the holder does "
         "while holding it (its stack, here or with `eu-stack -p PID`): it may sleep, wait for I/O or a network "
         "reply, or wait for another lock. Hold locks across no blocking call, and give waits a timeout that "
         "says which lock was not released.",
         detect_stuck),
    Rule(MMAP_LOCK, "Threads wait for the process's memory-map lock (mmap_lock)",
         "Stop mapping and unmapping memory on the hot path: allocate buffers once per thread (or from a pool) and "
         "reuse them, read files with read()/pread() into a reused buffer instead of mmap() per request, and keep "
         "the allocator from returning memory to the kernel all the time (glibc: raise M_MMAP_THRESHOLD and "
         "M_TRIM_THRESHOLD, or use jemalloc/tcmalloc). In the MemSQL case, read() instead of mmap() per query "
         "nearly doubled throughput.",
         detect_mmap_lock),
    Rule(STACK_CACHE_LOCK, "Thread creation and exit wait for glibc's stack cache lock",
         "Stop creating a thread per task: run tasks on a fixed pool of threads created once. glibc serializes "
         "every thread creation and exit on one lock, held while thread stacks are mapped and unmapped, so the "
         "cost of starting a thread grows with how many start and exit at the same time. If threads must come "
         "and go, give them smaller stacks (pthread_attr_setstacksize) so freed stacks stay in glibc's stack "
         "cache (40 MiB by default, GLIBC_TUNABLES=glibc.pthread.stack_cache_size).",
         detect_stack_cache_lock),
    Rule(LOCK_CONTENTION, "Threads wait for a lock another thread holds", LOCK_REMEDY, detect_lock_contention),
    Rule(SERIALIZATION, "Threads take turns: they wait on each other",
         "The threads wait for one another far more than they run: one lock, queue or resource lets one of them "
         "through at a time. The wait site shows where they wait and the release site which code lets them go; "
         "make that section shorter or split what it guards so that several can go at once, or use fewer "
         "threads (they add waiting, not throughput). When the threads that let them go were waiting for a disk "
         "or a lock themselves (the chain), fix that first.",
         detect_serialization),
    Rule(HANDOFF, "Threads hand work to each other",
         "Nothing is held here: the threads wait for each other's data by design (a pipe, a queue, a request and "
         "its reply). At high rates the cost is the switches: hand over work in batches, or keep both sides on "
         "one thread.",
         detect_handoff),
    Rule(THREAD_CHURN, "Threads are created and destroyed at a high rate",
         "Use a thread pool sized to the CPUs and the work, fed by a bounded queue, instead of a thread per task "
         "or request: each new thread costs a clone, a stack mapping and its guard page, and an unmapping at exit, "
         "all under process-wide locks.",
         detect_thread_churn),
    Rule(FUTEX_UNKNOWN, "Futex waits of unknown kind",
         "Record again with --call-graph dwarf: the full user stacks tell lock waits (pthread_mutex_lock, rwlocks) "
         "from waits for work (pthread_cond_wait, pthread_join, sem_wait), and these waits become "
         "lock_contention or idle.",
         detect_futex_unknown),
    Rule(RUNQUEUE, "Threads wait for a CPU (CPU saturation)",
         "The threads had work but no CPU to run it on: run no more busy threads than there are CPUs (size pools "
         "to the CPU count), remove or throttle other CPU-heavy work on the machine, or give it more CPUs. This is "
         "not a lock: making critical sections shorter will not help.",
         detect_runqueue),
    Rule(IO_WAIT, "Threads wait for disk I/O",
         "Find which files and devices are slow (iostat -x, biolatency); batch fsync/fdatasync calls, move writes "
         "and flushes off the request path, read ahead or cache hot data, or use faster storage.",
         detect_io_wait),
    Rule("thread_limits", "The process is near the limits on threads or memory maps",
         "Bound the number of threads: a fixed pool with a bounded queue that pushes back on the producer. "
         "Raising ulimit -u (RLIMIT_NPROC), kernel.threads-max, kernel.pid_max or vm.max_map_count only postpones "
         "the 'Resource temporarily unavailable' failures.",
         detect_thread_limits),
    Rule(IDLE, "Threads wait for work (idle)",
         "Nothing to fix: threads blocked waiting for work cost almost nothing. Look at the other findings.",
         detect_idle),
)


# -- running them ---------------------------------------------------------------------

def severity_of(share: float) -> str:
    return "critical" if share >= CRITICAL_FROM else "warning" if share >= WARNING_FROM else "info"


def evidence(model: Model, rows: list[Row]) -> tuple[Evidence, ...]:
    """The stacks (with their state) that carry most of the rows' off-CPU time, grouped
    as the stack tables group them: stacks that read the same (they differ only in frames
    perf could not name or in the scheduler's own) are one."""
    return _heaviest(model, [(row.stack, row.state, row.offcpu_us, row.count, row.variance) for row in rows])


def release_sites(model: Model, rows: list[Row]) -> tuple[Evidence, ...]:
    """The wakers' stacks at the wakeups that ended the rows' waits, weighted by how long
    those waits had been blocked (of a sampling recording, those it took)."""
    return _heaviest(model, [(model.wakers[row.waker].stack, "", row.blocked_us, row.count, 0) for row in rows
                             if row.waker is not None and model.wakers[row.waker].kind in ("thread", "interrupt")
                             and model.stacks[model.wakers[row.waker].stack].frames != (WAKER_STACK_NOT_TAKEN,)])


def _heaviest(model: Model, weighted: list[tuple[int, str, int, int, int]]) -> tuple[Evidence, ...]:
    """(stack, state, µs, count, variance) grouped by how the stack reads, heaviest first."""
    groups: dict[tuple[str, str], list[tuple[int, int, int, int]]] = defaultdict(list)
    for stack_index, state, us, count, variance in weighted:
        stack = model.stacks[stack_index]
        groups[(reading(tuple(reversed(stack.frames)), stack.kernel_frames), state)].append(
            (stack_index, us, count, variance))
    said = []
    for (_, state), group in groups.items():
        by_stack: dict[int, int] = defaultdict(int)
        for stack_index, us, _, _ in group:
            by_stack[stack_index] += us
        frames, kernel_frames = drawn_alone(model.stacks[max(by_stack, key=by_stack.__getitem__)])  # the heaviest
        said.append(Evidence(frames, kernel_frames, state, sum(us for _, us, _, _ in group),
                             sum(count for _, _, count, _ in group), sum(variance for *_, variance in group)))
    return tuple(sorted(said, key=lambda item: -item.offcpu_us)[:EVIDENCE_STACKS])


def waker_shares(ctx: Context, rows: list[Row]) -> tuple[WakerShare, ...]:
    """Who ended the rows' waits: the wakers' pools, or what else it was."""
    shares: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    index = ctx.row_number
    for row in rows:
        cause = ctx.waits.classes[index[id(row)]].cause
        if row.waker is None:
            continue  # not let go in the window
        if ctx.model.wakers[row.waker].kind == "thread":
            waker = ctx.model.wakers[row.waker]
            who = ctx.waits.pool_of(waker.tid) if waker.tid in ctx.model.threads else f"{waker.comm} ({waker.pid})"
        else:
            who = CAUSE_WORDS[cause]
        shares[who][0] += row.count
        shares[who][1] += row.blocked_us
    ranked = sorted(shares.items(), key=lambda item: -item[1][1])
    return tuple(WakerShare(who, wakeups, us) for who, (wakeups, us) in ranked[:WAKERS] if us)


def chain(ctx: Context, rows: list[Row]) -> tuple[ChainStep, ...]:
    """What the threads that ended the rows' waits were doing meanwhile: their waits that
    overlapped them (by where they waited), and running for the rest."""
    index = ctx.row_number
    numbers = [index[id(row)] for row in rows if ctx.waits.classes[index[id(row)]].cause == PEER]
    whole = sum(ctx.model.rows[number].blocked_us for number in numbers)
    if not whole:
        return ()
    pools = {ctx.waits.pool_of(row.tid) for row in rows}
    steps: dict[str, int] = defaultdict(int)
    for number in numbers:
        overlapped = 0
        for waker_row, overlap in ctx.waits.links_by_waiter.get(number, ()):
            steps[_step_words(ctx, waker_row, pools)] += overlap
            overlapped += overlap
        steps["ran"] += max(0, ctx.model.rows[number].blocked_us - overlapped)
    ranked = sorted(steps.items(), key=lambda item: -item[1])
    return tuple(ChainStep(what, us, us / whole) for what, us in ranked[:CHAIN_STEPS] if us >= 0.01 * whole)


def _step_words(ctx: Context, number: int, pools: set[str]) -> str:
    """A waker's overlapping wait: where it waited (and whose, when not the waiters' own pool)."""
    pool = ctx.waits.pool_of(ctx.model.rows[number].tid)
    whose = "" if pool in pools else f" ({pool})"
    claim = ctx.claims.of_row[number]
    if claim is not None and claim.finding == RUNQUEUE:
        return f"waited for a CPU{whose}"
    return f"waited for {_root_words(ctx, number)}{whose}"


ON_CPU = "a thread on CPU (or waiting for one)"
# What is left going round: rows whose waits were ended by peers that were themselves waiting
# on the first rows. Counted by rows, the chains of a lock's queue close on themselves (in
# time each goes back to a holder on CPU): wPerf calls such a cycle a knot, the threads taking
# turns at something none of them lets go of sooner.
IN_TURNS = "one another, in turns (their waits end in each other's)"
ROOT_ROUNDS = 2000  # at most: each round carries what is left of a chain one waker further
ROOT_SETTLED = 1e-6  # a round that moves no row's share by more than this ends the rounds
IN_TURNS_FROM = 1e-3  # less left going round than this is the rounding of the rounds


def roots(ctx: Context, rows: list[Row]) -> tuple[RootShare, ...]:
    """The peer-ended part of the rows' blocked time, followed down the wake-up links to its
    roots (wPerf's cascaded redistribution): the time a waker was itself waiting for a peer
    goes to what that peer was doing, in proportion, and so on; the rest of each wait goes
    to the waker's own wait (a disk, a timer...) or to its being on CPU."""
    index = ctx.row_number
    numbers = [index[id(row)] for row in rows if ctx.waits.classes[index[id(row)]].cause == PEER]
    whole = sum(ctx.model.rows[number].blocked_us for number in numbers)
    if not whole:
        return ()
    shares = ctx.root_shares
    found: dict[str, float] = defaultdict(float)
    for number in numbers:
        for what, share in shares[number].items():
            found[what] += share * ctx.model.rows[number].blocked_us
    ranked = sorted(found.items(), key=lambda item: -item[1])
    return tuple(RootShare(what, round(us), us / whole) for what, us in ranked[:CHAIN_STEPS + 1] if us >= 0.01 * whole)


def _root_shares(ctx: Context) -> dict[int, dict[str, float]]:
    """For every peer-ended row, what its blocked time came down to, as shares of it: the
    fixed point of "a row's roots are its wakers' overlapping waits' roots (their own kind
    for waits no peer ended), and a thread on CPU for the rest", reached round by round
    (each round follows the chains one waker further) until no share moves; what still
    goes round then is the rows' turns on one another (IN_TURNS)."""
    peers = [number for number, cls in enumerate(ctx.waits.classes) if cls.cause == PEER]
    place = {number: at for at, number in enumerate(peers)}
    labels: dict[str, int] = {}
    own: list[tuple[int, int, float]] = []  # (row's place, label, share): the part no peer's wait carries
    carried: list[tuple[int, int, float]] = []  # (row's place, its waker's place, share): what a peer's wait carries
    for at, number in enumerate(peers):
        blocked_us = ctx.model.rows[number].blocked_us
        links = ctx.waits.links_by_waiter.get(number, ())
        overlapped = sum(overlap for _, overlap in links)
        # Sampled links are estimates that may add up to more than the row's own (estimated)
        # time: they share it then, so that no row hands on more than all of it.
        whole = max(blocked_us, overlapped)
        for waker_row, overlap in links:
            part = overlap / whole if whole else 0.0
            if ctx.waits.classes[waker_row].cause == PEER:
                carried.append((at, place[waker_row], part))
            else:
                own.append((at, labels.setdefault(_root_words(ctx, waker_row), len(labels)), part))
        if blocked_us > overlapped:
            own.append((at, labels.setdefault(ON_CPU, len(labels)), (blocked_us - overlapped) / blocked_us))
    carried.sort()  # by waiter: the core sums each waiter's links together
    shares = _core.root_shares(len(peers), len(labels), own, carried, ROOT_ROUNDS, ROOT_SETTLED)
    names = list(labels)
    result = {}
    for at, number in enumerate(peers):
        row = {names[label]: float(share) for label, share in enumerate(shares[at]) if share > 0}
        in_turns = 1.0 - sum(row.values())
        if in_turns > IN_TURNS_FROM:
            row[IN_TURNS] = in_turns
        result[number] = row
    return result


def _root_words(ctx: Context, number: int) -> str:
    """A wait at the root of a chain: where it waited, or what ended it."""
    cls, claim = ctx.waits.classes[number], ctx.claims.of_row[number]
    if (claim is not None and claim.finding == RUNQUEUE) or cls.cause in (PREEMPTED_CAUSE, NEW):
        return ON_CPU
    if cls.site is not None:
        return "a futex of the program's" if cls.site.lock.name == GENERIC_FUTEX else cls.site.lock.name
    if cls.cause == PEER:
        return "another thread of theirs"
    return f"a wait ended by {CAUSE_WORDS[cls.cause]}"


def _finding(rule: Rule, ctx: Context, match: Match) -> Finding | None:
    us = total(match.rows)
    idle = rule.id == IDLE
    graded = graded_us(rule.id, match.rows)
    share_of_wall = ctx.share_of_wall(graded, match.rows) if match.rows else 0.0
    offcpu = ctx.offcpu_us if idle else ctx.offcpu_us - ctx.idle_us
    # The sub-windows keep off-CPU time: a lock's share, of its blocked part, spreads as much
    # in proportion (its blocked part taken to be the same share of each sub-window's)
    uncertainty = ctx.share_uncertainty(match.rows) * (graded / us if us else 1.0)
    rank = SEVERITIES.index

    def severity_at(share: float) -> str:
        return SEVERITIES[min(max(rank(severity_of(share)), rank(match.floor)), rank(match.cap))]

    severity = severity_at(share_of_wall)
    if not idle and severity == "info" and match.floor == "info" and share_of_wall < REPORT_FROM:
        return None
    peer_waits = rule.id not in (IDLE, RUNQUEUE, "thread_limits")
    return Finding(
        id=rule.id, severity=severity, title=match.title or rule.title, summary=match.summary, offcpu_us=us,
        blocked_us=blocked(match.rows), share_of_wall=share_of_wall,
        share_of_offcpu=min(us / offcpu, 1.0) if offcpu > 0 else 0.0,
        threads=match.threads if match.threads is not None else tids(match.rows),
        evidence=evidence(ctx.model, match.rows), remedy=match.remedy or rule.remedy,
        confidence=match.confidence, confidence_reason=match.confidence_reason, subject=match.subject,
        release_sites=release_sites(ctx.model, match.rows) if peer_waits else (),
        wakers=waker_shares(ctx, match.rows) if peer_waits else (),
        chain=chain(ctx, match.rows) if peer_waits else (),
        roots=roots(ctx, match.rows) if peer_waits else (),
        share_uncertainty=uncertainty, settled_severity=severity_at(share_of_wall - uncertainty),
    )


def findings(model: Model, rules: tuple[Rule, ...] = RULES, table: LockTable | None = None) -> list[Finding]:
    """What every rule found in the model, worst first: by severity, then waits with a
    cause in the program before waits for a CPU (which the machine's other load shares),
    then by time."""
    ctx = Context(model, table)
    found = [finding for rule in rules for match in rule.detect(ctx)
             if (finding := _finding(rule, ctx, match)) is not None]
    return sorted(found, key=lambda f: (-SEVERITIES.index(f.severity), f.id == RUNQUEUE,
                                        -(f.blocked_us if f.id in LOCK_FINDINGS else f.offcpu_us)))


def view_findings(model: Model, view: StackView) -> list[Finding]:
    """The findings about the threads a report's filters keep, in every state."""
    return findings(of_threads(model, view), table=lock_table(view.locks))


def graded_us(finding_id: str, rows: list[Row]) -> int:
    """The time a finding is graded by: a lock's, the time blocked on it; the others', their
    whole time off CPU."""
    return blocked(rows) if finding_id in LOCK_FINDINGS else total(rows)

