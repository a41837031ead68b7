"""Findings on models built from the committed fixtures (recorded from examples/)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

import pytest

from offcpu.capture import CaptureInfo, Target
from offcpu.diagnosis.context import Context, share_uncertainty
from offcpu.diagnosis.findings import SEVERITIES, Finding, findings, severity_of
from offcpu.diagnosis.locktable import default_table
from offcpu.diagnosis.rules import RULES, Match, Rule, detect_mmap_lock
from offcpu.model import Model, Row, Thread, Waker
from offcpu.stacks import Stack
from tests.fixtures import model_of


def by_id(model) -> dict[str, Finding]:
    return {finding.id: finding for finding in findings(model)}


def top_busy(model) -> Finding:
    return next(finding for finding in findings(model) if finding.id != "idle")


def rename_frames(model, names: dict[str, str]) -> None:
    """Stand for another kernel or program: the same waits under other frame names."""
    model.stacks[:] = [Stack(tuple(names.get(frame, frame) for frame in stack.frames), stack.kernel_frames)
                       for stack in model.stacks]


def test_rules_are_one_table_with_unique_ids():
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids)) == 15
    assert all(rule.title and rule.remedy and callable(rule.detect) for rule in RULES)


def test_severity_thresholds():
    assert [severity_of(share) for share in (0.0, 0.049, 0.05, 0.199, 0.2, 1.0)] == \
           ["info", "info", "warning", "warning", "critical", "critical"]


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all", "idle_pid", "mmap_fixed_pid",
                                  "churn_dwarf_pid"])
def test_findings_are_sorted_worst_first_and_well_formed(name):
    found = findings(model_of(name))
    assert found
    # worst first; within a severity, waits with a cause in the program before waits for a CPU,
    # then by the time each is graded by
    keys = [(-SEVERITIES.index(f.severity), f.id == "runqueue", -f.graded_us) for f in found]
    assert keys == sorted(keys)
    for finding in found:
        assert finding.severity in SEVERITIES and finding.confidence in ("high", "low")
        assert 0 <= finding.share_of_wall <= 1 and 0 <= finding.share_of_offcpu <= 1
        assert finding.summary.endswith(".") and finding.remedy
        assert len(finding.evidence) <= 3 and not re.search(r"(?<![\d,])1 (waits|times)", finding.summary)
        assert sum(e.offcpu_us for e in finding.evidence) <= finding.offcpu_us
        assert [e.offcpu_us for e in finding.evidence] == sorted((e.offcpu_us for e in finding.evidence),
                                                                  reverse=True)
        with pytest.raises(dataclasses.FrozenInstanceError):
            finding.severity = "info"  # type: ignore[misc]


def test_mmap_lock_from_mmap_munmap_and_page_faults():
    finding = top_busy(model_of("mmap_all"))
    assert finding.id == "mmap_lock" and finding.severity == "critical" and finding.confidence == "high"
    assert finding.threads == 4 and "mmap_lock" in finding.summary and "%" in finding.summary
    leaves = {frame for e in finding.evidence for frame in e.frames}
    assert {"rwsem_down_write_slowpath", "rwsem_down_read_slowpath"} <= leaves
    assert {"__vm_munmap", "lock_mm_and_find_vma"} & leaves
    assert all(e.state == "D" for e in finding.evidence)
    assert "read()" in finding.remedy and "mmap()" in finding.remedy


def test_mmap_lock_with_an_old_kernels_rwsem_names():
    # Given the mmap_all recording with its rwsem frames renamed as kernels before 5.3 named them
    model = model_of("mmap_all")
    before = by_id(model)["mmap_lock"]
    rename_frames(model, {"rwsem_down_write_slowpath": "rwsem_down_write_failed",
                          "rwsem_down_read_slowpath": "call_rwsem_down_read_failed"})
    after = by_id(model)["mmap_lock"]
    assert any("rwsem_down_write_failed" in e.frames for e in after.evidence)
    assert (after.offcpu_us, after.severity) == (before.offcpu_us, before.severity)


def test_no_mmap_lock_without_a_memory_map_entry():
    # A rwsem wait reached from elsewhere (here: the mmap paths renamed to an unrelated caller) is not mmap_lock
    model = model_of("mmap_all")
    rename_frames(model, {name: "some_other_rwsem_user" for name in (
        "__vm_munmap", "vm_mmap_pgoff", "lock_mm_and_find_vma", "exc_page_fault", "do_user_addr_fault",
        "do_mprotect_pkey", "do_madvise", "__vma_start_write")})
    assert "mmap_lock" not in by_id(model)


def test_lock_contention_told_by_the_lock_leaf_even_in_truncated_stacks():
    model = model_of("futex_pid")
    assert model.capture.user_stacks_truncated
    finding = by_id(model)["lock_contention"]
    assert finding.subject == "pthread mutex"
    assert finding.confidence == "high" and finding.severity == "critical"  # see test_a_lock_convoy_is_graded_...
    assert "__GI___lll_lock_wait" in finding.evidence[0].frames
    assert "--call-graph dwarf" in finding.confidence_reason  # which lock is not shown
    assert finding.threads == 4


def test_futex_waits_stopping_at_the_libc_leaf_are_not_called_contention():
    # churn_pid (fp): joins end in __futex_abstimed_wait_common with nothing above it
    found = by_id(model_of("churn_pid"))
    finding = found["futex_unknown"]
    assert "lock_contention" not in found
    assert finding.severity == "info" and finding.confidence == "low"
    assert "neither counted as contention nor as waits for work" in finding.summary
    assert "--call-graph dwarf" in finding.confidence_reason
    assert finding.evidence[0].frames[0] == "__futex_abstimed_wait_common"


def test_dwarf_stacks_tell_joins_from_locks():
    # The same program with DWARF stacks: the joins are seen as joins, and no futex finding is left
    model = model_of("churn_dwarf_pid")
    assert not model.capture.user_stacks_truncated
    assert {"lock_contention", "futex_unknown"}.isdisjoint(by_id(model))
    sites = {site.lock.name for site in Context(model).waits.sites if site is not None}
    assert {"thread join", "glibc stack cache lock"} <= sites


def test_the_lock_table_names_wait_sites_by_frames():
    # leaf first, kernel frames then the program's, as perf prints them
    def site(*frames: str) -> str | None:
        found = default_table().site(Stack(("__schedule", "schedule", "futex_wait", *frames), 3))
        return found.lock.name if found else None

    assert site("__GI___lll_lock_wait", "__pthread_mutex_lock", "work") == "pthread mutex"
    assert site("__lll_lock_wait_private", "get_cached_stack", "allocate_stack") == "glibc stack cache lock"
    assert site("__lll_lock_wait_private", "malloc") == "glibc internal lock"
    assert site("__futex_abstimed_wait_common", "__pthread_cond_wait_common", "consume") == "condition variable"
    assert site("syscall", "std::mutex::lock", "run") == "pthread mutex"
    assert site("__futex_abstimed_wait_common", "pthread_cond_wait@@GLIBC_2.3.2", "rb_native_cond_wait",
                "gvl_acquire_common") == "Ruby GVL"
    assert site("__futex_abstimed_wait_common", "syscall", "mylatch::wait") == "futex"  # the program's own
    assert site("__new_sem_wait_slow64.constprop.0", "worker") == "semaphore"
    # CPython's threading.Lock is a semaphore: the Python frames joined after the native ones tell
    # a lock from a Condition's wait (Queue.get, Event.wait) and a join; a wrapper alone could be the GIL
    sem = ("__futex_abstimed_wait_common", "__new_sem_wait_slow64.constprop.0", "PyThread_acquire_lock_timed")
    assert site(*sem, "work (app.py:57) [py]", "Thread.run (threading.py:975) [py]") == "Python threading lock"
    assert site(*sem, "Condition.wait (threading.py:320) [py]", "Queue.get (queue.py:171) [py]",
                "work (app.py:40) [py]") == "Python Condition wait"
    assert site(*sem, "Thread._wait_for_tstate_lock (threading.py:1132) [py]", "Thread.join (threading.py:1112) [py]",
                "main (app.py:70) [py]") == "Python thread join"
    assert site("__futex_abstimed_wait_common", "Condition.wait (threading.py:320) [py]") == "Python Condition wait"
    assert site("__futex_abstimed_wait_common", "work (app.py:57) [py]") == "futex"
    # a Java thread's wait as its thread dump names it, before libjvm's frames that say only how
    java = ("ObjectMonitor::EnterI", "ObjectMonitor::enter", "[waiting to lock a java.lang.Object]",
            "M.run (M.java:3) [java]")
    assert site("__futex_abstimed_wait_common", *java) == "Java monitor"
    assert site("ObjectMonitor::EnterI", "M.run (M.java:3) [java]") == "JVM monitor (synchronized)"
    assert site("Unsafe_Park", "[parking to wait for a java.util.concurrent.locks.ReentrantLock$NonfairSync]") == \
        "ReentrantLock"
    assert site("Unsafe_Park", "[parking to wait for a java.util.concurrent.CountDownLatch$Sync]") == \
        "Java park (java.util.concurrent)"
    assert site("ObjectMonitor::wait", "[waiting on a java.lang.Object]") == "Java Object.wait"
    assert site("[waiting to re-lock in wait() a java.lang.Object]") == "Java monitor"
    # a Ruby thread's wait as its own fields say it, before glibc's futex wrapper (libruby's frames are static)
    assert site("__futex_abstimed_wait_common", "[held by worker-1: block in work (app.rb:9)]",
                "[waiting to lock a Thread::Mutex]", "work (app.rb:8) [rb]") == "Ruby Mutex"
    assert site("__futex_abstimed_wait_common", "[waiting for Ruby's GVL]", "spin (app.rb:3) [rb]") == "Ruby GVL"
    assert site("__futex_abstimed_wait_common", "[asleep until another thread wakes it (Queue#pop, "
                "ConditionVariable#wait, sleep)]", "take (app.rb:5) [rb]") == "Ruby Queue or ConditionVariable"
    assert site("__futex_abstimed_wait_common", "[waiting for another thread to end (Thread#join)]",
                "<main> (app.rb:12) [rb]") == "Ruby Thread#join"


def test_stack_cache_lock_seen_with_dwarf_stacks():
    model = model_of("churn_dwarf_pid")
    finding = top_busy(model)
    assert finding.id == "stack_cache_lock" and finding.severity == "critical" and finding.confidence == "high"
    callers = {frame for e in finding.evidence for frame in e.frames}
    assert callers & {"__GI___nptl_deallocate_stack", "pthread_create@GLIBC_2.2.5", "__pthread_clockjoin_ex"}
    assert "pool" in finding.remedy
    # the churn that causes it is its own finding, without counting the lock waits twice
    churn = by_id(model)["thread_churn"]
    assert churn.severity != "info" and churn.offcpu_us + finding.offcpu_us <= sum(
        t.offcpu_us for t in model.threads.values())


def test_a_lock_convoy_is_graded_by_its_waiters_wait_for_a_cpu_too():
    # futex_pid: 4 threads on one mutex on 2 CPUs (the golden text report): 137.0 ms in the lock's
    # waits, 26.4 ms blocked on the lock and 110.5 ms waiting for a CPU after the releases woke
    # them, which is most of all the waiting for a CPU: the run queue is the lock's woken waiters
    # (a convoy), so the lock is graded by all 137.0 ms, 63% of their 217 ms
    model = model_of("futex_pid")
    assert sum(row.runqueue_us for row in model.rows) < 2 * 110_500
    found = by_id(model)
    lock = found["lock_contention"]
    assert (round(lock.offcpu_us, -2), round(lock.blocked_us, -2)) == (137_000, 26_400)
    assert lock.graded_us == lock.offcpu_us and lock.share_of_wall == pytest.approx(0.63, abs=0.005)
    assert "(63% of their time: 26.4 ms until woken, 110.5 ms more waiting for a CPU" in lock.summary
    assert "convoy" in lock.summary
    # and CPU saturation is left the rest
    assert found["runqueue"].graded_us < sum(row.runqueue_us for row in model.rows) - 110_000


def test_stack_cache_lock_guessed_with_low_confidence_from_truncated_stacks_and_churn():
    model = model_of("churn16_pid")
    finding = by_id(model)["stack_cache_lock"]
    assert finding.confidence == "low" and "most likely" in finding.summary
    assert "--call-graph dwarf" in finding.confidence_reason
    # without thread churn a bare __lll_lock_wait_private is not pinned on the stack cache
    for thread in model.threads.values():
        thread.created_ns = thread.exited_ns = None
    assert {"stack_cache_lock", "thread_churn"}.isdisjoint(by_id(model))


def test_thread_churn_reports_rate_and_lives_even_with_shallow_stacks():
    finding = by_id(model_of("churn_pid"))["thread_churn"]
    assert finding.severity in ("warning", "critical") and finding.threads > 100
    assert "a second" in finding.summary and "median" in finding.summary
    assert any(e.frames == ("[new thread, waiting for its first run]",) for e in finding.evidence)


def test_runqueue_is_preemption_not_new_threads():
    finding = by_id(model_of("mmap_fixed_pid"))["runqueue"]
    assert finding.severity == "critical" and all(e.state == "R" for e in finding.evidence)
    assert "2 CPUs" in finding.summary
    # the wakeup-to-run percentiles are of wakeups: the fixed twin's threads are only ever preempted
    assert "p99" not in finding.summary and "p99" in by_id(model_of("churn_pid"))["runqueue"].summary
    assert not any("[new thread" in frame for e in by_id(model_of("churn_pid"))["runqueue"].evidence
                   for frame in e.frames)


def test_kernel_workers_woken_by_the_disk_wait_for_work_not_for_it():
    # rm -rf of 20,000 files, the whole machine recorded: the block layer's completions wake
    # kworkers parked in worker_thread (and ksoftirqd in smpboot_thread_fn); only the remover's
    # own waits are disk I/O
    model = model_of("rm_tree_all")
    io = by_id(model)["io_wait"]
    assert io.threads == 1 and any("do_unlinkat" in e.frames for e in io.evidence)
    remover_in_d = sum(row.offcpu_us for row in model.rows
                       if model.threads[row.tid].comm == "rm" and row.state == "D")
    assert io.offcpu_us == remover_in_d


def test_threads_that_never_ran_are_told_by_the_stacks_they_slept_in():
    # deadlock (recorded with --pid, no events: every stack is from the snapshot at the end):
    # left holds A and waits for B, right holds B and waits for A, late waits for A behind
    # them; waiter waits on a condition variable and main sleeps: those two wait for work
    model = model_of("deadlock_pid")
    found = by_id(model)
    assert set(found) == {"deadlock", "idle"} and model.asleep_threads == 5
    deadlock = found["deadlock"]
    tid = {thread.comm: tid for tid, thread in model.threads.items()}
    assert deadlock.severity == "critical" and deadlock.threads == 3
    assert (f"left ({tid['left']}) waits for a mutex held by right ({tid['right']}), which waits for one held by "
            f"left ({tid['left']}); 1 more thread waits behind them (late ({tid['late']}))") in deadlock.summary
    assert {frame for e in deadlock.evidence for frame in e.frames} >= {"__pthread_mutex_lock@GLIBC_2.2.5",
                                                                        "futex_do_wait"}
    assert found["idle"].threads == 2


def test_threads_stuck_behind_a_sleeping_holder():
    # deadlock -H 1: left takes A and sleeps with it; right and late wait for A all the window
    model = model_of("stuck_pid")
    found = by_id(model)
    stuck = found["stuck"]
    left = next(tid for tid, thread in model.threads.items() if thread.comm == "left")
    # (all of their time: critical, above the warning every such finding has at least)
    assert stuck.severity == "critical" and stuck.threads == 2 and stuck.subject == "pthread mutex"
    assert f"held by left ({left}), itself asleep all the recording (a sleep" in stuck.summary
    assert "deadlock" not in found


def test_fixed_twin_has_no_mmap_lock():
    assert by_id(model_of("mmap_fixed_pid")).keys() <= {"runqueue", "idle"}


def test_idle_pool_is_idle_not_contended():
    # fp stacks: the workers' condition-variable waits stop in libc, but what ended them
    # says what they were: the poster, which was itself sleeping until it posted (a
    # wait for work); the pool's sleeps and its workers that nothing woke are idle too
    found = by_id(model_of("idle_pid"))
    assert set(found) == {"idle"} and found["idle"].severity == "info"
    assert "not contention" in found["idle"].summary and "not woken at all" in found["idle"].summary
    # all of the pool (idle_pool -t 8: a poster and 8 workers): the poster's sleeps in do_nanosleep and the
    # workers' condition-variable waits are waits for work; perf script shows nothing else of them but 3
    # switches of under 30 us (2 preempted, 1 on the queue's lock), of their 4.8 s off CPU
    assert found["idle"].threads == 9 and "(100% of their time)" in found["idle"].summary


def handoff_beside_a_long_waiter() -> Model:
    """1 s on 2 CPUs of one process: two workers, on CPU 200 ms each, hand work to each other
    100 times each (8 ms a wait); a compiler thread waits 900 ms once, until a worker wakes it. All
    the waits stop at one libc frame, as a JVM's do (glibc has no frame pointers)."""
    capture = CaptureInfo(target=Target("pid", "java", pid=10), perf_command=[], kernel_release="", perf_version="",
                          cpus=2, call_graph="fp", events=[], events_skipped=[], duration_requested_s=1.0,
                          schedstats="absent", limits=None, window_start_ns=0, window_end_ns=1_000_000_000)
    stacks = [Stack(("__schedule", "futex_wait", "__futex_abstimed_wait_common"), 2),
              Stack(("try_to_wake_up", "futex_wake", "__lll_unlock_wake"), 2)]
    wakers = [Waker("thread", 10, 22, "worker-2", 1), Waker("thread", 10, 21, "worker-1", 1)]
    rows = [Row(21, 0, "S", 0, 800_000, 800_000, 0, 100), Row(22, 0, "S", 1, 800_000, 800_000, 0, 100),
            Row(31, 0, "S", 1, 900_000, 900_000, 0, 1)]
    threads = {21: Thread(21, 10, "worker-1", oncpu_us=200_000, offcpu_us=800_000),
               22: Thread(22, 10, "worker-2", oncpu_us=200_000, offcpu_us=800_000),
               31: Thread(31, 10, "C2 CompilerThread0", oncpu_us=100_000, offcpu_us=900_000)}
    return Model(capture, 0, 1_000_000_000, stacks, wakers, rows, threads, Counter())


