//! The engine on small hand-built event sequences. Every expected value is worked out by
//! hand in the comment beside it, from the rules the engine follows (see each module).
//!
//! Ids: names, states and chains are numbers in the caller's tables, which start with the
//! engine's own (NAMES: "", "?"; STATES: "", "R", "?", "X", "Z"; chains: none and the four
//! stand-ins). The tests' own follow them.

use super::events::*;
use super::micros::micros;
use super::slice::SliceBuilder;
use super::tally::Tally;
use super::{at_start, merge, renumber};

const WORKER: Id = 2; // a thread's name
const WAKER_NAME: Id = 3;
const SLEEPING: Id = 5; // the state "S"
const WAIT_STACK: Id = 5; // a chain
const WAKER_STACK: Id = 6;
const MS: i64 = 1_000_000;

#[allow(clippy::too_many_arguments)]
fn event(
    kind: u8,
    time: i64,
    cpu: i32,
    tid: i32,
    other: i32,
    name: Id,
    state: Id,
    chain: Id,
) -> Event {
    Event {
        kind,
        time,
        cpu,
        pid: tid,
        tid,
        other,
        name,
        state,
        chain,
        weight: 1,
    }
}

/// Thread 10 sleeps at 0.1 ms on CPU 0, thread 20 (on CPU 1) wakes it at 0.3 ms, and the
/// idle task switches to it at 0.35 ms: the switch names it as next, then perf records it in.
fn one_wait() -> Vec<Event> {
    vec![
        event(
            SCHED_SWITCH,
            100_000,
            0,
            10,
            0,
            WORKER,
            SLEEPING,
            WAIT_STACK,
        ),
        event(
            SCHED_WAKING,
            300_000,
            1,
            20,
            10,
            WAKER_NAME,
            NO_TEXT,
            WAKER_STACK,
        ),
        event(SCHED_SWITCH, 350_000, 0, 0, 10, NO_TEXT, NO_TEXT, NO_CHAIN),
        event(SWITCH_IN, 350_000, 0, 10, 0, WORKER, NO_TEXT, NO_CHAIN),
    ]
}

/// The events paired in slices cut at `cuts` (ns) of the window 0..1 ms, all of it counted.
fn paired(events: &[Event], cuts: &[i64]) -> Tally {
    paired_at_cost(events, cuts, 0)
}

/// As paired, with the capture's switch cost (ns) measured as `switch_cost`.
fn paired_at_cost(events: &[Event], cuts: &[i64], switch_cost: i64) -> Tally {
    let bounds: Vec<i64> = [0].iter().chain(cuts).chain(&[MS + 1]).copied().collect();
    let slices = bounds
        .windows(2)
        .map(|pair| {
            let mut builder = SliceBuilder::new(pair[0], pair[1] - 1, Some((0, MS)), switch_cost);
            builder.take(events);
            builder.finish(0)
        })
        .collect();
    merge(slices, (0, MS), &at_start(Vec::new()), Some((0, MS))).0
}

#[test]
fn a_switch_out_and_the_switch_that_names_it_next_make_one_wait_split_at_its_wakeup() {
    let tally = paired(&one_wait(), &[]);
    // off CPU 0.1 -> 0.35 ms = 250 µs: blocked until the wakeup (0.1 -> 0.3 = 200 µs), then
    // 50 µs waiting for a CPU; counted under thread 10's stack and state, and its waker
    // (pid 20, tid 20, its name, its stack)
    let waker = (20, 20, WAKER_NAME, WAKER_STACK);
    assert_eq!(
        tally.rows_in_us(),
        vec![(
            (10, WAIT_STACK, SLEEPING, Some(waker)),
            false,
            (250, 200, 50, 1, 0),
            expected_windows()
        )]
    );
    // on CPU from the window's start to its switch-out (100 µs), and from its return to the
    // end (0.35 -> 1 ms = 650 µs); the waker left no switch, so it has no totals
    let threads = tally.threads_in_us();
    assert_eq!(threads.len(), 1);
    let (tid, pid, name, oncpu_ns, offcpu, blocked, runqueue, observer_ns, _, _) = threads[0];
    assert_eq!((tid, pid, name), (10, Some(10), WORKER));
    assert_eq!(
        (oncpu_ns, offcpu, blocked, runqueue, observer_ns),
        (750_000, 250, 200, 50, 0)
    );
    // one wakeup-to-running delay of 50 µs
    assert_eq!(tally.runqueue_delays_us.get(&50), Some(&1));
    assert_eq!(tally.runqueue_delays_us.len(), 1);
}

