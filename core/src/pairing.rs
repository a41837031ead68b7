//! The engine: from scheduler events to the off-CPU model's inputs.
//!
//! A thread is off CPU from its switch-out to its next switch-in, both placed where the
//! kernel switches: at sched_switch, which fires as the scheduler has picked the next thread
//! and gives the leaving thread's stack and state. A thread comes back at the sched_switch
//! that names it as next; when the thread that left was not recorded (the idle task, another
//! process), perf's record of the switch-in, less the switch's cost measured in the capture,
//! says when. The time perf spends between the switch and its record of it is charged by the
//! kernel to the thread coming in: it counts as that thread's time on CPU, and is shown apart
//! as the observer's cost, never as waiting. The wakeup in between, recorded in the waker's
//! context with the waker's stack, splits the time off CPU into blocked time and run-queue
//! delay. This needs sched_switch alone, so it works on kernels without schedstats.
//!
//! The window is cut into time slices, paired in parallel. Each slice is a state machine
//! over its own events (`SliceBuilder`); waits that cross a slice boundary leave a tail in
//! one slice and a head in the next, and `merge` joins them, so that a slice never needs
//! another slice's events. Names, states and call chains are ids (`Id`) into tables the
//! caller keeps; the engine knows the few below by their ids.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::hash::Hash;

use crate::quick::{QuickMap, QuickSet};

/// A name, state or call chain, by its number in its caller's table.
pub type Id = u32;

// The kinds of event, as offcpu.reading.sched_events numbers them.
pub const SCHED_SWITCH: u8 = 0;
pub const SCHED_WAKING: u8 = 1;
pub const SWITCH_IN: u8 = 2;
pub const SWITCH_OUT: u8 = 3;
pub const THREAD_FORK: u8 = 4;
pub const THREAD_EXIT: u8 = 5;
pub const THREAD_COMM: u8 = 6; // the engine takes names from switches and wakeups
pub const UNKNOWN_CPU: i32 = -1;

/// The names every table starts with: no name, and a thread's name before one is known.
pub const NAMES: [&str; 2] = ["", "?"];
/// No name or state: the first of both tables.
pub const NO_TEXT: Id = 0;
const NO_NAME: Id = NO_TEXT;
const UNNAMED: Id = 1;
/// The states every table starts with (prev_state as perf prints it).
pub const STATES: [&str; 5] = ["", "R", "?", "X", "Z"];
const PREEMPTED: Id = 1; // switched out while runnable: all of the gap is run-queue delay
const UNKNOWN_STATE: Id = 2;
const DEAD_STATES: [Id; 2] = [3, 4];
/// The chains every table starts with: none (an event that has none), then the stacks
/// the engine stands in where there is no recorded one.
pub const NO_CHAIN: Id = 0;
pub const BEFORE_WINDOW: Id = 1; // off CPU since before the recording
pub const NEW_THREAD: Id = 2; // a new thread, waiting for its first run
pub const WAKER_NOT_RECORDED: Id = 3;
pub const STACK_LOST: Id = 4; // the switch-out's stack was lost
pub const SEEDED_CHAINS: usize = 5;

/// Parts of the counted time each row's off-CPU time is also kept by (model.SUB_WINDOWS).
pub const SUB_WINDOWS: usize = 10;
/// How many of a thread's last waits are kept to see what it was waiting for while a
/// thread it then woke was waiting for it.
const HISTORY: usize = 256;
/// How many of the longest waits are kept with their times, for a timeline.
pub const TIMELINE_WAITS: usize = 4096;
/// What a tally counts up to when it counts everything.
const UNBOUNDED: i64 = i64::MAX;
/// The row of a wait in a thread's history that has no row (its stack was not taken).
const NO_ROW: i64 = -1;

pub type Windows = [i64; SUB_WINDOWS];

/// One event (offcpu.reading.sched_events.Events says what each field means for each kind).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub kind: u8,
    pub time: i64,
    pub cpu: i32,
    pub pid: i32,
    pub tid: i32,
    pub other: i32,
    pub name: Id,
    pub state: Id,
    pub chain: Id,
    /// Of a sched_switch, the waits the one it begins stands for (see Events.weights): 1
    /// when its stack was taken for certain, w > 1 with probability 1/w, 0 not taken.
    pub weight: u32,
}

/// Who woke a wait: its process, thread, name and call chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    pub pid: i32,
    pub tid: i32,
    pub name: Id,
    pub chain: Id,
}

/// The waker of a wait that ended with no wakeup recorded.
const UNRECORDED_WAKER: WakerKey = WakerKey {
    pid: -1,
    tid: -1,
    name: NO_NAME,
    chain: WAKER_NOT_RECORDED,
};

/// What a wait is counted under: its thread, call chain, state and waker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    pub tid: i32,
    pub chain: Id,
    pub state: Id,
    pub waker: Option<WakerKey>,
}

/// The waits of one thread in one state, ended by one waker (its thread, whatever its
/// stack), or by none: what a sampling backend's weighted rows are scaled to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StratumKey {
    pub tid: i32,
    pub state: Id,
    pub waker: Option<(i32, i32, Id)>,
}

impl StratumKey {
    fn of(row: &RowKey) -> Self {
        StratumKey {
            tid: row.tid,
            state: row.state,
            waker: row.waker.map(|waker| (waker.pid, waker.tid, waker.name)),
        }
    }
}

/// A thread off CPU and not yet back.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    since: i64,
    chain: Id,
    state: Id,
    woken: Option<i64>,
    waker: Option<WakerKey>,
    ran: Option<i64>, // when the thread came on CPU before it left (None: not in the slice)
    weight: u32,
    serial: u64, // which wait this is, for the slice's first waits (0: not one of them)
}

impl Wait {
    fn new(since: i64, chain: Id, state: Id) -> Self {
        Wait {
            since,
            chain,
            state,
            woken: None,
            waker: None,
            ran: None,
            weight: 1,
            serial: 0,
        }
    }

    fn woken(&mut self, time: i64, waker: WakerKey) {
        if self.woken.is_none() && self.state != PREEMPTED {
            self.woken = Some(time);
            self.waker = Some(waker);
        }
    }

    /// The earliest it can have come back: its wakeup, else its start (and not before its
    /// start when the wakeup raced its switch-out).
    fn earliest(&self) -> i64 {
        self.woken
            .filter(|&woken| woken != 0)
            .map_or(self.since, |woken| woken.max(self.since))
    }
}

/// The off-CPU time of some waits (model.WaitTimes, which is in µs: kept here in ns and
/// rounded once, as rounding each of many short waits is biased; 126k futex waits of 4 µs
/// came out 4.9 ms short). The variance is of the waits' µs.
#[derive(Clone, Copy, Debug, Default)]
pub struct WaitTimes {
    pub offcpu_ns: i64,
    pub blocked_ns: i64,
    pub count: i64,
    pub variance: i128,
}