def test_a_pool_s_hand_offs_are_judged_by_its_own_waits_not_another_s_at_the_same_stack():
    # The workers' waits average 8 ms: hand-offs (under IDLE_MEAN_WAIT_US, 10 ms), though with the
    # compiler thread's 900 ms wait at the same frames the stack's average is 2.5 s / 201 = 12.4 ms;
    # that thread's own wait, 900 ms, is one for work. (Their pool runs on 0.4 CPUs of 2, so it is
    # not held to fewer than it could use: the averages decide.)
    by_finding = {finding.id: finding for finding in findings(handoff_beside_a_long_waiter())}
    handoff, idle = by_finding["handoff"], by_finding["idle"]
    # (the process named by its first thread)
    assert (handoff.subject, handoff.threads, handoff.offcpu_us) == ("worker-1 (10): worker", 2, 1_600_000)
    assert (idle.threads, idle.offcpu_us) == (1, 900_000)


def test_shares_are_of_the_threads_a_finding_is_about():
    # mmap_all is a whole-machine recording: other processes' threads do not dilute mmap_lock's share
    model = model_of("mmap_all")
    found = by_id(model)
    mmap = found["mmap_lock"]
    tids = {tid for tid, thread in model.threads.items() if thread.comm.startswith("mmap_conten") and thread.offcpu_us}
    wall = sum(model.threads[tid].oncpu_us + model.threads[tid].offcpu_us for tid in tids)
    assert mmap.threads == len(tids) == 4
    # a lock's: blocked on it, and the waiting for a CPU after, in a convoy (the woken waiters of the
    # mmap_lock are most of the machine's run queue)
    assert mmap.graded_us == mmap.offcpu_us and mmap.share_of_wall == pytest.approx(mmap.offcpu_us / wall)
    # and idle time is left out of the off-CPU shares of the others
    offcpu = sum(t.offcpu_us for t in model.threads.values())
    assert mmap.share_of_offcpu == pytest.approx(mmap.offcpu_us / (offcpu - found["idle"].offcpu_us))


