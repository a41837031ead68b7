"""Which finding each wait goes to, so that no wait is counted by two.

A wait goes by where it waited when the lock table names a lock or a disk there, and
otherwise by what ended it: a timer, the network or a thread outside the service
means it waited for time or work (idle); a device, for I/O. A wait a peer ended is
judged by what that peer did meanwhile (the wake-up links): waiting for work or time
itself, it handed work over (idle); on CPU, or waiting on a disk or a lock, it held
the waiter back. Held back, threads that take turns (their pool runs on fewer CPUs
than it has threads with work and CPUs to run them) or wait behind a peer's disk or
lock, or behind a peer of their pool in line itself, are serialized; otherwise they hand
work to each other.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from offcpu.capture import Cgroup, of_capture
from offcpu.diagnosis.locktable import Lock
from offcpu.diagnosis.waits import WaitClass, Waits
from offcpu.machine.cgroups import cgroups_of
from offcpu.model import WHOLE_WINDOW, Model, Row
from offcpu.model.summaries import Lifecycle, lifecycle
from offcpu.model.wakeups import (
    DEVICE,
    INTERRUPT,
    KERNEL,
    NETWORK,
    NEW,
    OUTSIDE,
    PREEMPTED_CAUSE,
    TIMER,
    UNRECORDED,
    UNWOKEN,
)
from offcpu.stacks import BEFORE_WINDOW, NEW_THREAD, RUNTIME_MARKS, STACK_NOT_TAKEN, waited_for

# Thread churn: this many threads created a second, living this long or less (median).
CHURN_RATE_PER_S = 100.0
CHURN_LIFE_US = 100_000
# A wait whose peer was itself waiting for work or time this much of it handed work over; one
# whose peer of another pool or process was running or held back itself this much of it was held
# back by that peer (busy_peer).
IDLE_ROOT = 0.5
BUSY_ROOT = 0.5
# Peer waits this long on average (fewer than 100 a second per waiting thread) are a pool
# waiting for the work its peers hand it, unless their pool is held to fewer CPUs than it could use.
# The average is the pool's own at the stack: where stacks stop in libc (a JVM's), every thread's
# futex waits share one, and a compiler thread's waits of seconds would make a pool's of
# milliseconds look like waits for work.
IDLE_MEAN_WAIT_US = 10_000
# A pool is held to fewer CPUs when it runs on at least this many on average, and at least
# this many fewer than it has threads with work (and CPUs to run them).
CEILING_FROM = 0.5
CEILING_BELOW = 0.5
# A thread has work when it is not waiting for work or time for at least this much of its time.
WITH_WORK = 0.5
# Passes over the waits on peers at most: a wait in line puts the waits behind it in line, one
# link of a queue a pass (each link a thread's waits at one stack, ended by one waker).
MAX_PASSES = 32
# glibc's own lock, when its callers do not show: during thread churn, most likely the stack cache's.
GLIBC_INTERNAL_LOCK = "glibc internal lock"
STACK_CACHE = "glibc stack cache lock"  # the lock table's name for it

# The findings claims go to (offcpu.diagnosis.rules has a rule for each).
MMAP_LOCK, STACK_CACHE_LOCK, LOCK_CONTENTION = "mmap_lock", "stack_cache_lock", "lock_contention"
# The findings that name a lock: graded by the time their waiters were blocked on it. The wait
# for a CPU after the lock was let go is the machine's (on a saturated machine, most of it).
LOCK_FINDINGS = (MMAP_LOCK, STACK_CACHE_LOCK, LOCK_CONTENTION)
SERIALIZATION, HANDOFF, THREAD_CHURN = "serialization", "handoff", "thread_churn"
# Threads held back by a thread of another pool or process that was busy (on CPU, or waiting
# itself for a CPU, a disk or a lock) while they waited for it: a pipeline's slow stage, a local
# server, a coordinator's workers.
BUSY_PEER = "busy_peer"
FUTEX_UNKNOWN, RUNQUEUE, IO_WAIT, IDLE = "futex_unknown", "runqueue", "io_wait", "idle"
# Preempted waits of threads whose cgroup's CPU limit (quota) held them off: a cgroup whose
# throttled time grew over the recording by at least THROTTLED_COVERS of its recorded threads'
# preempted time takes those waits from runqueue (the quota, not other threads, kept them off a CPU).
CPU_THROTTLING = "cpu_throttling"
THROTTLED_COVERS = 0.5
# Threads that waited at a lock all the window, never woken; of those, threads that wait for
# each other's mutex (glibc's owner of each: the snapshot at the window's end), and threads behind them.
STUCK, DEADLOCK = "stuck", "deadlock"
PTHREAD_MUTEX = "pthread mutex"  # the lock table's name for glibc's mutexes (locks.toml)
# A semaphore posted by the threads that wait on it, in turns, is a lock: CPython's threading.Lock is one.
SEMAPHORE = "semaphore"
# Such a semaphore under Python frames is CPython's threading.Lock: the lock table's entry for it.
PYTHON_LOCK = "Python threading lock"
PYTHON_MARK = f") {RUNTIME_MARKS['CPython']}"
# CPython's threading primitives are semaphores: what a CPython process's threads signal through a
# condition variable, in turns, is its interpreter lock (take_gil waits in one, drop_gil signals it).
CONDITION_VARIABLE, PYTHON_GIL = "condition variable", "CPython GIL"
# A lock whose holders waited at sites of these kinds (locks.toml) for at least this share of a
# wait for it was held while they waited for work: the waiters behind them wait for work too.
WORK_KINDS = ("work", "handoff")
HOLDER_AWAITED_WORK = 0.5
# Threads of a pool that wait at one place in turns (each let go by one that waited there too)
# queue there when more than one of them waits at a time on average (two threads handing work
# back and forth wait one at a time: a hand-off); the one let through holds the rest back.
QUEUE_FROM = 1.5
QUEUE_THREADS = 3  # a queue and the one let through
# The findings of waits on peers, which a wait under way when the recording began may join (not
# busy_peer: such a wait's waker is known, and says which peer held it back, or none).
PEER_FINDINGS = (LOCK_CONTENTION, SERIALIZATION, HANDOFF)
EXIT_FRAMES = frozenset({"do_exit", "mm_release", "exit_mm"})  # a thread's end, waking its joiner
CHURN_FRAMES = frozenset({  # a thread being created, joined or exiting
    "kernel_clone", "copy_process", "__do_sys_clone", "__do_sys_clone3", "__x64_sys_clone", "__x64_sys_clone3",
    "do_exit", "do_group_exit", "__x64_sys_exit", "pthread_create", "__pthread_create_2_1", "pthread_join",
    "__pthread_join", "__pthread_clockjoin_ex", "__pthread_timedjoin_ex", "allocate_stack",
    "__nptl_deallocate_stack", "__free_tcb",
})


@dataclass(frozen=True)
class Claim:
    """A wait's finding, and which of its kind (a lock's name, a pool) when there are several."""

    finding: str
    key: str = ""
    guessed: bool = False  # the finding is likely, not seen (a lock whose callers the stack does not show)


@dataclass
class Pool:
    """Threads of one service whose names differ only in a trailing number."""

    name: str
    tids: list[int] = field(default_factory=list)
    oncpu_us: int = 0
    wall_us: int = 0
    with_work: int = 0  # threads not mostly waiting for work or time
    busy_us: int = 0  # the time of its threads not spent waiting for work or time
    cpus: int = 1
    window_us: int = 1

    @property
    def parallelism(self) -> float:
        """How many CPUs its threads ran on, on average."""
        return self.oncpu_us / self.window_us if self.window_us else 0.0

    @property
    def busy_threads(self) -> float:
        """How many of its threads had work (were not waiting for work or time), on average."""
        return self.busy_us / self.window_us if self.window_us else 0.0

    @property
    def could_use(self) -> int:
        return min(self.with_work, self.cpus)

    @property
    def held_to_fewer_cpus(self) -> bool:
        """It runs, on fewer CPUs than it has threads with work and CPUs for them: they take turns."""
        return self.parallelism >= CEILING_FROM and self.parallelism <= self.could_use - CEILING_BELOW


@dataclass(frozen=True)
class Deadlock:
    """Threads each waiting for a mutex the next one holds, the last for the first's."""

    cycle: tuple[int, ...]
    behind: tuple[int, ...]  # threads waiting for a mutex one of the cycle holds (or one behind it)