impl WaitTimes {
    fn add(&mut self, other: &WaitTimes) {
        self.offcpu_ns += other.offcpu_ns;
        self.blocked_ns += other.blocked_ns;
        self.count += other.count;
        self.variance += other.variance;
    }
}

/// How long waits of one row overlapped waits of their waker's other row, and how often.
#[derive(Clone, Copy, Debug, Default)]
pub struct Overlap {
    pub ns: i128,
    pub count: i128,
}

#[derive(Clone, Copy, Debug)]
pub struct ThreadTotals {
    pub pid: Option<i32>, // None until an event of the thread's own says which process it is in
    pub comm: Id,
    pub oncpu_ns: i64,
    pub offcpu_ns: i64,
    pub blocked_ns: i64,
    pub observer_ns: i64,
    pub created_ns: Option<i64>,
    pub exited_ns: Option<i64>,
}

impl ThreadTotals {
    fn new(pid: Option<i32>, comm: Id) -> Self {
        ThreadTotals {
            pid,
            comm: if comm == NO_NAME { UNNAMED } else { comm },
            oncpu_ns: 0,
            offcpu_ns: 0,
            blocked_ns: 0,
            observer_ns: 0,
            created_ns: None,
            exited_ns: None,
        }
    }

    fn add(&mut self, other: &ThreadTotals) {
        self.pid = other.pid.or(self.pid);
        if other.comm != UNNAMED {
            self.comm = other.comm;
        }
        self.oncpu_ns += other.oncpu_ns;
        self.offcpu_ns += other.offcpu_ns;
        self.blocked_ns += other.blocked_ns;
        self.observer_ns += other.observer_ns;
        self.created_ns = other.created_ns.or(self.created_ns);
        self.exited_ns = other.exited_ns.or(self.exited_ns);
    }
}

/// The exact times of a stratum's waits of weight other than 1; and, of those without a
/// stack, what a stratum made of them alone needs: their sub-windows and their row's key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stratum {
    pub times: WaitTimes,
    pub unsampled_windows: Windows,
    pub unsampled_row: Option<RowKey>,
}

/// One of the longest waits: length, since, tid, woken, back, ran (ns), row; ordered by
/// length first.
pub type LongWait = (i64, i64, i32, Option<i64>, i64, Option<i64>, usize);

/// A map that keeps its keys in the order they were first put in (as Python's dicts do,
/// which the model's order of rows and threads followed).
#[derive(Clone, Debug)]
pub struct Ordered<K, V> {
    index: QuickMap<K, usize>,
    pub entries: Vec<(K, V)>,
}

impl<K, V> Default for Ordered<K, V> {
    fn default() -> Self {
        Ordered {
            index: QuickMap::default(),
            entries: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V> Ordered<K, V> {
    fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&at| &self.entries[at].1)
    }

    fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let at = *self.index.entry(key).or_insert_with(|| {
            self.entries.push((key, make()));
            self.entries.len() - 1
        });
        &mut self.entries[at].1
    }
}

/// A map whose entries can be taken out, iterated in the order their keys were put in
/// (a key taken out and put back goes last; one put in again keeps its place), as
/// Python's dicts do.
#[derive(Clone, Debug)]
struct Queue<V> {
    entries: QuickMap<i32, (u64, V)>,
    next: u64,
}

impl<V> Default for Queue<V> {
    fn default() -> Self {
        Queue {
            entries: QuickMap::default(),
            next: 0,
        }
    }
}

impl<V> Queue<V> {
    fn get(&self, tid: i32) -> Option<&V> {
        self.entries.get(&tid).map(|(_, value)| value)
    }

    fn get_mut(&mut self, tid: i32) -> Option<&mut V> {
        self.entries.get_mut(&tid).map(|(_, value)| value)
    }

    fn contains(&self, tid: i32) -> bool {
        self.entries.contains_key(&tid)
    }

    fn remove(&mut self, tid: i32) -> Option<V> {
        self.entries.remove(&tid).map(|(_, value)| value)
    }

    fn insert(&mut self, tid: i32, value: V) {
        match self.entries.get_mut(&tid) {
            Some(entry) => entry.1 = value,
            None => {
                self.entries.insert(tid, (self.next, value));
                self.next += 1;
            }
        }
    }

    fn into_ordered(self) -> Vec<(i32, V)> {
        let mut entries: Vec<(i32, (u64, V))> = self.entries.into_iter().collect();
        entries.sort_unstable_by_key(|(_, (order, _))| *order);
        entries
            .into_iter()
            .map(|(tid, (_, value))| (tid, value))
            .collect()
    }
}

/// ns in µs, rounded as Python rounds (to even).
pub fn micros(ns: i64) -> i64 {
    (ns as f64 / 1000.0).round_ties_even() as i64
}

/// Add a wait's time off CPU (since to until, within the `counted` part), `weight` times, to
/// the sub-windows of that part it falls in, split at their edges.
fn add_to_windows(counted: (i64, i64), windows: &mut Windows, since: i64, until: i64, weight: i64) {
    let start = counted.0;
    let span = i128::from(counted.1) - i128::from(start);
    let window_of = |ns: i64| sub_window(counted, i128::from(ns));
    let edge = |window: usize| -> i64 {
        (i128::from(start) + span * (window as i128 + 1) / SUB_WINDOWS as i128) as i64
    };
    let mut from = since;
    for (window, part) in windows.iter_mut().enumerate().skip(window_of(since)) {
        let upto = if window == SUB_WINDOWS - 1 {
            until
        } else {
            until.min(edge(window))
        };
        *part += (upto - from) * weight;
        from = upto;
        if from == until {
            return;
        }
    }
}

/// The sub-window of the `counted` part (first, last ns) that `ns` falls in.
fn sub_window(counted: (i64, i64), ns: i128) -> usize {
    let span = i128::from(counted.1) - i128::from(counted.0);
    if span > 0 {
        let window = (ns - i128::from(counted.0)) * SUB_WINDOWS as i128 / span;
        window.clamp(0, SUB_WINDOWS as i128 - 1) as usize
    } else {
        0
    }
}

