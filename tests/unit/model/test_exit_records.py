"""A thread after perf's exit record: perf writes it before the thread lets go of its memory,
which may wait, so a recording of the whole machine sees the thread come back after it, and its
last switch names no thread (its tid is gone by then). BPF says a thread's exit at its last
switch, after all of that. Times are microseconds from the window's start, as in
test_engine_events; thread 13 is a short-lived thread of process 10 on CPU 1."""

from __future__ import annotations

from tests.helpers.engine_events import US, builder, model, row_of, switch


def test_a_thread_back_after_its_exit_record_is_not_on_cpu_to_the_windows_end() -> None:
    events = builder()
    events.switch_in(1000 * US, 1, 10, 13, "t13")
    events.exit(1100 * US, 1, 10, 13)  # perf's exit record; the switch-out in the exit path unsampled
    events.switch_in(1500 * US, 1, 10, 13, "t13")  # back in the exit path; its last switch names tid -1
    result = model(events)
    # on CPU 1000 -> 1100, to its exit record; not 1500 -> 10000 as well (8,500 µs more)
    assert result.threads[13].oncpu_us == 100
    assert result.threads[13].exited_ns == 1100 * US


def test_a_wait_in_the_exit_path_after_the_exit_record_keeps_its_time_and_its_last_run() -> None:
    events = builder()
    events.switch_in(1000 * US, 1, 10, 13, "t13")
    events.exit(1100 * US, 1, 10, 13)
    switch(events, 1200, 13, "D", 0, "rwsem_down_read_slowpath", cpu=1)  # waits for mmap_lock as it ends
    events.sched_waking(1700 * US, 10, 12, "t12", 13, "up_read")
    events.switch_in(1750 * US, 1, 10, 13, "t13")
    switch(events, 1780, 13, "X", 0, "do_task_dead", cpu=1)  # its last switch, sampled
    result = model(events)
    # the wait 1200 -> 1750: 500 µs blocked until the wakeup, 50 waiting for a CPU; on CPU 1000 ->
    # 1100 and 1750 -> 1780, its last run (as BPF counts it, to the last switch)
    row = row_of(result, 13, "rwsem_down_read_slowpath")
    assert (row.offcpu_us, row.blocked_us, row.runqueue_us) == (550, 500, 50)
    assert result.threads[13].oncpu_us == 100 + 30