def test_a_finding_counts_the_wait_and_the_cpu_wait_after_it_once():
    model = model_of("futex_pid")
    found = by_id(model)
    lock, runqueue = found["lock_contention"], found["runqueue"]
    woken = sum(row.blocked_us for row in model.rows if row.state != "R" and "__GI___lll_lock_wait" in
                model.stacks[row.stack].frames)
    assert f"{woken / 1000:.1f} ms until woken" in lock.summary
    assert all(e.state != "R" for e in lock.evidence) and all(e.state == "R" for e in runqueue.evidence)
    assert lock.offcpu_us + runqueue.offcpu_us <= sum(t.offcpu_us for t in model.threads.values())


def test_io_wait_of_synchronous_writes():
    # dd writing 4 KiB blocks with O_DSYNC: every write waits for the disk
    model = model_of("dsync_command")
    finding = top_busy(model)
    assert finding.id == "io_wait" and finding.severity == "critical" and finding.threads == 1
    assert "disk I/O" in finding.summary and "its time" in finding.summary and "fsync" in finding.remedy
    assert all(e.state == "D" for e in finding.evidence)
    assert {"io_schedule_timeout", "folio_wait_bit", "bit_wait_io"} & {f for e in finding.evidence for f in e.frames}


def test_a_thread_per_request_churns_threads():
    found = findings(model_of("per_request_pid"))
    busy = [finding for finding in found if finding.id != "idle"]
    assert busy[0].id in ("stack_cache_lock", "thread_churn") and busy[0].severity != "info"
    churn = next(finding for finding in found if finding.id == "thread_churn")
    assert churn.severity != "info" and churn.threads > 100 and "a second" in churn.summary
    # its requests' 5 ms sleeps are waits for time to pass, not contention
    assert "do_nanosleep" in {f for f in next(f for f in found if f.id == "idle").evidence[0].frames}


