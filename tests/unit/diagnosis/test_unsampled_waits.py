"""Waits without a sampled stack (issue 35, part 6), on small event sequences in the engine's
own form, every expected figure worked out by hand in the comments. Thread 11 of process 10
("app") reads a file: its waits in D are ended by the disk's interrupt, in whatever thread ran
when it came (the idle task, or bash of another process); a wait of weight 0 had no stack
taken, nor its waker's (as the BPF reader gives it)."""

from __future__ import annotations

from offcpu.diagnosis.findings import Finding, findings
from offcpu.stacks import STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN
from tests.helpers.engine_events import US, Feed, builder, model

READ = "__schedule;schedule;io_schedule;folio_wait_bit_common;filemap_read;vfs_read"
POLL = "__schedule;schedule;do_poll;__x64_sys_poll"
DISK = "try_to_wake_up;blk_mq_end_request;virtblk_done;asm_common_interrupt"
BASH = (20, 21, "bash")


def d_wait(events: Feed, start_us: int, woken_us: int, end_us: int, chain: str, weight: int,
           waker: tuple[int, int, str] = (0, 0, "swapper/0")) -> None:
    """11 waits in D from `start_us` (12 runs meanwhile), woken at `woken_us` by `waker`, back
    when 12 sleeps in poll at `end_us` (12's waits are exact: weight 1)."""
    events.sched_switch(start_us * US, 0, 10, 11, "app-11", "D", 12, chain if weight else STACK_NOT_TAKEN, weight)
    events.switch_in(start_us * US, 0, 10, 12, "app-12")
    pid, tid, comm = waker
    events.sched_waking(woken_us * US, pid, tid, comm, 11, DISK if weight else WAKER_STACK_NOT_TAKEN)
    events.sched_switch(end_us * US, 0, 10, 12, "app-12", "S", 11, POLL, 1)
    events.switch_in(end_us * US, 0, 10, 11, "app-11")


def by_id(found: list[Finding]) -> dict[str, Finding]:
    return {finding.id: finding for finding in found}


def test_waits_in_d_without_a_stack_are_lent_the_threads_reads_and_are_disk_io() -> None:
    events = builder()
    d_wait(events, 1000, 1900, 2000, READ, 2)  # 1 ms, its stack taken (weight 2: one in two)
    d_wait(events, 3000, 3700, 4000, "", 0, BASH)  # 1 ms without a stack: 700 µs blocked, 300 in the run queue
    d_wait(events, 5000, 5500, 5600, "", 0, BASH)  # 600 µs without a stack: 500 blocked, 100
    found = by_id(findings(model(events)))
    io = found["io_wait"]
    # all three, 2,600 µs (blocked 900 + 700 + 500), are waits for the disk: the two without a stack are
    # a stratum (11, D, bash) with none, lent 11's one stack in D, the read (evidence: root first)
    assert (io.offcpu_us, io.blocked_us) == (2600, 2100)
    assert [(site.frames[0], site.state, site.offcpu_us, site.count) for site in io.evidence] == \
        [("vfs_read", "D", 2600, 3)]
    # (12's waits are its own: in poll, and since before the recording)
    assert "D" not in [site.state for site in found["idle"].evidence]


def test_waits_in_d_with_no_stack_to_lend_are_disk_io_never_idle_and_no_evidence() -> None:
    events = builder()
    # 11's only wait with a stack is in S, in poll (exact); its 2 waits in D have none
    events.sched_switch(500 * US, 0, 10, 11, "app-11", "S", 12, POLL, 1)
    events.switch_in(500 * US, 0, 10, 12, "app-12")
    events.sched_switch(800 * US, 0, 10, 12, "app-12", "S", 11, POLL, 1)
    events.switch_in(800 * US, 0, 10, 11, "app-11")
    d_wait(events, 3000, 3700, 4000, "", 0, BASH)
    d_wait(events, 5000, 5500, 5600, "", 0, BASH)
    result = model(events)
    [unsampled] = [row for row in result.rows if result.stacks[row.stack].frames == (STACK_NOT_TAKEN,)]
    assert (unsampled.offcpu_us, unsampled.state, unsampled.count) == (1600, "D", 2)
    found = by_id(findings(result))
    # uninterruptible, ended by no peer of 11's: the disk's, whoever ran when its interrupt came; the
    # 1,600 µs count in the finding, but with no stack to show, it shows none
    io = found["io_wait"]
    assert (io.offcpu_us, io.blocked_us, io.evidence) == (1600, 1200, ())
    assert all(STACK_NOT_TAKEN not in site.frames for finding in found.values() for site in finding.evidence)
