//! perf.data read for offcpu (`PerfData`): what the file says of itself, and its
//! scheduler events decoded in time order into columns of Python objects, a batch
//! at a time, in the order and with the values `perf script` shows.
//!
//! Call chains travel as Python keys: the raw bytes of their u64 addresses, with the
//! process and its exec generation when they hold user addresses (their meaning depends
//! on the process's memory maps); each distinct chain is one object, made once.

use std::collections::HashMap;
use std::fs::File;
use std::hash::Hash;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use byteorder::LittleEndian;
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use linux_perf_event_reader::{RawEventRecord, SampleRecord};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::files::open_regular;
use crate::model_inputs::Tally;
use crate::pairing::{
    self, Event, Id, SliceBuilder, SliceResult, NO_CHAIN, NO_TEXT, SCHED_SWITCH, SCHED_WAKING,
    SWITCH_IN, SWITCH_OUT, THREAD_COMM, THREAD_EXIT, THREAD_FORK,
};
use crate::perf::unwind::{Unwinder, UserRegs};
use crate::perf_file::{
    self, FileError, Index, Opened, Shape, Task, TaskKind, COMM, EXIT, FORK, HEADER_SIZE, SAMPLE,
};
use crate::quick::{QuickMap, QUICK};
use crate::tracing_formats::{self, Field, StateNames, Tracepoint};
use crate::PerfDataError;

const SWITCH_TRACEPOINT: &str = "sched:sched_switch";
const WAKING_TRACEPOINTS: [&str; 2] = ["sched:sched_waking", "sched:sched_wakeup"];
const SWITCH_FIELDS: [&str; 4] = ["prev_comm", "prev_pid", "prev_state", "next_pid"];
const WAKING_FIELDS: [&str; 1] = ["pid"]; // the woken thread
const TEXT_FIELDS: [&str; 1] = ["prev_comm"];

// perf_event_attr.sample_type bits
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_READ: u64 = 1 << 4;
const SAMPLE_CALLCHAIN: u64 = 1 << 5;
const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_STACK_USER: u64 = 1 << 13;
/// The machine whose user stacks the core unwinds (perf's HEADER_ARCH)
const UNWOUND_ARCHITECTURE: &str = "x86_64";
// perf's x86_64 register numbers (PERF_SAMPLE_REGS_USER)
const PERF_REG_X86_BP: u64 = 6;
const PERF_REG_X86_SP: u64 = 7;
const PERF_REG_X86_IP: u64 = 8;
const SAMPLE_IDENTIFIER: u64 = 1 << 16;

// Record types (and perf_file's)
const SWITCH: u32 = 14;
const SWITCH_CPU_WIDE: u32 = 15;
const MISC_SWITCH_OUT: u16 = 1 << 13;
const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

const CONTEXT_USER: u64 = 0xFFFF_FFFF_FFFF_FE00;

const IDLE_COMM: &str = "swapper"; // perf's name for the idle task (tid 0)

/// Events decoded before the engine takes them.
const BATCH: usize = 1 << 16;
const READ_BUFFER: usize = 1 << 20;

fn error(error: FileError) -> PyErr {
    match error {
        FileError::Io(what) => PerfDataError::new_err(("io", what)),
        FileError::Damaged(what) => PerfDataError::new_err(("damaged", what)),
    }
}

/// A perf.data, its header read; its records walked once when first needed.
#[pyclass(frozen, weakref, module = "offcpu._core")]
pub struct PerfData {
    path: PathBuf,
    shape: Shape,
    tracepoints: HashMap<u64, Tracepoint>,
    index: OnceLock<Result<Index, String>>,
}

impl PerfData {
    fn opened(&self) -> Option<&Opened> {
        match &self.shape {
            Shape::File(opened) => Some(opened),
            _ => None,
        }
    }

    fn tracepoint(&self, name: &str) -> Option<&Tracepoint> {
        self.tracepoints.values().find(|tp| tp.full_name == name)
    }

    fn index(&self) -> PyResult<(&Opened, &Index)> {
        let opened = self
            .opened()
            .ok_or_else(|| error(FileError::Damaged("it was not written to a file".into())))?;
        let index = self.index.get_or_init(|| {
            opened.index(&self.path).map_err(|error| match error {
                FileError::Io(what) | FileError::Damaged(what) => what,
            })
        });
        match index {
            Ok(index) => Ok((opened, index)),
            Err(what) => Err(error(FileError::Damaged(what.clone()))),
        }
    }

