//! BPF records decoded into events, every expected value worked out by hand in the comments.
//! Times are µs from the window's start (`at`).

use std::sync::Mutex;

use super::*;
use crate::bpf::record::{Record, COMM, EXIT, FORK, NOT_TAKEN, WAIT};
use crate::engine::{SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, THREAD_COMM, THREAD_EXIT, THREAD_FORK};

const PID: u32 = 4242;
const WAITER: u32 = 11;
const WAKER: u32 = 12;
const CHILD: u32 = 13;
const S: u32 = 0x1;
const D: u32 = 0x2;
const DEAD: u32 = 0x80;
const EXIT_DEAD: u32 = 0x10;
const BASE_NS: u64 = 1_000_000_000;

fn at(us: u64) -> u64 {
    BASE_NS + us * 1000
}

fn comm(name: &str) -> [u8; 16] {
    let mut comm = [0u8; 16];
    comm[..name.len()].copy_from_slice(name.as_bytes());
    comm
}

/// A record of thread `tid` of PID named t{tid}, its stacks not taken, its times 0 (not seen)
/// but `since_us`'s.
fn record(kind: u32, tid: u32, since_us: Option<u64>) -> Record {
    Record {
        kind,
        pid: PID,
        tid,
        since_ns: since_us.map_or(0, at),
        kernel_stack: NOT_TAKEN,
        user_stack: NOT_TAKEN,
        waker_kernel_stack: NOT_TAKEN,
        waker_user_stack: NOT_TAKEN,
        comm: comm(&format!("t{tid}")),
        ..Record::default()
    }
}

fn woken_by(mut record: Record, waker: u32) -> Record {
    (record.waker_pid, record.waker_tid, record.waker_comm) =
        (PID, waker, comm(&format!("t{waker}")));
    record
}

/// (kind, time, cpu, pid, tid, other, name, state, chain, weight), the ids by their keys.
type Seen = (
    u8,
    i64,
    i32,
    i32,
    i32,
    i32,
    String,
    String,
    Option<ChainKey>,
    u32,
);

fn decoded(records: &[Record], slice: (i64, i64)) -> Vec<Seen> {
    let keys = Mutex::new(Keys::default());
    let mut generations = Generations::default();
    records
        .iter()
        .for_each(|record| count_generation(&mut generations, record));
    let generations = generations.sorted();
    let mut decoder = SliceDecoder::new(slice, &keys, &generations, None);
    // through their bytes, as the file holds them
    let bytes: Vec<u8> = records.iter().flat_map(Record::bytes).collect();
    Record::all(&bytes).for_each(|record| decoder.take(&record));
    let events = decoder.events();
    let keys = keys.into_inner().expect("keys");
    events
        .into_iter()
        .map(|e| {
            let chain = (e.chain as usize)
                .checked_sub(engine::SEEDED_CHAINS)
                .map(|id| keys.chains.keys[id]);
            let (name, state) = (
                keys.names.keys[e.name as usize].clone(),
                keys.states.keys[e.state as usize].clone(),
            );
            (
                e.kind, e.time, e.cpu, e.pid, e.tid, e.other, name, state, chain, e.weight,
            )
        })
        .collect()
}