/// Everything that adds up across slices, of the time between `counted_from` and
/// `counted_to`: a report of part of a recording reads the events from the start (what each
/// thread was doing when the part begins), and counts only that part. Rows are numbered in
/// the order they were first counted; links and each thread's history name rows by number.
#[derive(Clone, Debug)]
pub struct Tally {
    pub counted_from: i64,
    pub counted_to: i64,
    row_numbers: QuickMap<RowKey, usize>, // rows of waits of weight 1
    weighted_numbers: QuickMap<RowKey, usize>, // rows of waits of weight w > 1
    /// By row number: its key, whether it counts weighted waits, its times, and its
    /// off-CPU time in each of SUB_WINDOWS parts of what is counted (none when unbounded)
    pub rows: Vec<(RowKey, bool, WaitTimes, Option<Windows>)>,
    pub links: Ordered<(usize, usize), Overlap>, // waiter's row, waker's row
    pub threads: Ordered<i32, ThreadTotals>,
    pub runqueue_delays_us: QuickMap<i64, i64>,
    pub clipped: i64,
    pub unseen_wakeups: i64,
    /// Of a sampling backend's waits (weight other than 1): how many carry no stack, and
    /// how many more the rows count than carry one
    pub stackless_waits: i64,
    pub stand_in_waits: i64,
    pub strata: Ordered<StratumKey, Stratum>,
    pub estimated_switch_ins: i64,
    pub half_recorded_switches: i64,
    /// Each thread's last waits (since, back, row or NO_ROW, weight), to follow a wakeup to
    /// what the waker itself waited for; of one slice only
    history: QuickMap<i32, VecDeque<(i64, i64, i64, u32)>>,
    longest: BinaryHeap<Reverse<LongWait>>,
}

impl Tally {
    pub fn new(counted: Option<(i64, i64)>) -> Self {
        let (counted_from, counted_to) = counted.unwrap_or((0, UNBOUNDED));
        Tally {
            counted_from,
            counted_to,
            row_numbers: QuickMap::default(),
            weighted_numbers: QuickMap::default(),
            rows: Vec::new(),
            links: Ordered::default(),
            threads: Ordered::default(),
            runqueue_delays_us: QuickMap::default(),
            clipped: 0,
            unseen_wakeups: 0,
            stackless_waits: 0,
            stand_in_waits: 0,
            strata: Ordered::default(),
            estimated_switch_ins: 0,
            half_recorded_switches: 0,
            history: QuickMap::default(),
            longest: BinaryHeap::new(),
        }
    }

    fn bounded(&self) -> bool {
        self.counted_to != UNBOUNDED
    }

    /// The longest waits, longest first.
    pub fn longest(&self) -> Vec<LongWait> {
        let mut waits: Vec<LongWait> = self.longest.iter().map(|Reverse(wait)| *wait).collect();
        waits.sort_unstable_by(|a, b| b.cmp(a));
        waits
    }

    /// A thread's totals, made when first seen; its process and name updated where given.
    fn thread(&mut self, tid: i32, pid: Option<i32>, comm: Id) -> &mut ThreadTotals {
        let thread = self
            .threads
            .get_or_insert_with(tid, || ThreadTotals::new(pid, comm));
        if pid.is_some() {
            thread.pid = pid;
        }
        if comm != NO_NAME {
            thread.comm = comm;
        }
        thread
    }

    /// How much of from..to is counted.
    fn counted(&self, from: i64, to: i64) -> i64 {
        (to.min(self.counted_to) - from.max(self.counted_from)).max(0)
    }

    fn on_cpu(&mut self, tid: i32, from: i64, to: i64) {
        let counted = self.counted(from, to);
        self.thread(tid, None, NO_NAME).oncpu_ns += counted;
    }

    /// A run of the thread's counted on CPU from `counted_from` began at `from` instead:
    /// returns the time that adds (ns, below 0 when it began later).
    fn run_began(&mut self, tid: i32, counted_from: i64, from: i64) -> i64 {
        let gained = if from < counted_from {
            self.counted(from, counted_from)
        } else {
            -self.counted(counted_from, from)
        };
        self.thread(tid, None, NO_NAME).oncpu_ns += gained;
        gained
    }

    /// perf's handling of a switch to a thread: on CPU for the kernel, the observer's cost.
    fn observed(&mut self, tid: i32, from: i64, to: i64) {
        let counted = self.counted(from, to);
        self.thread(tid, None, NO_NAME).observer_ns += counted;
    }

    fn row_number(&mut self, key: RowKey, weighted: bool) -> usize {
        let numbers = if weighted {
            &mut self.weighted_numbers
        } else {
            &mut self.row_numbers
        };
        if let Some(&number) = numbers.get(&key) {
            return number;
        }
        let number = self.rows.len();
        numbers.insert(key, number);
        let windows = self.bounded().then_some([0; SUB_WINDOWS]);
        self.rows
            .push((key, weighted, WaitTimes::default(), windows));
        number
    }

    /// Count one off-CPU interval, from the wait's start to `back` (when the thread came
    /// back, or, not `back_seen`, the end of the recording), as far as it is counted.
    pub fn add_wait(&mut self, tid: i32, wait: &Wait, back: i64, back_seen: bool) {
        let (from, to) = (self.counted_from, self.counted_to);
        if back < from || wait.since > to {
            return; // all of it outside what is counted
        }
        let state = wait.state;
        let mut clipped = !back_seen || wait.chain == BEFORE_WINDOW;
        let (mut since, mut until) = (wait.since, back);
        if since < from {
            (since, clipped) = (from, true);
        }
        if until > to {
            (until, clipped) = (to, true);
        }
        let offcpu = until - since;
        let mut waker = wait.waker;
        let blocked = if state == PREEMPTED {
            0
        } else if let Some(woken) = wait.woken {
            (woken - since).clamp(0, offcpu.max(0))
        } else {
            self.unseen_wakeups += i64::from(!clipped && state != UNKNOWN_STATE);
            if back_seen {
                waker = Some(UNRECORDED_WAKER);
            }
            offcpu
        };
        let thread = self.thread(tid, None, NO_NAME);
        thread.offcpu_ns += offcpu;
        thread.blocked_ns += blocked;
        if let Some(woken) = wait.woken {
            if back_seen && from <= woken && back <= to {
                let wakeup_to_running = micros(offcpu - blocked);
                *self
                    .runqueue_delays_us
                    .entry(wakeup_to_running)
                    .or_insert(0) += 1;
            }
        }
        self.clipped += i64::from(clipped);
        let key = RowKey {
            tid,
            chain: wait.chain,
            state,
            waker,
        };
        let weight = wait.weight;
        let counted = Counted {
            since,
            until,
            offcpu,
            blocked,
        };
        if weight == 0 {
            // in its stratum only: no row, no link of its own, no place in the timeline
            self.stackless_waits += 1;
            self.count_in_stratum(&key, &counted, true);
            self.remember(tid, since, until, NO_ROW, 0);
            return;
        }
        let number = if weight != 1 {
            self.count_in_stratum(&key, &counted, false);
            self.add_sampled(key, &counted, weight)
        } else {
            let number = self.row_number(key, false);
            let counted_part = (from, to);
            let row = &mut self.rows[number];
            if let Some(windows) = row.3.as_mut() {
                add_to_windows(counted_part, windows, since, until, 1);
            }
            row.2.offcpu_ns += offcpu;
            row.2.blocked_ns += blocked;
            row.2.count += 1;
            number
        };
        if let (Some(woken), Some(waker)) = (wait.woken, waker) {
            let waker_ran_all_along = self
                .history
                .get(&waker.tid)
                .and_then(|history| history.back())
                .is_none_or(|last| last.1 <= since);
            if !waker_ran_all_along {
                self.link(number, since, woken.min(until), waker.tid, weight);
            }
        }
        self.remember(tid, since, until, number as i64, weight);
        let length = until - since;
        let full = self.longest.len() >= TIMELINE_WAITS;
        if !full
            || self
                .longest
                .peek()
                .is_some_and(|Reverse(least)| length > least.0)
        {
            self.longest.push(Reverse((
                length, since, tid, wait.woken, until, wait.ran, number,
            )));
            if full {
                self.longest.pop();
            }
        }
    }

