"""The rules: each is data (its id, title and remedy) and a function that turns the waits the
claims gave it (offcpu.diagnosis.claims) into matches, each with its sentence."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from offcpu.diagnosis.claims import (
    BUSY_PEER,
    CPU_THROTTLING,
    DEADLOCK,
    FUTEX_UNKNOWN,
    HANDOFF,
    IDLE,
    IDLE_MEAN_WAIT_US,
    IO_WAIT,
    LOCK_CONTENTION,
    MMAP_LOCK,
    PTHREAD_MUTEX,
    PYTHON_GIL,
    RUNQUEUE,
    SEMAPHORE,
    SERIALIZATION,
    STACK_CACHE,
    STACK_CACHE_LOCK,
    STUCK,
    THREAD_CHURN,
    Root,
)
from offcpu.diagnosis.context import Context, blocked, tids, total
from offcpu.diagnosis.evidence import RootShare, chain, roots
from offcpu.diagnosis.locktable import GENERIC_FUTEX
from offcpu.diagnosis.roots import IN_TURNS, ON_CPU
from offcpu.diagnosis.wording import counted, pct, us_text
from offcpu.model import WHOLE_WINDOW, Row
from offcpu.model.summaries import runqueue_percentiles
from offcpu.stacks import BEFORE_WINDOW, RUNTIME_MARKS, held_by, program_frame, runtime_parts, waited_for

# thread_limits: a limit used this much is worth a finding, a warning, critical.
LIMIT_INFO_FROM = 0.5
LIMIT_WARNING_FROM = 0.8  # offcpu.machine.limits.WARN_FROM, doctor's "near"
LIMIT_CRITICAL_FROM = 0.95

DWARF_HINT = "record with --call-graph dwarf to see the callers"
# A lock's holders made a blocking call while holding it when one wait of theirs (a sleep, the
# disk, the network, another thread) took at least this share of the time its waiters waited.
BLOCKING_FROM = 0.5
PROGRAM_SITES = 2  # the program's own places a lock's finding names (the heaviest)
TURNS_PER_THREAD = 2  # threads take turns when they wait for each other this many times each, on average
SEMAPHORE_AS_LOCK = ("a POSIX semaphore that the threads waiting on it post in turns: a lock (CPython's "
                     "threading.Lock is one)")
GIL_UNSEEN = ("take_gil is not in the stacks (libpython and glibc have no frame pointers): a condition variable "
              "that a CPython process's threads signal to each other in turns is taken for its GIL (threading's "
              "locks are semaphores), with the waits there that timed out (its 5 ms switch interval); "
              f"{DWARF_HINT}")
BLOCKING_CALL_REMEDY = ("Make no blocking call while holding the lock (or the monitor, or what the threads take "
                        "turns at): every waiter waits for the call too. Do the sleep, the I/O or the request "
                        "before taking the lock or after letting it go, and hold it only around the shared state it "
                        "guards. The chain shows what the holders waited for, and the release site where they let "
                        "it go.")
RUNTIME_DEADLOCK_REMEDY = (
    "Threads that each hold a lock another of them waits for never go on. Take the locks (monitors: synchronized "
    "blocks) in one order everywhere, or take the second with a timeout (ReentrantLock.tryLock, Ruby's "
    "Mutex#try_lock) and back off. The stacks show where each thread waits and who held what it waits for; "
    "`jstack PID` shows which monitors a JVM's threads hold.")
LOCK_REMEDY = ("Hold the lock for less time or less often: move work out of the critical section, split the data so "
               "threads do not share one lock (per-thread or per-CPU state merged at the end, striped locks), or use "
               "atomics for simple counters. The wait site shows who waits, the release site who held it.")


@dataclass(frozen=True)
class Match:
    """What a rule found: the rows it is about and its sentence."""

    rows: list[Row]
    summary: str
    confidence: str = "high"
    confidence_reason: str = ""
    floor: str = "info"  # lowest severity, whatever the share
    # The time it is graded by, and the rows whose time that is part of, when not its rows' own
    # time (CPU saturation: the run-queue time of every wait, not only of its rows)
    graded_us: int | None = None
    graded_rows: list[Row] | None = None
    cap: str = "critical"  # highest severity
    threads: int | None = None  # counted from the rows unless given
    subject: str = ""
    title: str = ""  # instead of the rule's
    remedy: str = ""  # instead of the rule's


def threads_text(rows: Iterable[Row]) -> str:
    return counted(tids(rows), "thread")


def spent_text(rows: list[Row], ctx: Context) -> str:
    """'spent 5.7 s (2.1 s until woken, 24% of their time; 3.6 s more waiting for a CPU)': a
    finding's share is of the time its waits were blocked (the wait for a CPU after their
    wakeups is CPU saturation's, but for a lock convoy's: Context.own_us)."""
    us = total(rows)
    woken = blocked(rows)
    if us == woken:
        return f"spent {us_text(us)} ({pct(ctx.share_of_wall(us, rows))} of {their(rows)} time)"
    if all(id(row) in ctx.convoy for row in rows):
        return (f"spent {us_text(us)} ({pct(ctx.share_of_wall(us, rows))} of {their(rows)} time: {us_text(woken)} "
                f"until woken, {us_text(us - woken)} more waiting for a CPU in a line made mostly of the lock's own "
                f"woken waiters: a convoy)")
    share = f"{pct(ctx.share_of_wall(woken, rows))} of {their(rows)} time"
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
    return [Match(rows, f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for the "
                        f"process's memory-map lock (mmap_lock), which mmap, munmap, mprotect, madvise and page "
                        f"faults all take.", subject="mmap_lock")]


def detect_stack_cache_lock(ctx: Context) -> list[Match]:
    rows = ctx.claims.rows(STACK_CACHE_LOCK)
    if not rows:
        return []
    summary = (f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for glibc's stack "
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
    """A finding per lock, named by the lock table where the threads waited or where they were
    let go (glibc's mutexes, a runtime's or a server's), with what its holders did while the
    threads waited: a blocking call inside the critical section is the reason, and the fix."""
    matches = []
    for name in ctx.claims.keys(LOCK_CONTENTION):
        rows = ctx.claims.rows(LOCK_CONTENTION, name)
        lock = ctx.waits.table.named(name)
        assert lock is not None, "a claim names a lock of the table"
        what = SEMAPHORE_AS_LOCK if name == SEMAPHORE else lock.what or name
        summary = (f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for {what}"
                   f"{_program_sites(ctx, rows)}")
        blocking = _blocking_call(ctx, rows)
        if lock.retry:
            summary += (": they sleep and try again, so a timer ends their waits, not the holder; meanwhile "
                        f"{_holders(ctx, rows)}")
        elif blocking:
            summary += (f"; {pct(blocking.share)} of that time came down to the holders waiting for "
                        f"{blocking.what}: a blocking call inside the critical section{_holder_sites(ctx, rows, name)}")
        summary += _owners(ctx, rows)
        reason = f"which lock is not shown (user stacks truncated): {DWARF_HINT}" \
            if ctx.truncated() and name == PTHREAD_MUTEX else ""
        gil_unseen = name == PYTHON_GIL and not any(lock.waits_at(ctx.waits.normal_frames(row.stack)) is not None
                                                    for row in rows)
        objects = sorted({found for row in rows if (site := ctx.waits.sites[row.stack]) is not None
                          and (found := waited_for(site.frame)) is not None})
        title = f"Threads wait for a lock: {name}" + (f" ({', '.join(objects)})" if objects else "")
        matches.append(Match(rows, summary + ".", subject=name, title=title,
                             remedy=BLOCKING_CALL_REMEDY if blocking and not lock.retry else
                             lock.remedy or LOCK_REMEDY,
                             confidence="low" if gil_unseen else "high",
                             confidence_reason=GIL_UNSEEN if gil_unseen else reason))
    return matches


def detect_deadlock(ctx: Context) -> list[Match]:
    """A finding per cycle of threads each waiting for a lock the next holds: asleep all the
    window at a mutex (glibc's owner of each, read at the window's end), or at a Java monitor
    (its owner named by the thread dumps), where HotSpot wakes them by a timer to try again."""
    matches = []
    for deadlock in ctx.claims.deadlocks:
        tids_of = set(deadlock.cycle + deadlock.behind)
        rows = [row for row in ctx.claims.rows(DEADLOCK) if row.tid in tids_of]
        if not rows:
            continue
        first, *others = deadlock.cycle
        holder = ctx.claims.mutex_owners
        lock = _lock_words(ctx, first)
        links = [f"{_thread_words(ctx, first)}{_where_words(ctx, first)} waits for {lock} "
                 + (f"held by {_thread_words(ctx, holder[first])}" if others else "it holds itself")]
        links += [f"which{_where_words(ctx, tid)} waits for "
                  f"{'one' if (words := _lock_words(ctx, tid)) == lock else words} held by "
                  f"{_thread_words(ctx, holder[tid])}" for tid in others]
        behind = (f"; {counted(len(deadlock.behind), 'more thread')} wait{'s' * (len(deadlock.behind) == 1)} "
                  f"behind them ({', '.join(_thread_words(ctx, tid) for tid in deadlock.behind)})"
                  if deadlock.behind else "")
        waited = (f"waited all {us_text(ctx.model.wall_us)} of the recording and none of them ran"
                  if all(row.waker is None for row in rows) else
                  f"{spent_text(rows, ctx)} deadlocked, woken only by timers to try again")
        summary = f"{threads_text(rows)} {waited}: {', '.join(links)}{behind}."
        matches.append(Match(rows, summary, floor="critical", subject=_thread_words(ctx, deadlock.cycle[0]),
                             remedy="" if lock == "a mutex" else RUNTIME_DEADLOCK_REMEDY))
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
                   f"{lock.what or name}{_program_sites(ctx, rows)}{held}, and made no progress.")
        matches.append(Match(rows, summary, floor="warning", subject=name, title=f"Threads stuck on a lock: {name}"))
    return matches


def _program_sites(ctx: Context, rows: list[Row]) -> str:
    """Where in the program's own code the waits were: the innermost runtime frame (a Python
    function and line, read while recording) of each wait's stack, the two heaviest by time, with
    their shares of all the rows' time (those without one count in the whole)."""
    by_frame: dict[str, int] = defaultdict(int)
    for row in rows:
        if (frame := _innermost_runtime(ctx, row)) is not None:
            by_frame[frame] += row.offcpu_us
    return _sites_text(" at ", by_frame, sum(row.offcpu_us for row in rows))


