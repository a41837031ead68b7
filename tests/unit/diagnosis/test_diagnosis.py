"""Findings by cause on small event sequences in the engine's own form (EventSink calls),
every expected figure worked out by hand in the comments.

Threads 11-13 are threads of process 10 ("app"); chains are frame names joined by ';',
leaf first, all of them the kernel's (see test_engine_events.NamedChains), so the lock
table reads them as it reads a stack's frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import pytest

from offcpu.diagnosis.findings import Finding, findings
from tests.helpers.engine_events import US, Feed, builder, model

FUTEX = "__schedule;schedule;futex_do_wait;futex_wait;__lll_lock_wait"  # a pthread mutex
PIPE = "__schedule;schedule;pipe_wait_readable;anon_pipe_read;vfs_read"
CONDITION = "__schedule;schedule;futex_do_wait;futex_wait"  # a futex of the program's own
TIMER = "try_to_wake_up;hrtimer_wakeup;__hrtimer_run_queues;hrtimer_interrupt;asm_sysvec_apic_timer_interrupt"
DISK = "try_to_wake_up;blk_mq_end_request;virtblk_done;asm_common_interrupt"
WAKE = "try_to_wake_up;wake_up_q;futex_wake"


def switch(events: Feed, at_us: int, prev: int, state: str, next_tid: int, chain: str,
           cpu: int = 0, prev_pid: int = 10, names: Mapping[int, str] = MappingProxyType({})) -> None:
    """sched_switch from `prev` to `next_tid`, and perf's record of `next_tid` being in (threads
    named app-TID, or as `names` says)."""
    events.sched_switch(at_us * US, cpu, prev_pid if prev else 0, prev, names.get(prev, f"app-{prev}"), state,
                        next_tid, chain)
    if next_tid:
        events.switch_in(at_us * US, cpu, 10, next_tid, names.get(next_tid, f"app-{next_tid}"))


def turns(chain: str) -> list[Finding]:
    """Threads 11, 12, 13 take turns on one CPU of two for 9 ms: each runs 1 ms, wakes the
    next and waits at `chain` until its turn comes again, 2 ms later."""
    events = builder()
    order = [11, 12, 13]
    events.switch_in(0, 0, 10, 11, "app-11")
    for step in range(1, 10):
        running, following = order[(step - 1) % 3], order[step % 3]
        events.sched_waking(step * 1000 * US, 10, running, f"app-{running}", following, WAKE)
        switch(events, step * 1000, running, "S", following, chain)
    return findings(model(events))


def by_id(found: list[Finding]) -> dict[str, Finding]:
    return {finding.id: finding for finding in found}


def test_threads_that_take_turns_on_a_futex_of_their_own_are_serialized() -> None:
    found = by_id(turns(CONDITION))
    finding = found["serialization"]
    # 7 waits of 2 ms each were ended by another of the three, two more were under way when the
    # recording began (12's 1 ms, 13's 2 ms) and two when it ended (12's 2 ms, 13's 1 ms: turns,
    # in a pool that takes turns); the pool ran on 1.0 CPU of 2 with 3 threads with work
    # (the process is named after its first thread: "app-11")
    assert finding.severity == "critical" and finding.subject == "app-11 (10): app"
    assert finding.blocked_us == 7 * 2000 + (1000 + 2000) + (2000 + 1000)
    assert "ran on 1.0 CPUs of 2" in finding.summary and "take turns" in finding.summary
    assert [(share.who, share.wakeups) for share in finding.wakers] == [("app-11 (10): app", 9)]  # 7 + 2 begun
    assert finding.release_sites[0].frames == tuple(reversed(WAKE.split(";")))
    assert "lock_contention" not in found and "handoff" not in found


def test_threads_that_take_turns_through_a_pipe_hand_work_over() -> None:
    found = by_id(turns(PIPE))
    finding = found["handoff"]
    assert finding.severity == "info" and "through a pipe" in finding.summary and "take turns" in finding.summary
    assert "serialization" not in found and "lock_contention" not in found


def test_threads_that_take_turns_on_a_mutex_wait_for_that_lock() -> None:
    found = by_id(turns(FUTEX))
    finding = found["lock_contention"]
    assert finding.subject == "pthread mutex" and finding.severity == "critical"
    # the 7 waits ended within the window, the 2 cut by its end (at the mutex too), and the 2 under
    # way when it began, which have no stack but go with their pool's waits on peers
    assert finding.blocked_us == 7 * 2000 + (2000 + 1000) + (1000 + 2000)
    assert "serialization" not in found
    # every waker was on CPU until it let go: the waits come down to threads running
    assert [(root.what, round(root.share, 3)) for root in finding.roots] == [(
        "a thread on CPU (or waiting for one)", 1.0)]


@pytest.mark.parametrize(("waker_pid", "waker_tid", "waker_chain", "expected"), [
    (0, 0, TIMER, "idle"),  # a timer's interrupt: time passing
    (0, 0, DISK, "io_wait"),  # a disk's interrupt: I/O
    (98, 99, "try_to_wake_up;sock_def_readable;unix_stream_sendmsg", "idle"),  # a client, outside the service
])
def test_what_ended_a_wait_says_what_it_was(waker_pid: int, waker_tid: int, waker_chain: str,
                                            expected: str) -> None:
    # Given thread 11 waiting 1 -> 6 ms in a futex of its own, woken at 5 ms
    events = builder()
    events.switch_in(0, 0, 10, 11, "app-11")
    switch(events, 1000, 11, "S", 0, CONDITION)
    events.sched_waking(5000 * US, waker_pid, waker_tid, "other", 11, waker_chain)
    switch(events, 6000, 0, "R", 11, "", cpu=0, prev_pid=0)
    found = by_id(findings(model(events)))
    # Then its 5 ms (4 ms blocked, 1 ms waiting for a CPU) go to the finding of what ended it
    finding = found[expected]
    assert (finding.offcpu_us, finding.blocked_us) == (5000, 4000)


def test_a_lock_wait_comes_down_to_what_the_holder_waited_for() -> None:
    # Given 11 blocked on a mutex 1 -> 5 ms while its holder, 12, waited for the disk 2 -> 4 ms
    events = builder()
    switch(events, 1000, 11, "S", 12, FUTEX)
    switch(events, 2000, 12, "D", 0, "__schedule;schedule;io_schedule;do_fsync", cpu=0)
    events.sched_waking(3900 * US, 0, 0, "swapper/0", 12, DISK)
    switch(events, 4000, 0, "R", 12, "", prev_pid=0)
    events.sched_waking(5000 * US, 10, 12, "app-12", 11, WAKE)
    switch(events, 5200, 12, "S", 11, CONDITION)
    finding = by_id(findings(model(events)))["lock_contention"]
    # Then of its 4 ms blocked, the holder was off CPU waiting for the disk (its wait, 2 -> 4 ms,
    # run queue included) 2 ms, and on CPU the other 2 ms
    assert [(step.what, step.us) for step in finding.chain] == [("waited for disk I/O", 2000), ("ran", 2000)]
    assert {root.what: root.share for root in finding.roots} == {"disk I/O": 0.5,
                                                                  "a thread on CPU (or waiting for one)": 0.5}



def test_a_sampled_holders_wait_hands_on_no_more_than_the_whole_lock_wait() -> None:
    # Given the same lock wait, but the holder's disk wait 2 -> 4 ms sampled with weight 2, and in its
    # stratum (12 in D, woken by swapper/0) a later one without a stack, 5.4 -> 9.9 ms: the link
    # (2 ms, counted twice) is scaled with the holder's row, by its stratum's 6.5 ms over its estimate
    # of 4 ms, to 6.5 ms: more than 11's 4 ms blocked
    events = builder()
    switch(events, 1000, 11, "S", 12, FUTEX)
    events.sched_switch(2000 * US, 0, 10, 12, "app-12", "D", 0, "__schedule;schedule;io_schedule;do_fsync",
                        weight=2)
    events.sched_waking(3900 * US, 0, 0, "swapper/0", 12, DISK)
    switch(events, 4000, 0, "R", 12, "", prev_pid=0)
    events.sched_waking(5000 * US, 10, 12, "app-12", 11, WAKE)
    switch(events, 5200, 12, "S", 11, CONDITION)
    events.sched_waking(5250 * US, 10, 11, "app-11", 12, WAKE)
    switch(events, 5300, 11, "S", 12, CONDITION)
    events.sched_switch(5400 * US, 0, 10, 12, "app-12", "D", 0, "", weight=0)
    events.sched_waking(9800 * US, 0, 0, "swapper/0", 12, DISK)
    switch(events, 9900, 0, "R", 12, "", prev_pid=0)
    finding = by_id(findings(model(events)))["lock_contention"]
    # Then the disk is the root of all of it, not of more
    assert {root.what: root.share for root in finding.roots} == {"disk I/O": 1.0}

EPOLL = "__schedule;schedule;schedule_hrtimeout_range;ep_poll;do_epoll_wait"  # waiting for a client
CLIENT = "try_to_wake_up;sock_def_readable;unix_stream_sendmsg"
FSYNC = "__schedule;schedule;io_schedule;do_fsync"


def test_a_pool_mostly_waiting_for_clients_says_how_many_threads_had_work() -> None:
    # Given 11 waiting 0.5 -> 1 ms for 12, who waited 0.6 -> 0.9 ms for the disk before it let
    # 11 go (as a session waits for another's commit), then both waiting for a client (thread 99
    # of process 98) from 1.0 and 1.1 ms until 8.7 ms, and running to the end of the 10 ms window
    events = builder()
    events.switch_in(0, 0, 10, 11, "app-11")
    events.sched_waking(500 * US, 10, 11, "app-11", 12, WAKE)
    switch(events, 500, 11, "S", 12, CONDITION)
    switch(events, 600, 12, "D", 0, FSYNC)
    events.sched_waking(900 * US, 0, 0, "swapper/0", 12, DISK)
    switch(events, 900, 0, "R", 12, "", prev_pid=0)
    events.sched_waking(1000 * US, 10, 12, "app-12", 11, WAKE)
    switch(events, 1000, 12, "S", 11, EPOLL)
    switch(events, 1100, 11, "S", 0, EPOLL)
    for tid, cpu in ((11, 0), (12, 1)):
        events.sched_waking(8700 * US, 98, 99, "client", tid, CLIENT)
        switch(events, 8700, 0, "R", tid, "", cpu=cpu, prev_pid=0)
    finding = by_id(findings(model(events)))["serialization"]
    # Then each waited for work most of its time (11: 1.1 -> 8.7 ms, 7,600 us; 12: 1.0 -> 8.7 ms,
    # 7,700 us): neither had work half of it, which the summary said as "0 of its threads had
    # work". It says how many had work on average: (10,000 - 7,600) + (10,000 - 7,700) = 4,700 us
    # of the 10,000 us window, 0.47; and on CPU, 11: 500 + 100 + 1,300, 12: 100 + 100 + 1,300,
    # 3,400 us, 0.34 CPUs
    assert "on average 0.5 of its 2 threads had work" in finding.summary, finding.summary
    assert "ran on 0.3 CPUs of 2" in finding.summary, finding.summary


def queue_of_three(first: str) -> dict[str, Finding]:
    """13 waiting for the disk 1.2 -> 4 ms, then running 1 ms and letting 12 go, which had
    waited for it since 1.1 ms; 12 running 1 ms and letting 11 (named `first`) go, which had
    waited for 12 since 1 ms (as RocksDB's writers wait for the write group's leader, the
    leader for the disk); then each waiting for a client, and the window ending at 10 ms."""
    names = {11: first}
    events = builder()
    events.switch_in(0, 0, 10, 11, first)
    switch(events, 1000, 11, "S", 12, CONDITION, names=names)
    switch(events, 1100, 12, "S", 13, CONDITION)
    switch(events, 1200, 13, "D", 0, FSYNC)
    events.sched_waking(4000 * US, 0, 0, "swapper/0", 13, DISK)
    switch(events, 4000, 0, "R", 13, "", prev_pid=0)
    events.sched_waking(5000 * US, 10, 13, "app-13", 12, WAKE)
    switch(events, 5000, 13, "S", 12, EPOLL)
    events.sched_waking(6000 * US, 10, 12, "app-12", 11, WAKE)
    switch(events, 6000, 12, "S", 11, EPOLL, names=names)
    switch(events, 6500, 11, "S", 0, EPOLL, names=names)
    events.sched_waking(10_000 * US, 98, 99, "client", 11, CLIENT)
    switch(events, 10_000, 0, "R", 11, "", prev_pid=0, names=names)
    return by_id(findings(model(events)))


def test_a_wait_behind_a_peer_in_line_itself_is_in_line() -> None:
    found = queue_of_three("app-11")
    # Then the pool, on CPU 1.5 + 1.1 + 1.1 = 3.7 ms of the 10 ms window (0.4 CPUs: not taking
    # turns), waited in line: 12 for 3.9 ms behind 13's disk (2.8 ms of it) and 13 on CPU; 11
    # for 5 ms behind 12, in line itself 3.9 ms of it (not handing work over, as when 12 ran)
    finding = found["serialization"]
    assert finding.blocked_us == 3900 + 5000
    # Followed down the line to its head: 12's 3.9 ms were 2.8 ms of 13's disk wait and 1.1 ms of
    # 13 on CPU; 11's 5 ms were 12 on CPU 0.1 + 1.0 ms and 12 in line 3.9 ms (2.8 ms of it 13's
    # disk again): 5,600 of the 8,900 us came down to the disk, 63%
    assert ("63% of that time came down to the one let through waiting for disk I/O: a blocking call while "
            "holding what they take turns at") in finding.summary
    # and one wait of each is not yet taking turns (TURNS_PER_THREAD): said, at most info
    assert finding.severity == "info"
    assert "handoff" not in found


def test_a_thread_of_another_pool_behind_one_in_line_is_not_in_its_line() -> None:
    # Given the same, with 11 a thread of another name: not one of the pool waiting in line
    found = queue_of_three("other")
    # Then 12's 3.9 ms are in line (behind 13's disk), and 11's 5 ms were held back by 12, a
    # thread of another pool: 12 was off CPU 3.9 ms of it in a line 11 is not in, on CPU 1.1 ms
    assert found["serialization"].blocked_us == 3900
    assert found["busy_peer"].blocked_us == 5000
    assert found["busy_peer"].subject == "other (10): app"
    assert "handoff" not in found


@pytest.mark.parametrize(("chain", "parked"), [
    ("__schedule;schedule;worker_thread;kthread;ret_from_fork;ret_from_fork_asm", True),
    ("__schedule;schedule;smpboot_thread_fn;kthread;ret_from_fork;ret_from_fork_asm", True),
    ("__schedule;schedule;schedule_timeout;rcu_gp_fqs_loop;rcu_gp_kthread;kthread;ret_from_fork", True),
    ("__schedule;schedule;kthreadd;ret_from_fork;ret_from_fork_asm", True),
    ("__schedule;schedule;kthread;ret_from_fork;ret_from_fork_asm", True),  # created, not started
    # in a piece of work: a writeback waiting for the disk, a work item sleeping
    ("__schedule;schedule;io_schedule;folio_wait_bit_common;wb_writeback;wb_workfn;process_one_work;"
     "worker_thread;kthread;ret_from_fork", False),
    ("__schedule;schedule;schedule_timeout;msleep;poll_work;process_one_work;worker_thread;kthread", False),
])
def test_a_kernel_thread_waits_for_work_in_its_main_loop(chain: str, parked: bool) -> None:
    # Given kernel thread 20 asleep 1 -> 6 ms at `chain`, woken at 5 ms by a disk's interrupt
    events = builder()
    events.switch_in(0, 0, 20, 20, "kworker/0:1")
    events.sched_switch(1000 * US, 0, 20, 20, "kworker/0:1", "I", 0, chain)
    events.sched_waking(5000 * US, 0, 0, "swapper/0", 20, DISK)
    events.sched_switch(6000 * US, 0, 0, 0, "swapper/0", "R", 20, "")
    events.switch_in(6000 * US, 0, 20, 20, "kworker/0:1")
    found = by_id(findings(model(events)))
    # Then its 5 ms are a wait for work when it slept in its loop, else a wait for the disk
    assert found["idle" if parked else "io_wait"].offcpu_us == 5000


def test_a_kernel_thread_preempted_in_its_main_loop_waits_for_a_cpu() -> None:
    # Given kernel thread 20 preempted (state R) at 1 ms in worker_thread, back on CPU at 3 ms
    events = builder()
    events.switch_in(0, 0, 20, 20, "kworker/0:1")
    events.sched_switch(1000 * US, 0, 20, 20, "kworker/0:1", "R", 21, "__schedule;preempt_schedule_irq;worker_thread;"
                                                                    "kthread;ret_from_fork")
    events.switch_in(1000 * US, 0, 10, 21, "app-21")
    events.sched_switch(3000 * US, 0, 10, 21, "app-21", "R", 20, "__schedule;preempt_schedule;app")
    events.switch_in(3000 * US, 0, 20, 20, "kworker/0:1")
    # Then its 2 ms are a wait for a CPU, not for work: with app-21's, preempted from 3 ms to
    # the end of the 10 ms window, 9 ms
    found = by_id(findings(model(events)))
    assert found["runqueue"].offcpu_us == 2000 + 7000


def java_monitor(holder: int) -> str:
    """A Java thread's wait for a monitor that `holder` holds, as a recorded JVM's wait reads with
    its thread dump's frames (leaf first): libjvm's futex, what it waits for and who held it, its Java frame."""
    return (f"{CONDITION};[held by app-{holder}: M.hold (M.java:7)];[waiting to lock a java.lang.Object];"
            "M.run (M.java:3) [java]")


def test_a_java_monitors_wait_is_its_own_lock_named_by_its_class_and_owner() -> None:
    # Given 11 blocked on a monitor 1 -> 5 ms, which the dump says 12 holds (in M.hold), and 12 lets it go at 5 ms
    events = builder()
    switch(events, 1000, 11, "S", 12, java_monitor(12))
    events.sched_waking(5000 * US, 10, 12, "app-12", 11, WAKE)
    switch(events, 5200, 12, "S", 11, CONDITION)
    finding = by_id(findings(model(events)))["lock_contention"]
    # Then its 4.2 ms (4 ms blocked, 0.2 ms waiting for the CPU 12 held) are the Java monitor's, all of them
    # with 12 named as the owner, in M.hold
    assert (finding.title, finding.subject, finding.offcpu_us) == (
        "Threads wait for a lock: Java monitor (a java.lang.Object)", "Java monitor", 4200)
    assert finding.summary.endswith("; 100% of that time the thread dumps named its owner as app-12, in M.hold "
                                    "(M.java:7)."), finding.summary


def test_a_reentrantlocks_wait_is_placed_at_the_programs_frame_not_the_jdks() -> None:
    # Given 11 parked 1 -> 5 ms in a ReentrantLock's queue (the JDK's park frames innermost, the program's
    # M.run outermost), unparked by 12's unlock at 5 ms
    events = builder()
    switch(events, 1000, 11, "S", 12, f"{CONDITION};[parking to wait for a java.util.concurrent.locks."
                                      "ReentrantLock$FairSync];jdk.internal.misc.Unsafe.park (Native Method) [java];"
                                      "java.util.concurrent.locks.LockSupport.park (LockSupport.java:211) [java];"
                                      "M.run (M.java:3) [java]")
    events.sched_waking(5000 * US, 10, 12, "app-12", 11, WAKE)
    switch(events, 5200, 12, "S", 11, CONDITION)
    finding = by_id(findings(model(events)))["lock_contention"]
    # Then the lock's finding says the wait is at the program's line, M.java:3
    assert finding.subject == "ReentrantLock" and " holds at M.run (M.java:3) (100%)" in finding.summary, \
        finding.summary


def test_two_java_threads_each_waiting_for_the_others_monitor_are_deadlocked() -> None:
    # Given 11 and 12 each waiting for the monitor the other holds (the last dump's owners), woken by HotSpot's
    # timer every 4 ms to try again and back to their wait
    events = builder()
    switch(events, 1000, 11, "S", 12, java_monitor(12))
    switch(events, 1100, 12, "S", 0, java_monitor(11))
    events.sched_waking(5000 * US, 0, 0, "swapper/0", 11, TIMER)
    switch(events, 5000, 0, "R", 11, "", prev_pid=0)
    switch(events, 5010, 11, "S", 0, java_monitor(12))
    found = model(events)
    found.mutex_owners.update({11: 12, 12: 11})
    deadlock = by_id(findings(found))["deadlock"]
    # Then their waits at the monitor are the deadlock's, which says where each waits and for what
    assert deadlock.severity == "critical" and deadlock.threads == 2
    assert ("deadlocked, woken only by timers to try again: app-11 (11) at M.run (M.java:3) waits for a Java monitor "
            "(a java.lang.Object) held by app-12 (12), which at M.run (M.java:3) waits for one held by app-11 (11)."
            ) in deadlock.summary, deadlock.summary
    assert "ReentrantLock.tryLock" in deadlock.remedy