    fn why_unsupported(&self) -> Option<String> {
        let opened = match &self.shape {
            Shape::Swapped => return Some("perf.data was written on a machine of the other byte order, which the native reader does not decode".into()),
            Shape::Pipe => return Some("perf.data was written through a pipe (perf record -o -), which the native reader does not decode".into()),
            Shape::File(opened) => opened,
        };
        for attr in &opened.attrs {
            let sample_type = attr.sample_type;
            if sample_type & SAMPLE_STACK_USER != 0 && sample_type & SAMPLE_REGS_USER == 0 {
                return Some("perf.data has user stacks to unwind (--call-graph dwarf) without their registers, which the native reader needs".into());
            }
            if sample_type & SAMPLE_STACK_USER != 0
                && opened.feature_string(perf_file::FEATURE_ARCH).as_deref()
                    != Some(UNWOUND_ARCHITECTURE)
            {
                return Some("perf.data has user stacks to unwind (--call-graph dwarf) of another machine than x86_64, which the native reader does not unwind".into());
            }
            if sample_type & SAMPLE_BRANCH_STACK != 0 {
                return Some("perf.data has branch stacks (--call-graph lbr), which the native reader does not decode".into());
            }
            if sample_type & SAMPLE_READ != 0 {
                return Some("perf.data's samples carry counter values (PERF_SAMPLE_READ), which the native reader does not decode".into());
            }
            if sample_type & SAMPLE_TID == 0 {
                return Some("perf.data's samples do not say their thread (PERF_SAMPLE_TID), which the native reader needs".into());
            }
            if !attr.sample_id_all || sample_type & SAMPLE_TIME == 0 {
                return Some("perf.data's records carry no time stamps (sample_id_all), which the native reader needs".into());
            }
        }
        if opened.attrs.len() > 1
            && !opened
                .attrs
                .iter()
                .all(|attr| attr.sample_type & SAMPLE_IDENTIFIER != 0)
        {
            return Some("perf.data's events are not told apart by PERF_SAMPLE_IDENTIFIER, which the native reader needs".into());
        }
        let time_at = |attr: &perf_file::Attr| attr.parse_info.sample_record_time_offset_from_start;
        if opened
            .attrs
            .windows(2)
            .any(|pair| time_at(&pair[0]) != time_at(&pair[1]))
        {
            return Some("perf.data's events lay out their times differently, which the native reader does not decode".into());
        }
        let Some(switch) = self.tracepoint(SWITCH_TRACEPOINT) else {
            return Some("perf.data holds no sched:sched_switch format in its tracing data, which the native reader needs".into());
        };
        if StateNames::of(&switch.print_fmt).is_none() {
            return Some("perf.data's sched_switch prints prev_state in a way the native reader does not decode".into());
        }
        let wanted = std::iter::once((SWITCH_TRACEPOINT, &SWITCH_FIELDS[..])).chain(
            WAKING_TRACEPOINTS
                .iter()
                .map(|name| (*name, &WAKING_FIELDS[..])),
        );
        for (name, fields) in wanted {
            if let Some(tracepoint) = self.tracepoint(name) {
                if !decodable(tracepoint, fields) {
                    return Some(format!(
                        "perf.data's {name} format lacks the fields the native reader needs ({})",
                        fields.join(", ")
                    ));
                }
            }
        }
        None
    }
}

/// Whether the format has the wanted fields, integers of 1, 2, 4 or 8 bytes but the names.
fn decodable(tracepoint: &Tracepoint, wanted: &[&str]) -> bool {
    wanted
        .iter()
        .all(|name| match tracepoint.fields.get(*name) {
            Some(field) => TEXT_FIELDS.contains(name) || matches!(field.size, 1 | 2 | 4 | 8),
            None => false,
        })
}