def _holder_sites(ctx: Context, rows: list[Row], lock: str) -> str:
    """Where in the program's own code the holders made the blocking call: a holder is on CPU when
    it lets go, so its own stack carries no runtime frame, but its waits that overlapped the
    waiters' (other than for the lock itself) do when a read of its stacks fell in them. The
    innermost runtime frames of those, by the overlap, as shares of the overlap that has one."""
    by_frame: dict[str, int] = defaultdict(int)
    for row in rows:
        for waker_row, overlap in ctx.waits.links_by_waiter.get(ctx.row_number[id(row)], ()):
            claim = ctx.claims.of_row[waker_row]
            if (claim is None or claim.key != lock) and \
                    (frame := _innermost_runtime(ctx, ctx.model.rows[waker_row])) is not None:
                by_frame[frame] += overlap
    return _sites_text(", made at ", by_frame, sum(by_frame.values()))


def _innermost_runtime(ctx: Context, row: Row) -> str | None:
    """A wait's innermost runtime frame of the program's own (stacks.program_frame)."""
    return program_frame(ctx.model.stacks[row.stack].frames)


def _sites_text(words: str, by_frame: dict[str, int], whole: int) -> str:
    heaviest = sorted(by_frame.items(), key=lambda item: (-item[1], item[0]))[:PROGRAM_SITES]
    return (words + ", ".join(f"{frame} ({pct(us / whole)})" for frame, us in heaviest)) if heaviest else ""