/// Three threads, their records in the order the ring buffer gives them (a wait's when it
/// ends; the waits still open at the end last):
/// - WAKER off CPU since before the recording, back at 500; preempted at 4600, back at 5000
///   (its stack not taken, weight 2^3 dropped to 0).
/// - WAITER sleeps (S) at 1000 with kernel stack 1 and user stack 2 (taken with probability
///   1/4: weight 4), woken by WAKER at 4000 (its stacks 3 and 4), back at 4500 on CPU 1;
///   sleeps at 6000, woken by WAKER at 5990 on its way off (not taken), back at 6200; sleeps
///   (D) at 8000 with kernel stack 5 and a user stack that failed (-7), still off at the end.
/// - CHILD made by WAITER at 2000, renamed at 2100, first run at 2500, exits at 3000, its
///   last switch-out (dead) at 3001.
///
/// Then a record of a kind this offcpu does not know.
fn story() -> Vec<Record> {
    let renamed = comm("renamed");
    vec![
        Record {
            back_ns: at(500),
            ..record(WAIT, WAKER, None)
        },
        Record {
            comm: comm("t11"),
            ..woken_by(record(FORK, CHILD, Some(2000)), WAITER)
        },
        Record {
            comm: renamed,
            ..record(COMM, CHILD, Some(2100))
        },
        Record {
            back_ns: at(2500),
            cpu: 1,
            comm: renamed,
            ..record(WAIT, CHILD, None)
        },
        Record {
            cpu: 1,
            comm: renamed,
            ..record(EXIT, CHILD, Some(3000))
        },
        Record {
            woken_ns: at(4000),
            back_ns: at(4500),
            cpu: 1,
            kernel_stack: 1,
            user_stack: 2,
            waker_kernel_stack: 3,
            waker_user_stack: 4,
            state: S,
            weight_shift: 2,
            ..woken_by(record(WAIT, WAITER, Some(1000)), WAKER)
        },
        Record {
            back_ns: at(5000),
            preempted: 1,
            weight_shift: 3,
            ..record(WAIT, WAKER, Some(4600))
        },
        Record {
            woken_ns: at(5990),
            back_ns: at(6200),
            state: S,
            weight_shift: 1,
            ..woken_by(record(WAIT, WAITER, Some(6000)), WAKER)
        },
        Record {
            kernel_stack: 5,
            user_stack: -7,
            state: D,
            ..record(WAIT, WAITER, Some(8000))
        },
        Record {
            state: DEAD,
            exit_state: EXIT_DEAD,
            comm: renamed,
            ..record(WAIT, CHILD, Some(3001))
        },
        record(9, WAITER, Some(9000)),
    ]
}

#[allow(clippy::too_many_arguments)]
fn seen(
    kind: u8,
    us: u64,
    cpu: i32,
    tid: u32,
    other: u32,
    name: &str,
    state: &str,
    chain: Option<ChainKey>,
    weight: u32,
) -> Seen {
    let pid = PID as i32;
    (
        kind,
        at(us) as i64,
        cpu,
        pid,
        tid as i32,
        other as i32,
        name.into(),
        state.into(),
        chain,
        weight,
    )
}

#[test]
fn records_become_the_events_the_engine_reads_in_time_order() {
    let pid = i64::from(PID);
    // the process and its generation (0: no fork nor exec of it recorded) with a user stack
    let waiter_stack = ChainKey::Stack([1, 2, pid, 0, NO_RUNTIME_STACK]);
    let waker_stack = ChainKey::Stack([3, 4, pid, 0, NO_RUNTIME_STACK]);
    // without user frames, the chain is the same in every process: no pid
    let kernel_alone = ChainKey::Stack([5, -7, 0, 0, NO_RUNTIME_STACK]);
    let not_taken = Some(ChainKey::NotTaken);
    assert_eq!(
        decoded(&story(), (0, i64::MAX)),
        vec![
            seen(SWITCH_IN, 500, 0, WAKER, 0, "t12", "", None, 1),
            seen(
                SCHED_SWITCH,
                1000,
                -1,
                WAITER,
                0,
                "t11",
                "S",
                Some(waiter_stack),
                4
            ),
            seen(THREAD_FORK, 2000, 0, CHILD, WAITER, "t11", "", None, 1),
            seen(THREAD_COMM, 2100, 0, CHILD, 0, "renamed", "", None, 1),
            seen(SWITCH_IN, 2500, 1, CHILD, 0, "renamed", "", None, 1),
            seen(THREAD_EXIT, 3000, 1, CHILD, 0, "renamed", "", None, 1),
            seen(
                SCHED_SWITCH,
                3001,
                -1,
                CHILD,
                0,
                "renamed",
                "X",
                not_taken,
                0
            ),
            seen(
                SCHED_WAKING,
                4000,
                -1,
                WAKER,
                WAITER,
                "t12",
                "",
                Some(waker_stack),
                1
            ),
            seen(SWITCH_IN, 4500, 1, WAITER, 0, "t11", "", None, 1),
            seen(SCHED_SWITCH, 4600, -1, WAKER, 0, "t12", "R", not_taken, 0),
            seen(SWITCH_IN, 5000, 0, WAKER, 0, "t12", "", None, 1),
            // woken at 5990, before it was off at 6000: the wakeup is placed at its switch-out,
            // after it (a switch-out before a wakeup at one time)
            seen(SCHED_SWITCH, 6000, -1, WAITER, 0, "t11", "S", not_taken, 0),
            seen(
                SCHED_WAKING,
                6000,
                -1,
                WAKER,
                WAITER,
                "t12",
                "",
                Some(ChainKey::WakerNotTaken),
                1
            ),
            seen(SWITCH_IN, 6200, 0, WAITER, 0, "t11", "", None, 1),
            seen(
                SCHED_SWITCH,
                8000,
                -1,
                WAITER,
                0,
                "t11",
                "D",
                Some(kernel_alone),
                1
            ),
        ]
    );
}

