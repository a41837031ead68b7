//! `Tally`: everything that adds up across slices.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::events::*;
use super::micros::micros;
use super::ordered::Ordered;
use super::totals::*;
use crate::quick::QuickMap;

/// Add a wait's time off CPU (since to until, within the `counted` part), `weight` times, to
/// the sub-windows of that part it falls in, split at their edges.
pub(super) fn add_to_windows(
    counted: (i64, i64),
    windows: &mut Windows,
    since: i64,
    until: i64,
    weight: i64,
) {
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

/// A wait as far as it is counted: its times clipped to what is counted, in ns.
pub(super) struct Counted {
    pub(super) since: i64,
    pub(super) until: i64,
    pub(super) offcpu: i64,
    pub(super) blocked: i64,
}

/// Everything that adds up across slices, of the time between `counted_from` and
/// `counted_to`: a report of part of a recording reads the events from the start (what each
/// thread was doing when the part begins), and counts only that part. Rows are numbered in
/// the order they were first counted; links and each thread's history name rows by number.
#[derive(Clone, Debug)]
pub struct Tally {
    pub counted_from: i64,
    pub counted_to: i64,
    pub(super) row_numbers: QuickMap<RowKey, usize>, // rows of waits of weight 1
    pub(super) weighted_numbers: QuickMap<RowKey, usize>, // rows of waits of weight w > 1
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
    pub(super) history: QuickMap<i32, VecDeque<(i64, i64, i64, u32)>>,
    pub(super) longest: BinaryHeap<Reverse<LongWait>>,
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

    pub(super) fn bounded(&self) -> bool {
        self.counted_to != UNBOUNDED
    }

    /// The longest waits, longest first.
    pub fn longest(&self) -> Vec<LongWait> {
        let mut waits: Vec<LongWait> = self.longest.iter().map(|Reverse(wait)| *wait).collect();
        waits.sort_unstable_by(|a, b| b.cmp(a));
        waits
    }

    /// A thread's totals, made when first seen; its process and name updated where given.
    pub(super) fn thread(&mut self, tid: i32, pid: Option<i32>, comm: Id) -> &mut ThreadTotals {
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
    pub(super) fn counted(&self, from: i64, to: i64) -> i64 {
        (to.min(self.counted_to) - from.max(self.counted_from)).max(0)
    }

    pub(super) fn on_cpu(&mut self, tid: i32, from: i64, to: i64) {
        let counted = self.counted(from, to);
        self.thread(tid, None, NO_NAME).oncpu_ns += counted;
    }

    /// A run of the thread's counted on CPU from `counted_from` began at `from` instead:
    /// returns the time that adds (ns, below 0 when it began later).
    pub(super) fn run_began(&mut self, tid: i32, counted_from: i64, from: i64) -> i64 {
        let gained = if from < counted_from {
            self.counted(from, counted_from)
        } else {
            -self.counted(counted_from, from)
        };
        self.thread(tid, None, NO_NAME).oncpu_ns += gained;
        gained
    }

    /// perf's handling of a switch to a thread: on CPU for the kernel, the observer's cost.
    pub(super) fn observed(&mut self, tid: i32, from: i64, to: i64) {
        let counted = self.counted(from, to);
        self.thread(tid, None, NO_NAME).observer_ns += counted;
    }

    pub(super) fn row_number(&mut self, key: RowKey, weighted: bool) -> usize {
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
    pub(super) fn count_in_stratum(&mut self, key: &RowKey, counted: &Counted, unsampled: bool) {
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
    pub(super) fn add_sampled(&mut self, key: RowKey, counted: &Counted, weight: u32) -> usize {
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

    pub(super) fn remember(&mut self, tid: i32, since: i64, until: i64, number: i64, weight: u32) {
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
    pub(super) fn link(&mut self, row: usize, since: i64, woken: i64, waker_tid: i32, weight: u32) {
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
    pub(super) fn add(&mut self, other: Tally) {
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