#[pymethods]
impl PerfData {
    /// Read the header, attributes and feature sections of the perf.data at `path`;
    /// PerfDataError("io" or "damaged", what) when it cannot be read as one.
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let shape = perf_file::open(&path).map_err(error)?;
        let tracepoints = match &shape {
            Shape::File(opened) => opened
                .features
                .get(&perf_file::FEATURE_TRACING_DATA)
                .map(|section| tracing_formats::tracepoints(section))
                .unwrap_or_default(),
            _ => HashMap::new(),
        };
        Ok(PerfData {
            path,
            shape,
            tracepoints,
            index: OnceLock::new(),
        })
    }

    /// Why the native reader cannot read this file as perf script would (one sentence), or None.
    fn unsupported(&self) -> Option<String> {
        self.why_unsupported()
    }

    /// The recorded tracepoints: (system:name, sample_type) of each event that is one.
    fn tracepoint_events(&self) -> Vec<(String, u64)> {
        let Some(opened) = self.opened() else {
            return Vec::new();
        };
        opened
            .attrs
            .iter()
            .filter_map(|attr| {
                let tracepoint = self.tracepoints.get(&attr.tracepoint?)?;
                Some((tracepoint.full_name.clone(), attr.sample_type))
            })
            .collect()
    }

    /// A feature section that holds a string (4: the kernel release, 5: perf's version); "" without.
    fn feature_string(&self, feature: u32) -> String {
        self.opened()
            .and_then(|opened| opened.feature_string(feature))
            .unwrap_or_default()
    }

    /// The arguments perf recorded with (None when the header has none).
    fn command_line(&self) -> PyResult<Option<Vec<String>>> {
        match self.opened() {
            Some(opened) => opened.command_line().map_err(error),
            None => Ok(None),
        }
    }

    /// The CPUs online when it was recorded (None when the header does not say).
    fn cpus_online(&self) -> PyResult<Option<u32>> {
        match self.opened() {
            Some(opened) => opened.cpus_online().map_err(error),
            None => Ok(None),
        }
    }

    /// When its first and last samples came: from its header, unless perf skipped the pass
    /// that writes them (it says 0), else from the samples themselves; None without samples.
    fn sample_times(&self) -> PyResult<Option<(u64, u64)>> {
        if let Some(opened) = self.opened() {
            if let Some((first, last)) = opened.header_sample_times().map_err(error)? {
                if first != 0 {
                    return Ok(Some((first, last)));
                }
            }
        }
        Ok(self.index()?.1.sample_times)
    }

    /// The BUILD_ID section's entries: (pid, build id, file name, whether it is the kernel's).
    fn build_ids<'py>(&self, py: Python<'py>) -> Vec<(i32, Bound<'py, PyBytes>, String, bool)> {
        let Some(opened) = self.opened() else {
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

    /// The records that make processes' memory maps, in time order: ("comm", pid, exec),
    /// ("fork", pid, ppid) and ("map", pid, start, end, offset, path, build id or None,
    /// (major, minor, inode) or None, executable, the kernel's build id or None).
    fn task_records<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let (_, index) = self.index()?;
        let mut records = Vec::new();
        for task in &index.tasks {
            let record = match &task.kind {
                TaskKind::Comm { pid, exec, .. } => ("comm", *pid, *exec).into_pyobject(py)?,
                TaskKind::Fork { pid, ppid, .. } => ("fork", *pid, *ppid).into_pyobject(py)?,
                TaskKind::Exit { .. } => continue,
                TaskKind::Map(map) => (
                    "map",
                    map.pid,
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
            };
            records.push(record);
        }
        Ok(records)
    }

    /// How many samples and switch records it holds ("samples", "switch_records"), and how
    /// many events perf lost ("lost_events").
    fn record_counts(&self) -> PyResult<HashMap<&'static str, u64>> {
        let counts = self.index()?.1.counts;
        Ok(HashMap::from([
            ("samples", counts.samples),
            ("switch_records", counts.switches),
            ("lost_events", counts.lost_events()),
        ]))
    }

    /// Records that could not be read (unknown types, too short for their fields).
    fn unknown_records(&self) -> PyResult<u64> {
        Ok(self.index()?.1.unknown)
    }

    /// `count` consecutive slices of start_ns..end_ns (both included) of about the same number
    /// of records: cut at the first time of the rounds nearest equal parts of the file.
    fn time_slices(&self, start_ns: i64, end_ns: i64, count: usize) -> PyResult<Vec<(i64, i64)>> {
        let (opened, index) = self.index()?;
        let mut bounds = vec![start_ns];
        let length = i128::from(opened.data_end - opened.data_start);
        for part in 1..count.max(1) {
            let target = i128::from(opened.data_start) + length * part as i128 / count as i128;
            let nearest = index
                .rounds
                .iter()
                .enumerate()
                .min_by_key(|(number, (offset, _))| {
                    ((i128::from(*offset) - target).abs(), *number)
                });
            let cut = nearest
                .and_then(|(_, (_, time))| *time)
                .map_or(-1, |time| time as i64);
            if bounds.last().is_some_and(|last| *last < cut) && cut < end_ns {
                bounds.push(cut);
            }
        }
        bounds.push(end_ns + 1);
        Ok(bounds
            .windows(2)
            .map(|pair| (pair[0], pair[1] - 1))
            .collect())
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
        let (opened, index) = self.index()?;
        let keys = Mutex::new(Keys::new());
        let mut objects = Objects::default();
        self.decode(opened, index, &keys, time_slice, |events| -> PyResult<()> {
            objects.update(py, &locked(&keys))?;
            objects.hand_over(py, events, &take)?;
            py.check_signals()
        })
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
        at_start: Vec<(i32, String, String)>,
        counted: (i64, i64),
        switch_cost_ns: i64,
        on_done: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Paired<'py>> {
        let (opened, index) = self.index()?;
        let keys = Mutex::new(Keys::new());
        let threads_at_start = {
            let mut keys = locked(&keys);
            at_start
                .into_iter()
                .map(|(tid, name, state)| (tid, keys.names.id(&name), keys.states.id(&state)))
                .collect()
        };
        let stop = AtomicBool::new(false);
        let done = AtomicUsize::new(0);
        let results =
            std::thread::scope(|scope| -> PyResult<Vec<Result<SliceResult, FileError>>> {
                let threads: Vec<_> = slices
                    .iter()
                    .map(|&(first, last)| {
                        let (keys, stop, done) = (&keys, &stop, &done);
                        scope.spawn(move || {
                            let result = self.pair_slice(
                                opened,
                                index,
                                keys,
                                (first, last),
                                counted,
                                switch_cost_ns,
                                stop,
                            );
                            done.fetch_add(1, Ordering::Relaxed);
                            result
                        })
                    })
                    .collect();
                let mut reported = 0;
                while threads.iter().any(|thread| !thread.is_finished()) {
                    py.detach(|| std::thread::sleep(POLL));
                    if let Err(interrupt) = py.check_signals() {
                        stop.store(true, Ordering::Relaxed);
                        return Err(interrupt); // the scope waits for the threads, which stop soon
                    }
                    reported = report(&on_done, &done, reported)?;
                }
                report(&on_done, &done, reported)?;
                threads
                    .into_iter()
                    .map(|thread| {
                        thread.join().map_err(|panic| {
                            error(FileError::Damaged(format!(
                                "the reader failed on a time slice: {}",
                                crate::panic_message(&*panic)
                            )))
                        })
                    })
                    .collect()
            })?;
        let results = results
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(error)?;
        let (tally, skipped) = pairing::merge(
            results,
            window,
            &pairing::at_start(threads_at_start),
            Some(counted),
        );
        let keys = keys.into_inner().unwrap_or_else(PoisonError::into_inner);
        let chains = keys
            .chains
            .keys
            .iter()
            .map(|chain| chain_object(py, chain))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((
            Tally { tally },
            skipped,
            keys.names.keys,
            keys.states.keys,
            chains,
        ))
    }
}

