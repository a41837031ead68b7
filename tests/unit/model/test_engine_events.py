"""The engine on small event sequences in its own form (events handed to its sink one at
a time), with every expected microsecond worked out by hand in the comments.

Times below are microseconds from the window's start (the helpers turn them into
nanoseconds). Thread 11 and 12 are threads of process 10; tid 0 is the idle task.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from offcpu.model import PREEMPTED, Model
from offcpu.model.engine import to_model
from offcpu.reading.pairing import Decoded
from offcpu.reading.sched_events import UNKNOWN_CPU
from offcpu.stacks import STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN
from tests.helpers.engine_events import (
    CPU,
    US,
    WINDOW_US,
    Feed,
    NamedChains,
    builder,
    info,
    model,
    paired,
    row_of,
    switch,
)


def test_a_wait_is_blocked_until_its_wakeup_then_waits_for_a_cpu() -> None:
    events = builder()
    events.switch_in(500 * US, CPU, 10, 11, "worker")       # 11 runs from 500 (its record, no switch seen)
    switch(events, 1000, 11, "S", 12, "futex_wait", 4)       # 11 sleeps at 1000; perf says 12 is in 4 µs later
    events.sched_waking(4000 * US, 10, 12, "waker", 11, "futex_wake")  # 12 wakes 11 at 4000
    switch(events, 4500, 12, "S", 11, "futex_wait", 10)      # 11 is switched in at 4500, perf says so 10 µs later
    result = model(events)
    row = row_of(result, 11, "futex_wait")
    # off CPU 1000 -> 4500: 3500 µs, blocked until the wakeup at 4000 (3000), then 500 waiting for a CPU
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us, row.count) == (3500, 3000, 500, 1)
    # woken by 12, from its stack at the wakeup
    waker = result.wakers[row.waker]
    assert (waker.tid, waker.kind, result.stacks[waker.stack].frames) == (12, "thread", ("futex_wake",))
    # 11 on CPU 500 -> 1000 and 4500 -> 10000: 6000 µs, of which perf's 10 µs at its switch-in; off CPU
    # since before the recording until 500, then 1000 -> 4500: 4000 µs; together, the window
    thread = result.threads[11]
    assert (thread.oncpu_us, thread.offcpu_us, thread.observer_us) == (6000, 4000, 10)
    assert thread.oncpu_us + thread.offcpu_us == WINDOW_US
    # 12: on CPU from the switch to it at 1000 to its own at 4500, perf's 4 µs included
    assert (result.threads[12].oncpu_us, result.threads[12].observer_us) == (3500, 4)
    assert result.runqueue_delays_us == {500: 1}


def test_a_switch_in_from_an_unrecorded_thread_is_placed_by_the_switch_cost() -> None:
    events = builder(switch_cost_us=20)
    switch(events, 1000, 11, "S", 0, "futex_wait")  # to the idle task
    events.sched_waking(2000 * US, 10, 12, "waker", 11, "futex_wake")
    events.switch_in(2600 * US, CPU, 10, 11, "worker")  # from idle: no sched_switch names 11
    result = model(events, switch_cost_ns=20 * US)
    row = row_of(result, 11, "futex_wait")
    # back at 2600 - 20 = 2580: off 1580, blocked 1000 (to the wakeup at 2000), run queue 580
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (1580, 1000, 580)
    assert result.estimated_switch_ins == 1 and result.threads[11].observer_us == 20


def test_a_switch_in_after_a_recorded_threads_exit_costs_perf_nothing() -> None:
    events = builder(switch_cost_us=20)
    switch(events, 1000, 11, "S", 0, "futex_wait", cpu=1)
    events.sched_waking(2000 * US, 10, 13, "child", 11, "futex_wake")
    events.exit(2400 * US, 1, 10, 13)  # 13 exits on CPU 1; perf records nothing of it after this
    events.switch_in(2600 * US, 1, 10, 11, "worker")
    row = row_of(model(events, switch_cost_ns=20 * US), 11, "futex_wait")
    # back at perf's record, 2600: off 1600, blocked 1000, run queue 600
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (1600, 1000, 600)


def test_a_return_that_left_no_record_comes_after_an_exit_on_its_cpu() -> None:
    events = builder(switch_cost_us=20)
    switch(events, 1000, 11, "S", 0, "futex_wait")  # to the idle task, on CPU 0
    events.exit(2400 * US, CPU, 10, 13)  # 13 exits on CPU 0; its last switch is not recorded
    switch(events, 3000, 11, "S", 0, "do_nanosleep")  # 11 leaves CPU 0 again: its return left no record
    result = model(events, switch_cost_ns=20 * US)
    # no wakeup seen: back after the last thing recorded on CPU 0, 13's exit at 2400 (not the
    # switch to idle at 1000): off 1000 to 2400, then on CPU 2400 to 3000 (and 0 to 1000)
    assert row_of(result, 11, "futex_wait").offcpu_us == 1400
    assert result.threads[11].oncpu_us == 1000 + 600 and result.estimated_switch_ins == 1


def test_a_thread_whose_return_left_no_record_was_back_before_its_own_exit() -> None:
    events = builder(switch_cost_us=20)
    switch(events, 1000, 11, "S", 0, "futex_wait")  # to the idle task, on CPU 0
    events.sched_waking(2000 * US, 10, 12, "waker", 11, "futex_wake")
    events.exit(2400 * US, CPU, 10, 11)  # 11 exits on CPU 0: its return there left no record
    switch(events, 2410, 11, "X", 0, "do_exit")  # its last switch
    result = model(events, switch_cost_ns=20 * US)
    # back after its wakeup at 2000 and the last switch recorded on CPU 0 (1000), not after its
    # own exit: off 1000 to 2000, all of it blocked; on CPU 0 to 1000 and 2000 to its exit at 2400
    row = row_of(result, 11, "futex_wait")
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (1000, 1000, 0)
    assert result.threads[11].oncpu_us == 1000 + 400 and result.estimated_switch_ins == 1


def test_a_thread_that_exits_after_a_switch_to_it_with_no_record_of_being_in_came_back_at_the_switch() -> None:
    events = builder()
    switch(events, 1000, 11, "S", 12, "futex_wait")  # 11 sleeps on CPU 0; 12 comes in
    events.sched_waking(2000 * US, 10, 12, "t12", 11, "futex_wake")
    events.sched_switch(2500 * US, CPU, 10, 12, "t12", "S", 11, "poll")  # to 11: perf lost its record of being in
    events.exit(3000 * US, CPU, 10, 11)  # and recorded no last switch of 11 (as for a thread-bound recording)
    result = model(events)
    # back at the switch to it, 2500: off 1000 to 2500 (1000 blocked, 500 waiting for a CPU); on CPU
    # 0 to 1000 and 2500 to its exit at 3000 (not off CPU to the window's end)
    row = row_of(result, 11, "futex_wait")
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (1500, 1000, 500)
    assert result.threads[11].oncpu_us == 1000 + 500 and result.half_recorded_switches == 1


def test_a_preempted_thread_only_waits_for_a_cpu() -> None:
    events = builder()
    switch(events, 1000, 11, "R", 12, "preempt_schedule")
    switch(events, 1800, 12, "S", 11, "futex_wait")
    row = row_of(model(events), 11, "preempt_schedule")
    assert (row.state, row.offcpu_us, row.blocked_us, row.runqueue_us, row.waker) == (PREEMPTED, 800, 0, 800, None)


def test_a_wakeup_before_the_switch_out_makes_the_whole_gap_run_queue_delay() -> None:
    events = builder()
    events.switch_in(100 * US, CPU, 10, 11, "worker")
    events.sched_waking(900 * US, 10, 12, "waker", 11, "futex_wake")  # 11 is still on CPU, on its way to sleep
    switch(events, 1000, 11, "S", 0, "futex_wait")
    switch(events, 1300, 12, "S", 11, "futex_wait", cpu=1)
    row = row_of(model(events), 11, "futex_wait")
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (300, 0, 300)



def test_many_short_waits_add_up_in_nanoseconds_before_they_are_rounded() -> None:
    # Given 1,000 waits of 11 of 1.4 µs each, woken 1.0 µs into each, 5 µs apart from 1,000 µs on
    # (12 runs between, preempted in each)
    events = builder()
    for start_ns in range(1000 * US, 6000 * US, 5 * US):
        events.sched_switch(start_ns, CPU, 10, 11, "t11", "S", 12, "futex_wait")
        events.switch_in(start_ns, CPU, 10, 12, "t12")
        events.sched_waking(start_ns + 1000, 10, 12, "t12", 11, "futex_wake")
        events.sched_switch(start_ns + 1400, CPU, 10, 12, "t12", "R", 11, "preempt")
        events.switch_in(start_ns + 1400, CPU, 10, 11, "t11")
    result = model(events)
    # Then its 1,000 waits are 1,400 µs off CPU: 1,000 until woken, 400 waiting for a CPU (each
    # rounded to a µs first, they would be 1,000 µs, all of it blocked)
    row = row_of(result, 11, "futex_wait")
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us, row.count) == (1400, 1000, 400, 1000)
    thread = result.threads[11]
    assert (thread.offcpu_us, thread.blocked_us, thread.runqueue_us) == (1400, 1000, 400)
    # and 12's 999 preemptions of 3.6 µs and its last, from 5,996.4 µs to the window's end at 10,000
    # (4,003.6), are 7,600 µs (rounded first, 8,000)
    assert row_of(result, 12, "preempt").offcpu_us == 7600


def test_a_wait_is_linked_to_what_its_waker_waited_for_meanwhile() -> None:
    events = builder()
    # 11 waits for a lock from 1000; 12, which holds it, waits for the disk from 2000 to 4000
    switch(events, 1000, 11, "S", 12, "futex_wait")
    switch(events, 2000, 12, "D", 0, "io_schedule")
    events.sched_waking(3900 * US, 0, 0, "swapper/0", 12, "asm_common_interrupt")  # the disk's interrupt
    switch(events, 4000, 0, "R", 12, "")
    # then 12 lets the lock go at 5000, waking 11, which is in at 5200
    events.sched_waking(5000 * US, 10, 12, "holder", 11, "futex_wake")
    switch(events, 5200, 12, "S", 11, "futex_wait")
    result = model(events)
    waiter, holder = row_of(result, 11, "futex_wait"), row_of(result, 12, "io_schedule")
    assert (waiter.offcpu_us, waiter.blocked_us) == (4200, 4000)
    assert (holder.offcpu_us, holder.blocked_us, holder.runqueue_us) == (2000, 1900, 100)
    # of 11's 4000 µs blocked (1000 -> 5000), 12 was off CPU in its disk wait 2000 -> 4000
    [link] = result.links
    assert (result.rows[link.waiter_row], result.rows[link.waker_row], link.overlap_us, link.count) == \
        (waiter, holder, 2000, 1)
    assert result.wakers[holder.waker].kind == "interrupt"


def test_a_thread_with_no_event_is_of_the_process_it_was_of_at_the_start() -> None:
    events = builder()
    switch(events, 1000, 11, "S", 0, "futex_wait")  # 11 (of 10) sleeps; 13 never runs, 14 is unknown
    at_start = [(11, "t11", "S"), (13, "t13", "S"), (14, "t14", "S")]
    capture = info()
    capture.processes_at_start = {"11": 10, "13": 10}  # 14 from a capture.json before the field: its own tid
    result = to_model(paired(events, [events.builder], at_start), NamedChains(), capture,  # type: ignore[arg-type]
                      0, WINDOW_US * US)
    assert {tid: thread.pid for tid, thread in result.threads.items()} == {11: 10, 13: 10, 14: 14}
    assert result.threads[13].offcpu_us == WINDOW_US


def test_a_waits_time_is_split_over_the_sub_windows_it_spans() -> None:
    # Given a window of 10,000 µs counted in ten sub-windows of 1,000 µs
    events = Feed(0, counted=(0, WINDOW_US * US))
    switch(events, 1500, 11, "S", 12, "futex_wait")    # 11 waits from 1,500...
    switch(events, 3200, 12, "S", 11, "futex_wait")    # ...to 3,200; then 12 from 3,200...
    switch(events, 3700, 11, "R", 12, "preempt")       # ...to 3,700, in one sub-window; 11 from 3,700 to the end
    result = model(events)
    # Then 11's 1,700 µs are 500 in the second sub-window, 1,000 in the third, 200 in the fourth
    assert row_of(result, 11, "futex_wait").windows == [0, 500, 1000, 200, 0, 0, 0, 0, 0, 0]
    assert row_of(result, 12, "futex_wait").windows == [0, 0, 0, 500, 0, 0, 0, 0, 0, 0]
    # 11's preemption, 3,700 to 10,000: 300 in the fourth, 1,000 in each after
    assert row_of(result, 11, "preempt").windows == [0, 0, 0, 300, 1000, 1000, 1000, 1000, 1000, 1000]
    # 12, off CPU since before the recording until 1,500
    assert row_of(result, 12, "[off CPU since before the recording]").windows == [1000, 500] + [0] * 8


# Sampled stacks (a backend that takes the stacks of a sample of waits, Events.weights): a wait
# of weight w > 1 counts w times in its row, one of weight 0 in no row; every wait of weight
# other than 1 counts once in its stratum (a thread's waits in one state, ended by one waker),
# and each stratum's weighted rows are scaled to its exact times (offcpu.model.sampling).

def three_sampled_waits(events: Feed, stacks: tuple[str, str] = ("futex_wait", "futex_wait"),
                        first_waker: int = 12) -> None:
    """11 waits 10, 20 and 30 µs, of weights 0, 2 and 4 (the last two in `stacks`), each ended
    5 µs before it runs again by 12 (the first by `first_waker`); 12 waits in poll meanwhile
    (its waits weigh 1: perf's)."""
    for (start_us, length_us, weight), stack, waker in zip(((1000, 10, 0), (1100, 20, 2), (1200, 30, 4)),
                                                           ("", *stacks), (first_waker, 12, 12), strict=True):
        switch(events, start_us, 11, "S", 12, stack, weight=weight)
        events.sched_waking((start_us + length_us - 5) * US, 10, waker, f"t{waker}", 11,
                            WAKER_STACK_NOT_TAKEN if weight == 0 else "futex_wake")
        switch(events, start_us + length_us, 12, "S", 11, "poll")


def test_a_stratums_only_row_holds_its_time_exactly_and_its_thread_its_own() -> None:
    events = builder()
    three_sampled_waits(events)
    result = model(events)
    # all three of 11's waits were woken by 12 in state S: one stratum, and futex_wait its only row. Its
    # estimate (2 * 20 + 4 * 30 = 160 µs, blocked 130, run queue 30, 6 waits) is scaled to the stratum's
    # exact 60 µs, blocked 5 + 15 + 25 = 45, run queue 3 * 5, 3 waits; its variance is gone with the
    # estimate's, 2*1*20² + 4*3*30² = 11,600 µs² before
    row = row_of(result, 11, "futex_wait")
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us, row.count, row.variance) == (60, 45, 15, 3, 0)
    # the thread's totals are exact: 10 + 20 + 30 = 60 µs, blocked 45, run queue 15
    thread = result.threads[11]
    assert (thread.offcpu_us, thread.blocked_us, thread.runqueue_us) == (60, 45, 15)
    assert result.runqueue_delays_us == {5: 3}
    # 12's waits weigh 1: off CPU since before the recording to 1000, 1010 -> 1100, 1120 -> 1200, 1230 -> the end
    assert sum(row.count for row in result.rows if row.tid == 12) == 4
    assert all(row.variance == 0 for row in result.rows if row.tid == 12)
    # 7 waits in all, 6 with a stack (11's of weight 0 has none); the weight-0 wait has no timed wait
    assert (result.waits, result.stacked_waits, result.sampled) == (7, 6, True)
    assert [wait.since_ns for wait in result.timeline if wait.tid == 11] == [1100 * US, 1200 * US]