@dataclass
class Root:
    """What a wait's waker did while it waited (µs of the wait's blocked time)."""

    idle_us: int = 0  # the waker waited for work or time
    io_us: int = 0  # ... for a disk
    lock_us: int = 0  # ... for a lock
    queued_us: int = 0  # ... for a peer of its own, in line itself (its wait serialized, in the same pool)
    peer_us: int = 0  # ... for a peer of its own, otherwise
    busy_us: int = 0  # the waker was on CPU (or runnable)

    def add(self, other: Root) -> None:
        for name, us in vars(other).items():
            setattr(self, name, getattr(self, name) + us)

    @property
    def whole_us(self) -> int:
        return self.idle_us + self.io_us + self.lock_us + self.queued_us + self.peer_us + self.busy_us

    @property
    def idle_share(self) -> float:
        return self.idle_us / self.whole_us if self.whole_us else 0.0

    @property
    def busy_share(self) -> float:
        """The share of the time its waker was running, or held back itself: on CPU (or waiting
        for one), at a disk, at a lock, or in line."""
        return (self.busy_us + self.io_us + self.lock_us + self.queued_us) / self.whole_us if self.whole_us else 0.0

    @property
    def held_back(self) -> bool:
        """Whether its waker was mostly held back itself: at a disk, at a lock, or in line."""
        return self.io_us + self.lock_us + self.queued_us > self.busy_us + self.idle_us + self.peer_us