/// The sub-windows of the wait of one_wait: the counted 1 ms in ten parts of 100 µs, the wait
/// 100 -> 350 µs: 100 -> 200 in the second, 200 -> 300 in the third, 300 -> 350 in the fourth.
fn expected_windows() -> Vec<i64> {
    vec![0, 100, 100, 50, 0, 0, 0, 0, 0, 0]
}

#[test]
fn a_preempted_wait_is_all_run_queue_delay_and_a_thread_on_cpu_since_before_is_kept_apart() {
    let preempted = 1; // "R"
    let events = [
        // 10 is preempted at 0.1 ms by 11, which had been off CPU since before the window
        event(
            SCHED_SWITCH,
            100_000,
            0,
            10,
            11,
            WORKER,
            preempted,
            WAIT_STACK,
        ),
        event(SWITCH_IN, 100_000, 0, 11, 0, WORKER, NO_TEXT, NO_CHAIN),
        // a wakeup of a runnable thread ends no blocked time
        event(
            SCHED_WAKING,
            200_000,
            1,
            20,
            10,
            WAKER_NAME,
            NO_TEXT,
            WAKER_STACK,
        ),
        // 11 sleeps at 0.4 ms, for good: 10 comes back
        event(
            SCHED_SWITCH,
            400_000,
            0,
            11,
            10,
            WORKER,
            SLEEPING,
            WAKER_STACK,
        ),
        event(SWITCH_IN, 400_000, 0, 10, 0, WORKER, NO_TEXT, NO_CHAIN),
    ];
    let tally = paired(&events, &[]);
    let times: Vec<_> = tally
        .rows_in_us()
        .into_iter()
        .map(|(key, _, times, _)| (key, times))
        .collect();
    let unrecorded_waker = Some((-1, -1, NO_TEXT, WAKER_NOT_RECORDED));
    assert_eq!(
        times,
        vec![
            // 11, off CPU from the window's start to 0.1 ms (100 µs), in a state not recorded,
            // woken by no wakeup recorded: all of it blocked
            (
                (11, BEFORE_WINDOW, 2, unrecorded_waker),
                (100, 100, 0, 1, 0)
            ),
            // 10, preempted 0.1 -> 0.4 ms: 300 µs, none of it blocked, no waker
            ((10, WAIT_STACK, preempted, None), (300, 0, 300, 1, 0)),
            // 11 from 0.4 ms to the end of the window (600 µs), never woken: all blocked
            ((11, WAKER_STACK, SLEEPING, None), (600, 600, 0, 1, 0)),
        ]
    );
    // 10 on CPU 0 -> 0.1 and 0.4 -> 1 ms (700 µs), 11 on CPU 0.1 -> 0.4 ms (300 µs)
    let mut oncpu: Vec<_> = tally.threads_in_us().iter().map(|t| (t.0, t.3)).collect();
    oncpu.sort_unstable();
    assert_eq!(oncpu, vec![(10, 700_000), (11, 300_000)]);
    // the two waits cut by the window's edges
    assert_eq!(tally.clipped, 2);
}

#[test]
fn slices_merged_count_a_wait_that_crosses_their_boundary_as_one_slice_does() {
    let whole = paired(&one_wait(), &[]);
    // cut at 0.2 ms: the switch-out in the first slice, the wakeup and the return in the
    // second; and at 0.32 ms too, between the wakeup and the return
    for cuts in [&[200_000][..], &[200_000, 320_000]] {
        let merged = paired(&one_wait(), cuts);
        assert_eq!(merged.rows_in_us(), whole.rows_in_us(), "cut at {cuts:?}");
        assert_eq!(
            merged.threads_in_us(),
            whole.threads_in_us(),
            "cut at {cuts:?}"
        );
    }
    // and it is the wait above: 250 µs, 200 of them blocked
    assert_eq!(whole.rows_in_us()[0].2, (250, 200, 50, 1, 0));
}

