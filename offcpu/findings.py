"""Findings: the contention a model shows, named, with its evidence and its fix.

Pure functions over the model. Each rule is data (id, title, remedy) plus a
function that picks the off-CPU rows it is about; `findings` runs every rule
in RULES and ranks what they found, worst first. Adding a rule is one entry
in RULES.

What a finding counts (its `offcpu_us`) is the whole off-CPU time of its
rows: for a wait, the time blocked until the wakeup and then the time waiting
for a CPU (a thread that had not blocked would not have lost its CPU); summaries
say both parts. `runqueue` counts the time threads were preempted while they
still had work, which no other rule counts: no microsecond is in two findings.

Shares: `share_of_wall` is that time over the wall time of the threads it is
about (each one's on-CPU plus off-CPU time, and never less than one thread's
whole window, so that one short-lived thread's wait does not look like a
process-wide problem); `share_of_offcpu` is its share of all off-CPU time, idle
time (threads waiting for work) left out for every rule but `idle`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from offcpu.model import BEFORE_WINDOW, NEW_THREAD, PREEMPTED, Model, Row
from offcpu.stacks import Stack
from offcpu.stacks import THREAD_ROOTS, UNKNOWN, reading
from offcpu.stackview import drawn_alone
from offcpu.summaries import Lifecycle, lifecycle, runqueue_percentiles

# Severity from share_of_wall. On the examples (2 CPUs, 1 s): the pathologies'
# findings carry 20-80% of their threads' time, the same programs' secondary
# effects (madvise at thread exit, a pool's queue lock) 0.2-15%, idle programs'
# stray waits < 1%.
CRITICAL_FROM = 0.20
WARNING_FROM = 0.05
REPORT_FROM = 0.01  # below this share a finding is noise and is left out (unless a rule raises its floor)
SEVERITIES = ("info", "warning", "critical")
EVIDENCE_STACKS = 3

# A wait for work: a blocked wait on a condition variable lasting this long on
# average, i.e. fewer than 100 wakeups a second per waiting thread, is not wakeup
# pressure but an idle worker. (A futex wait whose kind the stack does not show
# is never called idle: a lock held for 15 ms looks the same.)
IDLE_MEAN_WAIT_US = 10_000
# A thread asleep for this much of the window, never woken: nothing asked it to run.
WHOLE_WINDOW = 0.99

# Thread churn: this many threads created a second, living this long or less (median).
CHURN_RATE_PER_S = 100.0
CHURN_LIFE_US = 100_000

# thread_limits: a limit used this much is worth a finding, a warning, critical.
LIMIT_INFO_FROM = 0.5
LIMIT_WARNING_FROM = 0.8  # offcpu.limits.WARN_FROM, doctor's "near"
LIMIT_CRITICAL_FROM = 0.95

DWARF_HINT = "record with --call-graph dwarf to see the callers"


# -- frame names ----------------------------------------------------------------------

_SUFFIX = re.compile(r"@.*$|\.(?:isra|constprop|part|cold|llvm)\b.*$")


def normal(frame: str) -> str:
    """A frame's name without glibc's internal alias prefix (__GI_), symbol versions
    (@@GLIBC_2.2.5) and compiler clone suffixes (.isra.0, .constprop.0)."""
    name = _SUFFIX.sub("", frame)
    return name.removeprefix("__GI_")


RWSEM_SLOW = frozenset({
    "rwsem_down_write_slowpath", "rwsem_down_read_slowpath",  # kernel 5.x and later
    "rwsem_down_write_failed", "rwsem_down_read_failed",  # older kernels
    "rwsem_down_write_failed_killable", "rwsem_down_read_failed_killable",
    "call_rwsem_down_write_failed", "call_rwsem_down_read_failed",
    "call_rwsem_down_write_failed_killable", "call_rwsem_down_read_failed_killable",
})
MM_ENTRIES = frozenset({
    "vm_mmap_pgoff", "__vm_munmap", "do_mprotect_pkey", "__do_sys_mremap", "__x64_sys_mremap", "mremap",
    "__do_sys_brk", "__x64_sys_brk", "brk", "do_madvise", "__x64_sys_madvise",
    "lock_mm_and_find_vma", "do_user_addr_fault", "exc_page_fault", "__do_page_fault",
})
VMA_LOCK = frozenset({"__vma_start_write", "vma_start_write"})

FUTEX_KERNEL = frozenset({"futex_wait", "__futex_wait", "futex_wait_queue", "futex_wait_queue_me", "futex_do_wait"})
# libc's own futex wrappers: they say a futex was waited on, not why.
FUTEX_LEAVES = frozenset({
    "__futex_abstimed_wait_common", "__futex_abstimed_wait_common64", "__futex_abstimed_wait_cancelable64",
    "__futex_wait", "futex_wait", "syscall", UNKNOWN,
})
LOCK_WAITS = frozenset({  # somebody else holds the lock: contention
    "__lll_lock_wait", "pthread_mutex_lock", "__pthread_mutex_lock", "__pthread_mutex_lock_full",
    "pthread_mutex_timedlock", "__pthread_mutex_timedlock", "__pthread_mutex_clocklock_common",
    "pthread_rwlock_rdlock", "pthread_rwlock_wrlock", "__pthread_rwlock_rdlock", "__pthread_rwlock_wrlock",
    "__pthread_rwlock_rdlock_full", "__pthread_rwlock_wrlock_full", "__pthread_rwlock_rdlock_full64",
    "__pthread_rwlock_wrlock_full64", "pthread_rwlock_timedrdlock",
    "pthread_rwlock_timedwrlock", "__pthread_rwlock_clockrdlock64", "__pthread_rwlock_clockwrlock64",
})
PRIVATE_LOCK_WAIT = "__lll_lock_wait_private"  # glibc's internal locks
CONDITION_WAITS = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "__pthread_cond_wait",
    "__pthread_cond_timedwait", "__pthread_cond_wait_common", "__pthread_cond_timedwait64",
})
OTHER_WAITS = frozenset({  # waiting for an event, not for a lock
    "pthread_join", "__pthread_join", "__pthread_clockjoin_ex", "__pthread_timedjoin_ex", "pthread_barrier_wait",
    "sem_wait", "sem_timedwait", "sem_clockwait", "__new_sem_wait", "__new_sem_wait_slow64", "do_futex_wait",
})
STACK_CACHE_CALLERS = frozenset({
    "allocate_stack", "get_cached_stack", "__deallocate_stack", "__nptl_deallocate_stack", "__free_tcb",
    "pthread_create", "__pthread_create_2_1", "pthread_join", "__pthread_join", "__pthread_clockjoin_ex",
})
CHURN_FRAMES = frozenset({  # a thread being created, joined or exiting
    NEW_THREAD, "kernel_clone", "copy_process", "__do_sys_clone", "__do_sys_clone3", "__x64_sys_clone",
    "__x64_sys_clone3", "do_exit", "do_group_exit", "__x64_sys_exit", "pthread_create", "__pthread_create_2_1",
    "pthread_join", "__pthread_join", "__pthread_clockjoin_ex", "__pthread_timedjoin_ex", "allocate_stack",
    "__nptl_deallocate_stack", "__free_tcb",
})
IDLE_FRAMES = frozenset({  # waiting for work or for time to pass
    "do_nanosleep", "hrtimer_nanosleep", "do_epoll_wait", "ep_poll", "do_sys_poll", "do_poll", "do_select",
    "core_sys_select", "do_sigtimedwait", "__x64_sys_pause", "epoll_wait", "poll", "ppoll", "select", "pselect",
    "nanosleep", "clock_nanosleep", "sigtimedwait", "sigwaitinfo",
})
IO_FRAMES = frozenset({
    "io_schedule", "io_schedule_timeout", "folio_wait_bit", "folio_wait_bit_common", "folio_wait_writeback",
    "wait_on_page_bit", "wait_on_page_bit_common", "wait_on_page_writeback", "submit_bio_wait",
    "wait_for_completion_io", "do_fsync", "vfs_fsync_range", "file_write_and_wait_range",
    "filemap_write_and_wait_range", "__x64_sys_fsync", "__x64_sys_fdatasync", "__x64_sys_sync_file_range",
})
IO_PREFIXES = ("blk_", "jbd2")


def frames_of(stack: Stack) -> tuple[str, ...]:
    """Leaf-first normal names, without the thread's root frame (clone3, _start...),
    which every complete stack has and which says nothing about the wait."""
    names = [normal(frame) for frame in stack.frames]
    if len(names) > stack.kernel_frames and names[-1] in THREAD_ROOTS:
        names.pop()
    return tuple(names)


def futex_kind(stack: Stack) -> str | None:
    """What a futex wait was: "lock" (a mutex or rwlock another thread holds),
    "private" (one of glibc's internal locks), "wait" (a condition variable, join,
    semaphore: waiting for an event), "unknown" (the user stack stops at libc's
    futex wrapper); None when the stack is not a futex wait."""
    kernel = [normal(frame) for frame in stack.frames[:stack.kernel_frames]]
    if not FUTEX_KERNEL.intersection(kernel):
        return None
    for frame in (normal(frame) for frame in stack.user_frames):
        if frame in FUTEX_LEAVES:
            continue
        if frame == PRIVATE_LOCK_WAIT:
            return "private"
        if frame in LOCK_WAITS or "mutex::lock" in frame or "shared_mutex::lock" in frame:
            return "lock"
        if frame in CONDITION_WAITS or "condition_variable::wait" in frame:
            return "condition"
        if frame in OTHER_WAITS:
            return "wait"
        return "unknown"
    return "unknown"


# -- what rules see and return --------------------------------------------------------

def total(rows: Iterable[Row]) -> int:
    return sum(row.offcpu_us for row in rows)


def blocked(rows: Iterable[Row]) -> int:
    return sum(row.blocked_us for row in rows)


@dataclass(frozen=True)
class Evidence:
    frames: tuple[str, ...]  # root first
    kernel_frames: int  # the last this many frames are the kernel's
    state: str
    offcpu_us: int
    count: int


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
    evidence: tuple[Evidence, ...]
    remedy: str
    confidence: str  # "high" or "low"
    confidence_reason: str


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


class Context:
    """The model with what every rule needs computed once: frames, idle rows, totals."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.frames = [frames_of(stack) for stack in model.stacks]
        self.kinds = [futex_kind(stack) for stack in model.stacks]
        self.wall_by_tid = {tid: t.oncpu_us + t.offcpu_us for tid, t in model.threads.items()}
        self.offcpu_us = sum(t.offcpu_us for t in model.threads.values())
        self.idle_rows = [row for row in model.rows if self._idle(row)]
        self._idle_ids = {id(row) for row in self.idle_rows}
        self.idle_us = total(self.idle_rows)

    @cached_property
    def lifecycle(self) -> Lifecycle:
        return lifecycle(self.model)

    @cached_property
    def churning(self) -> bool:
        life = self.lifecycle
        return (life.created_per_s >= CHURN_RATE_PER_S and life.median_life_us is not None
                and life.median_life_us <= CHURN_LIFE_US)

    @cached_property
    def _mean_wait_us(self) -> dict[int, float]:
        sums: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for row in self.model.rows:
            sums[row.stack][0] += row.offcpu_us
            sums[row.stack][1] += row.count
        return {stack: us / max(count, 1) for stack, (us, count) in sums.items()}

    def _idle(self, row: Row) -> bool:
        if row.state == PREEMPTED:
            return False
        if self.model.stacks[row.stack].frames == (BEFORE_WINDOW,):  # asleep (S) all window, never woken
            return row.state == "S" and row.waker is None and row.blocked_us >= WHOLE_WINDOW * self.model.wall_us
        if IDLE_FRAMES.intersection(self.frames[row.stack]):
            return True
        return self.kinds[row.stack] == "condition" and self._mean_wait_us[row.stack] >= IDLE_MEAN_WAIT_US

    def waits(self, keep: Callable[[Row], bool]) -> list[Row]:
        """The waits (not preemptions, not waits for work) that `keep` keeps."""
        return [row for row in self.model.rows
                if row.state != PREEMPTED and id(row) not in self._idle_ids and keep(row)]

    def share_of_wall(self, us: int, rows: list[Row]) -> float:
        """`us` over the wall time of the threads of `rows`, at least one whole window."""
        wall = max(sum(self.wall_by_tid[tid] for tid in {row.tid for row in rows}), self.model.wall_us)
        return us / wall if wall > 0 else 0.0

    def truncated(self) -> bool:
        return bool(self.model.capture.user_stacks_truncated)


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