#[test]
fn a_slice_holds_the_events_in_it_of_waits_that_cross_it() {
    // 4000..=6000: WAITER's first wait's wakeup (4000) and switch-in (4500), not its switch-out
    // at 1000; WAKER's preemption whole (4600, 5000); WAITER's second switch-out and its wakeup
    // (placed at 6000), not its switch-in at 6200
    let kinds: Vec<(u8, i64)> = decoded(&story(), (at(4000) as i64, at(6000) as i64))
        .into_iter()
        .map(|event| (event.0, (event.1 - BASE_NS as i64) / 1000))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (SCHED_WAKING, 4000),
            (SWITCH_IN, 4500),
            (SCHED_SWITCH, 4600),
            (SWITCH_IN, 5000),
            (SCHED_SWITCH, 6000),
            (SCHED_WAKING, 6000),
        ]
    );
}

#[test]
fn a_user_stack_after_an_exec_is_of_the_new_generation() {
    // WAITER's process made by a fork at 100 (tid == pid), exec'd at 500; a wait of its thread
    // with a user stack at 300 (generation 1: after the fork) and at 1000 (2: after the exec)
    let main = PID;
    let wait = |since| Record {
        kernel_stack: 1,
        user_stack: 2,
        ..record(WAIT, WAITER, Some(since))
    };
    let records = [
        record(FORK, main, Some(100)),
        Record {
            state: EXEC,
            ..record(COMM, main, Some(500))
        },
        wait(300),
        wait(1000),
    ];
    let chains: Vec<Option<ChainKey>> = decoded(&records, (0, i64::MAX))
        .into_iter()
        .filter(|event| event.0 == SCHED_SWITCH)
        .map(|event| event.8)
        .collect();
    let pid = i64::from(PID);
    assert_eq!(
        chains,
        vec![
            Some(ChainKey::Stack([1, 2, pid, 1, NO_RUNTIME_STACK])),
            Some(ChainKey::Stack([1, 2, pid, 2, NO_RUNTIME_STACK])),
        ]
    );
}

#[test]
fn a_process_generation_counts_the_programs_begun_in_it() {
    // process PID made by a fork at 100 (its first thread: tid == pid), exec'ing at 300; a
    // thread of it made at 500 (not a new process), renamed at 600 (no exec), exec'ing at 700
    // (the kernel gives the process's pid: PID's count)
    let mut generations = Generations::default();
    for record in [
        record(FORK, PID, Some(100)),
        Record {
            state: EXEC,
            ..record(COMM, PID, Some(300))
        },
        record(FORK, WAITER, Some(500)),
        record(COMM, WAITER, Some(600)),
        Record {
            state: EXEC,
            ..record(COMM, WAITER, Some(700))
        },
    ] {
        count_generation(&mut generations, &record);
    }
    let generations = generations.sorted();
    // 0 up to the fork (a start counts after its time), 1 until the first exec, 2 until the
    // thread's, 3 after; another process: none begun
    let pid = i64::from(PID);
    let times = [50, 100, 200, 300, 301, 650, 701];
    let found: Vec<i64> = times
        .iter()
        .map(|&us| generations.at(pid, at(us)))
        .collect();
    assert_eq!(found, vec![0, 0, 1, 1, 2, 2, 3]);
    assert_eq!(generations.at(pid + 1, at(701)), 0);
}