RUBY_ENDING = f") {RUNTIME_MARKS['MRI']}"  # a Ruby frame's: its holders were named by reads of its memory


def _owners(ctx: Context, rows: list[Row]) -> str:
    """Who held the lock, where the runtime named its owner while the threads waited (a Java
    monitor's, in the stacks' holder frames): the owners' place that most of the waits' time had,
    with their names; "" where none was named."""
    places: dict[str, tuple[set[str], int]] = {}
    ruby = False
    for row in rows:
        frames = ctx.model.stacks[row.stack].frames
        held = next((found for frame in frames if (found := held_by(frame))), None)
        if held is not None:
            owner, _, where = held.rpartition(": ")
            names, us = places.get(where, (set(), 0))
            places[where] = (names | {owner}, us + row.offcpu_us)
            ruby = ruby or any(frame.endswith(RUBY_ENDING) for frame in frames)
    if not places:
        return ""
    where, (names, us) = max(places.items(), key=lambda place: place[1][1])
    named_by = "the reads of its threads" if ruby else "the thread dumps"  # a Ruby process's memory, a JVM's dumps
    return (f"; {pct(us / max(total(rows), 1))} of that time {named_by} named its owner as "
            f"{', '.join(sorted(names))}, in {where}")


def _blocking_call(ctx: Context, rows: list[Row]) -> RootShare | None:
    """What a lock's waits mostly came down to, followed through its holders' own waits, when
    that is a wait (a sleep, the disk, the network) and not threads running or taking turns:
    a blocking call made while holding the lock."""
    found = roots(ctx, rows)
    top = found[0] if found else None
    return top if top is not None and top.share >= BLOCKING_FROM and top.what not in (ON_CPU, IN_TURNS) else None


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