def their(rows: Iterable[Row]) -> str:
    return "its" if tids(rows) == 1 else "their"


def times_text(rows: Iterable[Row]) -> str:
    n = sum(row.count for row in rows)
    return "once" if n == 1 else f"{n:,} times"


# -- the rules ------------------------------------------------------------------------

def detect_mmap_lock(ctx: Context) -> Match | None:
    def keep(row: Row) -> bool:
        frames = ctx.frames[row.stack]
        slow = next((i for i, frame in enumerate(frames) if frame in RWSEM_SLOW), None)
        return (slow is not None and any(frame in MM_ENTRIES for frame in frames[slow + 1:])) or \
            bool(VMA_LOCK.intersection(frames))

    rows = ctx.waits(keep)
    if not rows:
        return None
    return Match(rows, f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for the process's "
                       f"memory-map lock (mmap_lock), which mmap, munmap, mprotect, madvise and page faults all take.")


def stack_cache_rows(ctx: Context) -> tuple[list[Row], list[Row]]:
    """Waits for glibc's internal lock under thread creation or exit (seen), and, while
    threads churn, those whose callers the stacks do not show (guessed)."""
    def callers(row: Row) -> list[str]:
        frames = ctx.frames[row.stack]
        return [f for f in frames[frames.index(PRIVATE_LOCK_WAIT) + 1:] if f not in (UNKNOWN, "start_thread")]

    private = ctx.waits(lambda row: ctx.kinds[row.stack] == "private")
    seen = [row for row in private if STACK_CACHE_CALLERS.intersection(callers(row))]
    guessed = [row for row in private if not callers(row)] if ctx.churning else []
    return seen, guessed


