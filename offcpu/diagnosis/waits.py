"""What each wait was, by what ended it first and by where it waited after.

What ended a wait is in every capture: the wakeup, recorded in the waker's context
with the waker's stack. A wait ended by a *peer* (a thread of the same service:
the same process, or processes of the same name) waited for that peer: a lock, a
condition, a hand-off. One ended by a *timer* waited for time; by a *device*, for
I/O; by the *network* or a thread *outside* the service, for work. Where it waited
(the lock table's entry for its stack) then says which lock or queue it was.

A peer's wait is judged by what the peer did meanwhile, from the wake-up links: a
peer that was itself waiting for work or time handed work over when it came (the
waiter waited for work too); a peer that was on CPU, or waiting on a disk or a lock,
held the waiter back.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cached_property

from offcpu.diagnosis.locktable import LockTable, Site
from offcpu.model import PREEMPTED, Model, Row
from offcpu.model.wakeups import (
    DEVICE,
    NEW,
    OUTSIDE,
    PEER,
    PREEMPTED_CAUSE,
    UNWOKEN,
    cause_of_waker,
)
from offcpu.stacks import BEFORE_WINDOW, NEW_THREAD, STACK_LOST, STACK_NOT_TAKEN, THREAD_ROOTS, UNKNOWN, Stack, normal

# libc's futex wrappers: a user stack of these and nothing of the program's says a futex was
# waited on, not why (glibc built without frame pointers cuts the walk there).
LIBC_WRAPPERS = frozenset({
    "__futex_abstimed_wait_common", "__futex_abstimed_wait_common64", "__futex_abstimed_wait_cancelable64",
    "__futex_wait", "futex_wait", "syscall", "start_thread", UNKNOWN,
})
STEM = re.compile(r"[-_.:# ]*\d+$")  # "worker-3" -> "worker", "GC Thread#0" -> "GC Thread"
# The scheduler's own frames at the leaf of a sleeping thread's kernel stack (not io_schedule:
# that says what the thread waits for).
SCHEDULER_FRAMES = re.compile(r"__schedule|schedule|schedule_timeout|schedule_hrtimeout(?:_range\w*)?|"
                              r"schedule_preempt_disabled|preempt_schedule\w*")
UNINTERRUPTIBLE = "D"
# How far from its thread function a kernel thread may sleep and still be in its main loop: in
# the function itself (worker_thread, smpboot_thread_fn, kswapd), or in one helper of its loop
# (rcu_gp_fqs_loop under rcu_gp_kthread, devtmpfs_work_loop under devtmpfsd).
MAIN_LOOP_DEPTH = 2


@dataclass(frozen=True)
class WaitClass:
    """One row's waits: what ended them, and where they waited (None: no entry names it)."""

    cause: str  # a cause of offcpu.model.wakeups (a key of its CAUSE_WORDS)
    site: Site | None
    truncated: bool  # the user stack stops at libc's futex wrapper, with no frame of the program
    parked: bool = False  # a kernel thread asleep in its main loop: it waits for work, whoever wakes it


def in_main_loop(stack: Stack) -> bool:
    """Whether a kernel thread's stack sleeps in its thread function's loop (a workqueue worker
    in worker_thread, ksoftirqd in smpboot_thread_fn), as kernel threads do between pieces of
    work, rather than in the work (a writeback's io_schedule under process_one_work)."""
    if not stack.frames or stack.kernel_frames != len(stack.frames):
        return False
    frames = [normal(frame) for frame in stack.frames]  # leaf first
    if "kthread" in frames:
        function_at = frames.index("kthread")  # the thread function is the frame before it (kthread: not started)
    elif "kthreadd" in frames:
        function_at = frames.index("kthreadd") + 1
    else:
        return False
    first = next((index for index, frame in enumerate(frames) if not SCHEDULER_FRAMES.fullmatch(frame)), len(frames))
    return function_at - first <= MAIN_LOOP_DEPTH


def truncated(stack: Stack) -> bool:
    user = [normal(frame) for frame in stack.user_frames]
    return bool(user) and all(frame in LIBC_WRAPPERS or frame in THREAD_ROOTS for frame in user)


def stem(comm: str) -> str:
    return STEM.sub("", comm) or comm


