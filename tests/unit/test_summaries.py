"""The summaries on the fixtures' models: they add up to the model's own numbers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from offcpu.renderers.text import TextReport
from offcpu.stackview import StackView
from offcpu.summaries import by_state, lifecycle, runqueue_percentiles, thread_names, totals, waker_pairs
from tests.unit.test_engine import model_of


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