    /// Count a wait of weight other than 1 once in its stratum; one without a stack
    /// (`unsampled`) also in what a stratum with none of them needs (see Stratum).
    fn count_in_stratum(&mut self, key: &RowKey, counted: &Counted, unsampled: bool) {
        let (bounded, counted_part) = (self.bounded(), (self.counted_from, self.counted_to));
        let stratum = self
            .strata
            .get_or_insert_with(StratumKey::of(key), Stratum::default);
        stratum.times.offcpu_ns += counted.offcpu;
        stratum.times.blocked_ns += counted.blocked;
        stratum.times.count += 1;
        if unsampled {
            if bounded && counted.offcpu != 0 {
                add_to_windows(
                    counted_part,
                    &mut stratum.unsampled_windows,
                    counted.since,
                    counted.until,
                    1,
                );
            }
            stratum.unsampled_row = stratum.unsampled_row.or(Some(*key));
        }
    }

    /// Count a wait whose stack was taken with probability 1/`weight` `weight` times in its
    /// row (Horvitz-Thompson), with its share of the row's variance; returns the row.
    fn add_sampled(&mut self, key: RowKey, counted: &Counted, weight: u32) -> usize {
        let number = self.row_number(key, true);
        let times_weight = i64::from(weight);
        let counted_part = (self.counted_from, self.counted_to);
        let row = &mut self.rows[number];
        if let Some(windows) = row.3.as_mut().filter(|_| counted.offcpu != 0) {
            add_to_windows(
                counted_part,
                windows,
                counted.since,
                counted.until,
                times_weight,
            );
        }
        row.2.offcpu_ns += counted.offcpu * times_weight;
        row.2.blocked_ns += counted.blocked * times_weight;
        row.2.count += times_weight;
        let offcpu = i128::from(micros(counted.offcpu));
        row.2.variance += i128::from(weight) * (i128::from(weight) - 1) * offcpu * offcpu;
        self.stand_in_waits += times_weight - 1;
        number
    }

    fn remember(&mut self, tid: i32, since: i64, until: i64, number: i64, weight: u32) {
        let history = self.history.entry(tid).or_default();
        if history.len() == HISTORY {
            history.pop_front();
        }
        history.push_back((since, until, number, weight));
    }

    /// While this wait was blocked (since to woken), when was its waker itself off CPU
    /// (its last waits), and in which of its rows? Counted `weight` times, as the wait is
    /// in its row, times the weight of the waker's wait (a waker's wait with no stack has
    /// no row: the sampled ones stand for it).
    fn link(&mut self, row: usize, since: i64, woken: i64, waker_tid: i32, weight: u32) {
        let Some(history) = self.history.get(&waker_tid) else {
            return;
        };
        for &(waker_since, waker_back, waker_row, waker_weight) in history.iter().rev() {
            if waker_back <= since {
                break;
            }
            if waker_weight == 0 {
                continue;
            }
            let overlap = waker_back.min(woken) - waker_since.max(since);
            if overlap > 0 {
                let link = self
                    .links
                    .get_or_insert_with((row, waker_row as usize), Overlap::default);
                let pairs = i128::from(weight) * i128::from(waker_weight);
                link.ns += i128::from(overlap) * pairs;
                link.count += pairs;
            }
        }
    }

    /// Where each of another tally's sub-windows goes among this one's: the same one when both
    /// count the same time; else (a live window's slice, counted on its own) the one its middle
    /// falls in.
    fn windows_of(&self, other: &Tally) -> [usize; SUB_WINDOWS] {
        let mut parts: [usize; SUB_WINDOWS] = std::array::from_fn(|part| part);
        let counted = (self.counted_from, self.counted_to);
        if other.bounded() && (other.counted_from, other.counted_to) != counted {
            let (from, span) = (
                i128::from(other.counted_from),
                i128::from(other.counted_to) - i128::from(other.counted_from),
            );
            for (part, to) in parts.iter_mut().enumerate() {
                let middle = from + span * (2 * part as i128 + 1) / (2 * SUB_WINDOWS as i128);
                *to = sub_window(counted, middle);
            }
        }
        parts
    }

    /// Add another tally (of a later slice) to this one.
    fn add(&mut self, other: Tally) {
        let parts = self.windows_of(&other);
        let numbers: Vec<usize> = other
            .rows
            .iter()
            .map(|(key, weighted, _, _)| self.row_number(*key, *weighted))
            .collect();
        for (&number, (_, _, times, windows)) in numbers.iter().zip(&other.rows) {
            let row = &mut self.rows[number];
            row.2.add(times);
            if let (Some(mine), Some(theirs)) = (row.3.as_mut(), windows) {
                for (part, theirs) in theirs.iter().enumerate() {
                    mine[parts[part]] += theirs;
                }
            }
        }
        for ((waiter, waker), overlap) in &other.links.entries {
            let link = self
                .links
                .get_or_insert_with((numbers[*waiter], numbers[*waker]), Overlap::default);
            link.ns += overlap.ns;
            link.count += overlap.count;
        }
        for (tid, thread) in &other.threads.entries {
            self.threads
                .get_or_insert_with(*tid, || ThreadTotals::new(None, NO_NAME))
                .add(thread);
        }
        for Reverse(wait) in other.longest {
            let wait = (
                wait.0,
                wait.1,
                wait.2,
                wait.3,
                wait.4,
                wait.5,
                numbers[wait.6],
            );
            self.longest.push(Reverse(wait));
            if self.longest.len() > TIMELINE_WAITS {
                self.longest.pop();
            }
        }
        for (delay, count) in other.runqueue_delays_us {
            *self.runqueue_delays_us.entry(delay).or_insert(0) += count;
        }
        self.clipped += other.clipped;
        self.unseen_wakeups += other.unseen_wakeups;
        self.stackless_waits += other.stackless_waits;
        self.stand_in_waits += other.stand_in_waits;
        for (key, stratum) in &other.strata.entries {
            let mine = self.strata.get_or_insert_with(*key, Stratum::default);
            mine.times.add(&stratum.times);
            for (part, theirs) in stratum.unsampled_windows.iter().enumerate() {
                mine.unsampled_windows[parts[part]] += theirs;
            }
            mine.unsampled_row = mine.unsampled_row.or(stratum.unsampled_row);
        }
        self.estimated_switch_ins += other.estimated_switch_ins;
        self.half_recorded_switches += other.half_recorded_switches;
    }
}