/// What PerfData.pair returns.
type Paired<'py> = (Tally, u64, Vec<String>, Vec<String>, Vec<Bound<'py, PyAny>>);

/// How often the thread that waits for the slices looks for Ctrl-C and progress.
const POLL: Duration = Duration::from_millis(20);

fn report(
    on_done: &Option<Bound<'_, PyAny>>,
    done: &AtomicUsize,
    reported: usize,
) -> PyResult<usize> {
    let now = done.load(Ordering::Relaxed);
    if let Some(on_done) = on_done.as_ref().filter(|_| now != reported) {
        on_done.call1((now,))?;
    }
    Ok(now)
}

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

impl PerfData {
    /// One slice decoded and paired; stops early once `stop` is set.
    #[allow(clippy::too_many_arguments)]
    fn pair_slice(
        &self,
        opened: &Opened,
        index: &Index,
        keys: &Mutex<Keys>,
        (first, last): (i64, i64),
        counted: (i64, i64),
        switch_cost_ns: i64,
        stop: &AtomicBool,
    ) -> Result<SliceResult, FileError> {
        let mut builder = SliceBuilder::new(first, last, Some(counted), switch_cost_ns);
        let skipped = self.decode(opened, index, keys, Some((first, last)), |events| {
            builder.take(events);
            match stop.load(Ordering::Relaxed) {
                true => Err(FileError::Io("interrupted".into())),
                false => Ok(()),
            }
        })?;
        Ok(builder.finish(skipped))
    }

