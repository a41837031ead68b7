//! BPF records for Python: a capture's bpf-records.bin (`BpfRecords`: checked, its slices
//! decoded and paired in the core, what its notes count) and the records a live recording
//! holds in memory (`HeldRecords`: an interval's records paired into a slice), both through
//! bpf::decode; the processes' exec generations (`ExecGenerations`).

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use super::model_inputs::{Slice, Tally};
use super::pairing::{self, AtStart};
use crate::bpf::decode::{self, count_generation, ChainKey, Keys, RuntimeSamples, SliceDecoder};
use crate::bpf::record::Record;
use crate::bpf::records_file::RecordsFile;
use crate::engine::interning::Interned;
use crate::engine::{self, renumber, Id, SliceBuilder};
use crate::generations::Generations;
use crate::quick::QuickSet;

/// A runtime's samples as Python hands them: their threads, times and stack ids.
type Samples = (Vec<i64>, Vec<i64>, Vec<i64>);
/// What BpfRecords.pair returns: the tally, how many records could not be read, and the
/// names, states and chains its ids stand for.
type Paired<'py> = (Tally, u64, Vec<String>, Vec<String>, Vec<Bound<'py, PyAny>>);
/// What HeldRecords.keys returns: names, states and chains.
type Keyed<'py> = (Vec<String>, Vec<String>, Vec<Bound<'py, PyAny>>);

/// bpf-records.bin, walked once when opened.
#[pyclass(frozen, module = "offcpu._core")]
pub struct BpfRecords {
    file: RecordsFile,
}

#[pymethods]
impl BpfRecords {
    /// The records at `path` walked; PerfDataError("io" or "damaged", what) when a record
    /// holds what the kernel never gives, or the file cannot be read.
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let file = py.detach(|| RecordsFile::open(&path))?;
        Ok(BpfRecords { file })
    }

    /// Records that could not be read: of a kind this offcpu does not know, or cut short.
    fn unreadable(&self) -> u64 {
        self.file.unreadable()
    }

    /// Process `pid`'s exec generation at `time_ns`.
    fn generation(&self, pid: u32, time_ns: u64) -> i64 {
        self.file.generations.at(pid.into(), time_ns)
    }

    /// `count` consecutive slices of start_ns..end_ns (both included), cut where equal shares
    /// of the waits' times fall.
    fn time_slices(
        &self,
        py: Python<'_>,
        start_ns: i64,
        end_ns: i64,
        count: usize,
    ) -> PyResult<Vec<(i64, i64)>> {
        Ok(py.detach(|| self.file.time_slices(start_ns, end_ns, count))?)
    }

    /// The model's inputs: each of `slices` (first, last ns, both included; of the window,
    /// in time order) decoded and paired in a pool of threads, then joined. `at_start`: the
    /// target's threads when recording began (tid, name, state); `runtime`: the runtimes'
    /// samples (threads, times, stack ids) or None; `not_taken`: the keys of the switch-outs'
    /// and the wakers' stacks not sampled; `on_done(slices done)` as they are. The chains
    /// from SEEDED_CHAINS on are (kernel stack id, user stack id, pid, exec generation,
    /// runtime stack id), or one of `not_taken`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (slices, window, at_start, counted, switch_cost_ns, runtime, not_taken, on_done=None))]
    fn pair<'py>(
        &self,
        py: Python<'py>,
        slices: Vec<(i64, i64)>,
        window: (i64, i64),
        at_start: AtStart,
        counted: (i64, i64),
        switch_cost_ns: i64,
        runtime: Option<Samples>,
        not_taken: (String, String),
        on_done: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Paired<'py>> {
        let samples =
            runtime.map(|(tids, times, stacks)| RuntimeSamples::new(&tids, &times, &stacks));
        let (tally, skipped, keys) =
            pairing::paired(py, window, at_start, counted, on_done, |keys, poll| {
                self.file.pair(
                    &slices,
                    Some(counted),
                    switch_cost_ns,
                    keys,
                    samples.as_ref(),
                    poll,
                )
            })?;
        let chains = chain_objects(py, &keys.chains.keys, &not_taken)?;
        Ok((tally, skipped, keys.names.keys, keys.states.keys, chains))
    }

    /// (switch-outs, switch-ins) the tracepoint did not report, the waits they began or ended,
    /// and those waits' time off CPU (ns).
    fn estimated(&self) -> (u64, u64, u64, i64) {
        let estimated = self.file.estimated;
        (
            estimated.since,
            estimated.back,
            estimated.waits,
            estimated.ns,
        )
    }

    /// How many of the waits' and wakers' stacks were taken with each stack id (negative:
    /// -errno of a walk that failed; a user stack's -EFAULT, no user frames, left out).
    fn taken_stacks(&self) -> Vec<(i32, u64)> {
        self.file
            .taken_stacks
            .iter()
            .map(|(&id, &count)| (id, count))
            .collect()
    }

    /// A process's last name: its main thread's, else any thread's (None: no record of it).
    fn process_name(&self, pid: u32) -> Option<String> {
        let (main, any) = self.file.process_names.get(&pid)?;
        Some(decode::name_of(main.as_ref().unwrap_or(any)))
    }

    /// Of each process, how many waits of `min_ns` or more (their start recorded, their
    /// stacks taken) it had, and how many of them a sample of `runtime` joined.
    fn runtime_counts(
        &self,
        py: Python<'_>,
        runtime: Samples,
        min_ns: i64,
    ) -> PyResult<Vec<(u32, u64, u64)>> {
        let (tids, times, stacks) = runtime;
        let counts = py.detach(|| {
            self.file
                .runtime_counts(&RuntimeSamples::new(&tids, &times, &stacks), min_ns)
        })?;
        Ok(counts
            .into_iter()
            .map(|(pid, (waits, joined))| (pid, waits, joined))
            .collect())
    }
}