def test_a_stratums_time_is_shared_by_its_rows_estimates() -> None:
    events = builder()
    three_sampled_waits(events, ("futex_wait", "pipe_read"))
    result = model(events)
    futex, pipe = row_of(result, 11, "futex_wait"), row_of(result, 11, "pipe_read")
    # blocked estimates 2 * 15 = 30 and 4 * 25 = 100 share the exact 45: 10.38 and 34.62, rounded down to
    # 10 and 34, and the µs left to the larger remainder (34.62): 10 and 35; run queue 2 * 5 = 10 and
    # 4 * 5 = 20 share 15: 5 and 10; so 15 and 45 µs off CPU, of the stratum's 60
    assert (futex.blocked_us, futex.runqueue_us, pipe.blocked_us, pipe.runqueue_us) == (10, 5, 35, 10)
    assert (futex.offcpu_us, pipe.offcpu_us) == (15, 45)
    # counts 2 and 4 share the 3 waits: 1 and 2
    assert (futex.count, pipe.count) == (1, 2)
    # the variance of a share p of the stratum's estimate, scaled by f = 60 / 160: f² (V(1 - 2p) + p² V_all),
    # V = 2*1*20² = 800 and 4*3*30² = 10,800, V_all = 11,600, p = 40/160 and 120/160:
    # 0.140625 * (400 + 725) = 158.2 and 0.140625 * (-5,400 + 6,525) = 158.2
    assert (futex.variance, pipe.variance) == (158, 158)