    /// The events of `time_slice` (first, last ns; None: all), from the round that may hold
    /// its first record, to `take` a batch at a time; returns how many records could not be
    /// decoded.
    fn decode<E: From<FileError>>(
        &self,
        opened: &Opened,
        index: &Index,
        keys: &Mutex<Keys>,
        time_slice: Option<(i64, i64)>,
        mut take: impl FnMut(&[Event]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let first = time_slice.map_or(0, |(first, _)| u64::try_from(first).unwrap_or(0));
        let start = index
            .rounds
            .get(round_for_time(index, first))
            .map_or(opened.data_end, |round| round.0);
        let mut decoder = Decoder::new(self, opened, keys);
        for task in index.tasks.iter().filter(|task| task.offset < start) {
            decoder.replay(&task.kind);
        }
        let source = FromRound::new(&self.path, opened, start)?;
        let damaged = |e: linux_perf_data::Error| FileError::Damaged(e.to_string());
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(BufReader::with_capacity(READ_BUFFER, source))
            .map_err(damaged)?;
        let last = time_slice.map_or(i128::MAX, |(_, last)| i128::from(last));
        while let Some(record) = record_iter.next_record(&mut perf_file).map_err(damaged)? {
            let PerfFileRecord::EventRecord { attr_index, record } = record else {
                continue;
            };
            let Some(time) = record.timestamp() else {
                continue;
            };
            if i128::from(time) > last {
                break;
            }
            decoder.follow(&index.tasks, time);
            decoder.decode(attr_index, &record, time);
            if decoder.events.len() >= BATCH {
                take(&decoder.events)?;
                decoder.events.clear();
            }
        }
        take(&decoder.events)?;
        Ok(decoder.skipped)
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
                .extend((0..pairing::SEEDED_CHAINS).map(|_| py.None()));
        }
        for chain in &keys.chains.keys[self.chains.len() - pairing::SEEDED_CHAINS..] {
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

/// The first round that may hold a record at or after `time_ns`: perf writes a round's
/// records after every record two rounds before, so a record of time t is never earlier
/// than two rounds before the first round that starts after t.
fn round_for_time(index: &Index, time_ns: u64) -> usize {
    let first_time = |number: usize| index.rounds[number].1.map_or(-1, i128::from);
    let (mut low, mut high) = (0usize, index.rounds.len());
    while low < high {
        let middle = (low + high) / 2;
        if first_time(middle) < i128::from(time_ns) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low.saturating_sub(2)
}

/// The file as the crate reads it, with a header whose data section begins at a round:
/// records before it are not read (nor sorted) at all.
struct FromRound {
    file: File,
    header: [u8; HEADER_SIZE],
    size: u64,
    position: u64,
}

impl FromRound {
    fn new(path: &Path, opened: &Opened, start: u64) -> Result<Self, FileError> {
        let mut header = opened.header;
        header[40..48].copy_from_slice(&start.to_le_bytes());
        header[48..56].copy_from_slice(&(opened.data_end - start).to_le_bytes());
        Ok(FromRound {
            file: open_regular(path)?,
            header,
            size: opened.file_size,
            position: 0,
        })
    }
}

impl Read for FromRound {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = match self.header.get(self.position as usize..) {
            Some(header) if self.position < HEADER_SIZE as u64 => {
                let length = header.len().min(buffer.len());
                buffer[..length].copy_from_slice(&header[..length]);
                length
            }
            _ => self.file.read_at(buffer, self.position)?,
        };
        self.position += read as u64;
        Ok(read)
    }
}

impl Seek for FromRound {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let position = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(by) => self.size.checked_add_signed(by),
            SeekFrom::Current(by) => self.position.checked_add_signed(by),
        };
        self.position = position.ok_or(std::io::ErrorKind::InvalidInput)?;
        Ok(self.position)
    }
}

/// How the samples of one event are decoded.
enum SampleEvent {
    Switch {
        prev_comm: Field,
        prev_pid: Field,
        prev_state: Field,
        next_pid: Field,
    },
    Waking {
        pid: Field,
    },
    Other,
}

/// A call chain as the engine's key: its process and exec generation (-1 when it holds no
/// user address: kernel addresses mean the same in every process), and its addresses. An
/// event that takes no chain has the empty one.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ChainKey {
    pid: i64,
    generation: i64,
    addresses: Box<[u64]>,
}

/// Keys numbered in the order they were first seen.
struct Interned<K> {
    ids: QuickMap<K, Id>,
    keys: Vec<K>,
}

impl<K: Clone + Eq + Hash> Interned<K> {
    fn of(seeds: impl IntoIterator<Item = K>) -> Self {
        let mut interned = Interned {
            ids: QuickMap::default(),
            keys: Vec::new(),
        };
        for seed in seeds {
            interned.id(&seed);
        }
        interned
    }

    fn id(&mut self, key: &K) -> Id {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.keys.len() as Id;
        self.ids.insert(key.clone(), id);
        self.keys.push(key.clone());
        id
    }
}

/// The names, states and call chains of a reading, as the engine's ids: shared by the
/// decoders of all its slices, each of which keeps the ids it has looked up.
struct Keys {
    names: Interned<String>,
    states: Interned<String>,
    chains: Interned<ChainKey>, // a chain's id is its number here after the engine's own
}

impl Keys {
    fn new() -> Self {
        Keys {
            names: Interned::of(pairing::NAMES.map(String::from)),
            states: Interned::of(pairing::STATES.map(String::from)),
            chains: Interned::of([]),
        }
    }
}

fn locked(keys: &Mutex<Keys>) -> MutexGuard<'_, Keys> {
    keys.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state perf keeps while it reads records in order: each thread's name (perf names a
/// thread after its last COMM, a new thread after its parent's, and one it never saw ':tid')
/// and each process's exec generation; the ids of what it has looked up; and the events
/// decoded since the engine last took them.
struct Decoder<'a> {
    sample_events: Vec<SampleEvent>,
    chained: Vec<bool>,
    states: Option<StateNames>,
    keys: &'a Mutex<Keys>,
    events: Vec<Event>,
    comms: QuickMap<i32, Id>,
    unnamed: QuickMap<i32, Id>,
    generations: QuickMap<i32, i64>,
    prev_comms: QuickMap<Vec<u8>, Id>,
    state_names: QuickMap<i64, Id>,
    chains: QuickMap<u64, Vec<(ChainKey, Id)>>,
    addresses: Vec<u64>,
    /// The user stacks of --call-graph dwarf samples, unwound from their registers and
    /// stack copies (None when no event copies them), and how many of the file's task
    /// records (Index.tasks, in time order) it has followed.
    unwinder: Option<Unwinder>,
    followed: usize,
    skipped: u64,
}

