//! `PerfData`: perf.data for Python (perf/ reads it): what the file says of itself, its
//! events handed over as columns of Python objects (to compare with perf script), and its
//! slices paired in the core.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::model_inputs::Tally;
use super::pairing::{self, AtStart};
use crate::engine::{self, Event, Id};
use crate::generations::{Begun, Generations};
use crate::perf::decoder::{locked, ChainKey, Keys};
use crate::perf::index::TaskKind;
use crate::perf::perf_file::FileError;
use crate::perf::reader::PerfReader;
use crate::perf::support::why_unsupported;
use crate::perf::tracing_formats::StateNames;
use crate::PerfDataError;

fn error(error: FileError) -> PyErr {
    match error {
        FileError::Io(what) => PerfDataError::new_err(("io", what)),
        FileError::Damaged(what) => PerfDataError::new_err(("damaged", what)),
    }
}

/// A perf.data, its header read; its records walked once when first needed.
#[pyclass(frozen, weakref, module = "offcpu._core")]
pub struct PerfData {
    reader: PerfReader,
}

#[pymethods]
impl PerfData {
    /// Read the header, attributes and feature sections of the perf.data at `path`;
    /// PerfDataError("io" or "damaged", what) when it cannot be read as one.
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        Ok(PerfData {
            reader: PerfReader::new(path).map_err(error)?,
        })
    }

    /// Why the native reader cannot read this file as perf script would (one sentence), or None.
    fn unsupported(&self) -> Option<String> {
        why_unsupported(&self.reader)
    }

    /// The recorded tracepoints: (system:name, sample_type) of each event that is one.
    fn tracepoint_events(&self) -> Vec<(String, u64)> {
        let Some(opened) = self.reader.opened() else {
            return Vec::new();
        };
        opened
            .attrs
            .iter()
            .filter_map(|attr| {
                let tracepoint = self.reader.tracepoints.get(&attr.tracepoint?)?;
                Some((tracepoint.full_name.clone(), attr.sample_type))
            })
            .collect()
    }

    /// A feature section that holds a string (4: the kernel release, 5: perf's version); "" without.
    fn feature_string(&self, feature: u32) -> String {
        self.reader
            .opened()
            .and_then(|opened| opened.feature_string(feature))
            .unwrap_or_default()
    }

    /// The arguments perf recorded with (None when the header has none).
    fn command_line(&self) -> PyResult<Option<Vec<String>>> {
        match self.reader.opened() {
            Some(opened) => opened.command_line().map_err(error),
            None => Ok(None),
        }
    }

    /// The CPUs online when it was recorded (None when the header does not say).
    fn cpus_online(&self) -> PyResult<Option<u32>> {
        match self.reader.opened() {
            Some(opened) => opened.cpus_online().map_err(error),
            None => Ok(None),
        }
    }

    /// When its first and last samples came: from its header, unless perf skipped the pass
    /// that writes them (it says 0), else from the samples themselves; None without samples.
    fn sample_times(&self) -> PyResult<Option<(u64, u64)>> {
        if let Some(opened) = self.reader.opened() {
            if let Some((first, last)) = opened.header_sample_times().map_err(error)? {
                if first != 0 {
                    return Ok(Some((first, last)));
                }
            }
        }
        Ok(self.reader.index()?.1.sample_times)
    }

    /// The BUILD_ID section's entries: (pid, build id, file name, whether it is the kernel's).
    fn build_ids<'py>(&self, py: Python<'py>) -> Vec<(i32, Bound<'py, PyBytes>, String, bool)> {
        let Some(opened) = self.reader.opened() else {
            return Vec::new();
        };
        opened
            .build_ids()
            .into_iter()
            .map(|entry| {
                (
                    entry.pid,
                    PyBytes::new(py, &entry.build_id),
                    entry.filename,
                    entry.kernel,
                )
            })
            .collect()
    }

    /// The records that make processes' memory maps, in time order, with the exec generation
    /// they are of (crate::generations): ("begin", pid, generation, (pid, generation) whose
    /// maps it starts with) at a fork that makes a process or an exec, and ("map", pid,
    /// generation, start, end, offset, path, build id or None, (major, minor, inode) or None,
    /// executable, the kernel's build id or None).
    fn task_records<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let (_, index) = self.reader.index()?;
        let mut generations = Generations::default();
        let mut records = Vec::new();
        for task in &index.tasks {
            let time = task.time.unwrap_or(0);
            let begun = |begun: Begun| ("begin", begun.pid, begun.generation, begun.from);
            let record = match &task.kind {
                TaskKind::Comm {
                    pid, exec: true, ..
                } => begun(generations.exec((*pid).into(), time)).into_pyobject(py)?,
                TaskKind::Fork { pid, ppid, tid, .. } => {
                    match generations.fork((*pid).into(), (*tid).into(), (*ppid).into(), time) {
                        Some(new_process) => begun(new_process).into_pyobject(py)?,
                        None => continue,
                    }
                }
                TaskKind::Map(map) => (
                    "map",
                    map.pid,
                    generations.latest(map.pid.into()),
                    map.start,
                    map.start.wrapping_add(map.length),
                    map.offset,
                    map.path.as_str(),
                    map.build_id.as_deref().map(|id| PyBytes::new(py, id)),
                    map.inode,
                    map.executable,
                    map.kernel_build_id
                        .as_deref()
                        .map(|id| PyBytes::new(py, id)),
                )
                    .into_pyobject(py)?,
                TaskKind::Comm { .. } | TaskKind::Exit { .. } => continue,
            };
            records.push(record);
        }
        Ok(records)
    }

    /// How many samples and switch records it holds ("samples", "switch_records"), and how
    /// many events perf lost ("lost_events").
    fn record_counts(&self) -> PyResult<HashMap<&'static str, u64>> {
        let counts = self.reader.index()?.1.counts;
        Ok(HashMap::from([
            ("samples", counts.samples),
            ("switch_records", counts.switches),
            ("lost_events", counts.lost_events()),
        ]))
    }

    /// Records that could not be read (unknown types, too short for their fields).
    fn unknown_records(&self) -> PyResult<u64> {
        Ok(self.reader.index()?.1.unknown)
    }

    /// `count` consecutive slices of start_ns..end_ns (both included) of about the same number
    /// of records: cut at the first time of the rounds nearest equal parts of the file.
    fn time_slices(&self, start_ns: i64, end_ns: i64, count: usize) -> PyResult<Vec<(i64, i64)>> {
        Ok(self.reader.time_slices(start_ns, end_ns, count)?)
    }

    /// Every event in time order, `take(kinds, times, cpus, pids, tids, others, names, states,
    /// chains)` a batch at a time, as Python objects (offcpu.reading.sched_events.Events): what the
    /// engine is handed, for comparing with perf script. With `time_slice` (first, last ns),
    /// from the round that may hold its first record to its last. Returns how many records
    /// could not be decoded.
    #[pyo3(signature = (take, time_slice=None))]
    fn read(
        &self,
        py: Python<'_>,
        take: Bound<'_, PyAny>,
        time_slice: Option<(i64, i64)>,
    ) -> PyResult<u64> {
        let (opened, index) = self.reader.index()?;
        let keys = Mutex::new(Keys::default());
        let mut objects = Objects::default();
        self.reader.decode(
            opened,
            index,
            &keys,
            time_slice,
            true,
            |events| -> PyResult<()> {
                objects.update(py, &locked(&keys))?;
                objects.hand_over(py, events, &take)?;
                py.check_signals()
            },
        )
    }

    /// The model's inputs: each of `slices` (first, last ns, both included; of the window,
    /// in time order) decoded and paired in a thread of its own, from the round that may
    /// hold its first record, then joined (offcpu.model.engine.build_model). `at_start`: the
    /// target's threads when recording began (tid, name, state); `on_done(slices done)`
    /// as they are. Returns the tally, how many records could not be decoded, and the
    /// names, states and call chains its ids stand for (the chains from SEEDED_CHAINS on:
    /// the raw bytes of their u64 addresses, with the process and its exec generation
    /// when they hold user addresses).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (slices, window, at_start, counted, switch_cost_ns, on_done=None))]
    fn pair<'py>(
        &self,
        py: Python<'py>,
        slices: Vec<(i64, i64)>,
        window: (i64, i64),
        at_start: AtStart,
        counted: (i64, i64),
        switch_cost_ns: i64,
        on_done: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Paired<'py>> {
        let (tally, skipped, keys) =
            pairing::paired(py, window, at_start, counted, on_done, |keys, poll| {
                self.reader
                    .pair(&slices, counted, switch_cost_ns, keys, poll)
            })?;
        let chains = keys
            .chains
            .keys
            .iter()
            .map(|chain| chain_object(py, chain))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((tally, skipped, keys.names.keys, keys.states.keys, chains))
    }
}