def test_waits_whose_stacks_were_all_taken_are_not_scaled() -> None:
    # Given, in one stratum (11 in S, woken by 12), a wait of 1000 µs in "long" whose stack was taken
    # for sure (weight 1), and four of 10 µs in "short", of weights 4, 0, 0 and 4
    events = builder()
    for start_us, length_us, stack, weight in ((1000, 1000, "long", 1), (2100, 10, "short", 4),
                                               (2200, 10, "", 0), (2300, 10, "", 0), (2400, 10, "short", 4)):
        switch(events, start_us, 11, "S", 12, stack, weight=weight)
        events.sched_waking((start_us + length_us - 5) * US, 10, 12, "t12", 11, "futex_wake")
        switch(events, start_us + length_us, 12, "S", 11, "poll")
    result = model(events)
    # Then "long" keeps its exact 1000 µs, and only "short"'s estimate (4 * 10 + 4 * 10 = 80) is scaled,
    # to the 4 * 10 µs of the waits of weight other than 1: 20 blocked, 20 in the run queue, 4 waits
    assert (row_of(result, 11, "long").offcpu_us, row_of(result, 11, "long").variance) == (1000, 0)
    short = row_of(result, 11, "short")
    assert (short.offcpu_us, short.blocked_us, short.runqueue_us, short.count) == (40, 20, 20, 4)