impl<'a> Decoder<'a> {
    fn new(data: &PerfData, opened: &Opened, keys: &'a Mutex<Keys>) -> Self {
        let mut sample_events = Vec::new();
        let mut states = None;
        for attr in &opened.attrs {
            let tracepoint = attr.tracepoint.and_then(|id| data.tracepoints.get(&id));
            let field = |name: &str| tracepoint.and_then(|tp| tp.fields.get(name).copied());
            let event = match tracepoint.map(|tp| tp.full_name.as_str()) {
                Some(SWITCH_TRACEPOINT) => {
                    states = tracepoint.and_then(|tp| StateNames::of(&tp.print_fmt));
                    match (
                        field("prev_comm"),
                        field("prev_pid"),
                        field("prev_state"),
                        field("next_pid"),
                    ) {
                        (Some(prev_comm), Some(prev_pid), Some(prev_state), Some(next_pid)) => {
                            SampleEvent::Switch {
                                prev_comm,
                                prev_pid,
                                prev_state,
                                next_pid,
                            }
                        }
                        _ => SampleEvent::Other,
                    }
                }
                Some(name) if WAKING_TRACEPOINTS.contains(&name) => match field("pid") {
                    Some(pid) => SampleEvent::Waking { pid },
                    None => SampleEvent::Other,
                },
                _ => SampleEvent::Other,
            };
            sample_events.push(event);
        }
        let mut comms = QuickMap::default();
        comms.insert(0, locked(keys).names.id(&IDLE_COMM.to_string()));
        Decoder {
            sample_events,
            chained: opened
                .attrs
                .iter()
                .map(|attr| attr.sample_type & SAMPLE_CALLCHAIN != 0)
                .collect(),
            states,
            keys,
            events: Vec::with_capacity(BATCH),
            comms,
            unnamed: QuickMap::default(),
            generations: QuickMap::default(),
            prev_comms: QuickMap::default(),
            state_names: QuickMap::default(),
            chains: QuickMap::default(),
            addresses: Vec::new(),
            unwinder: opened
                .attrs
                .iter()
                .any(|attr| attr.sample_type & SAMPLE_STACK_USER != 0)
                .then(Unwinder::new),
            followed: 0,
            skipped: 0,
        }
    }

    fn name_id(&self, name: &str) -> Id {
        locked(self.keys).names.id(&name.to_string())
    }

    /// The processes' memory maps as of `time`, for the unwinder: the task records up to it.
    fn follow(&mut self, tasks: &[Task], time: u64) {
        let Some(unwinder) = self.unwinder.as_mut() else {
            return;
        };
        while let Some(task) = tasks
            .get(self.followed)
            .filter(|task| task.time.is_none_or(|at| at <= time))
        {
            match &task.kind {
                TaskKind::Map(map) if map.executable => unwinder.add_mapping(
                    map.pid,
                    map.start,
                    map.start.saturating_add(map.length),
                    map.offset,
                    map.path.as_bytes(),
                    map.build_id.as_deref(),
                ),
                TaskKind::Fork { pid, ppid, .. } if pid != ppid => {
                    unwinder.fork_process(*ppid, *pid)
                }
                TaskKind::Comm {
                    pid, exec: true, ..
                } => unwinder.forget_process(*pid),
                TaskKind::Exit { pid, tid } if pid == tid => unwinder.forget_process(*pid),
                _ => {}
            }
            self.followed += 1;
        }
    }

    /// The user frames of a --call-graph dwarf sample (the ip, then its callers), or
    /// none when it copied no stack.
    fn unwound(&mut self, sample: &SampleRecord<'_>, pid: i32) -> Vec<u64> {
        let (Some(unwinder), Some(regs), Some((stack, dynamic_size))) = (
            self.unwinder.as_mut(),
            sample.user_regs.as_ref(),
            sample.user_stack.as_ref(),
        ) else {
            return Vec::new();
        };
        let (Some(ip), Some(sp), Some(bp)) = (
            regs.get(PERF_REG_X86_IP),
            regs.get(PERF_REG_X86_SP),
            regs.get(PERF_REG_X86_BP),
        ) else {
            return Vec::new();
        };
        let stack = stack.as_slice();
        let copied =
            usize::try_from(*dynamic_size).map_or(stack.len(), |size| size.min(stack.len()));
        let mut frames = unwinder.unwind(
            pid,
            &UserRegs { ip, sp, bp },
            stack.get(..copied).unwrap_or_default(),
        );
        // A caller is named by the call before its return address, as perf names it (the
        // return address of a call to a function that does not return is past its caller)
        for address in frames.iter_mut().skip(1) {
            *address = address.saturating_sub(1);
        }
        frames
    }

    /// A task record before the part read: names and generations as of the part's start.
    fn replay(&mut self, task: &TaskKind) {
        match task {
            TaskKind::Comm {
                pid,
                tid,
                name,
                exec,
            } => {
                self.comm(*pid, *tid, name, *exec);
            }
            TaskKind::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => self.fork(*pid, *ppid, *tid, *ptid),
            _ => {}
        }
    }