class Claims:
    """Every row's claim (None: no finding's), decided once per model."""

    def __init__(self, model: Model, waits: Waits) -> None:
        self.model = model
        self.waits = waits
        self.of_row: list[Claim | None] = [self._direct(row, cls, followed) for row, cls, followed in
                                           zip(model.rows, waits.classes, waits.followed, strict=True)]
        self.pools = self._pools()
        self.roots: dict[int, Root] = {}
        peers = [index for index, claim in enumerate(self.of_row) if claim is None and waits.followed[index]]
        # A peer's wait is judged by its waker's waits, which the first pass may find were turns
        # taken rather than time waited for; after the second, a pass only puts more waits in
        # line behind waits in line (so that the passes end: no claim goes back and forth).
        for number in range(MAX_PASSES):
            before = list(self.of_row)
            for index in peers:
                self.roots[index] = self._root(index)
            for index in peers:
                claim = self._peer_claim(index)
                if number < 2 or claim.finding == SERIALIZATION:
                    self.of_row[index] = claim
            gil_waited_at = self._gil_waited_at()
            for index, row in enumerate(model.rows):
                if self._timed_out_taking_turns(index):
                    self.of_row[index] = Claim(SERIALIZATION, self.waits.pool_of(row.tid))
                elif self._timed_out_at_the_gil(index, gil_waited_at):
                    self.of_row[index] = Claim(LOCK_CONTENTION, PYTHON_GIL)
            if number >= 1 and self.of_row == before:
                break  # (the roots of this pass were read by the final claims)
        else:  # the passes ran out: the roots by the final claims
            for index in peers:
                self.roots[index] = self._root(index)
        self.pools = self._pools()  # with the turns found: threads taking them have work
        self._begun_like_the_rest()

    def _begun_like_the_rest(self) -> None:
        """A wait under way when the recording began, or one whose stack was not sampled (nor any of
        its thread's in its state: offcpu.model.sampling), has no stack to say where it waited:
        ended by a peer, it goes with the heaviest of its thread's (else its pool's) waits on peers."""
        by_thread: dict[int, dict[Claim, int]] = defaultdict(lambda: defaultdict(int))
        by_pool: dict[str, dict[Claim, int]] = defaultdict(lambda: defaultdict(int))
        begun = []
        for index, (row, claim) in enumerate(zip(self.model.rows, self.of_row, strict=True)):
            if not self.waits.followed[index] or claim is None or claim.finding not in PEER_FINDINGS:
                continue
            if self.model.stacks[row.stack].frames in ((BEFORE_WINDOW,), (STACK_NOT_TAKEN,)):
                begun.append(index)
            else:
                by_thread[row.tid][claim] += row.blocked_us
                by_pool[self.waits.pool_of(row.tid)][claim] += row.blocked_us
        for index in begun:
            row = self.model.rows[index]
            if self._released_lock(row) is not None:
                continue  # its release says which lock
            claims = by_thread.get(row.tid) or by_pool.get(self.waits.pool_of(row.tid))
            if claims:
                self.of_row[index] = max(claims, key=claims.__getitem__)

    @cached_property
    def lifecycle(self) -> Lifecycle:
        return lifecycle(self.model)

    @cached_property
    def churning(self) -> bool:
        life = self.lifecycle
        return (life.created_per_s >= CHURN_RATE_PER_S and life.median_life_us is not None
                and life.median_life_us <= CHURN_LIFE_US)

    def rows(self, finding: str, key: str | None = None) -> list[Row]:
        return [row for row, claim in zip(self.model.rows, self.of_row, strict=True)
                if claim is not None and claim.finding == finding and (key is None or claim.key == key)]

    def keys(self, finding: str) -> list[str]:
        return list(dict.fromkeys(claim.key for claim in self.of_row if claim is not None and claim.finding == finding))

    def guessed(self, finding: str) -> list[Row]:
        return [row for row, claim in zip(self.model.rows, self.of_row, strict=True)
                if claim is not None and claim.finding == finding and claim.guessed]

    # -- waits that go by their site or by what ended them --------------------------

    def _direct(self, row: Row, cls: WaitClass, followed: bool) -> Claim | None:
        stack = self.model.stacks[row.stack]
        site = cls.site.lock if cls.site else None
        if cls.cause == NEW:
            return Claim(THREAD_CHURN) if self.churning else None
        if cls.cause == PREEMPTED_CAUSE:  # a kernel thread preempted in its main loop had work too
            if stack.frames == (BEFORE_WINDOW,):
                return None
            throttled = self.throttled.get(self.model.threads[row.tid].pid)
            return Claim(CPU_THROTTLING, throttled.path) if throttled else Claim(RUNQUEUE)
        if cls.parked:
            return Claim(IDLE)  # a disk's interrupt that queues work wakes a kworker: still a wait for work
        if site is not None and site.kind == "lock" and self._waited_all_window(row, cls):
            return Claim(DEADLOCK if row.tid in self.deadlocked else STUCK, site.name)
        if row.tid in self.deadlocked and cls.cause in (TIMER, UNWOKEN):
            # a deadlocked JVM's thread: HotSpot parks a monitor's waiter with a timeout, to try again
            return Claim(DEADLOCK, site.name if site is not None else "")
        if stack.frames == (BEFORE_WINDOW,) and cls.cause == UNWOKEN:
            asleep_all_window = row.state == "S" and row.blocked_us >= WHOLE_WINDOW * self.model.wall_us
            return Claim(IDLE) if asleep_all_window else None
        if site is not None and site.kind == "lock":
            if site.name == GLIBC_INTERNAL_LOCK and self.churning and not self._callers_shown(stack.frames):
                return Claim(STACK_CACHE_LOCK, STACK_CACHE, guessed=True)
            return Claim(site.finding or LOCK_CONTENTION, site.name)
        if (site is not None and site.kind == "io") or cls.cause == DEVICE:
            return Claim(IO_WAIT)
        if self.churning and (site is not None and site.kind == "join" or
                              CHURN_FRAMES.intersection(self.waits.normal_frames(row.stack)) or
                              self._ended_by_an_exit(row)):
            return Claim(THREAD_CHURN)
        if site is not None and site.kind == "sleep":
            return Claim(IDLE)
        if cls.cause == OUTSIDE and followed:
            return None  # another recorded process's: decided with the peers' (see _peer_claim)
        if cls.cause in (TIMER, NETWORK, OUTSIDE, UNWOKEN, INTERRUPT):
            return Claim(IDLE)
        if cls.cause == UNRECORDED:
            return Claim(FUTEX_UNKNOWN) if cls.truncated else Claim(IDLE)
        if cls.cause == KERNEL:
            return None  # a kernel thread's doing: shown in the tables, not a finding of the program's
        return None  # a peer's: decided once every other wait is (see _peer_claim)

    @cached_property
    def cgroups(self) -> list[Cgroup]:
        """The recorded processes' cgroups (capture.json's)."""
        return of_capture(self.model.capture.cgroups)

    @cached_property
    def throttled(self) -> dict[int, Cgroup]:
        """{pid: the cgroup whose CPU limit held its threads off} for the processes of each throttled
        cgroup whose throttled time covers their preempted waits (THROTTLED_COVERS); of two such
        cgroups of a process (one above the other), the one held off longer."""
        preempted_us: dict[int, int] = defaultdict(int)
        for row, cls in zip(self.model.rows, self.waits.classes, strict=True):
            if cls.cause == PREEMPTED_CAUSE and self.model.stacks[row.stack].frames != (BEFORE_WINDOW,):
                preempted_us[self.model.threads[row.tid].pid] += row.offcpu_us
        throttled = sorted((cgroup for cgroup in self.cgroups if cgroup.throttled_ns), key=lambda c: c.throttled_ns)
        member_of = {pid: cgroups_of(pid, self.cgroups) for pid in preempted_us} if throttled else {}
        found: dict[int, Cgroup] = {}
        for cgroup in throttled:
            pids = [pid for pid in preempted_us if cgroup in member_of[pid]]
            waited_us = sum(preempted_us[pid] for pid in pids)
            if waited_us and cgroup.throttled_ns / 1000 >= THROTTLED_COVERS * waited_us:
                found.update(dict.fromkeys(pids, cgroup))  # held off longest last: it wins
        return found

    def _ended_by_an_exit(self, row: Row) -> bool:
        """Whether a thread's end let the wait go (a join, where the waiter's stack stops in libc)."""
        return row.waker is not None and \
            EXIT_FRAMES.intersection(self.waits.normal_frames(self.model.wakers[row.waker].stack)) != set()

    def _waited_all_window(self, row: Row, cls: WaitClass) -> bool:
        return cls.cause == UNWOKEN and row.blocked_us >= WHOLE_WINDOW * self.model.wall_us

    @cached_property
    def mutex_owners(self) -> dict[int, int]:
        """The model's mutex owners ({waiter tid: owner tid}) of threads whose wait all the
        window is at a pthread mutex (for a condition variable, a join or a semaphore, the
        word glibc's mutex keeps its owner in is something else), or that waited at a runtime's
        lock whose owner its runtime named (a Java monitor's, in a thread dump)."""
        at_a_mutex = {row.tid for row, cls in zip(self.model.rows, self.waits.classes, strict=True)
                      if cls.site is not None
                      and (cls.site.lock.name == PTHREAD_MUTEX and self._waited_all_window(row, cls)
                           or cls.site.lock.kind == "lock" and waited_for(cls.site.frame) is not None)}
        return {waiter: owner for waiter, owner in self.model.mutex_owners.items() if waiter in at_a_mutex}

    @cached_property
    def deadlocks(self) -> list[Deadlock]:
        """The cycles of threads each waiting for a mutex the next holds, all of them asleep
        through the window, with the threads waiting behind each cycle."""
        owner = self.mutex_owners
        found: dict[tuple[int, ...], set[int]] = {}
        for start in owner:
            path: list[int] = []
            tid: int | None = start
            while tid is not None and tid not in path:
                path.append(tid)
                tid = owner.get(tid)
            if tid is None:
                continue  # the chain ends at a thread that is not waiting for a mutex
            at = path.index(tid)
            cycle = path[at:]
            turned = min(range(len(cycle)), key=cycle.__getitem__)  # one order for each cycle
            found.setdefault(tuple(cycle[turned:] + cycle[:turned]), set()).update(path[:at])
        return [Deadlock(cycle, tuple(sorted(behind))) for cycle, behind in found.items()]

    @cached_property
    def deadlocked(self) -> set[int]:
        return {tid for deadlock in self.deadlocks for tid in deadlock.cycle + deadlock.behind}

    def _callers_shown(self, frames: tuple[str, ...]) -> bool:
        """Whether a glibc-internal lock wait shows who took the lock (a frame above the lock's)."""
        names = self.waits.normal_frames_of(frames)
        at = names.index("__lll_lock_wait_private") if "__lll_lock_wait_private" in names else len(names)
        return any(frame not in ("[unknown]", "start_thread", "clone3", "clone") for frame in names[at + 1:])

    # -- waits a peer ended --------------------------------------------------------------

    def _root(self, index: int) -> Root:
        """What the waker did while this row's waits were blocked: its own rows that overlapped
        them, by their claims, and the rest of the time on CPU."""
        row = self.model.rows[index]
        root = Root()
        overlapped = 0
        for waker_row, overlap in self.waits.links_by_waiter.get(index, ()):
            overlapped += overlap
            claim = self.of_row[waker_row]
            if claim is not None and claim.finding == IDLE:
                root.idle_us += overlap
            elif claim is not None and claim.finding == IO_WAIT:
                root.io_us += overlap
            elif claim is not None and claim.finding in LOCK_FINDINGS:
                root.lock_us += overlap
            elif claim is not None and claim.finding == SERIALIZATION:
                root.queued_us += overlap  # in line itself (a peer's: in the same line)
            elif claim is not None and claim.finding == BUSY_PEER:
                root.busy_us += overlap  # held back by a busy peer itself, down the chain
            elif self.waits.followed[waker_row]:
                root.peer_us += overlap
            else:
                root.busy_us += overlap  # preempted, new, or a kernel wait: it had work
        root.busy_us += max(0, row.blocked_us - overlapped)
        return root

    def _peer_claim(self, index: int) -> Claim:
        row, cls = self.model.rows[index], self.waits.classes[index]
        lock = self._released_lock(row)
        if lock is not None and self._holder_awaited_work(index):
            return Claim(HANDOFF, self.waits.pool_of(row.tid))  # a queue's lock, held while its holder waits for work
        if lock is not None:
            return self._lock_claim(lock)  # whatever the holder did while it held it (the reason)
        pool_name = self.waits.pool_of(row.tid)
        handoff_site = cls.site is not None and cls.site.lock.kind == "handoff"
        turn_site = cls.site is None or cls.site.lock.kind in ("lock", "condition")
        if turn_site and self.waits.in_turns(row) and \
                self.turn_queues.get((pool_name, row.stack), 0.0) >= QUEUE_FROM:
            # a queue forms where they take turns: something lets one through at a time, whatever
            # the one let through does meanwhile (a sleep or a call under a monitor: the reason)
            return Claim(SERIALIZATION, pool_name)
        root = self.roots[index]
        if root.idle_share >= IDLE_ROOT:
            return Claim(IDLE)  # the peer waited for work or time itself, then handed it over
        waker_pool = self.waits.waker_pool(row)
        long_waits = self.mean_wait_us[(pool_name, row.stack)] >= IDLE_MEAN_WAIT_US
        if waker_pool != pool_name:
            # on CPU, or held back itself, while they waited for it; unless they waited for work
            # it brings now and then (a JIT's compiler thread for its requests), or for what it
            # waited for itself (another thread: the chain says whom)
            return Claim(BUSY_PEER, waker_pool) if root.busy_share >= BUSY_ROOT and not long_waits else Claim(IDLE)
        pool = self.pools[pool_name]
        # Taking turns stands on a place they take in turns: the waker waited there for one of them too
        if root.held_back and not self.waits.in_turns(row) and (behind := self._behind_a_lock(index)) is not None:
            return behind  # waiting for threads that waited for a lock (joining them): the lock's
        if (pool.held_to_fewer_cpus and self.waits.in_turns(row)) or root.held_back:
            return Claim(HANDOFF if handoff_site else SERIALIZATION, pool.name)
        if long_waits:
            return Claim(IDLE)
        return Claim(HANDOFF, pool.name)

    def _behind_a_lock(self, index: int) -> Claim | None:
        """The lock a row's waker waited for most while the row waited, when that held it back
        more than its disk or its line did (then the row is in line behind it: serialization)."""
        behind: dict[Claim, int] = defaultdict(int)
        for waker_row, overlap in self.waits.links_by_waiter.get(index, ()):
            claim = self.of_row[waker_row]
            if claim is not None and claim.finding in (*LOCK_FINDINGS, IO_WAIT, SERIALIZATION):
                behind[claim] += overlap
        most = max(behind, key=behind.__getitem__, default=None)
        return most if most is not None and most.finding in LOCK_FINDINGS else None

    def _released_lock(self, row: Row) -> Lock | None:
        """The lock a wait on a peer was at, told by what let it go: a lock's release (an unlock
        ends only a wait for that lock), or a semaphore's post by a thread that waited at the
        same place in turn (in a CPython process: its threading.Lock). None when the release
        says no lock (a condition, a queue, a pipe)."""
        released = self.waits.table.released(self.model.stacks[self.model.wakers[row.waker].stack]) \
            if row.waker is not None else None
        if released is None:
            return None
        if released.kind == "lock":
            return released
        python = self.model.threads[row.tid].pid in self.python_pids
        if released.name == SEMAPHORE and self.waits.in_turns(row):
            return (python and self.waits.table.named(PYTHON_LOCK)) or released
        if released.name == CONDITION_VARIABLE and python and self.waits.in_turns(row):
            return self.waits.table.named(PYTHON_GIL)
        return None

    @cached_property
    def python_pids(self) -> set[int]:
        """The processes some of whose waits carry Python frames: CPython's (its waits without one
        are only those no read of its stacks fell in)."""
        framed = {index for index, stack in enumerate(self.model.stacks)
                  if any(frame.endswith(PYTHON_MARK) for frame in stack.frames)}
        return {self.model.threads[row.tid].pid for row in self.model.rows if row.stack in framed}

    def _lock_claim(self, lock: Lock) -> Claim:
        """A wait at a lock's claim, as the site's claim would be (see _direct)."""
        if lock.name == GLIBC_INTERNAL_LOCK and self.churning:
            return Claim(STACK_CACHE_LOCK, STACK_CACHE, guessed=True)
        return Claim(lock.finding or LOCK_CONTENTION, lock.name)

    def _holder_awaited_work(self, index: int) -> bool:
        """Whether a lock's holder spent most of a wait for it waiting for work itself (a poll, a
        pipe, a socket): a queue's reader lock held until the next item comes (Python's
        multiprocessing queues), which hands the wait for work on to the threads behind it."""
        row = self.model.rows[index]
        awaiting = sum(overlap for waker_row, overlap in self.waits.links_by_waiter.get(index, ())
                       if (site := self.waits.classes[waker_row].site) is not None
                       and site.lock.kind in WORK_KINDS)
        return awaiting >= HOLDER_AWAITED_WORK * row.blocked_us > 0

    @cached_property
    def turn_queues(self) -> dict[tuple[str, int], float]:
        """Per pool and stack, how many of its threads waited there in turns at a time, on
        average: the waits a thread ended that had waited at the same place itself (see
        Waits.in_turns), over the window."""
        queued: dict[tuple[str, int], int] = defaultdict(int)
        waiting: dict[tuple[str, int], set[int]] = defaultdict(set)
        for row, followed in zip(self.model.rows, self.waits.followed, strict=True):
            if followed and self.waits.in_turns(row):
                queued[(self.waits.pool_of(row.tid), row.stack)] += row.blocked_us
                waiting[(self.waits.pool_of(row.tid), row.stack)].add(row.tid)
        return {key: us / max(self.model.wall_us, 1) for key, us in queued.items()
                if len(waiting[key]) >= QUEUE_THREADS}

    @cached_property
    def mean_wait_us(self) -> dict[tuple[str, int], float]:
        """Per pool and stack, the average time off CPU of its waits that a peer ended."""
        sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
        for row, followed in zip(self.model.rows, self.waits.followed, strict=True):
            if followed:
                pool_and_stack = sums[(self.waits.pool_of(row.tid), row.stack)]
                pool_and_stack[0] += row.offcpu_us
                pool_and_stack[1] += row.count
        return {key: us / max(count, 1) for key, (us, count) in sums.items()}

    def _timed_out_taking_turns(self, index: int) -> bool:
        """A wait on a condition (not a sleep) that timed out, or that the recording's end
        cut, in a pool that takes turns there: a turn waited for (an interpreter lock's
        waiter wakes itself each time slice), not time waited for."""
        cls, claim = self.waits.classes[index], self.of_row[index]
        condition = cls.site is None or cls.site.lock.kind == "condition"
        synthetic = self.model.stacks[self.model.rows[index].stack].frames in ((BEFORE_WINDOW,), (NEW_THREAD,))
        if cls.cause not in (TIMER, UNWOKEN) or synthetic or not condition or claim is None or claim.finding != IDLE:
            return False
        pool = self.pools[self.waits.pool_of(self.model.rows[index].tid)]
        return pool.held_to_fewer_cpus and Claim(SERIALIZATION, pool.name) in self.of_row

    def _timed_out_at_the_gil(self, index: int, gil_waited_at: set[tuple[int, int]]) -> bool:
        """A condition's wait that timed out where its thread's other waits there were for the GIL:
        take_gil's waiter wakes itself every switch interval (5 ms), asks the holder to drop it and
        waits again, so all of its time there is the GIL's."""
        row, cls, claim = self.model.rows[index], self.waits.classes[index], self.of_row[index]
        if cls.cause != TIMER or claim is None or claim.finding != IDLE or \
                (cls.site is not None and cls.site.lock.kind != "condition"):
            return False
        return (row.tid, row.stack) in gil_waited_at

    def _gil_waited_at(self) -> set[tuple[int, int]]:
        """Where each thread waited for the GIL: (tid, stack)."""
        return {(row.tid, row.stack) for row, claim in zip(self.model.rows, self.of_row, strict=True)
                if claim == Claim(LOCK_CONTENTION, PYTHON_GIL)}

    def _pools(self) -> dict[str, Pool]:
        """The pools, with how many CPUs they ran on and how many of their threads had work
        (a wait a peer ended counts as work here: it is what is being judged)."""
        idle_us: dict[int, int] = defaultdict(int)
        for row, claim in zip(self.model.rows, self.of_row, strict=True):
            if claim is not None and claim.finding == IDLE:
                idle_us[row.tid] += row.offcpu_us
        pools: dict[str, Pool] = {}
        for tid, thread in self.model.threads.items():
            name = self.waits.pool_of(tid)
            pool = pools.setdefault(name, Pool(name, cpus=self.model.capture.cpus, window_us=self.model.wall_us))
            wall = thread.oncpu_us + thread.offcpu_us
            pool.tids.append(tid)
            pool.oncpu_us += thread.oncpu_us
            pool.wall_us += wall
            busy = max(wall - idle_us[tid], 0)
            pool.busy_us += busy
            pool.with_work += wall > 0 and busy >= WITH_WORK * wall
        return pools
