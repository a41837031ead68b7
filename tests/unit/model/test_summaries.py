"""The summaries on the fixtures' models: they add up to the model's own numbers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from offcpu.model import Model
from offcpu.model.stackview import StackView, drawn
from offcpu.model.summaries import (
    by_state,
    lifecycle,
    observer,
    runqueue_percentiles,
    thread_names,
    totals,
    waker_pairs,
)
from offcpu.renderers.text import TextReport, waker_name
from tests.fixtures import model_of
from tests.helpers.engine_events import US, builder, model, switch


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all"])
def test_states_add_up_to_the_totals(name):
    model = model_of(name)
    total = totals(model)
    states = by_state(model)
    assert sum(s.offcpu_us for s in states) == total.offcpu_us == sum(r.offcpu_us for r in model.rows)
    assert total.blocked_us + total.runqueue_us == total.offcpu_us
    assert [s.offcpu_us for s in states] == sorted((s.offcpu_us for s in states), reverse=True)


def test_waker_pairs_of_a_futex_storm_are_threads_of_the_process():
    model = model_of("futex_pid")
    pairs = waker_pairs(model)
    assert pairs and pairs[0].waker_kind == "thread" and pairs[0].waker_tid != pairs[0].wakee_tid
    pid = model.capture.target.pid
    assert {model.threads[p.wakee_tid].pid for p in pairs} == {pid}
    recorded = [row for row in model.rows if row.waker is not None and model.wakers[row.waker].kind != "unrecorded"]
    assert sum(p.wakeups for p in pairs) == sum(row.count for row in recorded)


def test_runqueue_percentiles_are_ordered_and_from_the_delays():
    model = model_of("mmap_all")
    percentiles = runqueue_percentiles(model)
    assert list(percentiles) == [50, 90, 99, 100]
    assert percentiles[50] <= percentiles[90] <= percentiles[99] <= percentiles[100]
    assert percentiles[100] == max(model.runqueue_delays_us)


def test_thread_churn_lifecycle_rate():
    model = model_of("churn_pid")
    life = lifecycle(model)
    window_s = (model.window_end_ns - model.window_start_ns) / 1e9
    assert life.created > 20 and life.created_per_s == pytest.approx(life.created / window_s)
    assert life.median_life_us is not None and 0 < life.median_life_us < window_s * 1e6


def test_namesakes_of_several_processes_go_by_their_process_titles():
    # Given a capture of nginx's master and workers (and of its load generator), several processes of one name
    model = model_of("nginx")
    pids = defaultdict(set)
    for thread in model.threads.values():
        pids[thread.comm].add(thread.pid)
    shared = next(comm for comm, processes in pids.items() if len(processes) > 1)
    alone = next(comm for comm, processes in pids.items() if len(processes) == 1)
    titled = {thread.pid for thread in model.threads.values() if thread.comm in (shared, alone)}
    # and the titles the recording kept of their processes
    model.capture = replace(model.capture, process_titles={str(pid): f"{shared}: process {pid}" for pid in titled})
    threads = list(model.threads.values())
    # Then threads of the shared name go by their process's title, and the others by their own name
    expected = [f"{shared}: process {thread.pid}" if thread.comm == shared else thread.comm for thread in threads]
    assert thread_names(model, threads) == expected
    # and a report's threads table says so
    text = TextReport(StackView(), top=len(threads), width=200, color=False).render(model)
    table = text.split("\nThreads\n")[1].split("\n\n")[0]
    assert all(f"{shared}: process {thread.pid}" in table for thread in threads if thread.comm == shared)


# A timer's interrupt, leaf first (as the engine tests' chains are)
TIMER = ("try_to_wake_up;hrtimer_wakeup;__hrtimer_run_queues;hrtimer_interrupt;__sysvec_apic_timer_interrupt;"
         "sysvec_apic_timer_interrupt;asm_sysvec_apic_timer_interrupt")


def timer_model() -> Model:
    """11 sleeps twice, each time woken by its timer: first while 12 is on CPU, then on an idle
    CPU; then it wakes 12 itself."""
    timer = TIMER
    events = builder()
    switch(events, 1000, 11, "S", 12, "do_nanosleep")          # 11 sleeps at 1000; 12 runs
    events.sched_waking(3000 * US, 10, 12, "t12", 11, timer)   # its timer fires while 12 is on CPU
    switch(events, 3200, 12, "R", 11, "preempt_schedule")      # 11 in: blocked 2000, run queue 200
    switch(events, 4000, 11, "S", 12, "do_nanosleep")          # 11 sleeps again
    events.sched_waking(6000 * US, 0, 0, "swapper/1", 11, timer)  # the timer fires on the idle CPU
    switch(events, 6100, 12, "S", 11, "futex_wait")            # 11 in: blocked 2000, run queue 100
    events.sched_waking(7000 * US, 10, 11, "t11", 12, "futex_wake")  # 11 itself wakes 12
    switch(events, 7300, 11, "S", 12, "do_nanosleep")          # 12 in: blocked 900, run queue 300
    return model(events)


def test_a_timer_is_named_as_what_ended_the_waits_not_the_thread_it_interrupted():
    pairs = waker_pairs(timer_model())
    # Then the timer's two wakeups are one pair, said as a timer's, with neither 12 nor the idle task
    timer_pair, thread_pair = pairs
    assert (timer_pair.waker_kind, timer_pair.ended_by, timer_pair.waker_comm, timer_pair.waker_tid) == \
        ("interrupt", "timer", "", 0)
    assert (timer_pair.wakee_tid, timer_pair.wakeups, timer_pair.blocked_us, timer_pair.runqueue_us) == \
        (11, 2, 4000, 300)
    assert (thread_pair.waker_comm, thread_pair.waker_tid, thread_pair.ended_by, thread_pair.wakee_tid,
            thread_pair.blocked_us, thread_pair.runqueue_us) == ("t11", 11, "", 12, 900, 300)
    assert [waker_name(pair) for pair in pairs] == ["[timer]", "t11-11"]


def test_perfs_cost_is_said_against_the_threads_time_on_cpu():
    events = builder()
    events.switch_in(500 * US, 0, 10, 11, "worker")  # 11 runs from 500
    switch(events, 1000, 11, "S", 12, "futex_wait", in_after_us=40)  # perf's record of 12 comes 40 µs late
    events.sched_waking(1500 * US, 10, 12, "t12", 11, "futex_wake")
    switch(events, 2000, 12, "S", 11, "futex_wait", in_after_us=60)  # and of 11, 60 µs late
    cost = observer(model(events))
    # on CPU: 11 from 500 to 1000 and from 2000 to the end at 10,000 (8,500 µs), 12 from 1000 to
    # 2000 (1,000 µs): 9,500 µs, of which perf's 40 + 60 = 100 µs, 1.05%; their whole time (10,000
    # µs each) would have made it 0.5%
    assert (cost.us, cost.oncpu_us) == (100, 9500) and cost.share_of_oncpu == 100 / 9500
    assert cost.said == "0.1 ms, 1.1% of their time on CPU (work bound by it: at least 1.1% slower while recorded)"


def test_a_stack_drawn_with_its_waker_ends_in_the_timer_not_the_thread_it_interrupted():
    stacks = drawn(timer_model(), StackView(waker=True))
    assert {(stack.frames[-1], stack.waker[-1]) for stack in stacks} == {
        ("do_nanosleep", "[timer]"),  # 11's two sleeps, neither "[interrupt in t12]" nor the idle task's
        ("do_nanosleep", "[not woken in the window]"),  # its last, from 7,300 on
        ("futex_wait", "t11"),  # 12, woken by 11
        ("preempt_schedule", "[preempted]"),  # 12 preempted at 3,200
        ("[off CPU since before the recording]", "[waker not recorded]"),  # 12 until 1,000
    }