/// A wait as far as it is counted: its times clipped to what is counted, in ns.
struct Counted {
    since: i64,
    until: i64,
    offcpu: i64,
    blocked: i64,
}

/// A thread whose first event in a slice is its return to CPU: it was off when the slice began.
#[derive(Clone, Copy, Debug)]
struct Head {
    back: i64,
    woken: Option<(i64, WakerKey)>,
    record: i64, // perf's record of it being in: the switch to it may be at the end of an earlier slice
    estimated: bool, // back is the record less the capture's switch cost
}

/// A thread whose first event in a slice is leaving a CPU (a switch-out or its exit), at
/// `time` on `cpu`. If it was off CPU when the slice began, its return left no record: it came
/// back at `switched_in`, the switch to it the slice recorded, if any; else after its wakeup
/// `woken` and `last_switch`, the last switch or exit the slice recorded on that CPU before it.
#[derive(Clone, Copy, Debug)]
struct FirstLeave {
    time: i64,
    cpu: i32,
    switched_in: Option<i64>,
    last_switch: Option<i64>,
    woken: Option<(i64, WakerKey)>,
}

/// What a slice found, for the merge (a live window merges each slice again as it slides).
#[derive(Clone, Debug)]
pub struct SliceResult {
    start: i64,
    end: i64,
    totals: Tally,
    heads: Ordered<i32, Head>,
    tails: Vec<(i32, Wait)>, // still off CPU at the end of the slice
    running_at_end: QuickSet<i32>,
    seen: QuickSet<i32>,
    early_wakeups: QuickMap<i32, (i64, WakerKey)>, // threads woken with no other event of theirs
    /// A thread's first wait of the slice, with no waker and nothing of the thread before
    /// it: a wakeup racing its switch-out may be at the end of an earlier slice.
    deferred: Vec<(i32, Wait, i64)>,
    first_tails: QuickSet<i32>, // tails that are such a first wait
    racing_at_end: QuickMap<i32, (i64, WakerKey)>,
    active: QuickSet<i32>, // threads that woke others before any switch of theirs in the slice
    incoming_at_end: QuickMap<i32, i64>, // switches to threads whose record of being in is later
    first_leaves: QuickMap<i32, FirstLeave>, // counted on CPU from the slice's start
    cpu_switched_at_end: QuickMap<i32, i64>,
    unreadable_events: u64,
}

/// The per-slice state machine: which threads are on CPU, which wait, since when.
pub struct SliceBuilder {
    start: i64,
    end: i64,
    totals: Tally,
    switch_cost: i64,
    running: QuickMap<i32, i64>,
    waiting: Queue<Wait>,
    seen: QuickSet<i32>,
    heads: Ordered<i32, Head>,
    head_wakeups: QuickMap<i32, (i64, WakerKey)>,
    /// Wakeups of threads still on CPU, on their way to sleep: the waker saw them
    /// sleeping, waits for the switch-out to finish, then makes them runnable.
    racing_wakeups: QuickMap<i32, (i64, WakerKey)>,
    active: QuickSet<i32>,
    first_waits: QuickMap<i32, u64>, // by the wait's serial
    deferred: Vec<(i32, Wait, i64)>,
    incoming: QuickMap<i32, i64>, // tid -> the sched_switch that names it next, until it is in
    cpu_switched: QuickMap<i32, i64>, // cpu -> the last switch (or exit) recorded there
    first_leaves: QuickMap<i32, FirstLeave>,
    /// CPUs whose last recorded thread exited (perf records nothing of it after its exit
    /// record): the next thread in pays no cost of perf's there -> since when
    after_exit: QuickMap<i32, i64>,
    serial: u64,
}

impl SliceBuilder {
    /// `switch_cost`: the capture's measured time from a switch to perf's record of the
    /// thread coming in, for switches from threads that were not recorded.
    pub fn new(start: i64, end: i64, counted: Option<(i64, i64)>, switch_cost: i64) -> Self {
        SliceBuilder {
            start,
            end,
            totals: Tally::new(counted),
            switch_cost,
            running: QuickMap::default(),
            waiting: Queue::default(),
            seen: QuickSet::default(),
            heads: Ordered::default(),
            head_wakeups: QuickMap::default(),
            racing_wakeups: QuickMap::default(),
            active: QuickSet::default(),
            first_waits: QuickMap::default(),
            deferred: Vec::new(),
            incoming: QuickMap::default(),
            cpu_switched: QuickMap::default(),
            first_leaves: QuickMap::default(),
            after_exit: QuickMap::default(),
            serial: 0,
        }
    }

    /// The next events of this slice, in time order (a reader may hand over records from
    /// around the slice: those are left out).
    pub fn take(&mut self, events: &[Event]) {
        for event in events {
            self.take_one(event);
        }
    }

    pub fn take_one(&mut self, event: &Event) {
        let &Event {
            kind,
            time,
            cpu,
            pid,
            tid,
            other,
            name,
            state,
            chain,
            weight,
        } = event;
        if time < self.start || time > self.end {
            return;
        }
        match kind {
            SWITCH_OUT if self.running.contains_key(&tid) => {
                self.lost_switch_out(time, cpu, pid, tid, other != 0);
            }
            SWITCH_IN if tid != 0 => {
                match self.incoming.remove(&tid) {
                    Some(switched) if switched <= time => {
                        self.back(tid, switched, pid, name, time, false) // at the sched_switch naming it
                    }
                    _ => self.unnamed_switch_in(time, cpu, pid, tid, name),
                }
                self.cpu_switched.insert(cpu, time);
            }
            SCHED_SWITCH => {
                if !self.after_exit.is_empty() {
                    self.after_exit.remove(&cpu);
                }
                if tid != 0 {
                    // tid 0 is the idle task, not a thread
                    self.leave(tid, time, cpu, chain, state, pid, name, weight);
                }
                if other != 0 {
                    self.incoming.insert(other, time);
                }
                self.cpu_switched.insert(cpu, time);
            }
            SCHED_WAKING => self.waking(name, pid, tid, other, chain, time),
            THREAD_FORK => {
                let parent = self.totals.threads.get(&other).map_or(NO_NAME, |t| t.comm);
                self.created(tid, time, pid, parent); // it has its creator's name
            }
            THREAD_EXIT => {
                // a return that left no record was before the exit, not after (an exit of no
                // CPU, as BPF's, after the last switch anywhere: as a later slice places it)
                let known = self.totals.thread(tid, Some(pid), NO_NAME).comm;
                let switched_in = self.close_unseen_return(tid, time, cpu, pid, known);
                self.exited(tid, time, cpu, pid, switched_in);
                if cpu != UNKNOWN_CPU {
                    self.after_exit.insert(cpu, time);
                    // the exiting thread ran there until now: whoever comes in next came after
                    self.cpu_switched.insert(cpu, time);
                }
            }
            _ => {} // THREAD_COMM: names come with every switch and wakeup
        }
    }