#[test]
fn a_runtime_sample_joins_the_wait_of_its_thread_that_covers_it() {
    // WAITER sampled at 2000 (stack 0) and 9000 (stack 1), twice at 7000 (stacks 2 then 3);
    // WAKER at 4800 (stack 4)
    let tids = [WAITER, WAITER, WAITER, WAITER, WAKER].map(i64::from);
    let times = [2000, 9000, 7000, 7000, 4800].map(|us| at(us) as i64);
    let samples = RuntimeSamples::new(&tids, &times, &[0, 1, 2, 3, 4]);
    let stack =
        |tid, since, back: Option<u64>| samples.stack_of(tid, at(since), back.map_or(0, at));
    assert_eq!(stack(WAITER, 1000, Some(4500)), 0); // 2000 inside
    assert_eq!(stack(WAITER, 4500, Some(6000)), NO_RUNTIME_STACK); // none inside
    assert_eq!(stack(WAITER, 8000, None), 1); // still off CPU at the end: 9000
    assert_eq!(stack(WAITER, 6500, Some(7000)), NO_RUNTIME_STACK); // ends as 7000's sample is taken
    assert_eq!(stack(WAITER, 6500, Some(7500)), 3); // two at one time: the last kept
    assert_eq!(stack(WAITER, 6500, None), 3); // the first inside, not 9000's
    assert_eq!(stack(WAKER, 4600, Some(5000)), 4);
    assert_eq!(samples.stack_of(WAITER, 0, at(4500)), NO_RUNTIME_STACK); // its start not seen
}

#[test]
fn a_sample_joins_the_one_wait_of_its_thread_that_covers_it() {
    // thread 1 off CPU from 100 to 200 and from 300 to 400; thread 2 from 100 to 400 and from
    // 500 to the end (still off CPU). Samples: thread 1 at 150 (stack 7: in its first wait) and
    // 250 (8: it ran from 200 to 300), thread 2 at 350 (9: its own wait, not thread 1's at the
    // same time) and 900 (5: its wait that has not ended)
    let samples = RuntimeSamples::new(&[1, 1, 2, 2], &[150, 250, 350, 900], &[7, 8, 9, 5]);
    let joined = [(1, 100, 200), (1, 300, 400), (2, 100, 400), (2, 500, 0)]
        .map(|(tid, since, back)| samples.stack_of(tid, since, back));
    assert_eq!(joined, [7, NO_RUNTIME_STACK, 9, 5]);
}

#[test]
fn a_wait_not_seen_to_begin_takes_none_and_the_first_of_several_samples_is_kept() {
    // thread 1 off CPU since before the recording to 100 (its start unseen), then from 200 to
    // 300; thread 3 from 50 to 60, never sampled. Samples of thread 1: at 50 (stack 1, in the
    // unseen wait), at 300 (2: back on CPU at the switch-in), at 200 (3: off CPU from the
    // switch-out on), at 250 (4: in the wait too, later)
    let samples = RuntimeSamples::new(&[1, 1, 1, 1], &[50, 300, 200, 250], &[1, 2, 3, 4]);
    let joined = [(1, 0, 100), (1, 200, 300), (3, 50, 60)]
        .map(|(tid, since, back)| samples.stack_of(tid, since, back));
    assert_eq!(joined, [NO_RUNTIME_STACK, 3, NO_RUNTIME_STACK]);
    let none = RuntimeSamples::new(&[], &[], &[]);
    assert_eq!(none.stack_of(1, 200, 300), NO_RUNTIME_STACK);
}