    fn comm(&mut self, pid: i32, tid: i32, name: &str, exec: bool) -> Id {
        let name = self.name_id(name);
        self.comms.insert(tid, name);
        if exec {
            *self.generations.entry(pid).or_insert(0) += 1;
        }
        name
    }

    fn fork(&mut self, pid: i32, ppid: i32, tid: i32, ptid: i32) {
        // perf drops a thread it knew by this tid (the tid was reused), then names the new
        // one after its parent when the parent's name was ever set
        self.comms.remove(&tid);
        if ptid != 0 {
            if let Some(&parent) = self.comms.get(&ptid) {
                self.comms.insert(tid, parent);
            }
        }
        if pid != ppid {
            self.generations.insert(pid, 0);
        }
    }

    fn comm_of(&mut self, tid: i32) -> Id {
        if let Some(&name) = self.comms.get(&tid) {
            return name;
        }
        if let Some(&name) = self.unnamed.get(&tid) {
            return name;
        }
        let name = self.name_id(&format!(":{tid}"));
        self.unnamed.insert(tid, name);
        name
    }

    /// An event with no name, state or chain (a switch-out record, a fork, an exit).
    fn push_bare(&mut self, kind: u8, time: u64, cpu: i32, pid: i32, tid: i32, other: i32) {
        self.push(kind, time, cpu, pid, tid, other, NO_TEXT, NO_TEXT, NO_CHAIN);
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        kind: u8,
        time: u64,
        cpu: i32,
        pid: i32,
        tid: i32,
        other: i32,
        name: Id,
        state: Id,
        chain: Id,
    ) {
        self.events.push(Event {
            kind,
            time: i64::try_from(time).unwrap_or(i64::MAX),
            cpu,
            pid,
            tid,
            other,
            name,
            state,
            chain,
            weight: 1,
        });
    }

    fn decode(&mut self, attr_index: usize, record: &RawEventRecord<'_>, time: u64) {
        match record.record_type.0 {
            SAMPLE => self.sample(attr_index, record, time),
            SWITCH | SWITCH_CPU_WIDE => {
                let Some((pid, tid, cpu)) = self.trailer(record) else {
                    return;
                };
                if record.misc & MISC_SWITCH_OUT != 0 {
                    let preempted = i32::from(record.misc & MISC_SWITCH_OUT_PREEMPT != 0);
                    self.push_bare(SWITCH_OUT, time, cpu, pid, tid, preempted);
                } else {
                    let name = self.comm_of(tid);
                    self.push(SWITCH_IN, time, cpu, pid, tid, 0, name, NO_TEXT, NO_CHAIN);
                }
            }
            COMM | FORK | EXIT => self.task(record, time),
            _ => {}
        }
    }

    /// The pid, tid and CPU of a record other than a sample, from its sample_id; None
    /// (counted as skipped) when it has none.
    fn trailer(&mut self, record: &RawEventRecord<'_>) -> Option<(i32, i32, i32)> {
        let common = record.common_data().ok();
        match common.as_ref().and_then(|c| Some((c.pid?, c.tid?, c.cpu))) {
            Some((pid, tid, cpu)) => Some((pid, tid, cpu_number(cpu))),
            None => {
                self.skipped += 1;
                None
            }
        }
    }

    /// A FORK, EXIT or COMM record, in its place: names and generations change from here on.
    fn task(&mut self, record: &RawEventRecord<'_>, time: u64) {
        let Some((pid, tid, cpu)) = self.trailer(record) else {
            return;
        };
        match record.parse() {
            Ok(linux_perf_event_reader::EventRecord::Fork(fork)) => {
                self.fork(fork.pid, fork.ppid, fork.tid, fork.ptid);
                self.push_bare(THREAD_FORK, time, cpu, fork.pid, fork.tid, fork.ptid);
            }
            Ok(linux_perf_event_reader::EventRecord::Exit(exit)) => {
                self.push_bare(THREAD_EXIT, time, cpu, exit.pid, exit.tid, 0);
            }
            Ok(linux_perf_event_reader::EventRecord::Comm(comm)) => {
                let name = perf_file::text(&comm.name.as_slice());
                let name = self.comm(comm.pid, comm.tid, &name, comm.is_execve);
                let exec = i32::from(comm.is_execve);
                self.push(
                    THREAD_COMM,
                    time,
                    cpu,
                    pid,
                    tid,
                    exec,
                    name,
                    NO_TEXT,
                    NO_CHAIN,
                );
            }
            _ => self.skipped += 1,
        }
    }