    /// Switch-outs come from sched_switch, with their stacks and states, just before perf's
    /// record of the switch; a thread still on CPU at the record lost its sched_switch (perf
    /// lost events): it left now, with no stack, runnable if preempted, else in a state perf
    /// did not record.
    fn lost_switch_out(&mut self, time: i64, cpu: i32, pid: i32, tid: i32, preempted: bool) {
        self.totals.half_recorded_switches += 1;
        let state = if preempted { PREEMPTED } else { UNKNOWN_STATE };
        self.leave(tid, time, cpu, STACK_LOST, state, pid, NO_NAME, 1);
    }

    /// A switch-in that no recorded sched_switch names (a task-bound sched_switch fires only
    /// for the thread leaving; or the thread that left was not recorded: the idle task,
    /// another process): at perf's record, less the capture's switch cost unless that thread
    /// had exited (its last switch costs perf nothing).
    fn unnamed_switch_in(&mut self, record: i64, cpu: i32, pid: i32, tid: i32, comm: Id) {
        if self.after_exit.remove(&cpu).is_some() || self.switch_cost == 0 {
            self.back(tid, record, pid, comm, record, false);
            return;
        }
        self.totals.estimated_switch_ins += 1;
        let earliest = match self.waiting.get(tid) {
            Some(wait) => wait.earliest(),
            // off CPU since before the slice: the merge keeps it after that wait's start
            None => self.head_wakeups.get(&tid).map_or(0, |woken| woken.0),
        };
        let back = (record - self.switch_cost).max(earliest);
        self.back(tid, back, pid, comm, record, true);
    }

    /// A thread leaves a CPU while its last wait is open: perf recorded neither the switch
    /// that brought it back nor its record of being in (seen after a thread exits). It came
    /// in after its wakeup, if one was seen, and after the last switch (or exit) recorded on
    /// this CPU.
    fn unseen_switch_in(&mut self, tid: i32, leave: i64, cpu: i32, pid: i32, comm: Id) {
        let Some(wait) = self.waiting.get(tid) else {
            return;
        };
        let switched = self.cpu_switched.get(&cpu).copied().unwrap_or(wait.since);
        let back = wait.earliest().max(switched).min(leave);
        self.totals.estimated_switch_ins += 1;
        self.back(tid, back, pid, comm, back, true);
    }

    /// A thread leaves a CPU (switched out, or exiting) at `time`: a wait of its still open
    /// was ended by a return that left no record, at the switch to it if one was recorded
    /// (perf lost its record of being in), else placed (unseen_switch_in). Returns that
    /// recorded switch to it, if any.
    fn close_unseen_return(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        pid: i32,
        comm: Id,
    ) -> Option<i64> {
        let switched_in = self.incoming.remove(&tid);
        if let Some(switched) = switched_in {
            if self
                .waiting
                .get(tid)
                .is_some_and(|wait| switched >= wait.since)
            {
                self.totals.half_recorded_switches += 1;
                self.back(tid, switched, pid, comm, switched, false);
            }
        } else if self.waiting.contains(tid) && !self.running.contains_key(&tid) {
            self.unseen_switch_in(tid, time, cpu, pid, comm);
        }
        switched_in
    }

    #[allow(clippy::too_many_arguments)]
    fn leave(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        chain: Id,
        state: Id,
        pid: i32,
        comm: Id,
        weight: u32,
    ) {
        let known = self.totals.thread(tid, Some(pid), comm).comm;
        let comm_or_known = if comm == NO_NAME { known } else { comm };
        let switched_in = self.close_unseen_return(tid, time, cpu, pid, comm_or_known);
        let first = !self.seen.contains(&tid);
        let ran = self.running.remove(&tid);
        let mut racing = if self.racing_wakeups.is_empty() {
            None
        } else {
            self.racing_wakeups.remove(&tid)
        };
        if first && ran.is_none() {
            // Woken before: on CPU then, most likely, so the wakeup raced this switch-out. If the
            // thread was off CPU when the slice began (a return that left no record), it ended
            // that wait too, which the merge knows (FirstLeave); this wait keeps it all the same
            // (its blocked time counts as waiting for a CPU), so that it is settled here, with
            // its links.
            let woken = self.head_wakeups.remove(&tid);
            racing = racing.or(woken);
            let active = self.active.contains(&tid); // it ran, waking others: on CPU when woken
            self.left_first(tid, time, cpu, switched_in, woken.filter(|_| !active));
        }
        let since = ran.or(first.then_some(self.start)); // on CPU since the slice began
        if let Some(since) = since {
            self.totals.on_cpu(tid, since, time);
        }
        if first {
            self.seen.insert(tid);
        }
        if DEAD_STATES.contains(&state) {
            return; // its last switch: the thread is gone, not waiting
        }
        self.serial += 1;
        let mut wait = Wait {
            ran,
            weight,
            serial: self.serial,
            ..Wait::new(time, chain, state)
        };
        if let Some((woken, waker)) = racing {
            wait.woken(woken, waker); // woken before it was off: all of the gap is run-queue delay
        } else if first && !self.active.contains(&tid) {
            self.first_waits.insert(tid, wait.serial);
        }
        self.waiting.insert(tid, wait);
    }

    fn back(&mut self, tid: i32, time: i64, pid: i32, comm: Id, record: i64, estimated: bool) {
        if self.running.contains_key(&tid) {
            return; // already on CPU: a duplicate switch record
        }
        if !self.racing_wakeups.is_empty() {
            self.racing_wakeups.remove(&tid);
        }
        // perf writes a thread's exit record before it lets go of its memory, which may wait: a
        // CPU-wide recording sees it come back after its exit, and its last switch names no thread
        // (its tid is gone by then). Back from no wait recorded (its switch-out came before perf's
        // sched_switch was on there, as the recording began), it would stay on CPU to the end of
        // the slice: its time on CPU ends at the exit record (see exited)
        let exited = self.totals.thread(tid, Some(pid), comm).exited_ns.is_some();
        self.totals.observed(tid, time, record);
        let gone = exited && !self.waiting.contains(tid);
        if let Some(wait) = self.waiting.remove(tid) {
            let first =
                !self.first_waits.is_empty() && self.first_waits.remove(&tid) == Some(wait.serial);
            if first && wait.waker.is_none() {
                self.deferred.push((tid, wait, time));
            } else {
                self.totals.add_wait(tid, &wait, time, true);
            }
        } else if !self.seen.contains(&tid) {
            let woken = self.head_wakeups.remove(&tid);
            self.heads.get_or_insert_with(tid, || Head {
                back: time,
                woken,
                record,
                estimated,
            });
        }
        self.seen.insert(tid);
        if !gone {
            self.running.insert(tid, time);
        }
    }