def test_lock_contention_with_an_old_kernels_futex_names():
    # Given the futex_pid recording with its futex frames named as kernels before 5.16 named them
    model = model_of("futex_pid")
    before = by_id(model)["lock_contention"]
    rename_frames(model, {"futex_do_wait": "futex_wait_queue_me", "__futex_wait": "futex_wait"})
    after = by_id(model)["lock_contention"]
    assert any("futex_wait_queue_me" in e.frames for e in after.evidence)
    assert (after.offcpu_us, after.severity) == (before.offcpu_us, before.severity)


def test_per_vma_lock_waits_alone_are_mmap_lock():
    # Given mmap_all with its rwsem slow paths renamed away: what is left are the per-VMA lock waits
    model = model_of("mmap_all")
    slowpaths = ("rwsem_down_write_slowpath", "rwsem_down_read_slowpath")
    rename_frames(model, {name: "some_other_wait" for name in slowpaths})
    # (a few ms, below the share a finding is reported from: the rule itself is asked)
    [match] = detect_mmap_lock(Context(model))
    per_vma = [row for row in model.rows if "__vma_start_write" in model.stacks[row.stack].frames]
    assert per_vma and all(any(row is claimed for claimed in match.rows) for row in per_vma)
    # the renamed waits go by their release: the holders let the mmap_lock go in mmap, munmap...
    wakers = [model.stacks[model.wakers[row.waker].stack].frames for row in match.rows if row not in per_vma]
    assert wakers and all({"up_write", "up_read", "downgrade_write"} & set(frames) for frames in wakers)