/// What PerfData.pair returns.
type Paired<'py> = (Tally, u64, Vec<String>, Vec<String>, Vec<Bound<'py, PyAny>>);

/// A chain as Python keeps it: bytes, or (pid, generation, bytes) when it holds user addresses.
fn chain_object<'py>(py: Python<'py>, chain: &ChainKey) -> PyResult<Bound<'py, PyAny>> {
    let raw: Vec<u8> = chain
        .addresses
        .iter()
        .flat_map(|address| address.to_le_bytes())
        .collect();
    let bytes = PyBytes::new(py, &raw).into_any();
    if chain.pid == -1 {
        return Ok(bytes);
    }
    Ok((chain.pid, chain.generation, bytes)
        .into_pyobject(py)?
        .into_any())
}

impl From<FileError> for PyErr {
    fn from(failure: FileError) -> Self {
        error(failure)
    }
}

/// The Python objects of a reading's ids, made once each.
#[derive(Default)]
struct Objects {
    names: Vec<Py<PyAny>>,
    states: Vec<Py<PyAny>>,
    chains: Vec<Py<PyAny>>,
}

impl Objects {
    /// Objects for the ids `keys` has given out since the last call.
    fn update(&mut self, py: Python<'_>, keys: &Keys) -> PyResult<()> {
        let text = |text: &String| PyString::new(py, text).into_any().unbind();
        self.names
            .extend(keys.names.keys[self.names.len()..].iter().map(text));
        self.states
            .extend(keys.states.keys[self.states.len()..].iter().map(text));
        if self.chains.is_empty() {
            self.chains
                .extend((0..engine::SEEDED_CHAINS).map(|_| py.None()));
        }
        for chain in &keys.chains.keys[self.chains.len() - engine::SEEDED_CHAINS..] {
            self.chains.push(chain_object(py, chain)?.unbind());
        }
        Ok(())
    }

