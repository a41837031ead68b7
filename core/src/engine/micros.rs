//! The µs rounding policy: the engine keeps times in ns, the model (model.WaitTimes) in µs.
//! Each total is rounded once, and its parts where their running sum ends, so that parts add
//! up to their whole: rounding each of many short waits on its own is biased (126k futex
//! waits of 4 µs came out 4.9 ms short).

use std::collections::HashMap;

use super::events::{Id, RowKey, WakerKey, Windows};
use super::tally::Tally;
use super::totals::WaitTimes;

/// ns in µs, rounded as Python rounds (to even).
pub fn micros(ns: i64) -> i64 {
    (ns as f64 / 1000.0).round_ties_even() as i64
}

/// A part (ns) of a running total that stood at `from_ns`, in µs: rounded where the total stands
/// after it, so that consecutive parts add up to the total rounded once. (Rounding each of many
/// short waits on its own is biased: 126k futex waits of 4 µs came out 4.9 ms short.)
fn part_in_us(from_ns: i64, part_ns: i64) -> i64 {
    micros(from_ns + part_ns) - micros(from_ns)
}

/// Waits' time off CPU, blocked and then waiting for a CPU (ns): what a thread's rows have added
/// up to so far, or all of a thread's.
#[derive(Clone, Copy, Debug, Default)]
struct OffCpu {
    blocked_ns: i64,
    runqueue_ns: i64,
}

impl OffCpu {
    fn of(offcpu_ns: i64, blocked_ns: i64) -> Self {
        OffCpu {
            blocked_ns,
            runqueue_ns: offcpu_ns - blocked_ns,
        }
    }

    fn add(&mut self, other: OffCpu) {
        self.blocked_ns += other.blocked_ns;
        self.runqueue_ns += other.runqueue_ns;
    }

    /// In µs, as parts of running totals that stood at `from`: off CPU (the sum of the other
    /// two), blocked, run queue. Each is then within a µs or two of its ns, none below 0, and a
    /// thread's rows add up to its totals (when each of its waits is in a row once: none sampled).
    fn in_us(&self, from: OffCpu) -> (i64, i64, i64) {
        let blocked = part_in_us(from.blocked_ns, self.blocked_ns);
        let runqueue = part_in_us(from.runqueue_ns, self.runqueue_ns);
        (blocked + runqueue, blocked, runqueue)
    }
}

/// Waits' times in µs (see OffCpu::in_us), their count and variance.
fn times_in_us(times: &WaitTimes, from: OffCpu) -> (i64, i64, i64, i64, i128) {
    let (offcpu, blocked, runqueue) = OffCpu::of(times.offcpu_ns, times.blocked_ns).in_us(from);
    (offcpu, blocked, runqueue, times.count, times.variance)
}

/// Sub-windows (ns) in µs that add up to `offcpu_us`, their row's: each rounded where their
/// running sum ends, the µs or two that leaves given to the largest one at a time, so that
/// none goes below 0.
fn windows_in_us(windows: &Windows, offcpu_us: i64) -> Vec<i64> {
    let mut total_ns = 0;
    let mut parts: Vec<i64> = windows
        .iter()
        .map(|window_ns| {
            let part = part_in_us(total_ns, *window_ns);
            total_ns += window_ns;
            part
        })
        .collect();
    let mut left = offcpu_us - parts.iter().sum::<i64>();
    while left != 0 {
        let Some(largest) = parts.iter_mut().max_by_key(|part| **part) else {
            break;
        };
        if *largest + left.signum() < 0 {
            break; // all at 0: the row's own µs is below 0, which rounding never gives
        }
        *largest += left.signum();
        left -= left.signum();
    }
    parts
}