def woken_by(result: Model, row) -> int | None:  # type: ignore[no-untyped-def]
    return None if row.waker is None else result.wakers[row.waker].tid


def test_a_stratum_none_of_whose_waits_has_a_stack_is_lent_its_threads_stacks() -> None:
    events = builder()
    three_sampled_waits(events, ("futex_wait", "pipe_read"), first_waker=13)
    result = model(events)
    # 11's waits woken by 12 are a stratum of 20 + 30 µs: blocked 15 + 25 = 40 shared as 30 : 100 (9.23 and
    # 30.77: 9 and 31), run queue 10 as 10 : 20 (3.33 and 6.67: 3 and 7): futex_wait 12 µs, pipe_read 38;
    # counts 2 as 2 : 4 (0.67 and 1.33: 1 and 1); variances as in the test above but with f = 50 / 160:
    # 0.0977 × 1,125 = 110 each
    by_12 = sorted((result.stacks[row.stack].frames, row.offcpu_us, row.blocked_us, row.runqueue_us, row.count,
                    row.variance) for row in result.rows if row.tid == 11 and woken_by(result, row) == 12)
    assert by_12 == [(("futex_wait",), 12, 9, 3, 1, 110), (("pipe_read",), 38, 31, 7, 1, 110)]
    # the one woken by 13 (10 µs: 5 blocked, 5 in the run queue) had no stack, nor had any other wait of its
    # stratum: it is lent 11's stacks in S woken by its waker's process (10), as they share their stratum:
    # blocked 5 as 9 : 31 (1.13 and 3.88: 1 and 4), run queue 5 as 3 : 7 (1.5 and 3.5: 1 and 3, the µs left
    # to the first of the equal remainders), its 1 wait as 1 : 1 (to the first); with 13 as its waker.
    # Variances: f = 10 / 50, V = 110 each, V_all = 220, p = 12/50 and 38/50:
    # 0.04 (110 (1 - 0.48) + 0.0576 × 220) = 2.79 and 0.04 (110 (1 - 1.52) + 0.5776 × 220) = 2.79
    by_13 = sorted((result.stacks[row.stack].frames, row.offcpu_us, row.blocked_us, row.runqueue_us, row.count,
                    row.variance) for row in result.rows if row.tid == 11 and woken_by(result, row) == 13)
    assert by_13 == [(("futex_wait",), 3, 1, 2, 1, 3), (("pipe_read",), 7, 4, 3, 0, 3)]
    # so that 11's rows still add up to its 60 µs, and none is without a stack
    assert sum(row.offcpu_us for row in result.rows if row.tid == 11) == result.threads[11].offcpu_us == 60
    assert all(result.stacks[row.stack].frames != (STACK_NOT_TAKEN,) for row in result.rows)