    /// A batch of events to Python, as nine lists.
    fn hand_over(&self, py: Python<'_>, events: &[Event], take: &Bound<'_, PyAny>) -> PyResult<()> {
        let column = |value: fn(&Event) -> i64| PyList::new(py, events.iter().map(value));
        let object = |table: &Vec<Py<PyAny>>, id: Id| {
            table
                .get(id as usize)
                .map_or_else(|| py.None(), |object| object.clone_ref(py))
        };
        take.call1((
            column(|e| e.kind.into())?,
            column(|e| e.time)?,
            column(|e| e.cpu.into())?,
            column(|e| e.pid.into())?,
            column(|e| e.tid.into())?,
            column(|e| e.other.into())?,
            PyList::new(py, events.iter().map(|e| object(&self.names, e.name)))?,
            PyList::new(py, events.iter().map(|e| object(&self.states, e.state)))?,
            PyList::new(py, events.iter().map(|e| object(&self.chains, e.chain)))?,
        ))?;
        Ok(())
    }
}

/// prev_state as perf prints it by this sched_switch print format (None: a format the
/// reader does not decode).
#[pyfunction]
pub fn prev_state_name(print_fmt: &str, state: i64) -> Option<String> {
    StateNames::of(print_fmt).map(|names| names.name(state))
}
