//! The engine (`pairing`) for Python: a slice's events handed over as columns of integers
//! (`Slice`, for the readers that decode in Python: perf script's text, BPF records), the
//! slices joined (`merge`), and what they add up to handed back in bulk (`Tally`): the
//! model's inputs, names and chains still as ids into the caller's tables.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::pairing::{
    self, micros, Event, Id, RowKey, SliceBuilder, SliceResult, WaitTimes, WakerKey, Windows,
};

/// One time slice's events, paired as they are taken, until `finish`.
#[pyclass(module = "offcpu._core")]
pub struct Slice {
    builder: Option<SliceBuilder>,
    result: Option<SliceResult>,
}

#[pymethods]
impl Slice {
    /// The slice from `start_ns` to `end_ns` (both included), counting the time from
    /// `counted` (first, last ns; None: all); `switch_cost_ns` as the capture measured it.
    #[new]
    #[pyo3(signature = (start_ns, end_ns, counted=None, switch_cost_ns=0))]
    fn new(start_ns: i64, end_ns: i64, counted: Option<(i64, i64)>, switch_cost_ns: i64) -> Self {
        Slice {
            builder: Some(SliceBuilder::new(start_ns, end_ns, counted, switch_cost_ns)),
            result: None,
        }
    }

    /// The next events in time order, as columns (offcpu.reading.sched_events.Events, names,
    /// states and chains as ids); `weights` empty when every event weighs 1.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        kinds: Vec<u8>,
        times: Vec<i64>,
        cpus: Vec<i32>,
        pids: Vec<i32>,
        tids: Vec<i32>,
        others: Vec<i32>,
        names: Vec<Id>,
        states: Vec<Id>,
        chains: Vec<Id>,
        weights: Vec<u32>,
    ) -> PyResult<()> {
        let builder = self
            .builder
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the slice is finished"))?;
        let count = kinds.len();
        let lengths = [
            times.len(),
            cpus.len(),
            pids.len(),
            tids.len(),
            others.len(),
            names.len(),
            states.len(),
            chains.len(),
        ];
        if lengths.iter().any(|&length| length != count)
            || !(weights.is_empty() || weights.len() == count)
        {
            return Err(PyValueError::new_err("the columns are not of one length"));
        }
        for at in 0..count {
            builder.take_one(&Event {
                kind: kinds[at],
                time: times[at],
                cpu: cpus[at],
                pid: pids[at],
                tid: tids[at],
                other: others[at],
                name: names[at],
                state: states[at],
                chain: chains[at],
                weight: if kinds[at] == pairing::SCHED_SWITCH {
                    weights.get(at).copied().unwrap_or(1)
                } else {
                    1
                },
            });
        }
        Ok(())
    }

    /// No more events; `skipped`: how many its reader could not decode.
    fn finish(&mut self, skipped: u64) -> PyResult<()> {
        let builder = self
            .builder
            .take()
            .ok_or_else(|| PyValueError::new_err("the slice is finished"))?;
        self.result = Some(builder.finish(skipped));
        Ok(())
    }
}

/// Join finished slices (of the window, in time order): the tally of the `counted` part,
/// and how many events could not be read. `at_start`: the target's threads when recording
/// began (tid, name, state). The slices stay as they were: a live window merges each again.
#[pyfunction]
#[pyo3(signature = (slices, window, at_start, counted=None))]
pub fn merge(
    slices: Vec<PyRef<'_, Slice>>,
    window: (i64, i64),
    at_start: Vec<(i32, Id, Id)>,
    counted: Option<(i64, i64)>,
) -> PyResult<(Tally, u64)> {
    let mut results = Vec::with_capacity(slices.len());
    for slice in slices {
        results.push(
            slice
                .result
                .clone()
                .ok_or_else(|| PyValueError::new_err("a slice is not finished"))?,
        );
    }
    let (tally, skipped) = pairing::merge(results, window, &pairing::at_start(at_start), counted);
    Ok((Tally { tally }, skipped))
}