def detect_stack_cache_lock(ctx: Context) -> Match | None:
    seen, guessed = stack_cache_rows(ctx)
    rows = seen + guessed
    if not rows:
        return None
    summary = (f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for glibc's stack cache "
               f"lock, which every thread creation and exit takes.")
    if total(guessed) * 2 > total(rows):
        life = ctx.lifecycle
        return Match(rows, summary.replace("for glibc's stack cache lock", "for a glibc-internal lock, most "
                                           "likely its stack cache lock"),
                     confidence="low",
                     confidence_reason=f"the stacks stop at __lll_lock_wait_private (user stacks truncated); with "
                                       f"{life.created_per_s:,.0f} threads created a second it is most likely the "
                                       f"stack cache lock: {DWARF_HINT}")
    return Match(rows, summary)


def detect_thread_churn(ctx: Context) -> Match | None:
    life = ctx.lifecycle
    if not ctx.churning or life.median_life_us is None:
        return None
    lock = {id(row) for part in stack_cache_rows(ctx) for row in part}  # the stack_cache_lock finding's
    new = [row for row in ctx.model.rows if ctx.model.stacks[row.stack].frames == (NEW_THREAD,)]
    rows = new + ctx.waits(lambda row: id(row) not in lock and bool(CHURN_FRAMES.intersection(ctx.frames[row.stack])))
    us = total(rows)
    busy = ctx.offcpu_us - ctx.idle_us
    paths = "waiting for their first run, and in creating and ending them" if ctx.truncated() else \
        "waiting for their first run, and in creating, joining and ending them"
    return Match(rows, f"{counted(life.created, 'thread')} were created ({life.created_per_s:,.0f} a second) and "
                       f"lived {us_text(life.median_life_us)} (median); they spent {us_text(us)} off CPU {paths} "
                       f"({pct(us / busy if busy > 0 else 0.0)} of the off-CPU time that was not waiting for work; "
                       f"waits for the stack cache lock aside), and more on CPU setting up and tearing down each "
                       f"thread.",
                 floor="warning", threads=life.created,
                 confidence="low" if ctx.truncated() else "high",
                 confidence_reason=f"waits in pthread_join are not told apart from other futex waits (user stacks "
                                   f"truncated): {DWARF_HINT}" if ctx.truncated() else "")