def test_a_preemption_none_of_whose_stratum_has_a_stack_keeps_its_time_without_one() -> None:
    events = builder()
    switch(events, 1000, 11, "R", 12, "preempt", weight=0)  # preempted at 1,000, back at 1,400
    switch(events, 1400, 12, "S", 11, "poll", weight=1)
    result = model(events)
    row = row_of(result, 11, STACK_NOT_TAKEN)
    assert (row.offcpu_us, row.runqueue_us, row.count, row.state, row.variance) == (400, 400, 1, "R", 0)


def test_waits_of_weight_1_are_perfs_and_not_sampled() -> None:
    events = builder()
    switch(events, 1000, 11, "S", 12, "futex_wait", weight=1)
    switch(events, 1500, 12, "S", 11, "poll")
    result = model(events)
    assert (row_of(result, 11, "futex_wait").offcpu_us, row_of(result, 11, "futex_wait").variance) == (500, 0)
    # 11's wait; 12's since before the recording and from 1500 to the end
    assert (result.waits, result.stacked_waits, result.sampled) == (3, 3, False)


def test_a_sampled_waits_sub_windows_are_scaled_with_it() -> None:
    events = Feed(0, counted=(0, WINDOW_US * US))
    switch(events, 1500, 11, "S", 12, "futex_wait", weight=3)  # 1,500 -> 3,200: 500, 1,000 and 200 µs
    switch(events, 3200, 12, "S", 11, "poll")
    row = row_of(model(events), 11, "futex_wait")
    # counted 3 times (1,500, 3,000, 600), then scaled to its stratum's one wait
    assert row.windows == [0, 500, 1000, 200, 0, 0, 0, 0, 0, 0]
    assert row.offcpu_us == sum(row.windows) == 1700


def io_wait_of_the_lock_holder(holder_weight: int) -> Model:
    """11 waits for a lock (weight 3) from 1000 to 5200, ended at 5000 by 12, which waited for
    the disk (weight `holder_weight`) from 2000 to 4000 meanwhile."""
    events = builder()
    switch(events, 1000, 11, "S", 12, "futex_wait", weight=3)
    switch(events, 2000, 12, "D", 0, "io_schedule", weight=holder_weight)
    events.sched_waking(3900 * US, 0, 0, "swapper/0", 12, "asm_common_interrupt")
    switch(events, 4000, 0, "R", 12, "")
    events.sched_waking(5000 * US, 10, 12, "holder", 11, "futex_wake")
    switch(events, 5200, 12, "S", 11, "futex_wait")
    return model(events)


def test_a_sampled_waits_link_to_its_wakers_wait_is_scaled_with_its_row() -> None:
    result = io_wait_of_the_lock_holder(holder_weight=1)
    waiter, holder = row_of(result, 11, "futex_wait"), row_of(result, 12, "io_schedule")
    # 11 blocked 1000 -> 5000 while 12 was off CPU 2000 -> 4000: 2000 µs, counted 3 times, then scaled
    # as 11's row was, to its one wait: 2000 µs, once
    [link] = result.links
    assert (result.rows[link.waiter_row], result.rows[link.waker_row], link.overlap_us, link.count) == \
        (waiter, holder, 2000, 1)


def test_a_wakers_wait_without_a_stack_has_no_row_to_link_to() -> None:
    result = io_wait_of_the_lock_holder(holder_weight=0)
    assert not result.links
    assert not [row for row in result.rows if result.stacks[row.stack].frames == ("io_schedule",)]
    # yet 12's 2000 µs in it are in its totals: 0 -> 1000 before the recording, 2000 -> 4000, 5200 -> the end
    assert result.threads[12].offcpu_us == 1000 + 2000 + 4800
    # and in a row without a stack, its stratum's only wait
    assert row_of(result, 12, STACK_NOT_TAKEN).offcpu_us == 2000


