//! The engine for Python: a slice's events handed over as columns of integers (`Slice`, for
//! the readers that decode in Python: perf script's text, BPF records), the slices joined
//! (`merge`), and what they add up to handed back in bulk (`Tally`): the model's inputs,
//! names and chains still as ids into the caller's tables, times in µs (engine::micros).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::engine::micros::{RowUs, StratumUs, ThreadUs};
use crate::engine::totals::LongWait;
use crate::engine::{self, Event, Id, SliceBuilder, SliceResult};

/// One time slice's events, paired as they are taken, until `finish`.
#[pyclass(module = "offcpu._core")]
pub struct Slice {
    builder: Option<SliceBuilder>,
    result: Option<SliceResult>,
}

impl Slice {
    /// A slice paired in the core.
    pub(super) fn finished(result: SliceResult) -> Self {
        Slice {
            builder: None,
            result: Some(result),
        }
    }

    /// What it found, once finished.
    pub(super) fn result_mut(&mut self) -> PyResult<&mut SliceResult> {
        self.result
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("a slice is not finished"))
    }
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
                weight: if kinds[at] == engine::SCHED_SWITCH {
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
    let (tally, skipped) = engine::merge(results, window, &engine::at_start(at_start), counted);
    Ok((Tally { tally }, skipped))
}

/// What the slices add up to (offcpu.model.engine.to_model makes the model of it).
#[pyclass(frozen, module = "offcpu._core")]
pub struct Tally {
    pub tally: engine::Tally,
}

#[pymethods]
impl Tally {
    /// Each row, by row number: its key (tid, chain, state, waker: pid, tid, name, chain, or
    /// None), whether it counts weighted waits, its times (off CPU, blocked, run queue in µs,
    /// count, variance), and its sub-windows (empty when what is counted is unbounded).
    fn rows(&self) -> Vec<RowUs> {
        self.tally.rows_in_us()
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
    fn threads(&self) -> Vec<ThreadUs> {
        self.tally.threads_in_us()
    }

    /// Of each stratum: its key (tid, state, waker's pid, tid and name or None), its exact
    /// times, its stackless waits' sub-windows, and their row's key (or None).
    fn strata(&self) -> Vec<StratumUs> {
        self.tally.strata_in_us()
    }

    /// The longest waits: (length, since, tid, woken or None, back, ran or None, row), ns.
    fn longest(&self) -> Vec<LongWait> {
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