def detect_futex_contention(ctx: Context) -> Match | None:
    locks = ctx.waits(lambda row: ctx.kinds[row.stack] == "lock")
    if not locks:
        return None
    unknown = ctx.waits(lambda row: ctx.kinds[row.stack] == "unknown")
    other = ctx.waits(lambda row: ctx.kinds[row.stack] in ("condition", "wait"))
    notes = ([f"{us_text(total(other))} of condition-variable, join and semaphore waits are not counted"]
             if other else []) + \
            ([f"nor {us_text(total(unknown))} of futex waits whose kind the stacks do not show"] if unknown else [])
    return Match(locks, f"{threads_text(locks)} {spent_text(locks, ctx)} waiting {times_text(locks)} for a mutex or "
                        f"rwlock another thread held" + (f" ({'; '.join(notes)})." if notes else "."),
                 confidence_reason=f"which lock is not shown (user stacks truncated): {DWARF_HINT}"
                 if ctx.truncated() else "")


def detect_futex_unknown(ctx: Context) -> Match | None:
    unknown = ctx.waits(lambda row: ctx.kinds[row.stack] == "unknown")
    if not unknown:
        return None
    return Match(unknown, f"{threads_text(unknown)} {spent_text(unknown, ctx)} in "
                          f"{counted(sum(row.count for row in unknown), 'futex wait')} that may be waits for a lock or "
                          f"for work (a condition variable, a join, a semaphore): the stacks stop in libc, so they "
                          f"are neither counted as contention nor as waits for work.",
                 cap="info", confidence="low",
                 confidence_reason="user stacks stop at libc's futex wrapper (glibc built without frame "
                                   f"pointers): {DWARF_HINT}")