def _deadlock_row(ctx: Context, tid: int) -> Row | None:
    """The wait of a deadlocked thread that says where it waits: the longest at a lock its runtime
    named (a Java monitor), or its wait all the window."""
    mine = [row for row in ctx.model.rows if row.tid == tid]
    named = [row for row in mine if (site := ctx.waits.sites[row.stack]) is not None and waited_for(site.frame)]
    return max(named, key=lambda row: row.offcpu_us) if named else next(
        (row for row in mine if row.waker is None and row.offcpu_us >= WHOLE_WINDOW * ctx.model.wall_us), None)


def _lock_words(ctx: Context, tid: int) -> str:
    """What a deadlocked thread waits for: 'a mutex', or a runtime's lock with what its runtime
    named ('a Java monitor (a java.lang.Object)')."""
    row = _deadlock_row(ctx, tid)
    site = ctx.waits.sites[row.stack] if row is not None else None
    found = waited_for(site.frame) if site is not None else None
    return f"a {site.lock.name} ({found})" if site is not None and found else "a mutex"


def _where_words(ctx: Context, tid: int) -> str:
    """Where a deadlocked thread waits in its program's code, where its runtime's frames say:
    ' at JavaDeadlock.takeBoth (JavaDeadlock.java:58)'; '' otherwise."""
    row = _deadlock_row(ctx, tid)
    frames = ctx.model.stacks[row.stack].frames if row is not None else ()
    parts = next((found for frame in frames if (found := runtime_parts(frame)) is not None), None)
    return f" at {parts[0]} ({parts[1]}:{parts[2]})" if parts and parts[2] else f" in {parts[0]}" if parts else ""


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
        blocking = _blocking_call(ctx, rows)
        # Held back mostly in the line itself, the ones let through say less than the chain
        # followed to what the line's head did (a blocking call)
        remedy = ""
        if blocking is not None and (not root.held_back or root.queued_us >= root.io_us + root.lock_us):
            summary += (f"; {pct(blocking.share)} of that time came down to the one let through waiting for "
                        f"{blocking.what}: a blocking call while holding what they take turns at")
            remedy = BLOCKING_CALL_REMEDY
        elif root.held_back:
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
        # Turns are taken again and again: waits of each thread once or so are not (the JVM launcher's
        # thread joining the main thread, itself asleep 1.5 s: 3 threads waiting 4 times, in one CI run)
        turns = sum(row.count for row in rows) >= TURNS_PER_THREAD * tids(rows)
        matches.append(Match(rows, summary + ".", subject=name, title=f"Threads take turns{site_words}: {name}",
                             remedy=remedy, cap="critical" if turns else "info",
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


def detect_busy_peer(ctx: Context) -> list[Match]:
    """A finding per busy peer (a pool of threads, or another process) that threads of another
    pool waited for while it ran or was held back itself."""
    matches = []
    for name in ctx.claims.keys(BUSY_PEER):
        rows = ctx.claims.rows(BUSY_PEER, name)
        peer = ctx.claims.pools[name]
        waiters = sorted({ctx.waits.pool_of(row.tid) for row in rows})
        runqueue_us = sum(ctx.model.threads[tid].runqueue_us for tid in peer.tids)
        meanwhile = ", ".join(f"{step.what} {pct(step.share)}" for step in chain(ctx, rows)[:2])
        matches.append(Match(
            rows, f"{threads_text(rows)} of {', '.join(waiters)} {spent_text(rows, ctx)} waiting {times_text(rows)} "
                  f"for {name}, which ran {us_text(peer.oncpu_us)} on CPU in the {us_text(ctx.model.wall_us)} "
                  f"recorded ({peer.parallelism:.1f} CPUs) and waited {us_text(runqueue_us)} for a CPU; while "
                  f"{'it' if tids(rows) == 1 else 'they'} waited, it {meanwhile}: it sets {their(rows)} pace.",
            subject=name, title=f"Threads wait for a busy peer: {name}"))
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
    """CPU saturation, graded by every wait's time waiting for a CPU: preempted while it still
    had work, and after its wakeup (the part of other findings' waits that is not theirs, but
    for a lock convoy's: Context.convoy)."""
    rows = ctx.claims.rows(RUNQUEUE)
    woken = [row for row in ctx.woken_waiting_for_a_cpu
             if ctx.model.threads[row.tid].pid not in ctx.claims.throttled and id(row) not in ctx.convoy]
    preempted_us, after_us = total(rows), sum(row.runqueue_us for row in woken)
    if not preempted_us + after_us:
        return []
    delay = runqueue_percentiles(ctx.model)
    after_wakeup = (f", {us_text(after_us)} after their wakeups ({us_text(delay[50])} median, {us_text(delay[99])} "
                    f"p99, up to {us_text(delay[100])})" if delay and after_us else "")
    waiting = sum(row.runqueue_us for row in ctx.model.rows) / max(ctx.model.wall_us, 1)
    share = ctx.share_of_wall(preempted_us + after_us, rows + woken)
    return [Match(rows, f"{threads_text(rows + woken)} waited {us_text(preempted_us + after_us)} for a CPU "
                        f"({pct(share)} of their time): {us_text(preempted_us)} preempted while they still had "
                        f"work{after_wakeup}; on average {waiting:.1f} runnable threads waited for the "
                        f"{ctx.model.capture.cpus} CPUs.",
                  graded_us=preempted_us + after_us, graded_rows=rows + woken, threads=tids(rows + woken))]


def detect_cpu_throttling(ctx: Context) -> list[Match]:
    """A finding per cgroup whose CPU limit held its threads off (see claims.THROTTLED_COVERS)."""
    matches = []
    for path in ctx.claims.keys(CPU_THROTTLING):
        rows = ctx.claims.rows(CPU_THROTTLING, path)
        cgroup = next(cgroup for cgroup in ctx.claims.throttled.values() if cgroup.path == path)
        counters = cgroup.end or cgroup.start
        limit = (f"its limit is {counters.cpus:.2f} CPUs (a quota of {us_text(counters.cpu_quota_us or 0)} of CPU time "
                 f"per {us_text(counters.cpu_period_us or 0)} period), and " if counters and counters.cpus else "")
        were, they = ("was", "it") if tids(rows) == 1 else ("were", "they")
        # its threads' waits for a CPU after their wakeups are the limit's too, not CPU saturation's
        woken = [row for row in ctx.woken_waiting_for_a_cpu
                 if ctx.claims.throttled.get(ctx.model.threads[row.tid].pid) is cgroup]
        after_us = sum(row.runqueue_us for row in woken)
        us = total(rows) + after_us
        after = f" ({us_text(after_us)} of it after their wakeups)" if after_us else ""
        share = pct(ctx.share_of_wall(us, rows + woken))  # (what it is graded by)
        matches.append(Match(rows, f"{threads_text(rows)} of cgroup {cgroup.describe()} {were} held off a CPU while "
                                   f"{they} still had work for {us_text(us)}{after} ({share} of {their(rows)} time) "
                                   f"by the cgroup's CPU limit: {limit}the kernel throttled it in "
                                   f"{cgroup.throttled_periods:,} of the {cgroup.periods:,} periods in which it ran "
                                   f"while recorded, {us_text(cgroup.throttled_ns // 1000)} in all.",
                             subject=path, graded_us=us, graded_rows=rows + woken))
    return matches


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
    Rule(BUSY_PEER, "Threads wait for a busy peer",
         "The peer is the bottleneck: it was running (or held back itself) while these threads waited for it, so "
         "it sets their pace. Profile it on CPU (perf record -g -p PID, perf top) and make its work cheaper, give it "
         "more CPU or more parallelism (more workers or processes, a cheaper setting such as a lighter compression "
         "level), or give it less work. The waiting threads cost nothing; speeding them up will not help.",
         detect_busy_peer),
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
    Rule(CPU_THROTTLING, "Threads are throttled by their cgroup's CPU limit",
         "The threads had work, but their cgroup had used its CPU time for the period (its quota), so the kernel "
         "held them off until the next period: this is not CPU saturation, and fewer threads or shorter critical "
         "sections will not help. Raise the limit (Kubernetes: the container's CPU limit, resources.limits.cpu; "
         "systemd: CPUQuota=; Docker: --cpus), or use less CPU per period: less work per request, or fewer "
         "threads running at once (together they spend the quota early in the period, then all wait).",
         detect_cpu_throttling),
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