    fn waking(&mut self, comm: Id, pid: i32, tid: i32, woken: i32, chain: Id, time: i64) {
        if !self.racing_wakeups.is_empty() {
            self.racing_wakeups.remove(&tid); // the waker ran on: it was not on its way to sleep
        }
        if !self.seen.contains(&tid) {
            self.head_wakeups.remove(&tid);
            self.active.insert(tid);
        }
        let waker = WakerKey {
            pid,
            tid,
            name: comm,
            chain,
        };
        if let Some(wait) = self.waiting.get_mut(woken) {
            wait.woken(time, waker);
        } else if self.running.contains_key(&woken) {
            self.racing_wakeups.entry(woken).or_insert((time, waker));
        } else if !self.seen.contains(&woken) {
            self.head_wakeups.entry(woken).or_insert((time, waker));
        }
    }

    fn created(&mut self, tid: i32, time: i64, pid: i32, comm: Id) {
        // a reused tid: nothing of the old thread carries over
        self.running.remove(&tid);
        self.waiting.remove(tid);
        self.first_waits.remove(&tid);
        self.racing_wakeups.remove(&tid);
        self.head_wakeups.remove(&tid);
        let thread = self.totals.thread(tid, Some(pid), comm);
        thread.created_ns = Some(time);
        thread.exited_ns = None;
        self.seen.insert(tid);
        // Runnable from birth: the wait for its first run is run-queue delay.
        self.waiting
            .insert(tid, Wait::new(time, NEW_THREAD, PREEMPTED));
    }

    /// perf writes its exit record on CPU, in the exiting thread. Its last switch-out is not
    /// recorded for a task-bound recording, so its time on CPU ends here.
    /// `switched_in`: the switch to it recorded before, if any (see FirstLeave).
    fn exited(&mut self, tid: i32, time: i64, cpu: i32, pid: i32, switched_in: Option<i64>) {
        self.totals.thread(tid, Some(pid), NO_NAME).exited_ns = Some(time);
        if let Some(since) = self.running.remove(&tid) {
            self.totals.on_cpu(tid, since, time);
        } else if !self.seen.contains(&tid) {
            let woken = self.head_wakeups.remove(&tid);
            self.left_first(tid, time, cpu, switched_in, woken);
            self.totals.on_cpu(tid, self.start, time);
        }
        self.seen.insert(tid);
    }

    /// A thread's first event in the slice is leaving `cpu`: counted on CPU from the slice's
    /// start, which the merge corrects if the thread was off CPU then (FirstLeave).
    fn left_first(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        switched_in: Option<i64>,
        woken: Option<(i64, WakerKey)>,
    ) {
        let last_switch = self.cpu_switched.get(&cpu).copied();
        self.first_leaves.insert(
            tid,
            FirstLeave {
                time,
                cpu,
                switched_in,
                last_switch,
                woken,
            },
        );
    }

    /// What the slice found; `skipped`: what its reader could not decode.
    pub fn finish(mut self, skipped: u64) -> SliceResult {
        let mut running: Vec<(i32, i64)> = self.running.iter().map(|(&t, &s)| (t, s)).collect();
        running.sort_unstable();
        for (tid, since) in running {
            self.totals.on_cpu(tid, since, self.end);
        }
        self.totals.history.clear(); // of this slice only: it does not travel
        let seen = &self.seen;
        let early_wakeups = self
            .head_wakeups
            .into_iter()
            .filter(|(tid, _)| !seen.contains(tid))
            .collect();
        let waiting = &self.waiting;
        let first_tails = self
            .first_waits
            .iter()
            .filter(|(&tid, &serial)| waiting.get(tid).is_some_and(|wait| wait.serial == serial))
            .map(|(&tid, _)| tid)
            .collect();
        SliceResult {
            start: self.start,
            end: self.end,
            totals: self.totals,
            heads: self.heads,
            tails: self.waiting.into_ordered(),
            running_at_end: self.running.keys().copied().collect(),
            seen: self.seen,
            early_wakeups,
            deferred: self.deferred,
            first_tails,
            racing_at_end: self.racing_wakeups,
            active: self.active,
            incoming_at_end: self.incoming,
            first_leaves: self.first_leaves,
            cpu_switched_at_end: self.cpu_switched,
            unreadable_events: skipped,
        }
    }
}

/// The target's threads when recording began: tid -> (name, state), in their order.
pub type AtStart = Ordered<i32, (Id, Id)>;

pub fn at_start(threads: Vec<(i32, Id, Id)>) -> AtStart {
    let mut at_start = AtStart::default();
    for (tid, name, state) in threads {
        at_start.get_or_insert_with(tid, || (name, state));
    }
    at_start
}