def detect_runqueue(ctx: Context) -> Match | None:
    synthetic = (NEW_THREAD, BEFORE_WINDOW)
    rows = [row for row in ctx.model.rows
            if row.state == PREEMPTED and ctx.model.stacks[row.stack].frames[0] not in synthetic]
    if not rows:
        return None
    us = total(rows)
    delay = runqueue_percentiles(ctx.model)
    after_wakeup = (f"; after their wakeups, threads waited {us_text(delay[50])} (median), {us_text(delay[99])} "
                    f"(p99), up to {us_text(delay[100])} for a CPU, which the findings of the waits they were "
                    f"woken from count" if delay else "")
    waiting = sum(row.runqueue_us for row in ctx.model.rows) / max(ctx.model.wall_us, 1)
    were, they = ("was", "it") if tids(rows) == 1 else ("were", "they")
    return Match(rows, f"{threads_text(rows)} {were} preempted while {they} still had work for {us_text(us)} "
                       f"({pct(ctx.share_of_wall(us, rows))} of {their(rows)} time){after_wakeup}; on average "
                       f"{waiting:.1f} runnable threads waited for the {ctx.model.capture.cpus} CPUs.")


def detect_io_wait(ctx: Context) -> Match | None:
    def keep(row: Row) -> bool:
        frames = ctx.frames[row.stack]
        return bool(IO_FRAMES.intersection(frames)) or any(frame.startswith(IO_PREFIXES) for frame in frames)

    rows = ctx.waits(keep)
    if not rows:
        return None
    return Match(rows, f"{threads_text(rows)} {spent_text(rows, ctx)} waiting {times_text(rows)} for disk I/O "
                       f"(reads, writeback, fsync or the journal).")