#[test]
fn a_tally_counts_only_the_counted_part_and_a_sampled_wait_for_the_waits_it_stands_for() {
    // counted: 0.1 -> 0.9 ms, in ten sub-windows of 80 µs
    let mut tally = Tally::new(Some((100_000, 900_000)));
    let wait = |since: i64, state: Id, chain: Id, weight: u32| Wait {
        weight,
        ..Wait::new(since, chain, state)
    };
    // 50 -> 150 µs, never woken: counted 100 -> 150 (50 µs, all blocked), clipped, in the
    // first sub-window
    tally.add_wait(10, &wait(50_000, SLEEPING, WAIT_STACK, 1), 150_000, true);
    // 850 -> 950 µs: counted 850 -> 900 (50 µs), clipped, in the last sub-window
    // ((850 - 100) * 10 / 800 = 9.4 -> 9); same row
    tally.add_wait(10, &wait(850_000, SLEEPING, WAIT_STACK, 1), 950_000, true);
    // a wait whose stack was taken with probability 1/4, 200 -> 210 µs (10 µs): its row
    // counts it 4 times (40 µs, 4 waits), variance w(w - 1)x^2 = 4 * 3 * 10^2 = 1200, and 3
    // waits stood in for; its stratum counts it once
    tally.add_wait(10, &wait(200_000, SLEEPING, WAKER_STACK, 4), 210_000, true);
    let rows = tally.rows_in_us();
    let no_waker = Some((-1, -1, NO_TEXT, WAKER_NOT_RECORDED));
    assert_eq!(rows[0].0, (10, WAIT_STACK, SLEEPING, no_waker));
    assert_eq!((rows[0].1, rows[0].2), (false, (100, 100, 0, 2, 0)));
    assert_eq!(rows[0].3, vec![50, 0, 0, 0, 0, 0, 0, 0, 0, 50]);
    // 200 -> 210 µs lies in the second sub-window (80 -> 160 µs of the counted part), 4 times
    assert_eq!((rows[1].1, rows[1].2), (true, (40, 40, 0, 4, 1200)));
    assert_eq!(rows[1].3, vec![0, 40, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!((tally.clipped, tally.stand_in_waits), (2, 3));
    let strata = tally.strata_in_us();
    assert_eq!(strata.len(), 1);
    assert_eq!(strata[0].1, (10, 10, 0, 1, 0));
    // of the three waits that ended with no wakeup recorded, the one not cut by the counted
    // part's edges counts as a wakeup not seen
    assert_eq!(tally.unseen_wakeups, 1);
}

#[test]
fn microseconds_round_to_even_and_a_threads_rows_add_up_to_its_total() {
    // 0.5 µs -> 0, 1.5 -> 2, 2.5 -> 2 (to even, as Python's round)
    assert_eq!([500, 1500, 2500, 1400, -1500].map(micros), [0, 2, 2, 1, -2]);
    // two rows of one thread, 1.4 µs blocked each: alone each would round to 1 µs (2 in all),
    // while the thread's 2.8 µs round to 3. Each row is rounded where its thread's running
    // total ends: the first 0 -> 1.4 (1 µs), the second 1.4 -> 2.8 (3 - 1 = 2 µs)
    let mut tally = Tally::new(None);
    for (since, chain) in [(0, WAIT_STACK), (10_000, WAKER_STACK)] {
        tally.add_wait(10, &Wait::new(since, chain, SLEEPING), since + 1400, true);
    }
    let offcpu: Vec<i64> = tally.rows_in_us().iter().map(|row| row.2 .0).collect();
    assert_eq!(offcpu, vec![1, 2]);
    assert_eq!(tally.threads_in_us()[0].4, 3);
}

/// Thread 10 is created, runs on CPU 1, sleeps, is woken and runs there again until it exits,
/// with no switch to it recorded (the threads it follows there are not recorded): each return
/// is placed at perf's record of it, less the switch cost (5 µs), unless the thread last
/// recorded on CPU 1 had exited while 10 was runnable (an exit's last switch costs perf
/// nothing). Thread 30's exit (0.1 ms) came before 10 was created (0.2 ms): something else ran
/// on CPU 1 between them, so it does not count for 10's first return; 40's (0.45 ms) came
/// after 10 was woken (0.41 ms), so 10 followed it.
fn returns_after_exits() -> Vec<Event> {
    vec![
        event(THREAD_EXIT, 100_000, 1, 30, 0, NO_TEXT, NO_TEXT, NO_CHAIN),
        event(THREAD_FORK, 200_000, 0, 10, 20, NO_TEXT, NO_TEXT, NO_CHAIN),
        event(SWITCH_IN, 300_000, 1, 10, 0, WORKER, NO_TEXT, NO_CHAIN),
        event(
            SCHED_SWITCH,
            400_000,
            1,
            10,
            0,
            WORKER,
            SLEEPING,
            WAIT_STACK,
        ),
        event(
            SCHED_WAKING,
            410_000,
            0,
            20,
            10,
            WAKER_NAME,
            NO_TEXT,
            WAKER_STACK,
        ),
        event(THREAD_EXIT, 450_000, 1, 40, 0, NO_TEXT, NO_TEXT, NO_CHAIN),
        event(SWITCH_IN, 500_000, 1, 10, 0, WORKER, NO_TEXT, NO_CHAIN),
        event(THREAD_EXIT, 600_000, 1, 10, 0, NO_TEXT, NO_TEXT, NO_CHAIN),
    ]
}

#[test]
fn a_return_follows_an_exit_only_if_the_thread_was_runnable_by_then_however_sliced() {
    let whole = paired_at_cost(&returns_after_exits(), &[], 5_000);
    // first return at 0.3 - 0.005 = 0.295 ms: waiting for a CPU from its birth (0.2 -> 0.295
    // = 95 µs), on CPU 0.295 -> 0.4 (105 µs), the 5 µs before perf's record the observer's.
    // Blocked 0.4 -> 0.41 (10 µs), then waiting for a CPU until its second return, at perf's
    // record (0.41 -> 0.5 = 90 µs), on CPU until its exit (0.5 -> 0.6 = 100 µs). In all: on
    // CPU 205 µs, off 195 (10 blocked, 95 + 90 = 185 waiting for a CPU)
    let threads = whole.threads_in_us();
    let ten = threads.iter().find(|thread| thread.0 == 10).unwrap();
    assert_eq!(
        (ten.3, ten.4, ten.5, ten.6, ten.7),
        (205_000, 195, 10, 185, 5_000)
    );
    // cut between an exit and the return after it, and around the wait: the same
    for cuts in [&[250_000][..], &[470_000], &[250_000, 405_000, 470_000]] {
        let merged = paired_at_cost(&returns_after_exits(), cuts, 5_000);
        assert_eq!(merged.rows_in_us(), whole.rows_in_us(), "cut at {cuts:?}");
        assert_eq!(
            merged.threads_in_us(),
            whole.threads_in_us(),
            "cut at {cuts:?}"
        );
        assert_eq!(
            merged.estimated_switch_ins, whole.estimated_switch_ins,
            "cut at {cuts:?}"
        );
    }
}

#[test]
fn slices_renumbered_keep_their_waits_under_the_chains_new_ids() {
    // one_wait with its chains at ids 9 and 12, cut at 0.2 ms: the wait's switch-out is a
    // tail of the first slice, its wakeup and return a head of the second
    let events: Vec<Event> = one_wait()
        .into_iter()
        .map(|event| Event {
            chain: match event.chain {
                WAIT_STACK => 9,
                WAKER_STACK => 12,
                other => other,
            },
            ..event
        })
        .collect();
    let mut slices: Vec<_> = [(0, 200_000 - 1), (200_000, MS)]
        .into_iter()
        .map(|(first, last)| {
            let mut builder = SliceBuilder::new(first, last, Some((0, MS)), 0);
            builder.take(&events);
            builder.finish(0)
        })
        .collect();
    // the chains they hold beyond the engine's own: 9 and 12, numbered 5 and 6
    let used = slices.iter_mut().flat_map(|slice| slice.chains()).collect();
    let kept = renumber::kept_chains(used);
    assert_eq!(kept, vec![9, 12]);
    let new = renumber::new_ids(&kept);
    for slice in &mut slices {
        slice.renumber_chains(&new);
    }
    let tally = merge(slices, (0, MS), &at_start(Vec::new()), Some((0, MS))).0;
    // as one_wait's: 250 µs, 200 blocked and 50 waiting for a CPU, under the new ids
    assert_eq!(
        tally.rows_in_us(),
        vec![(
            (10, 5, SLEEPING, Some((20, 20, WAKER_NAME, 6))),
            false,
            (250, 200, 50, 1, 0),
            expected_windows()
        )]
    );
}
