"""Strata none of whose waits carried a stack (issue 35, part 6): lent the stacks of their class,
their thread's waits in that state with a waker of the same process first, else all of its waits
in that state (offcpu.model.sampling). Event sequences in the engine's own form, as in
test_engine_events.py, with every expected microsecond worked out by hand in the comments."""

from __future__ import annotations

from offcpu.model import Model
from offcpu.model.engine import to_model
from offcpu.stacks import BEFORE_WINDOW, STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN
from tests.helpers.engine_events import (
    US,
    WINDOW_US,
    Feed,
    NamedChains,
    builder,
    info,
    model,
    paired,
    switch,
)


def rows_of(result: Model, tid: int) -> list[tuple[tuple[str, ...], str, int, int, int, int]]:
    """A thread's rows: stack, waker's comm, off-CPU, blocked and run-queue µs, count."""
    return sorted((result.stacks[row.stack].frames, result.wakers[row.waker].comm if row.waker is not None else "",
                   row.offcpu_us, row.blocked_us, row.runqueue_us, row.count)
                  for row in result.rows if row.tid == tid)


def wait(events: Feed, start_us: int, end_us: int, woken_us: int, stack: str, waker: tuple[int, int, str],
         weight: int) -> None:
    """11 waits in D from `start_us` (12 runs meanwhile), woken at `woken_us` by `waker` (pid, tid,
    comm: its stack taken with 11's), back when 12 sleeps in poll at `end_us`."""
    switch(events, start_us, 11, "D", 12, stack, weight=weight)
    pid, tid, comm = waker
    waker_stack = WAKER_STACK_NOT_TAKEN if weight == 0 else {0: "asm_common_interrupt"}.get(pid, "up_read")
    events.sched_waking(woken_us * US, pid, tid, comm, 11, waker_stack)
    switch(events, end_us, 12, "S", 11, "poll")


SWAPPER, PEER, BYSTANDER = (0, 0, "swapper/0"), (10, 12, "t12"), (20, 21, "bash")


def test_a_stratum_without_a_stack_is_lent_its_wakers_process_stacks_first_else_its_threads() -> None:
    events = builder()
    # 11's waits whose stacks were taken (weight 1: exact rows): two of 50 µs in io_schedule woken by the
    # disk's interrupt at idle, one of 300 µs in rwsem_down_read_slowpath woken by its peer 12; all blocked
    wait(events, 1000, 1050, 1050, "io_schedule", SWAPPER, 1)
    wait(events, 1100, 1150, 1150, "io_schedule", SWAPPER, 1)
    wait(events, 1200, 1500, 1500, "rwsem_down_read_slowpath", PEER, 1)
    # a wait without a stack woken by whatever ran when the interrupt came (bash, another process):
    # 400 µs, blocked 300 then 100 in the run queue; and one woken by the peer 12: 200 µs, blocked 150
    wait(events, 2000, 2400, 2300, "", BYSTANDER, 0)
    wait(events, 3000, 3200, 3150, "", PEER, 0)
    result = model(events)
    assert rows_of(result, 11) == [
        (("io_schedule",), "bash", 100, 75, 25, 1),
        (("io_schedule",), "swapper/0", 100, 100, 0, 2),
        (("rwsem_down_read_slowpath",), "bash", 300, 225, 75, 0),
        # 12's wait without a stack goes where 11's waits that 12's process ended went: all of it
        (("rwsem_down_read_slowpath",), "t12", 200, 150, 50, 1),
        (("rwsem_down_read_slowpath",), "t12", 300, 300, 0, 1),
    ]
    # bash's process ended none of 11's waits with a stack: its 400 µs go by all of 11's waits in D,
    # 100 µs in io_schedule and 300 in rwsem: blocked 300 as 100 : 300 (75 and 225), run queue 100 the
    # same (no lender waited in the run queue: by their time), its 1 wait as 2 : 1 (0.67 and 0.33: to
    # io_schedule). 11's rows add up to its 1,000 µs off CPU, none without a stack.
    assert result.threads[11].offcpu_us == 1000 == sum(row.offcpu_us for row in result.rows if row.tid == 11)


def test_a_stratum_whose_thread_has_no_other_stack_in_its_state_keeps_its_time_without_one() -> None:
    # 13 was asleep in D when the recording began (its row's stack is synthetic: lent to no wait), ran at
    # 500 on CPU 1, then waited in D from 600 to 900 with no stack, woken by the idle task at 800
    events = builder()
    events.switch_in(500 * US, 1, 10, 13, "t13")
    switch(events, 600, 13, "D", 0, "", cpu=1, weight=0)
    events.sched_waking(800 * US, 0, 0, "swapper/1", 13, WAKER_STACK_NOT_TAKEN)
    switch(events, 900, 0, "R", 13, "", cpu=1)
    result = to_model(paired(events, [events.builder], [(13, "t13", "D")]), NamedChains(),  # type: ignore[arg-type]
                      info(), 0, WINDOW_US * US)
    assert rows_of(result, 13) == [
        ((BEFORE_WINDOW,), "", 500, 500, 0, 1),
        ((STACK_NOT_TAKEN,), "swapper/1", 300, 200, 100, 1),
    ]