def detect_thread_limits(ctx: Context) -> Match | None:
    capture = ctx.model.capture
    snapshots = [("at the start of the recording", capture.limits), ("during the recording", capture.limits_peak)]
    when, snapshot = max(((when, snapshot) for when, snapshot in snapshots if snapshot),
                         key=lambda item: _highest_share(item[1]), default=("", None))
    limits = [item for item in (snapshot or {}).get("limits", [])
              if item.get("share") is not None and item["share"] >= LIMIT_INFO_FROM]
    if not snapshot or not limits:
        return None
    worst = max(item["share"] for item in limits)
    floor = "critical" if worst >= LIMIT_CRITICAL_FROM else "warning" if worst >= LIMIT_WARNING_FROM else "info"
    used = "; ".join(f"{item['used']:,} of {item['limit']:,} {item['what']} ({item['name']}, {item['share']:.0%})"
                     for item in sorted(limits, key=lambda item: -item["share"]))
    return Match([], f"{when.capitalize()} the process was near the limits on threads and memory maps: {used}; "
                     f"at the limit, creating a thread fails with 'Resource temporarily unavailable'.",
                 floor=floor, cap=floor, threads=snapshot.get("threads", 0))


def _highest_share(snapshot: dict) -> float:
    return max((item["share"] for item in snapshot.get("limits", []) if item.get("share") is not None), default=0.0)


def detect_idle(ctx: Context) -> Match | None:
    rows = ctx.idle_rows
    if not rows:
        return None
    us = total(rows)
    quiet = tids(row for row in rows if ctx.model.stacks[row.stack].frames == (BEFORE_WINDOW,))
    unwoken = "" if not quiet else " (not woken at all: idle, or stuck, which looks the same)" \
        if quiet == tids(rows) else f" ({quiet:,} of them not woken at all: idle, or stuck, which looks the same)"
    return Match(rows, f"{threads_text(rows)}{unwoken} spent {us_text(us)} ({pct(ctx.share_of_wall(us, rows))} of "
                       f"{their(rows)} time) waiting for work or for time to pass (sleeps, poll/epoll/select, condition "
                       f"variables woken less than {1_000_000 // IDLE_MEAN_WAIT_US} times a second); this is not "
                       f"contention and is left out of the other findings' shares.",
                 cap="info")


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    remedy: str
    detect: Callable[[Context], Match | None]