class Waits:
    """The classes of a model's rows, its services and pools, and what peers did while
    their waiters waited (from the model's links)."""

    def __init__(self, model: Model, table: LockTable) -> None:
        self.model = model
        self.table = table
        names = _process_names(model)
        same_name = defaultdict(set)
        for pid, name in names.items():
            same_name[name].add(pid)
        # a service: processes of one name when there are several, else a process
        self.service = {pid: name if len(same_name[name]) > 1 else f"{name} ({pid})" for pid, name in names.items()}
        # (named once: the claims ask for a thread's pool a few times for each of its rows)
        self.pool_by_tid = {tid: f"{self.service_of_pid(thread.pid, thread.comm)}: {stem(thread.comm)}"
                            for tid, thread in model.threads.items()}
        self._normal: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.sites = [table.site(stack) for stack in model.stacks]
        self.truncated = [truncated(stack) for stack in model.stacks]
        self.parked = [in_main_loop(stack) for stack in model.stacks]
        self.classes = self._parked_before_the_window([self._classify(row) for row in model.rows])
        # The waits a recorded thread ended, of its own service or another process: judged by
        # what that thread did meanwhile (from the links), not by who it was.
        self.followed = [cls.cause == PEER or (cls.cause == OUTSIDE and self.waker_tid(row) in model.threads)
                         for row, cls in zip(model.rows, self.classes, strict=True)]
        # Where each thread waited for a recorded thread, and where it let one go: the places a
        # lock or a turn passes through
        self.waited_at = {(row.tid, row.stack) for row, followed in zip(model.rows, self.followed, strict=True)
                          if followed}
        self.let_go_at = {(self.waker_tid(row), row.stack, self.release(row)) for row, followed in
                          zip(model.rows, self.followed, strict=True) if followed}

    def service_of_pid(self, pid: int, comm: str) -> str:
        return self.service.get(pid, f"{comm} ({pid})")

    def pool_of(self, tid: int) -> str:
        """Threads of one service whose names differ only in a trailing number are one pool."""
        return self.pool_by_tid[tid]

    def waker_tid(self, row: Row) -> int | None:
        """The thread that ended a row's waits (None: not a thread, or none)."""
        if row.waker is None or self.model.wakers[row.waker].kind != "thread":
            return None
        return self.model.wakers[row.waker].tid

    def waker_pool(self, row: Row) -> str:
        """The pool of the thread that ended a row's waits (one the model no longer holds, as a
        thread that ended before the part of the recording a report is of, by its name)."""
        assert row.waker is not None, "only for the rows a thread ended"
        waker = self.model.wakers[row.waker]
        if waker.tid in self.model.threads:
            return self.pool_of(waker.tid)
        return f"{self.service_of_pid(waker.pid, waker.comm)}: {stem(waker.comm)}"

    def in_turns(self, row: Row) -> bool:
        """Whether the thread that ended a row's waits, of the same pool, waited at the same place
        itself, and the row's thread let another go there: what lets one through at a time (a
        lock, an interpreter lock, a monitor) is waited for, and let go, by each of the threads
        that take it (a thread joining others waits there, and lets none go; a client and its
        server, both in epoll_wait, are not one pool)."""
        waker = self.waker_tid(row)
        return waker in self.model.threads and self.pool_of(waker) == self.pool_of(row.tid) and \
            (waker, row.stack) in self.waited_at and (row.tid, row.stack, self.release(row)) in self.let_go_at

    def release(self, row: Row) -> str | None:
        """The lock table's name for what let a row's waits go (a semaphore's post, a condition's
        signal), by the waker's stack: threads take turns by one release, not by any (a thread
        joining workers lets them go through the interpreter lock, and is let go by a post)."""
        if row.waker is None:
            return None
        released = self.table.released(self.model.stacks[self.model.wakers[row.waker].stack])
        return released.name if released else None

    def _classify(self, row: Row) -> WaitClass:
        stack = self.model.stacks[row.stack]
        site = self.sites[row.stack]
        if stack.frames == (NEW_THREAD,):
            return WaitClass(NEW, None, False)
        if row.state == PREEMPTED:
            return WaitClass(PREEMPTED_CAUSE, site, False)
        if row.waker is None:
            return WaitClass(self._unsampled_io(row, UNWOKEN), site, self.truncated[row.stack])
        waker = self.model.wakers[row.waker]
        waiter = self.model.threads[row.tid]
        same = self.service_of_pid(waker.pid, waker.comm) == self.service_of_pid(waiter.pid, waiter.comm) \
            and waker.tid != row.tid
        cause = self._unsampled_io(row, cause_of_waker(waker, self.model.stacks[waker.stack], same))
        return WaitClass(cause, site, self.truncated[row.stack], self.parked[row.stack])

    def _unsampled_io(self, row: Row, cause: str) -> str:
        """A wait in D with no stack, of its own or lent (offcpu.model.sampling), that no peer ended
        waited for I/O, whoever ran when the device's interrupt came: an uninterruptible sleep
        never waits for work."""
        unsampled = self.model.stacks[row.stack].frames == (STACK_NOT_TAKEN,)
        return DEVICE if unsampled and row.state == UNINTERRUPTIBLE and cause != PEER else cause

    def _parked_before_the_window(self, classes: list[WaitClass]) -> list[WaitClass]:
        """A wait under way when the recording began has no stack: a kernel thread's is taken
        to be in its main loop when every wait of its that has a stack was."""
        stacks_of: dict[int, list[int]] = defaultdict(list)
        for row in self.model.rows:
            if not is_synthetic(self.model.stacks[row.stack]):
                stacks_of[row.tid].append(row.stack)
        parked_threads = {tid for tid, stacks in stacks_of.items() if all(self.parked[stack] for stack in stacks)}
        return [replace(cls, parked=True) if row.tid in parked_threads and self.model.stacks[row.stack].frames ==
                (BEFORE_WINDOW,) else cls for row, cls in zip(self.model.rows, classes, strict=True)]

    def normal_frames(self, stack: int) -> tuple[str, ...]:
        """A stack's frames, leaf first, as the lock table reads them."""
        return self.normal_frames_of(self.model.stacks[stack].frames)

    def normal_frames_of(self, frames: tuple[str, ...]) -> tuple[str, ...]:
        found = self._normal.get(frames)
        if found is None:
            found = self._normal[frames] = tuple(normal(frame) for frame in frames)
        return found

    @cached_property
    def links_by_waiter(self) -> dict[int, list[tuple[int, int]]]:
        """Row index -> (waker's row index, overlap µs) for every link of the model."""
        found: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for link in self.model.links:
            found[link.waiter_row].append((link.waker_row, link.overlap_us))
        return found


def _process_names(model: Model) -> dict[int, str]:
    """Each process's name: its main thread's, else its first thread's."""
    names: dict[int, str] = {}
    for tid, thread in sorted(model.threads.items()):
        if tid == thread.pid or thread.pid not in names:
            names[thread.pid] = thread.comm
    return names


def is_synthetic(stack: Stack) -> bool:
    return stack.frames in ((BEFORE_WINDOW,), (NEW_THREAD,), (STACK_LOST,))
