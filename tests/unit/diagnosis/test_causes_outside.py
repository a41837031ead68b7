"""Causes outside the waiting thread, on models built by hand with every expected figure worked
out in the comments: a busy peer process, a lock held across a blocking call (told by its
release, or by threads queueing where they take turns), a wakeup made in the waker's own system
call, and every finding graded by its own time with the waits for a CPU going to CPU saturation."""

from __future__ import annotations

from collections import Counter

from offcpu.capture import CaptureInfo, Cgroup, Target
from offcpu.diagnosis.evidence import CgroupShare
from offcpu.diagnosis.findings import Finding, findings
from offcpu.model import Link, Model, Row, Thread, Waker
from offcpu.model.engine import waker_kind
from offcpu.model.wakeups import NETWORK, OUTSIDE, cause_of_waker
from offcpu.stacks import Stack
from tests.fixtures import model_of, program_summary

WALL_US = 1_000_000
PIPE_WRITE = Stack(("__schedule", "schedule", "anon_pipe_write", "vfs_write", "ksys_write", "do_syscall_64"), 6)
PIPE_READ_WAKES = Stack(("try_to_wake_up", "__wake_up_common", "__wake_up_sync_key", "anon_pipe_read", "vfs_read",
                         "ksys_read", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"), 8)
PREEMPTED_AT = Stack(("__schedule", "schedule", "irqentry_exit_to_user_mode", "asm_sysvec_apic_timer_interrupt"), 4)
NANOSLEEP = Stack(("__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep"), 5)
TIMER_FIRES = Stack(("try_to_wake_up", "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt",
                     "asm_sysvec_apic_timer_interrupt"), 5)
# glibc without frame pointers: the user stack is libc's futex wrapper and nothing of the program
FUTEX_WAIT = Stack(("__schedule", "schedule", "futex_do_wait", "__futex_wait", "futex_wait", "do_futex",
                    "__futex_abstimed_wait_common"), 6)
SEM_POST = Stack(("try_to_wake_up", "wake_up_q", "futex_wake", "do_futex", "__x64_sys_futex", "do_syscall_64",
                  "entry_SYSCALL_64_after_hwframe", "sem_post@GLIBC_2.2.5"), 7)
COND_SIGNAL = Stack(("try_to_wake_up", "wake_up_q", "futex_wake", "do_futex", "__x64_sys_futex", "do_syscall_64",
                     "entry_SYSCALL_64_after_hwframe", "pthread_cond_signal@@GLIBC_2.3.2"), 7)


def capture(comm: str) -> CaptureInfo:
    return CaptureInfo(target=Target("pid", comm, pid=10), perf_command=[], kernel_release="", perf_version="",
                       cpus=2, call_graph="fp", events=[], events_skipped=[], duration_requested_s=1.0,
                       schedstats="absent", limits=None, window_start_ns=0, window_end_ns=WALL_US * 1000)


def by_id(model: Model) -> dict[str, Finding]:
    return {finding.id: finding for finding in findings(model)}


# -- a busy peer ----------------------------------------------------------------------------

def pipeline(consumer_waits_for_work: bool) -> Model:
    """1 s on 2 CPUs: tar (process 20, thread 21) writes into a pipe that gzip (process 30,
    thread 31) reads. tar ran 300 ms and waited 700 ms in 600 waits on the full pipe (600 ms until
    gzip's reads woke it, 100 ms more for a CPU). gzip ran 900 ms, and was off CPU 100 ms: preempted
    (busy), or waiting on a timer (as a consumer waiting for work would), overlapping 500 ms of
    tar's waits either way."""
    stacks = [PIPE_WRITE, PIPE_READ_WAKES, PREEMPTED_AT, NANOSLEEP, TIMER_FIRES]
    wakers = [Waker("thread", 30, 31, "gzip", 1), Waker("interrupt", 0, 0, "swapper/1", 4)]
    gzip_row = Row(31, 3, "S", 1, 100_000, 100_000, 0, 10) if consumer_waits_for_work else \
        Row(31, 2, "R", None, 100_000, 0, 100_000, 100)
    rows = [Row(21, 0, "S", 0, 700_000, 600_000, 100_000, 600), gzip_row]
    threads = {21: Thread(21, 20, "tar", oncpu_us=300_000, offcpu_us=700_000, blocked_us=600_000,
                          runqueue_us=100_000),
               31: Thread(31, 30, "gzip", oncpu_us=900_000, offcpu_us=100_000)}
    links = [Link(0, 1, 500_000 if consumer_waits_for_work else 90_000, 10)]
    return Model(capture("tar"), 0, WALL_US * 1000, stacks, wakers, rows, threads, Counter(), links=links)


def test_a_process_waiting_for_a_busy_peer_process_is_held_back_by_it():
    found = by_id(pipeline(consumer_waits_for_work=False))
    finding = found["busy_peer"]
    # tar's 600 ms until woken over its 1 s: 60%, critical; gzip, which woke it, ran 900 ms and was
    # preempted 90 ms of those 600 ms: on CPU (or waiting for one) all of the time tar waited
    assert (finding.severity, finding.subject, finding.graded_us, finding.share_of_wall) == \
           ("critical", "gzip (30): gzip", 600_000, 0.6)
    assert "waiting 600 times for gzip (30): gzip, which ran 900.0 ms on CPU" in finding.summary
    assert "ran 85%, waited for a CPU (gzip (30): gzip) 15%" in finding.summary  # 510 and 90 of 600 ms
    assert "idle" not in found


def test_a_process_waiting_for_a_peer_that_waits_for_work_itself_waits_for_work():
    # gzip waited on a timer 500 ms of tar's 600 ms (83%, over IDLE_ROOT's half): it handed work over
    found = by_id(pipeline(consumer_waits_for_work=True))
    assert "busy_peer" not in found
    assert found["idle"].blocked_us == 600_000 + 100_000  # tar's, and gzip's own wait on the timer


def test_a_send_over_loopback_wakes_the_reader_in_the_senders_own_call():
    # a client's send delivers the packet, and wakes the server's reader, in the client's own system
    # call (softirqs run when it enables them again): its own doing, not an interrupt's
    sent = Stack(("try_to_wake_up", "__wake_up_common", "sock_def_readable", "tcp_data_queue", "tcp_v4_rcv",
                  "__netif_receive_skb_one_core", "process_backlog", "net_rx_action", "handle_softirqs",
                  "do_softirq", "__local_bh_enable_ip", "__dev_queue_xmit", "ip_finish_output2", "tcp_sendmsg",
                  "__sys_sendto", "__x64_sys_sendto", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"), 18)
    assert waker_kind(31, sent) == "thread"
    assert cause_of_waker(Waker("thread", 30, 31, "client", 0), sent, same_service=False) == OUTSIDE
    # a packet from the network interface, in an interrupt taken while the same thread ran: the network's
    received = Stack(sent.frames[:9] + ("__irq_exit_rcu", "common_interrupt", "asm_common_interrupt"), 12)
    assert waker_kind(31, received) == "interrupt"
    assert cause_of_waker(Waker("interrupt", 30, 31, "client", 0), received, same_service=False) == NETWORK


# -- a lock held across a blocking call -------------------------------------------------------

# The same wait with the Python frames the runtime sampler joined to it (after the native frames)
PYTHON_FUTEX_WAIT = Stack((*FUTEX_WAIT.frames, "work (app.py:57) [py]", "Thread.run (threading.py:975) [py]"), 6)


def lock_taken_in_turns(release: Stack, poster_waits_too: bool, waiting: Stack = FUTEX_WAIT) -> Model:
    """1 s on 2 CPUs of process 10 (python): threads 11-14 take a lock in turns and sleep holding
    it. Each waited 600 ms for it in 30 waits (ended by the next holder's release, `release`) and
    slept 200 ms in 20 sleeps (ended by a timer), of which 540 ms overlap its waiter's wait (90%).
    Without `poster_waits_too`, what lets them go is thread 15, which only ever sleeps (a producer
    posting work to a queue between sleeps)."""
    stacks = [waiting, release, NANOSLEEP, TIMER_FIRES]
    tids = (11, 12, 13, 14)
    waker_of = {tid: (tids[(index + 1) % 4] if poster_waits_too else 15) for index, tid in enumerate(tids)}
    wakers = [Waker("thread", 10, waker_of[tid], "python", 1) for tid in tids] + \
        [Waker("interrupt", 0, 0, "swapper/0", 3)]
    rows = [Row(tid, 0, "S", index, 600_000, 600_000, 0, 30) for index, tid in enumerate(tids)]
    rows += [Row(tid, 2, "S", 4, 200_000, 200_000, 0, 20) for tid in (*tids, 15)]
    sleep_row = {tid: 4 + index for index, tid in enumerate((*tids, 15))}
    links = [Link(index, sleep_row[waker_of[tid]], 540_000, 30) for index, tid in enumerate(tids)]
    threads = {tid: Thread(tid, 10, "python", oncpu_us=200_000, offcpu_us=800_000) for tid in tids}
    threads[15] = Thread(15, 10, "python", oncpu_us=800_000, offcpu_us=200_000)
    return Model(capture("python"), 0, WALL_US * 1000, stacks, wakers, rows, threads, Counter(), links=links)


def test_a_semaphore_posted_in_turns_by_its_waiters_is_a_lock_held_across_their_sleeps():
    found = by_id(lock_taken_in_turns(SEM_POST, poster_waits_too=True))
    finding = found["lock_contention"]
    # 4 x 600 ms over the 4 threads' 4 s: 60%; the holder slept 540 of each 600 ms (90%), the rest
    # it ran
    assert (finding.subject, finding.severity, finding.graded_us, finding.share_of_wall) == \
           ("semaphore", "critical", 2_400_000, 0.6)
    assert "90% of that time came down to the holders waiting for a timer (a sleep or a timeout): a blocking " \
           "call inside the critical section" in finding.summary
    assert finding.remedy.startswith("Make no blocking call while holding the lock")
    assert "serialization" not in found and "handoff" not in found


def test_a_semaphore_posted_in_turns_under_python_frames_is_a_python_lock_at_its_line():
    found = by_id(lock_taken_in_turns(SEM_POST, poster_waits_too=True, waiting=PYTHON_FUTEX_WAIT))
    finding = found["lock_contention"]
    assert (finding.subject, finding.title, finding.graded_us) == \
           ("Python threading lock", "Threads wait for a lock: Python threading lock", 2_400_000)
    # all 4 x 600 ms waited at the one stack whose innermost Python frame is work at app.py line 57
    assert "for a Python threading lock (threading.Lock or RLock, a with block or acquire()) at " \
           "work (app.py:57) (100%); 90% of that time came down to the holders waiting for a timer" in finding.summary
    assert finding.remedy.startswith("Make no blocking call while holding the lock")


def test_a_condition_variable_signalled_in_turns_in_a_python_process_is_its_gil():
    # CPython's threading locks are semaphores: what its threads signal in turns through a
    # condition variable is the interpreter lock, take_gil unseen (the stacks stop at the wrapper)
    found = by_id(lock_taken_in_turns(COND_SIGNAL, poster_waits_too=True, waiting=PYTHON_FUTEX_WAIT))
    finding = found["lock_contention"]
    assert (finding.subject, finding.graded_us, finding.confidence) == ("CPython GIL", 2_400_000, "low")
    assert finding.confidence_reason.startswith("take_gil is not in the stacks")
    assert "serialization" not in found
    # the same signals without Python frames anywhere: threads taking turns, no lock named
    assert "lock_contention" not in by_id(lock_taken_in_turns(COND_SIGNAL, poster_waits_too=True))


def test_a_python_threads_wait_that_timed_out_where_it_waits_for_the_gil_is_the_gils():
    # take_gil wakes itself every 5 ms to ask for the GIL: thread 11 also waited 100 ms in 20 waits
    # at the stack where it waits for the GIL, ended by the timer (waker 4); its sleeps stay idle
    model = lock_taken_in_turns(COND_SIGNAL, poster_waits_too=True, waiting=PYTHON_FUTEX_WAIT)
    model.rows.append(Row(11, 0, "S", 4, 100_000, 100_000, 0, 20))
    found = by_id(model)
    assert (found["lock_contention"].subject, found["lock_contention"].graded_us) == ("CPython GIL", 2_500_000)
    assert found["idle"].blocked_us == 5 * 200_000


def test_a_semaphore_a_sleeping_producer_posts_is_a_wait_for_work():
    # thread 15 posts between its sleeps, and never waits at the semaphore: the others wait for
    # what it hands them, and it waited on a timer 90% of their waits
    found = by_id(lock_taken_in_turns(SEM_POST, poster_waits_too=False))
    assert "lock_contention" not in found and "serialization" not in found
    assert found["idle"].blocked_us == 4 * 600_000 + 5 * 200_000


def test_threads_queueing_where_they_take_turns_are_held_back_whatever_lets_them_go():
    # a monitor whose release the stacks do not show (a JVM's: a condition variable's signal): 2.4 s
    # waited in 1 s at one place, each wait ended by one that waited there too, is 2.4 threads
    # queueing on average (QUEUE_FROM 1.5, of 4 threads), while the one let through slept
    found = by_id(lock_taken_in_turns(COND_SIGNAL, poster_waits_too=True))
    finding = found["serialization"]
    assert (finding.severity, finding.graded_us) == ("critical", 2_400_000)
    assert "90% of that time came down to the one let through waiting for a timer (a sleep or a timeout): a " \
           "blocking call while holding what they take turns at" in finding.summary
    assert finding.remedy.startswith("Make no blocking call while holding the lock")


# -- grades -----------------------------------------------------------------------------------

def disk_behind_busy_cpus() -> Model:
    """1 s on 2 CPUs: thread 11 (process 10) waited 900 ms on the disk in 100 reads, 100 ms of it
    until the disk woke it and 800 ms more for a CPU; it was also preempted 50 ms."""
    stacks = [Stack(("__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "filemap_read"), 5),
              Stack(("try_to_wake_up", "wake_page_function", "folio_wake_bit", "blk_mq_end_request",
                     "asm_common_interrupt"), 5), PREEMPTED_AT]
    wakers = [Waker("interrupt", 0, 0, "swapper/0", 1)]
    rows = [Row(11, 0, "D", 0, 900_000, 100_000, 800_000, 100), Row(11, 2, "R", None, 50_000, 0, 50_000, 20)]
    threads = {11: Thread(11, 10, "reader", oncpu_us=50_000, offcpu_us=950_000, blocked_us=100_000,
                          runqueue_us=850_000)}
    return Model(capture("reader"), 0, WALL_US * 1000, stacks, wakers, rows, threads, Counter({400: 100}))


def test_a_finding_is_graded_by_its_own_time_and_the_waits_for_a_cpu_after_it_by_cpu_saturation():
    io, runqueue = findings(disk_behind_busy_cpus())[:2][::-1]
    # the disk's own 100 ms of 1 s: 10%, a warning (not the 90% its waits lasted)
    assert (io.id, io.severity, io.offcpu_us, io.graded_us, io.share_of_wall) == \
           ("io_wait", "warning", 900_000, 100_000, 0.1)
    # 50 ms preempted and 800 ms waiting for a CPU after the disk's wakeups: 85%, critical, first
    assert (runqueue.id, runqueue.severity, runqueue.graded_us, runqueue.share_of_wall) == \
           ("runqueue", "critical", 850_000, 0.85)
    assert findings(disk_behind_busy_cpus())[0].id == "runqueue"
    assert "waited 850.0 ms for a CPU (85% of their time): 50.0 ms preempted while they still had work, " \
           "800.0 ms after their wakeups" in runqueue.summary


# -- on recordings of programs nobody here wrote (tests/fixtures) ----------------------------

def test_tar_behind_the_gzip_it_pipes_into_is_held_back_by_gzip():
    # tar czf: tar's writes into the full pipe wait for gzip, which ran nearly all the time
    model = model_of("tar_gzip_command")
    top = findings(model)[0]
    assert (top.id, top.severity) == ("busy_peer", "critical") and top.subject.startswith("gzip ("), top.summary
    gzip = next(thread for thread in model.threads.values() if thread.comm == "gzip")
    assert gzip.oncpu_us >= 0.8 * model.wall_us  # what makes it the bottleneck: it ran 547 of 616 ms (its
    # PERF_RECORD_SWITCH IN to OUT, summed with awk)
    # two threads wait for it (perf script: tar's sleeps in anon_pipe_write, 306 wakeups of tar by gzip, and the sh that
    # tar started, which forked gzip and sleeps until gzip wakes it)
    assert "anon_pipe_write" in top.evidence[0].frames and "it sets their pace" in top.summary


def test_python_threads_sleeping_holding_a_lock_contend_for_it_and_the_twin_does_not():
    # python_lock: 4 threads take one threading.Lock (a semaphore) in turns and sleep 10 ms holding it
    found = by_id(model_of("python_lock"))
    lock = found["lock_contention"]
    assert (lock.subject, lock.severity) == ("semaphore", "critical")
    assert "came down to the holders waiting for a timer (a sleep or a timeout): a blocking call inside the " \
           "critical section" in lock.summary, lock.summary
    assert "serialization" not in found and "handoff" not in found
    # the program's own clock (summary.txt): 62 turns of 10 ms in 0.6 s, one at a time; the twin sleeps outside
    # the lock and made 236
    assert program_summary("python_lock")["ops"] == "62" and program_summary("python_lock_twin")["ops"] == "236"
    twin = findings(model_of("python_lock_twin"))
    assert [finding.id for finding in twin if finding.severity != "info"] == []


def test_processes_fighting_for_two_cpus_are_cpu_saturation_not_turns():
    # compileall -j 4 on 2 CPUs: 4 workers and the parent want more CPUs than there are
    found = findings(model_of("compileall_command"))
    assert (found[0].id, found[0].severity) == ("runqueue", "critical"), found[0].summary
    assert not [finding for finding in found if finding.id == "serialization" and finding.severity != "info"]


def test_disk_waits_are_graded_by_the_disk_and_the_cpu_wait_after_them_by_cpu_saturation():
    # dd writing synchronously (niced) while three busy loops keep both CPUs busy, whole machine
    model = model_of("dsync_loaded_command")
    found = by_id(model)
    io, runqueue = found["io_wait"], found["runqueue"]
    dd = [row for row in io_rows(model) if model.threads[row.tid].comm == "dd"]
    assert dd and sum(row.runqueue_us for row in dd) > sum(row.blocked_us for row in dd)  # mostly CPU waits
    assert io.graded_us == io.blocked_us < io.offcpu_us  # the disk's own time, not the CPU wait after it
    assert runqueue.graded_us >= runqueue.offcpu_us + sum(row.runqueue_us for row in dd)


def io_rows(model: Model) -> list[Row]:
    return [row for row in model.rows if row.state == "D" and row.runqueue_us]


def test_java_threads_sleeping_inside_a_monitor_queue_on_it_and_the_twin_does_not():
    # java_monitor_sleep: 4 threads sleep 10 ms inside one synchronized block; HotSpot lets the next
    # one go through a condition variable, and the stacks stop in glibc: the queue says it
    found = by_id(model_of("java_monitor_sleep"))
    turns = found["serialization"]
    assert turns.severity == "critical" and turns.subject.endswith(": worker"), turns.summary
    assert "a blocking call while holding what they take turns at" in turns.summary
    # its own clock (summary.txt): 102 turns of 10 ms in 1 s; the twin, sleeping outside the block, made 394
    assert program_summary("java_monitor_sleep")["ops"] == "102"
    assert program_summary("java_monitor_sleep_twin")["ops"] == "394"
    twin = findings(model_of("java_monitor_sleep_twin"))
    assert [finding.id for finding in twin if finding.severity != "info"] == []


def test_a_whole_machine_recording_says_which_cgroups_a_findings_threads_were_in():
    # the pipeline recorded with -a: tar (process 20) runs in a container's cgroup, v1 cpu and v2
    # (the v2 one is named), gzip (30) in a systemd unit; tar's waits are the finding's
    model = pipeline(consumer_waits_for_work=False)
    model.capture.target = Target("all", "")
    model.capture.cgroups = [Cgroup("cpu,cpuacct", "/docker/c1", (20,)).to_json(),
                             Cgroup("", "/system.slice/docker-c1.scope", (20,)).to_json(),
                             Cgroup("", "/system.slice/gzip.service", (30,)).to_json()]
    finding = by_id(model)["busy_peer"]
    assert finding.cgroups == (CgroupShare("/system.slice/docker-c1.scope", 1),)
    # a recording of one target names none: it is the target's
    assert by_id(pipeline(consumer_waits_for_work=False))["busy_peer"].cgroups == ()