/// The records a live recording holds, an interval at a time, with the names, states and
/// chains of the whole recording.
#[pyclass(frozen, module = "offcpu._core")]
pub struct HeldRecords {
    keys: Mutex<Keys>,
}

#[pymethods]
impl HeldRecords {
    #[new]
    fn new() -> Self {
        HeldRecords {
            keys: Mutex::new(Keys::default()),
        }
    }

    /// The events of `records` (bpf-records.bin's form: every fork and exec of the recording
    /// so far among them) from `first` to `last` ns paired into a slice of their own, counted
    /// from `first` to `last`; `skipped`: the records that could not be read; `runtime`: the
    /// runtimes' samples (threads, times, stack ids) that the waits beginning in it join, or None.
    #[pyo3(signature = (records, first, last, skipped, runtime=None))]
    fn slice(
        &self,
        py: Python<'_>,
        records: &[u8],
        first: i64,
        last: i64,
        skipped: u64,
        runtime: Option<Samples>,
    ) -> Slice {
        py.detach(|| {
            let generations = exec_generations(records);
            let samples =
                runtime.map(|(tids, times, stacks)| RuntimeSamples::new(&tids, &times, &stacks));
            let mut decoder =
                SliceDecoder::new((first, last), &self.keys, &generations, samples.as_ref());
            Record::all(records).for_each(|record| decoder.take(&record));
            let mut builder = SliceBuilder::new(first, last, Some((first, last)), 0);
            builder.take(&decoder.events());
            Slice::finished(builder.finish(skipped))
        })
    }

    /// The names and states the ids of its slices stand for, and its chains from number
    /// `known` on (as BpfRecords.pair gives them): those before were asked for already.
    fn keys<'py>(
        &self,
        py: Python<'py>,
        not_taken: (String, String),
        known: usize,
    ) -> PyResult<Keyed<'py>> {
        let keys = decode::locked(&self.keys);
        let chains = chain_objects(
            py,
            keys.chains.keys.get(known..).unwrap_or_default(),
            &not_taken,
        )?;
        Ok((keys.names.keys.clone(), keys.states.keys.clone(), chains))
    }

    /// Let go of the chains none of `slices` holds (the slices of the window, which must be all
    /// those still to be merged): the chains kept are numbered anew, in their order, in the
    /// slices too; `keys` gives them all again from SEEDED_CHAINS on. Returns how many it kept.
    fn let_go_of_chains(&self, mut slices: Vec<PyRefMut<'_, Slice>>) -> PyResult<usize> {
        let mut used = QuickSet::default();
        for slice in &mut slices {
            used.extend(slice.result_mut()?.chains());
        }
        let kept = renumber::kept_chains(used);
        let mut keys = decode::locked(&self.keys);
        let seeded = engine::SEEDED_CHAINS as Id;
        let chains = kept
            .iter()
            .map(|&old| keys.chains.keys.get((old - seeded) as usize).cloned())
            .collect::<Option<Vec<ChainKey>>>()
            .ok_or_else(|| PyValueError::new_err("a slice holds a chain not numbered here"))?;
        keys.chains = Interned::of(chains);
        let new = renumber::new_ids(&kept);
        for slice in &mut slices {
            slice.result_mut()?.renumber_chains(&new);
        }
        Ok(kept.len())
    }
}

/// The exec generations of processes, by the records (bpf-records.bin's form) of their
/// forks and execs.
#[pyclass(frozen, module = "offcpu._core")]
pub struct ExecGenerations {
    generations: Generations,
}

#[pymethods]
impl ExecGenerations {
    #[new]
    fn new(records: &[u8]) -> Self {
        ExecGenerations {
            generations: exec_generations(records),
        }
    }

    /// Process `pid`'s exec generation at `time_ns`.
    fn at(&self, pid: u32, time_ns: u64) -> i64 {
        self.generations.at(pid.into(), time_ns)
    }
}

fn exec_generations(records: &[u8]) -> Generations {
    let mut generations = Generations::default();
    Record::all(records).for_each(|record| count_generation(&mut generations, &record));
    generations.sorted()
}

/// Chains as Python keeps them: a tuple of its five numbers, or one of `not_taken`.
fn chain_objects<'py>(
    py: Python<'py>,
    chains: &[ChainKey],
    not_taken: &(String, String),
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    chains
        .iter()
        .map(|chain| match chain {
            ChainKey::NotTaken => Ok(PyString::new(py, &not_taken.0).into_any()),
            ChainKey::WakerNotTaken => Ok(PyString::new(py, &not_taken.1).into_any()),
            ChainKey::Stack(numbers) => Ok(PyTuple::new(py, numbers)?.into_any()),
        })
        .collect()
}