RULES: tuple[Rule, ...] = (
    Rule("mmap_lock", "Threads wait for the process's memory-map lock (mmap_lock)",
         "Stop mapping and unmapping memory on the hot path: allocate buffers once per thread (or from a pool) and "
         "reuse them, read files with read()/pread() into a reused buffer instead of mmap() per request, and keep "
         "the allocator from returning memory to the kernel all the time (glibc: raise M_MMAP_THRESHOLD and "
         "M_TRIM_THRESHOLD, or use jemalloc/tcmalloc). In the MemSQL case, read() instead of mmap() per query "
         "nearly doubled throughput.",
         detect_mmap_lock),
    Rule("stack_cache_lock", "Thread creation and exit wait for glibc's stack cache lock",
         "Stop creating a thread per task: run tasks on a fixed pool of threads created once. glibc serializes "
         "every thread creation and exit on one lock, held while thread stacks are mapped and unmapped, so the "
         "cost of starting a thread grows with how many start and exit at the same time. If threads must come "
         "and go, give them smaller stacks (pthread_attr_setstacksize) so freed stacks stay in glibc's stack "
         "cache (40 MiB by default, GLIBC_TUNABLES=glibc.pthread.stack_cache_size).",
         detect_stack_cache_lock),
    Rule("thread_churn", "Threads are created and destroyed at a high rate",
         "Use a thread pool sized to the CPUs and the work, fed by a bounded queue, instead of a thread per task "
         "or request: each new thread costs a clone, a stack mapping and its guard page, and an unmapping at exit, "
         "all under process-wide locks.",
         detect_thread_churn),
    Rule("futex_contention", "Threads wait for locks held by other threads (futex contention)",
         "Hold the lock for less time or less often: move work out of the critical section, split the data so "
         "threads do not share one lock (per-thread or per-CPU counters merged at the end, striped locks), or "
         "use atomics for simple counters. The evidence stacks show where the waits are; record with "
         "--call-graph dwarf to see which code takes the lock.",
         detect_futex_contention),
    Rule("futex_unknown", "Futex waits of unknown kind",
         "Record again with --call-graph dwarf: the full user stacks tell lock waits (pthread_mutex_lock, rwlocks) "
         "from waits for work (pthread_cond_wait, pthread_join, sem_wait), and these waits become "
         "futex_contention or idle.",
         detect_futex_unknown),
    Rule("runqueue", "Threads wait for a CPU (CPU saturation)",
         "The threads had work but no CPU to run it on: run no more busy threads than there are CPUs (size pools "
         "to the CPU count), remove or throttle other CPU-heavy work on the machine, or give it more CPUs. This is "
         "not a lock: making critical sections shorter will not help.",
         detect_runqueue),
    Rule("io_wait", "Threads wait for disk I/O",
         "Find which files and devices are slow (iostat -x, biolatency); batch fsync/fdatasync calls, move writes "
         "and flushes off the request path, read ahead or cache hot data, or use faster storage.",
         detect_io_wait),
    Rule("thread_limits", "The process is near the limits on threads or memory maps",
         "Bound the number of threads: a fixed pool with a bounded queue that pushes back on the producer. "
         "Raising ulimit -u (RLIMIT_NPROC), kernel.threads-max, kernel.pid_max or vm.max_map_count only postpones "
         "the 'Resource temporarily unavailable' failures.",
         detect_thread_limits),
    Rule("idle", "Threads wait for work (idle)",
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
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        stack = model.stacks[row.stack]
        groups[(reading(tuple(reversed(stack.frames)), stack.kernel_frames), row.state)].append(row)
    said = []
    for (_, state), group in groups.items():
        by_stack: dict[int, int] = defaultdict(int)
        for row in group:
            by_stack[row.stack] += row.offcpu_us
        frames, kernel_frames = drawn_alone(model.stacks[max(by_stack, key=by_stack.__getitem__)])  # the heaviest
        said.append(Evidence(frames, kernel_frames, state, total(group), sum(row.count for row in group)))
    return tuple(sorted(said, key=lambda item: -item.offcpu_us)[:EVIDENCE_STACKS])


def _finding(rule: Rule, ctx: Context, match: Match) -> Finding | None:
    us = total(match.rows)
    idle = rule.id == "idle"
    share_of_wall = ctx.share_of_wall(us, match.rows) if match.rows else 0.0
    offcpu = ctx.offcpu_us if idle else ctx.offcpu_us - ctx.idle_us
    rank = SEVERITIES.index
    severity = SEVERITIES[min(max(rank(severity_of(share_of_wall)), rank(match.floor)), rank(match.cap))]
    if not idle and severity == "info" and match.floor == "info" and share_of_wall < REPORT_FROM:
        return None
    return Finding(
        id=rule.id, severity=severity, title=rule.title, summary=match.summary, offcpu_us=us,
        blocked_us=blocked(match.rows), share_of_wall=share_of_wall, share_of_offcpu=min(us / offcpu, 1.0) if offcpu > 0 else 0.0,
        threads=match.threads if match.threads is not None else tids(match.rows),
        evidence=evidence(ctx.model, match.rows), remedy=rule.remedy,
        confidence=match.confidence, confidence_reason=match.confidence_reason,
    )


def findings(model: Model, rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    """What every rule found in the model, worst first: by severity, then waits with a
    cause in the program before waits for a CPU (which the machine's other load shares),
    then by time."""
    ctx = Context(model)
    found = [finding for rule in rules if (match := rule.detect(ctx)) is not None
             and (finding := _finding(rule, ctx, match)) is not None]
    return sorted(found, key=lambda f: (-SEVERITIES.index(f.severity), f.id == "runqueue", -f.offcpu_us))