class Slices(Feed):
    """Two slices, 0 to 5000 µs and on, each handed every event (each keeps its own), paired and
    joined as build_model has them."""

    def __init__(self, switch_cost_us: int = 0) -> None:
        super().__init__(switch_cost_us)
        self.slices = [Decoded(0, 5000 * US - 1), Decoded(5000 * US, WINDOW_US * US)]

    def _one(self, *event: object, weight: int | None = None) -> None:
        for piece in self.slices:
            self.builder = piece
            super()._one(*event, weight=weight)

    def model(self) -> Model:
        return to_model(paired(self, self.slices), NamedChains(), info(), 0, WINDOW_US * US)  # type: ignore[arg-type]


def in_one_and_two_slices(events: Callable[[Feed], None], switch_cost_us: int = 0) -> tuple[Model, Model]:
    """The model of `events` read in one slice, and in two (cut at 5000 µs)."""
    whole, sliced = builder(switch_cost_us), Slices(switch_cost_us)
    events(whole)
    events(sliced)
    return model(whole), sliced.model()


def waits_across_the_slices(events: Feed) -> None:
    """11 waits (weight 4) from 1000 to 6500, woken at 6000; 13 (weight 0) from 2000 to 7000, on
    another CPU, woken at 6100."""
    switch(events, 1000, 11, "S", 12, "futex_wait", weight=4)
    switch(events, 2000, 13, "S", 0, "nanosleep", cpu=1, weight=0)
    events.sched_waking(6000 * US, 10, 12, "t12", 11, "futex_wake")
    events.sched_waking(6100 * US, 10, 12, "t12", 13, "hrtimer_wakeup")
    switch(events, 6500, 12, "S", 11, "poll")
    switch(events, 7000, 0, "R", 13, "", cpu=1)


def test_sampled_waits_across_slices_count_as_in_one_slice() -> None:
    one, two = in_one_and_two_slices(waits_across_the_slices)
    for result in (one, two):
        # 11's first wait, across the slices, alone in its stratum (woken by 12): 5500 µs, blocked 5000
        row = row_of(result, 11, "futex_wait")
        assert (row.offcpu_us, row.blocked_us, row.runqueue_us, row.count, row.variance) == \
            (5_500, 5_000, 500, 1, 0)
        assert result.threads[11].offcpu_us == 5500
        # 13's wait has no stack: its 5000 µs (blocked to 6100, then 900 in the run queue) are in its
        # totals, and in a row without a stack, its stratum's only wait
        thread = result.threads[13]
        assert (thread.offcpu_us, thread.blocked_us, thread.runqueue_us) == (5000, 4100, 900)
        unsampled = row_of(result, 13, STACK_NOT_TAKEN)
        assert (unsampled.offcpu_us, unsampled.blocked_us, unsampled.runqueue_us) == (5000, 4100, 900)
        assert result.sampled
    assert (two.waits, two.stacked_waits) == (one.waits, one.stacked_waits)
    assert sorted((row.tid, row.offcpu_us, row.variance) for row in two.rows) == \
        sorted((row.tid, row.offcpu_us, row.variance) for row in one.rows)


def test_a_sampled_models_json_keeps_its_variances_and_counts() -> None:
    events = builder()
    three_sampled_waits(events, ("futex_wait", "pipe_read"))
    result = model(events)
    again = Model.from_json(json.loads(json.dumps(result.to_json())))
    assert again.rows == result.rows
    assert (row_of(again, 11, "futex_wait").variance, row_of(again, 11, "futex_wait").count) == (158, 1)
    assert (again.waits, again.stacked_waits, again.sampled) == (7, 6, True)


def sleeps_twice_on_cpu_0(events: Feed, woken_us: int) -> None:
    """11 sleeps on CPU 0 at 4000, to the idle task, and is woken at `woken_us`; its return there
    left no record; it sleeps again at 6000 (to 12, no wakeup), and is back at 6500."""
    switch(events, 4000, 11, "S", 0, "futex_wait")
    events.sched_waking(woken_us * US, 10, 12, "t12", 11, "futex_wake")
    switch(events, 6000, 11, "S", 12, "poll")
    switch(events, 6500, 12, "S", 11, "poll")


def test_a_return_that_left_no_record_in_the_next_slice_is_placed_as_in_one() -> None:
    for result in in_one_and_two_slices(functools.partial(sleeps_twice_on_cpu_0, woken_us=4500)):
        # back after its wakeup at 4500 (and the switch recorded on CPU 0 before, at 4000): off 4000
        # to 4500, all of it blocked, and 6000 to 6500; on CPU 0 to 4000, 4500 to 6000, 6500 to the
        # end: 4000 + 1500 + 3500, the window in all
        row = row_of(result, 11, "futex_wait")
        assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (500, 500, 0)
        thread = result.threads[11]
        assert (thread.oncpu_us, thread.offcpu_us) == (9000, 1000)
        assert result.estimated_switch_ins == 1