/// Join the slices (of the recording's window, in time order); returns the tally of the
/// `counted` part of it (default: all) and the count of unreadable events.
pub fn merge(
    slices: Vec<SliceResult>,
    window: (i64, i64),
    at_start: &AtStart,
    counted: Option<(i64, i64)>,
) -> (Tally, u64) {
    let (window_start, window_end) = window;
    let mut totals = Tally::new(counted);
    let mut pending: Queue<Wait> = Queue::default();
    let mut running: QuickSet<i32> = QuickSet::default();
    let mut seen: QuickSet<i32> = QuickSet::default();
    let mut racing: QuickMap<i32, (i64, WakerKey)> = QuickMap::default(); // wakeups of threads on their way to sleep
    let mut incoming: QuickMap<i32, i64> = QuickMap::default(); // switches to threads not yet recorded as in
    let mut cpu_switched: QuickMap<i32, i64> = QuickMap::default(); // the last switch recorded on each CPU
    let mut carried_wakeups: QuickMap<i32, (i64, WakerKey)> = QuickMap::default(); // of threads with no other event yet
    let mut skipped = 0;
    for mut piece in slices {
        skipped += piece.unreadable_events;
        // one that woke others in this slice ran after its wakeup: that wakeup ended no wait
        carried_wakeups.retain(|tid, _| !piece.active.contains(tid));
        switched_before(
            &mut piece,
            &incoming,
            &pending,
            &carried_wakeups,
            &mut totals,
        );
        for (tid, (woken, waker)) in &piece.early_wakeups {
            if let Some(wait) = pending.get_mut(*tid) {
                wait.woken(*woken, *waker);
            }
        }
        for (tid, head) in &piece.heads.entries {
            let tid = *tid;
            let wait = pending.remove(tid);
            let unrecorded = seen.contains(&tid)
                || running.contains(&tid)
                || (!at_start.is_empty() && !at_start.contains(&tid));
            if wait.is_none() && unrecorded {
                continue; // its switch-out (or birth) was not recorded: do not invent a wait
            }
            let mut wait = wait.unwrap_or_else(|| {
                let state = at_start.get(&tid).map_or(UNKNOWN_STATE, |start| start.1);
                Wait::new(window_start, BEFORE_WINDOW, state)
            });
            if let Some((woken, waker)) = carried_wakeups.get(&tid).copied().or(head.woken) {
                wait.woken(woken, waker);
            }
            totals.add_wait(tid, &wait, head.back, true);
        }
        // A first wait with no waker: a wakeup that raced its switch-out may be in an earlier
        // slice, of a thread on CPU there or of one with no other event there (carried)
        let racing_of = |tid: i32| {
            let carried = carried_wakeups.get(&tid).copied();
            racing.get(&tid).copied().or(carried)
        };
        for (tid, mut wait, back) in std::mem::take(&mut piece.deferred) {
            if let Some((woken, waker)) = racing_of(tid) {
                wait.woken(woken, waker);
            }
            totals.add_wait(tid, &wait, back, true);
        }
        for (tid, wait) in piece.tails.iter_mut() {
            if piece.first_tails.contains(tid) {
                if let Some((woken, waker)) = racing_of(*tid) {
                    wait.woken(woken, waker);
                }
            }
        }
        let mut through: Vec<i32> = running.difference(&piece.seen).copied().collect();
        through.sort_unstable();
        for tid in through {
            totals.on_cpu(tid, piece.start, piece.end); // on CPU through the whole slice
        }
        totals.add(std::mem::replace(&mut piece.totals, Tally::new(None)));
        let mut returns_lost: Vec<i32> = piece
            .seen
            .iter()
            .filter(|tid| !piece.heads.contains(tid))
            .copied()
            .collect();
        returns_lost.sort_unstable();
        for tid in returns_lost {
            let wait = pending.remove(tid);
            let Some(leave) = piece.first_leaves.get(&tid) else {
                continue;
            };
            match wait {
                Some(mut wait) => {
                    if let Some((woken, waker)) = leave.woken {
                        wait.woken(woken, waker); // off CPU when woken: it ended this wait
                    }
                    let switched = incoming
                        .get(&tid)
                        .copied()
                        .filter(|&switched| switched >= wait.since);
                    let last_switch = leave.last_switch.or(cpu_switched.get(&leave.cpu).copied());
                    returned_unseen(
                        &mut totals,
                        tid,
                        &wait,
                        leave,
                        switched,
                        last_switch,
                        piece.start,
                    );
                }
                // nothing of it before: on CPU from the window's start, as in one slice
                None if !seen.contains(&tid) && !running.contains(&tid) => {
                    totals.on_cpu(tid, window_start, piece.start);
                }
                None => {}
            }
        }
        for (tid, wait) in std::mem::take(&mut piece.tails) {
            pending.insert(tid, wait);
        }
        running.retain(|tid| !piece.seen.contains(tid));
        running.extend(piece.running_at_end.iter().copied());
        seen.extend(piece.seen.iter().copied());
        racing.retain(|tid, _| !piece.seen.contains(tid) && !piece.active.contains(tid));
        racing.extend(piece.racing_at_end.iter().map(|(&t, &w)| (t, w)));
        incoming.retain(|tid, _| !piece.seen.contains(tid));
        incoming.extend(piece.incoming_at_end.iter().map(|(&t, &s)| (t, s)));
        cpu_switched.extend(piece.cpu_switched_at_end.iter().map(|(&c, &s)| (c, s)));
        carried_wakeups.retain(|tid, _| !piece.seen.contains(tid));
        for (&tid, &wakeup) in &piece.early_wakeups {
            if !seen.contains(&tid) && !running.contains(&tid) && !pending.contains(tid) {
                carried_wakeups.entry(tid).or_insert(wakeup);
            }
        }
    }
    for (tid, wait) in pending.into_ordered() {
        totals.add_wait(tid, &wait, window_end, false);
    }
    add_quiet_threads(&mut totals, at_start, &seen, window);
    (totals, skipped)
}

/// A thread off CPU when a slice began whose first event in it is leaving a CPU: its return
/// left no record. It came back at the switch to it, if one was recorded (in this slice or, as
/// `switched_before`, an earlier one); else after its wakeup and the last switch recorded on
/// that CPU, as within a slice (SliceBuilder::unseen_switch_in). The slice counted it on CPU
/// from its start: from its return instead.
fn returned_unseen(
    totals: &mut Tally,
    tid: i32,
    wait: &Wait,
    leave: &FirstLeave,
    switched_before: Option<i64>,
    last_switch: Option<i64>,
    slice_start: i64,
) {
    let back = match leave.switched_in.or(switched_before) {
        Some(switched) => {
            totals.half_recorded_switches += 1;
            switched
        }
        None => {
            totals.estimated_switch_ins += 1;
            let after = last_switch.unwrap_or(wait.since);
            wait.earliest().max(after).min(leave.time)
        }
    };
    totals.add_wait(tid, wait, back, true);
    totals.run_began(tid, slice_start, back);
}

/// Threads whose first event in the slice is perf's record of being in: they came back at
/// the switch to them in an earlier slice, when there was one; else no earlier than their
/// wait in an earlier slice began, or their wakeup (also one carried from an earlier slice),
/// when their return was placed by the switch cost.
fn switched_before(
    piece: &mut SliceResult,
    incoming: &QuickMap<i32, i64>,
    pending: &Queue<Wait>,
    carried_wakeups: &QuickMap<i32, (i64, WakerKey)>,
    totals: &mut Tally,
) {
    for (tid, head) in piece.heads.entries.iter_mut() {
        let tid = *tid;
        totals.thread(tid, None, NO_NAME);
        if let Some(&switched) = incoming.get(&tid) {
            if switched < head.back && head.back <= head.record {
                let gained = totals.run_began(tid, head.back, switched);
                totals.thread(tid, None, NO_NAME).observer_ns += gained; // perf's, from the switch
                totals.estimated_switch_ins -= i64::from(head.estimated);
                head.back = switched;
                continue;
            }
        }
        let earliest = match pending.get(tid) {
            Some(wait) => Some(wait.earliest()),
            None => carried_wakeups.get(&tid).map(|(woken, _)| *woken),
        };
        if let Some(earliest) = earliest.filter(|&earliest| head.estimated && head.back < earliest)
        {
            let gained = totals.run_began(tid, head.back, earliest);
            totals.thread(tid, None, NO_NAME).observer_ns += gained;
            head.back = earliest;
        }
    }
}

/// Threads of the target with no event at all: they neither left nor came back to a CPU, so
/// they spent the whole window as they began it, off CPU unless runnable.
fn add_quiet_threads(
    totals: &mut Tally,
    at_start: &AtStart,
    seen: &QuickSet<i32>,
    window: (i64, i64),
) {
    for (tid, (name, state)) in &at_start.entries {
        if seen.contains(tid) {
            continue;
        }
        totals.thread(*tid, None, *name);
        if *state == PREEMPTED {
            totals.on_cpu(*tid, window.0, window.1);
        } else {
            totals.add_wait(
                *tid,
                &Wait::new(window.0, BEFORE_WINDOW, *state),
                window.1,
                false,
            );
        }
    }
}