/// A waker by its ids: pid, tid, name, chain.
pub type WakerTuple = (i32, i32, Id, Id);
/// A row's key by its ids: tid, chain, state, waker (or None).
pub type RowIds = (i32, Id, Id, Option<WakerTuple>);
/// Times of waits in µs: off CPU, blocked, run queue; their count and variance.
pub type TimesUs = (i64, i64, i64, i64, i128);
/// A row: its key, whether it counts weighted waits, its times, its sub-windows in µs.
pub type RowUs = (RowIds, bool, TimesUs, Vec<i64>);
/// A thread: tid, pid, name, on CPU ns, off CPU, blocked, run queue µs, observer ns,
/// created and exited ns.
pub type ThreadUs = (
    i32,
    Option<i32>,
    Id,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
);
/// A stratum: its key (tid, state, waker's pid, tid and name), its times, its stackless
/// waits' sub-windows in µs and their row's key.
pub type StratumUs = (
    (i32, Id, Option<(i32, i32, Id)>),
    TimesUs,
    Vec<i64>,
    Option<RowIds>,
);

fn waker_ids(waker: Option<WakerKey>) -> Option<WakerTuple> {
    waker.map(|w| (w.pid, w.tid, w.name, w.chain))
}

fn row_ids(key: &RowKey) -> RowIds {
    (key.tid, key.chain, key.state, waker_ids(key.waker))
}

impl Tally {
    /// Each row, by row number, its times in µs as parts of its thread's running totals:
    /// a thread's rows add up to its totals (when each of its waits is in one row).
    pub fn rows_in_us(&self) -> Vec<RowUs> {
        let mut threads_so_far: HashMap<i32, OffCpu> = HashMap::new();
        self.rows
            .iter()
            .map(|(key, weighted, times, windows)| {
                let so_far = threads_so_far.entry(key.tid).or_default();
                let from = *so_far;
                so_far.add(OffCpu::of(times.offcpu_ns, times.blocked_ns));
                let times = times_in_us(times, from);
                (
                    row_ids(key),
                    *weighted,
                    times,
                    windows
                        .as_ref()
                        .map(|windows| windows_in_us(windows, times.0))
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Each thread, its times off CPU in µs.
    pub fn threads_in_us(&self) -> Vec<ThreadUs> {
        self.threads
            .entries
            .iter()
            .map(|(tid, t)| {
                let (offcpu, blocked, runqueue) =
                    OffCpu::of(t.offcpu_ns, t.blocked_ns).in_us(OffCpu::default());
                (
                    *tid,
                    t.pid,
                    t.comm,
                    t.oncpu_ns,
                    offcpu,
                    blocked,
                    runqueue,
                    t.observer_ns,
                    t.created_ns,
                    t.exited_ns,
                )
            })
            .collect()
    }

    /// Each stratum, its times in µs.
    pub fn strata_in_us(&self) -> Vec<StratumUs> {
        self.strata
            .entries
            .iter()
            .map(|(key, stratum)| {
                let times = times_in_us(&stratum.times, OffCpu::default());
                // (its stackless waits' sub-windows: all of its time when it has only those)
                let windows_ns: i64 = stratum.unsampled_windows.iter().sum();
                let windows_us = if windows_ns == stratum.times.offcpu_ns {
                    times.0
                } else {
                    micros(windows_ns)
                };
                (
                    (key.tid, key.state, key.waker),
                    times,
                    windows_in_us(&stratum.unsampled_windows, windows_us),
                    stratum.unsampled_row.as_ref().map(row_ids),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::windows_in_us;
    use crate::engine::events::Windows;

    #[test]
    fn sub_windows_add_up_to_their_row_and_none_goes_below_zero() {
        // 1.4, 0.4 and 0.4 µs round where their running sums end (1.4, 1.8, 2.2) to 1, 1 and 0
        let mut windows: Windows = Default::default();
        windows[..3].copy_from_slice(&[1400, 400, 400]);
        let mut expected = vec![0; windows.len()];
        // a row of 0 µs: the 2 µs too many come off the largest, one at a time
        assert_eq!(windows_in_us(&windows, 0), expected);
        // a row of 3 µs: the one missing goes to the largest (the last of equals)
        expected[..3].copy_from_slice(&[1, 2, 0]);
        assert_eq!(windows_in_us(&windows, 3), expected);
    }
}