def exit_after_a_return_that_left_no_record(events: Feed) -> None:
    """11 sleeps on CPU 0 at 4000, to the idle task, and is woken at 4500; its return there left
    no record; it exits on CPU 0 at 5400, and leaves it for the last time at 5410."""
    switch(events, 4000, 11, "S", 0, "futex_wait")
    events.sched_waking(4500 * US, 10, 12, "t12", 11, "futex_wake")
    events.exit(5400 * US, CPU, 10, 11)
    switch(events, 5410, 11, "X", 0, "do_exit")


def test_a_thread_exiting_in_the_next_slice_after_a_return_that_left_no_record_is_placed_as_in_one() -> None:
    for result in in_one_and_two_slices(exit_after_a_return_that_left_no_record):
        # back at its wakeup at 4500: off 4000 to 4500, on CPU 0 to 4000 and 4500 to its exit at 5400
        row = row_of(result, 11, "futex_wait")
        assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (500, 500, 0)
        assert result.threads[11].oncpu_us == 4000 + 900 and result.estimated_switch_ins == 1


def test_a_wakeup_after_the_cut_ends_the_wait_from_before_it() -> None:
    # woken at 5500, after the cut, before it leaves a CPU again
    one, two = in_one_and_two_slices(functools.partial(sleeps_twice_on_cpu_0, woken_us=5500))
    for result in (one, two):
        # the wakeup at 5500 ends the wait begun at 4000: off 4000 to 5500, all of it blocked;
        # then 6000 to 6500; on CPU 4000 + 500 + 3500
        futex = row_of(result, 11, "futex_wait")
        assert (futex.offcpu_us, futex.blocked_us, futex.runqueue_us) == (1500, 1500, 0)
        assert (result.threads[11].oncpu_us, result.threads[11].offcpu_us) == (8000, 2000)
    # The next wait has no wakeup of its own: blocked in one slice. In two, the slice that holds it
    # cannot tell that the thread was off CPU as it began, and takes the wakeup as racing it too
    # (waiting for a CPU), as it most often is; a return that left no record is rare.
    poll_one, poll_two = row_of(one, 11, "poll"), row_of(two, 11, "poll")
    assert (poll_one.offcpu_us, poll_one.blocked_us, poll_one.runqueue_us) == (500, 500, 0)
    assert (poll_two.offcpu_us, poll_two.blocked_us, poll_two.runqueue_us) == (500, 0, 500)


def woken_on_its_way_to_sleep_after_the_cut(events: Feed) -> None:
    """11 runs on CPU 0 from 1000 (12 sleeps); 12 wakes it at 5500, after the cut, while it is
    on its way to sleep; it sleeps at 6000 (to 12), and is back at 6500."""
    switch(events, 1000, 12, "S", 11, "futex_wait")
    events.sched_waking(5500 * US, 10, 12, "t12", 11, "futex_wake")
    switch(events, 6000, 11, "S", 12, "poll")
    switch(events, 6500, 12, "S", 11, "poll")


def test_a_wakeup_after_the_cut_of_a_thread_on_cpu_races_its_next_wait() -> None:
    for result in in_one_and_two_slices(woken_on_its_way_to_sleep_after_the_cut):
        # woken before it was off: its wait 6000 to 6500 is all run-queue delay
        poll = row_of(result, 11, "poll")
        assert (poll.offcpu_us, poll.blocked_us, poll.runqueue_us) == (500, 0, 500)
        # off CPU from the window's start to 1000 too, on from 1000 to 6000 and 6500 to the end
        assert (result.threads[11].oncpu_us, result.threads[11].offcpu_us) == (5000 + 3500, 1000 + 500)


def first_seen_leaving_after_the_cut(events: Feed) -> None:
    """13, of which nothing is recorded before, sleeps on CPU 1 at 6000 and is back at 7000."""
    switch(events, 6000, 13, "S", 0, "nanosleep", cpu=1)
    switch(events, 7000, 0, "R", 13, "", cpu=1)


def test_a_thread_first_seen_leaving_after_the_cut_was_on_cpu_from_the_start() -> None:
    for result in in_one_and_two_slices(first_seen_leaving_after_the_cut):
        # on CPU 0 to 6000 and 7000 to the end, off 6000 to 7000
        assert (result.threads[13].oncpu_us, result.threads[13].offcpu_us) == (9000, 1000)


def exit_of_no_cpu_while_waiting(events: Feed) -> None:
    """11 sleeps on CPU 0 at 4000 and is woken at 4500; its return left no record; it exits at
    6000, after the cut, in a record that names no CPU (as BPF's do)."""
    switch(events, 4000, 11, "S", 0, "futex_wait")
    events.sched_waking(4500 * US, 10, 12, "t12", 11, "futex_wake")
    events.exit(6000 * US, UNKNOWN_CPU, 10, 11)


def test_an_exit_of_no_cpu_ends_the_wait_before_it_as_in_one_slice() -> None:
    for result in in_one_and_two_slices(exit_of_no_cpu_while_waiting):
        # back at its wakeup: off 4000 to 4500, on CPU to 4000 and from 4500 to its exit
        row = row_of(result, 11, "futex_wait")
        assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (500, 500, 0)
        assert (result.threads[11].oncpu_us, result.threads[11].offcpu_us) == (4000 + 1500, 500)