def test_thread_limits_near():
    model = model_of("futex_pid")
    assert "thread_limits" not in by_id(model)
    limits = model.capture.limits["limits"]
    limits[3].update(used=63000, share=63000 / limits[3]["limit"], near=True)  # vm.max_map_count at 96%
    finding = by_id(model)["thread_limits"]
    assert finding.severity == "critical" and "vm.max_map_count" in finding.summary and "63,000" in finding.summary
    assert finding.summary.startswith("At the start of the recording")
    assert "Bound the number of threads" in finding.remedy
    limits[3].update(used=53000, share=53000 / limits[3]["limit"])  # 81%
    assert by_id(model)["thread_limits"].severity == "warning"
    # the snapshots taken while recording count too: a thread-per-request server grows
    peak = json.loads(json.dumps(model.capture.limits))
    peak["limits"][0].update(used=90000, share=90000 / 96000)
    model.capture.limits_peak = peak
    finding = by_id(model)["thread_limits"]
    assert finding.severity == "warning" and finding.summary.startswith("During the recording")


def test_a_rule_added_to_the_table_runs():
    extra = Rule("everything", "All of it", "Nothing.", lambda ctx: [Match(list(ctx.model.rows), "All of it.")])
    found = findings(model_of("futex_pid"), RULES + (extra,))
    assert found[0].id == "everything" and found[0].severity == "critical"