    fn sample(&mut self, attr_index: usize, record: &RawEventRecord<'_>, time: u64) {
        let Some(event) = self.sample_events.get(attr_index) else {
            return;
        };
        if matches!(event, SampleEvent::Other) {
            return;
        }
        let Ok(sample) =
            SampleRecord::parse::<LittleEndian>(record.data, record.misc, &record.parse_info)
        else {
            self.skipped += 1;
            return;
        };
        let raw = sample.raw.map(|raw| raw.as_slice()).unwrap_or_default();
        let (pid, tid) = (sample.pid.unwrap_or(-1), sample.tid.unwrap_or(-1));
        let cpu = cpu_number(sample.cpu);
        let decoded = match *event {
            SampleEvent::Switch {
                prev_comm,
                prev_pid,
                prev_state,
                next_pid,
            } => {
                match (
                    prev_comm
                        .offset
                        .checked_add(prev_comm.size)
                        .and_then(|end| raw.get(prev_comm.offset..end)),
                    prev_pid.integer(&raw),
                    prev_state.integer(&raw),
                    next_pid.integer(&raw),
                ) {
                    (Some(comm), Some(prev), Some(state), Some(next)) => {
                        let name = self.prev_comm(comm);
                        let state = self.state_name(state);
                        Some((SCHED_SWITCH, prev, next, name, state))
                    }
                    _ => None,
                }
            }
            SampleEvent::Waking { pid: woken } => woken.integer(&raw).map(|woken| {
                let name = self.comm_of(tid);
                (SCHED_WAKING, i64::from(tid), woken, name, NO_TEXT)
            }),
            SampleEvent::Other => None,
        };
        let Some((kind, thread, other, name, state)) = decoded else {
            self.skipped += 1;
            return;
        };
        let (Ok(thread), Ok(other)) = (i32::try_from(thread), i32::try_from(other)) else {
            self.skipped += 1;
            return;
        };
        let chain = self.chain(attr_index, &sample, pid);
        self.push(kind, time, cpu, pid, thread, other, name, state, chain);
    }

    fn prev_comm(&mut self, raw: &[u8]) -> Id {
        if let Some(&name) = self.prev_comms.get(raw) {
            return name;
        }
        let name = self.name_id(&perf_file::text(raw));
        self.prev_comms.insert(raw.to_vec(), name);
        name
    }

    fn state_name(&mut self, state: i64) -> Id {
        if let Some(&name) = self.state_names.get(&state) {
            return name;
        }
        let text = self
            .states
            .as_ref()
            .map(|names| names.name(state))
            .unwrap_or_default();
        let name = locked(self.keys).states.id(&text);
        self.state_names.insert(state, name);
        name
    }

    /// The id of a sample's call chain (the empty chain when its event takes none),
    /// extended by the user stack unwound from its registers and stack copy
    /// (`sample.user_regs`, `sample.user_stack`, --call-graph dwarf).
    fn chain(&mut self, attr_index: usize, sample: &SampleRecord<'_>, pid: i32) -> Id {
        self.addresses.clear();
        if let Some(callchain) = sample
            .callchain
            .as_ref()
            .filter(|_| self.chained.get(attr_index) == Some(&true))
        {
            self.addresses
                .extend((0..callchain.len()).filter_map(|index| callchain.get(index)));
            let unwound = self.unwound(sample, pid);
            if !unwound.is_empty() {
                // perf's chain ends at the kernel's part (or at the user ip): the unwound frames follow
                if let Some(user_part) = self
                    .addresses
                    .iter()
                    .position(|&address| address == CONTEXT_USER)
                {
                    self.addresses.truncate(user_part);
                }
                self.addresses.push(CONTEXT_USER);
                self.addresses.extend(unwound);
            }
        }
        let user = self.addresses.contains(&CONTEXT_USER);
        let (pid, generation) = if user {
            (
                i64::from(pid),
                self.generations.get(&pid).copied().unwrap_or(0),
            )
        } else {
            (-1, -1)
        };
        let mut hash =
            (pid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (generation as u64).rotate_left(32);
        for address in &self.addresses {
            hash = (hash.rotate_left(5) ^ address).wrapping_mul(QUICK);
        }
        let known = self.chains.entry(hash).or_default();
        if let Some((_, id)) = known.iter().find(|(chain, _)| {
            chain.pid == pid
                && chain.generation == generation
                && *chain.addresses == *self.addresses
        }) {
            return *id;
        }
        let key = ChainKey {
            pid,
            generation,
            addresses: self.addresses.clone().into_boxed_slice(),
        };
        let id = (pairing::SEEDED_CHAINS as Id) + locked(self.keys).chains.id(&key);
        known.push((key, id));
        id
    }
}

fn cpu_number(cpu: Option<u32>) -> i32 {
    cpu.and_then(|cpu| i32::try_from(cpu).ok())
        .unwrap_or(pairing::UNKNOWN_CPU)
}

/// prev_state as perf prints it by this sched_switch print format (None: a format the
/// reader does not decode).
#[pyfunction]
pub fn prev_state_name(print_fmt: &str, state: i64) -> Option<String> {
    StateNames::of(print_fmt).map(|names| names.name(state))
}