def woken_before_the_cut_then(events: Feed, leaves: bool) -> None:
    """11, of which nothing is recorded before, is woken by 13 at 4900, before the cut; it is back
    on CPU 0 at 5100; or, `leaves`, it leaves CPU 0 at 5200 and is back at 5600."""
    events.sched_waking(4900 * US, 10, 13, "t13", 11, "futex_wake")
    if leaves:
        switch(events, 5200, 11, "S", 0, "poll")
        switch(events, 5600, 0, "R", 11, "")
    else:
        switch(events, 5100, 0, "R", 11, "")


def test_a_wakeup_before_the_cut_of_a_thread_off_cpu_since_before_the_window_ends_that_wait() -> None:
    for result in in_one_and_two_slices(functools.partial(woken_before_the_cut_then, leaves=False)):
        # off CPU from the window's start to 5100: blocked until 4900, then 200 waiting for a CPU
        thread = result.threads[11]
        assert (thread.offcpu_us, thread.blocked_us, thread.runqueue_us) == (5100, 4900, 200)


def test_a_wakeup_before_the_cut_of_a_thread_first_seen_leaving_after_it_races_that_switch_out() -> None:
    for result in in_one_and_two_slices(functools.partial(woken_before_the_cut_then, leaves=True)):
        # on CPU from the window's start (it was woken on its way to sleep): 5200 to 5600 is all
        # run-queue delay, 13's; on CPU 5200 + 4400
        poll = row_of(result, 11, "poll")
        assert (poll.offcpu_us, poll.blocked_us, poll.runqueue_us) == (400, 0, 400)
        assert poll.waker is not None and result.wakers[poll.waker].tid == 13
        assert (result.threads[11].oncpu_us, result.threads[11].offcpu_us) == (9600, 400)


def woken_before_the_cut_then_waking_another(events: Feed) -> None:
    """11, of which nothing is recorded before, is woken by 13 at 4900, before the cut; it wakes
    12 at 5050 (so it ran after that wakeup), and is back on CPU 0 at 5100."""
    events.sched_waking(4900 * US, 10, 13, "t13", 11, "futex_wake")
    events.sched_waking(5050 * US, 10, 11, "t11", 12, "futex_wake")
    switch(events, 5100, 0, "R", 11, "")


def test_a_wakeup_before_the_cut_of_a_thread_that_ran_after_it_is_not_its_waits() -> None:
    for result in in_one_and_two_slices(woken_before_the_cut_then_waking_another):
        # the wakeup is not of the wait that ended at 5100: all of it is blocked, with no waker
        thread = result.threads[11]
        assert (thread.offcpu_us, thread.blocked_us, thread.runqueue_us) == (5100, 5100, 0)


def woken_before_the_cut_then_in_by_a_record_only(events: Feed) -> None:
    """11, of which nothing is recorded before, is woken by 13 at 4995, before the cut; the only
    record of its return is perf's of it being in, at 5001."""
    events.sched_waking(4995 * US, 10, 13, "t13", 11, "futex_wake")
    events.switch_in(5001 * US, CPU, 10, 11, "t11")


def test_a_return_placed_by_the_switch_cost_is_not_before_a_wakeup_before_the_cut() -> None:
    for result in in_one_and_two_slices(woken_before_the_cut_then_in_by_a_record_only, switch_cost_us=20):
        # placed 20 µs before the record, at 4981, but not before the wakeup at 4995
        thread = result.threads[11]
        assert (thread.offcpu_us, thread.blocked_us, thread.runqueue_us) == (4995, 4995, 0)


def woken_on_its_way_to_sleep_then_waking_another(events: Feed) -> None:
    """11 runs on CPU 0 from 1000; 13 wakes it at 5100, after the cut, on its way to sleep at
    5200; 15 sleeps on CPU 1 at 5250; 11 is back at 5400 and wakes 15 at 5500, back at 5600."""
    switch(events, 1000, 12, "S", 11, "futex_wait")
    events.sched_waking(5100 * US, 10, 13, "t13", 11, "futex_wake")
    switch(events, 5200, 11, "S", 0, "poll")
    switch(events, 5250, 15, "S", 0, "epoll_wait", cpu=1)
    switch(events, 5400, 0, "R", 11, "")
    events.sched_waking(5500 * US, 10, 11, "t11", 15, "sock_def_readable")
    switch(events, 5600, 0, "R", 15, "", cpu=1)


def test_a_wait_after_the_cut_whose_wakeup_raced_it_keeps_its_links() -> None:
    for result in in_one_and_two_slices(woken_on_its_way_to_sleep_then_waking_another):
        # 15 was blocked 5250 to 5500 while 11, its waker, was off CPU in poll 5250 to 5400
        poll, epoll = row_of(result, 11, "poll"), row_of(result, 15, "epoll_wait")
        assert (poll.offcpu_us, poll.blocked_us, poll.runqueue_us) == (200, 0, 200)
        [link] = result.links
        assert (result.rows[link.waiter_row], result.rows[link.waker_row]) == (epoll, poll)
        assert (link.overlap_us, link.count) == (150, 1)