/// What the slices add up to (offcpu.model.engine.to_model makes the model of it).
#[pyclass(frozen, module = "offcpu._core")]
pub struct Tally {
    pub tally: pairing::Tally,
}

type WakerTuple = (i32, i32, Id, Id);

fn waker_tuple(waker: Option<WakerKey>) -> Option<WakerTuple> {
    waker.map(|waker| (waker.pid, waker.tid, waker.name, waker.chain))
}

fn row_tuple(key: &RowKey) -> (i32, Id, Id, Option<WakerTuple>) {
    (key.tid, key.chain, key.state, waker_tuple(key.waker))
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

type RowTuple = (
    (i32, Id, Id, Option<WakerTuple>),
    bool,
    (i64, i64, i64, i64, i128),
    Vec<i64>,
);
type ThreadTuple = (
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
type StratumTuple = (
    (i32, Id, Option<(i32, i32, Id)>),
    (i64, i64, i64, i64, i128),
    Vec<i64>,
    Option<(i32, Id, Id, Option<WakerTuple>)>,
);

#[pymethods]
impl Tally {
    /// Each row, by row number: its key (tid, chain, state, waker: pid, tid, name, chain, or
    /// None), whether it counts weighted waits, its times (off CPU, blocked, run queue in µs,
    /// count, variance), and its sub-windows (empty when what is counted is unbounded).
    fn rows(&self) -> Vec<RowTuple> {
        let mut threads_so_far: HashMap<i32, OffCpu> = HashMap::new();
        self.tally
            .rows
            .iter()
            .map(|(key, weighted, times, windows)| {
                let so_far = threads_so_far.entry(key.tid).or_default();
                let from = *so_far;
                so_far.add(OffCpu::of(times.offcpu_ns, times.blocked_ns));
                let times = times_in_us(times, from);
                (
                    row_tuple(key),
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

    /// (waiter's row, waker's row, overlap ns, count) of each link.
    fn links(&self) -> Vec<(usize, usize, i128, i128)> {
        self.tally
            .links
            .entries
            .iter()
            .map(|((waiter, waker), overlap)| (*waiter, *waker, overlap.ns, overlap.count))
            .collect()
    }

    /// (tid, pid or None, name, on CPU ns, off CPU µs, blocked µs, run queue µs, observer ns,
    /// created ns or None, exited ns or None) of each thread.
    fn threads(&self) -> Vec<ThreadTuple> {
        self.tally
            .threads
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

    /// Of each stratum: its key (tid, state, waker's pid, tid and name or None), its exact
    /// times, its stackless waits' sub-windows, and their row's key (or None).
    fn strata(&self) -> Vec<StratumTuple> {
        self.tally
            .strata
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
                    stratum.unsampled_row.as_ref().map(row_tuple),
                )
            })
            .collect()
    }

    /// The longest waits: (length, since, tid, woken or None, back, ran or None, row), ns.
    fn longest(&self) -> Vec<pairing::LongWait> {
        self.tally.longest()
    }

    /// How many waits had each run-queue delay (µs, from wakeup to running).
    fn runqueue_delays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let delays = PyDict::new(py);
        for (delay, count) in &self.tally.runqueue_delays_us {
            delays.set_item(delay, count)?;
        }
        Ok(delays)
    }

    /// The tally's counts of waits and switches by what was odd about them.
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = &self.tally;
        let counts = PyDict::new(py);
        for (name, value) in [
            ("clipped", t.clipped),
            ("unseen_wakeups", t.unseen_wakeups),
            ("stackless_waits", t.stackless_waits),
            ("stand_in_waits", t.stand_in_waits),
            ("estimated_switch_ins", t.estimated_switch_ins),
            ("half_recorded_switches", t.half_recorded_switches),
        ] {
            counts.set_item(name, value)?;
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::windows_in_us;
    use crate::pairing::Windows;

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
