"""The off-CPU engine on the fixtures' perf script text: its invariants, and
that cutting the window into slices does not change any number."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from offcpu._core import TIMELINE_WAITS
from offcpu.model import PREEMPTED, SUB_WINDOWS, Model, TimedWait
from offcpu.model.engine import slice_count, threads_at_start, to_model
from offcpu.reading.native_reader import NativeReader
from offcpu.stacks import BEFORE_WINDOW, NEW_THREAD
from tests.fixtures import HERE, capture_info, model_of

FIXTURES = ["futex_pid", "churn_pid", "mmap_all"]


@pytest.mark.parametrize("name", FIXTURES)
def test_blocked_plus_runqueue_is_offcpu_in_every_row(name):
    model = model_of(name)
    assert model.rows
    for row in model.rows:
        assert row.blocked_us + row.runqueue_us == row.offcpu_us and row.blocked_us >= 0 and row.runqueue_us >= 0
        if row.state == PREEMPTED:
            assert row.blocked_us == 0


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("slices", [1, 3])
def test_every_rows_sub_windows_add_up_to_it(name, slices):
    model = model_of(name, slices)
    assert all(len(row.windows) == SUB_WINDOWS and sum(row.windows) == row.offcpu_us for row in model.rows)
    assert sum(sum(row.windows[:5]) for row in model.rows) > 0 < sum(sum(row.windows[5:]) for row in model.rows)


@pytest.mark.parametrize("name", FIXTURES)
def test_stacks_sum_to_the_threads_offcpu_time(name):
    model = model_of(name)
    for tid, thread in model.threads.items():
        assert sum(row.offcpu_us for row in model.rows if row.tid == tid) == thread.offcpu_us


@pytest.mark.parametrize("name", ["futex_pid", "mmap_all"])
def test_threads_alive_all_window_add_up_to_the_window(name):
    model = model_of(name)
    whole = [thread for thread in model.threads.values()
             if thread.created_ns is None and thread.exited_ns is None and thread.offcpu_us]
    assert len(whole) >= 4
    for thread in whole:
        assert abs(thread.oncpu_us + thread.offcpu_us - model.wall_us) <= 0.02 * model.wall_us, thread


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("slices", [2, 3, 7])
def test_slicing_changes_nothing(name, slices):
    whole, sliced = model_of(name), model_of(name, slices)
    assert {tid: (t.offcpu_us, t.blocked_us, t.runqueue_us) for tid, t in whole.threads.items() if t.offcpu_us} == \
           {tid: (t.offcpu_us, t.blocked_us, t.runqueue_us) for tid, t in sliced.threads.items() if t.offcpu_us}
    for tid, thread in whole.threads.items():
        assert abs(thread.oncpu_us - sliced.threads[tid].oncpu_us) <= slices  # rounding to µs per slice
    assert sorted(whole.runqueue_delays_us.items()) == sorted(sliced.runqueue_delays_us.items())
    assert whole.clipped_intervals == sliced.clipped_intervals and whole.unseen_wakeups == sliced.unseen_wakeups


def thread_totals_of_perf_data(name: str, slices: int) -> tuple[int, dict[int, tuple[int, int, int, int]]]:
    """A fixture's perf.data read in about `slices` time slices: how many, and each thread's
    time on CPU, off CPU, blocked and waiting for a CPU (µs)."""
    info = capture_info(name)
    window = (info.window_start_ns, info.window_end_ns)
    reader = NativeReader(HERE / name / "perf.data")
    cuts = reader.time_slices(*window, slices)
    paired = reader.pair(cuts, window, threads_at_start(info), window, info.switch_cost_ns or 0)
    model = to_model(paired, reader, info, *window)
    return len(cuts), {tid: (thread.oncpu_us, thread.offcpu_us, thread.blocked_us, thread.runqueue_us)
                       for tid, thread in model.threads.items()}


def test_slicing_a_real_programs_recording_changes_no_threads_times():
    # Given every real program's perf.data (and one of threads exiting), read whole and in slices
    names = sorted(path.parent.name for path in HERE.glob("*/perf.data"))
    sliced_into = {}
    for name in names:
        _, whole = thread_totals_of_perf_data(name, 1)
        sliced_into[name], sliced = thread_totals_of_perf_data(name, 6)
        # Then each thread's times are the same to the µs (before slices were joined as one reads
        # them, 3 of 16 differed: a worker's time on CPU by 9,390 µs, two splits by 206 and 357 µs)
        assert sliced == whole, name
    assert sum(count > 1 for count in sliced_into.values()) >= 12, sliced_into


def test_futex_waits_are_woken_by_threads_of_the_process():
    model = model_of("futex_pid")
    pid = model.capture.target.pid
    futex_rows = [row for row in model.rows if "futex_wait" in model.stacks[row.stack].frames]
    assert sum(row.offcpu_us for row in futex_rows) > 0.5 * sum(t.offcpu_us for t in model.threads.values())
    # every futex sleep has its waker, including wakeups that raced the sleeper's switch-out
    sleeps = [row for row in futex_rows if row.state == "S"]
    assert sleeps and all(row.waker is not None for row in sleeps)
    woken = [row for row in futex_rows if row.waker is not None]
    assert all(model.wakers[row.waker].pid == pid for row in woken)
    assert any("futex_wake" in model.stacks[model.wakers[row.waker].stack].frames for row in woken)


def test_thread_churn_lifecycle():
    model = model_of("churn_pid")
    created = [t for t in model.threads.values() if t.created_ns is not None]
    exited = [t for t in model.threads.values() if t.exited_ns is not None]
    assert len(created) > 20 and len(exited) > 20
    assert all(model.window_start_ns <= t.created_ns <= model.window_end_ns for t in created)
    # a new thread's wait for its first run is run-queue delay under a stack of its own
    new = [row for row in model.rows if model.stacks[row.stack].frames == (NEW_THREAD,)]
    assert new and all(row.state == PREEMPTED and row.runqueue_us == row.offcpu_us for row in new)


def test_waits_cut_by_the_window_are_kept_and_counted():
    model = model_of("futex_pid")
    before = [row for row in model.rows if model.stacks[row.stack].frames == (BEFORE_WINDOW,)]
    assert model.clipped_intervals >= sum(row.count for row in before) > 0


def test_a_semicolon_in_a_name_does_not_split_a_frame():
    from offcpu.model.stackview import StackView, folded
    from offcpu.stacks import Stack

    # Given a model whose busiest stack has a frame name holding ';' (as a symbol may)
    model = model_of("futex_pid")
    busiest = max(model.rows, key=lambda row: row.offcpu_us)
    stack = model.stacks[busiest.stack]
    model.stacks[busiest.stack] = Stack(("lock<a;b>",) + stack.frames[1:], stack.kernel_frames)
    # Then it stays one frame in the folded line
    lines = dict(folded(model, StackView()))
    line = next(line for line in lines if "lock<a" in line)
    assert line.endswith(";lock<a:b>") and line.count(";") == len(stack.frames)


@pytest.mark.parametrize("name", FIXTURES)
def test_the_timeline_holds_every_wait_when_they_fit_with_its_rows_times(name):
    # Given fewer waits than the timeline keeps, every wait is there, with its row's thread
    model = model_of(name)
    assert len(model.timeline) == sum(row.count for row in model.rows) < TIMELINE_WAITS
    per_row = defaultdict(list)
    for wait in model.timeline:
        assert model.rows[wait.row].tid == wait.tid
        assert wait.since_ns <= wait.back_ns and (wait.ran_ns is None or wait.ran_ns <= wait.since_ns)
        per_row[wait.row].append(wait)
    # and each row's waits are as many as it counts, as long as its off-CPU time (to under 2 µs for
    # each call chain made one stack in it: a chain's blocked and run-queue ns are each a part of
    # its thread's, rounded where it ends)
    for index, row in enumerate(model.rows):
        waits = per_row.get(index, [])
        assert len(waits) == row.count
        assert abs(sum(wait.back_ns - wait.since_ns for wait in waits) / 1000 - row.offcpu_us) < 2 * row.count
    # and each thread's waits as long as its off-CPU time (its blocked time and its time waiting for a
    # CPU each summed in ns and rounded once: to 1 µs)
    for tid, thread in model.threads.items():
        waits_ns = sum(wait.back_ns - wait.since_ns for wait in model.timeline if wait.tid == tid)
        assert abs(waits_ns / 1000 - thread.offcpu_us) <= 1


def test_the_timeline_keeps_the_longest_waits_across_slices():
    # Given a fixture with more waits than the timeline keeps, read in one slice and in three
    model, sliced = model_of("rm_tree_all"), model_of("rm_tree_all", slices=3)
    whole = model.timeline
    assert len(whole) == TIMELINE_WAITS < sum(row.count for row in model.rows)

    def times(of: Model) -> list[tuple]:
        return sorted((wait.tid, wait.since_ns, wait.woken_ns, wait.back_ns,
                       of.stacks[of.rows[wait.row].stack], of.rows[wait.row].state) for wait in of.timeline)

    # then the slices keep the same waits, in the same rows (when a wait's thread came on CPU is
    # known only within a slice)
    assert times(sliced) == times(model)
    # and those left out are no longer than the shortest kept: of each thread, the time it counts
    # beyond its kept waits' is at most as many of the shortest as it left out (to 1 µs: its blocked
    # time and its time waiting for a CPU are each summed in ns and rounded once)
    shortest_us = min(wait.back_ns - wait.since_ns for wait in whole) / 1000
    kept: dict[int, list[TimedWait]] = defaultdict(list)
    for wait in whole:
        kept[wait.tid].append(wait)
    for tid, thread in model.threads.items():
        left_out = sum(row.count for row in model.rows if row.tid == tid) - len(kept[tid])
        left_out_us = thread.offcpu_us - sum(wait.back_ns - wait.since_ns for wait in kept[tid]) / 1000
        assert left_out_us <= left_out * shortest_us + 1


def test_a_capture_is_cut_into_slices_by_its_size_not_by_the_readers_cpus():
    # one slice per 8 MiB of the recording (perf.data, or BPF's records), at most 16
    sizes = [1_500_000, (8 << 20) - 1, 8 << 20, 3 * (8 << 20) + 5, 320_470_266, 1 << 40]
    assert [slice_count(replace(capture_info("futex_pid"), perf_data_bytes=size)) for size in sizes] == \
        [1, 1, 1, 3, 16, 16]