# -- a share's uncertainty, from its spread over the window's sub-windows --------------------------

def test_the_uncertainty_of_a_share_is_the_standard_error_over_its_sub_windows():
    # parts of 5, 6, 4, 5, 5, 5, 6, 4, 5, 5 of 100 each: a share of 50 / 1,000 = 5%; the parts
    # differ from 5% of 100 by 0, 1, -1, 0, 0, 0, 1, -1, 0, 0 (squares: 4), so the standard
    # error is sqrt(10 / 9 * 4) / 1,000 = 0.0021082 (the sub-windows' shares' standard deviation,
    # 0.0066667, over sqrt(10))
    assert share_uncertainty([5, 6, 4, 5, 5, 5, 6, 4, 5, 5], [100.0] * 10) == pytest.approx(0.0021082, abs=1e-7)
    assert share_uncertainty([5] * 10, [100.0] * 10) == 0.0  # the same in every sub-window


def sub_window_model() -> Model:
    """10 ms; thread 11 there throughout, thread 13 from 5 ms on; each waits in one stack."""
    capture = CaptureInfo(target=Target("pid", "test", pid=10), perf_command=[], kernel_release="", perf_version="",
                          cpus=2, call_graph="fp", events=[], events_skipped=[], duration_requested_s=0.01,
                          schedstats="absent", limits=None, window_start_ns=0, window_end_ns=10_000_000)
    rows = [Row(11, 0, "S", None, 500, 500, 0, 5, [100, 0] * 5),  # all of it in every other millisecond
            Row(13, 0, "S", None, 500, 500, 0, 5, [0] * 5 + [100] * 5)]  # 100 µs in each of its
    threads = {11: Thread(11, 10, "t11", oncpu_us=9500, offcpu_us=500),
               13: Thread(13, 10, "t13", oncpu_us=4500, offcpu_us=500, created_ns=5_000_000)}
    return Model(capture, 0, 10_000_000, [Stack(("futex_wait",), 1)], [], rows, threads, Counter())


def test_a_findings_uncertainty_is_of_its_threads_time_in_each_sub_window():
    model = sub_window_model()
    ctx = Context(model)
    # 11: 500 µs of its 10,000, a millisecond on and one off: shares of 10% and 0% around 5%, whose
    # standard error is sqrt(10 / 9 * 10 * 50²) / 10,000 = 0.0166667
    assert ctx.share_uncertainty([model.rows[0]]) == pytest.approx(0.0166667, abs=1e-7)
    # 13: 500 µs of its 5,000, 100 µs in each of its five milliseconds: the same share in each, so
    # none, though its share is of a whole window (the least a share is of): 500 / 10,000
    assert ctx.share_of_wall(500, [model.rows[1]]) == 0.05
    assert ctx.share_uncertainty([model.rows[1]]) == 0.0
