//! perf.data read for offcpu (`PerfData`): what the file says of itself, and its
//! scheduler events decoded in time order into columns of Python objects, a batch
//! at a time, in the order and with the values `perf script` shows.
//!
//! Call chains travel as Python keys: the raw bytes of their u64 addresses, with the
//! process and its exec generation when they hold user addresses (their meaning depends
//! on the process's memory maps); each distinct chain is one object, made once.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use byteorder::LittleEndian;
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use linux_perf_event_reader::{RawEventRecord, SampleRecord};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::perf_file::{
    self, FileError, Index, Opened, Shape, Task, TaskKind, COMM, EXIT, FORK, HEADER_SIZE, SAMPLE,
};
use crate::tracing_formats::{self, Field, StateNames, Tracepoint};
use crate::unwind::{Unwinder, UserRegs};
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

// The kinds of event, as offcpu.sched_events numbers them.
const SCHED_SWITCH: i64 = 0;
const SCHED_WAKING: i64 = 1;
const SWITCH_IN: i64 = 2;
const SWITCH_OUT: i64 = 3;
const THREAD_FORK: i64 = 4;
const THREAD_EXIT: i64 = 5;
const THREAD_COMM: i64 = 6;
const UNKNOWN_CPU: i64 = -1;
const IDLE_COMM: &str = "swapper"; // perf's name for the idle task (tid 0)

/// Events handed to Python at a time.
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
    /// chains)` a batch at a time; with `time_slice` (first, last ns), from the round that may
    /// hold its first record to its last. Returns how many records could not be decoded.
    #[pyo3(signature = (take, time_slice=None))]
    fn read(
        &self,
        py: Python<'_>,
        take: Bound<'_, PyAny>,
        time_slice: Option<(u64, u64)>,
    ) -> PyResult<u64> {
        let (opened, index) = self.index()?;
        let first_round = time_slice.map_or(0, |(first, _)| round_for_time(index, first));
        let start = index
            .rounds
            .get(first_round)
            .map_or(opened.data_end, |round| round.0);
        let mut decoder = Decoder::new(py, self, opened)?;
        for task in index.tasks.iter().filter(|task| task.offset < start) {
            decoder.replay(py, &task.kind);
        }
        let source = FromRound::new(&self.path, opened, start).map_err(error)?;
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(BufReader::with_capacity(READ_BUFFER, source))
            .map_err(|e| error(FileError::Damaged(e.to_string())))?;
        let last = time_slice.map(|(_, last)| last);
        loop {
            let record = record_iter
                .next_record(&mut perf_file)
                .map_err(|e| error(FileError::Damaged(e.to_string())))?;
            let Some(PerfFileRecord::EventRecord { attr_index, record }) = record else {
                match record {
                    Some(_) => continue,
                    None => break,
                }
            };
            let Some(time) = record.timestamp() else {
                continue;
            };
            if last.is_some_and(|last| time > last) {
                break;
            }
            decoder.follow(&index.tasks, time);
            decoder.decode(py, attr_index, &record, time);
            if decoder.columns.kinds.len() >= BATCH {
                decoder.hand_over(py, &take)?;
                py.check_signals()?;
            }
        }
        decoder.hand_over(py, &take)?;
        Ok(decoder.skipped)
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
            file: File::open(path)?,
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

/// The events of a batch, as Python objects where they are text or keys.
#[derive(Default)]
struct Columns {
    kinds: Vec<i64>,
    times: Vec<u64>,
    cpus: Vec<i64>,
    pids: Vec<i64>,
    tids: Vec<i64>,
    others: Vec<i64>,
    names: Vec<Py<PyAny>>,
    states: Vec<Py<PyAny>>,
    chains: Vec<Py<PyAny>>,
}

/// A hasher for the decoder's keys (thread ids, states, names of 16 bytes, chains' own
/// hashes): a multiply and rotate per word, several times faster than the default SipHash on
/// millions of look-ups, and no keys from outside the file.
#[derive(Default)]
struct Quick(u64);

const QUICK: u64 = 0x517C_C1B7_2722_0A95;

impl Hasher for Quick {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(QUICK);
    }

    fn write_i32(&mut self, word: i32) {
        self.write_u64(word as u64);
    }

    fn write_i64(&mut self, word: i64) {
        self.write_u64(word as u64);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

type QuickMap<K, V> = HashMap<K, V, BuildHasherDefault<Quick>>;

/// A call chain handed out: its process and exec generation (-1 when it holds no user
/// address), its addresses, and its key.
struct KnownChain {
    pid: i64,
    generation: i64,
    addresses: Box<[u64]>,
    key: Py<PyAny>,
}

/// The state perf keeps while it reads records in order: each thread's name (perf names a
/// thread after its last COMM, a new thread after its parent's, and one it never saw ':tid')
/// and each process's exec generation; and the Python objects made once each.
struct Decoder {
    events: Vec<SampleEvent>,
    chained: Vec<bool>,
    states: Option<StateNames>,
    columns: Columns,
    comms: QuickMap<i32, Py<PyAny>>,
    unnamed: QuickMap<i32, Py<PyAny>>,
    generations: QuickMap<i32, i64>,
    prev_comms: QuickMap<Vec<u8>, Py<PyAny>>,
    state_names: QuickMap<i64, Py<PyAny>>,
    chains: QuickMap<u64, Vec<KnownChain>>,
    addresses: Vec<u64>,
    /// The user stacks of --call-graph dwarf samples, unwound from their registers and
    /// stack copies (None when no event copies them), and how many of the file's task
    /// records (Index.tasks, in time order) it has followed.
    unwinder: Option<Unwinder>,
    followed: usize,
    empty_text: Py<PyAny>,
    no_chain: Py<PyAny>,
    none: Py<PyAny>,
    skipped: u64,
}

impl Decoder {
    fn new(py: Python<'_>, data: &PerfData, opened: &Opened) -> PyResult<Self> {
        let mut events = Vec::new();
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
            events.push(event);
        }
        let mut comms = QuickMap::default();
        comms.insert(0, PyString::new(py, IDLE_COMM).into_any().unbind());
        Ok(Decoder {
            events,
            chained: opened
                .attrs
                .iter()
                .map(|attr| attr.sample_type & SAMPLE_CALLCHAIN != 0)
                .collect(),
            states,
            columns: Columns::default(),
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
            empty_text: PyString::new(py, "").into_any().unbind(),
            no_chain: PyBytes::new(py, b"").into_any().unbind(),
            none: py.None(),
            skipped: 0,
        })
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
    fn replay(&mut self, py: Python<'_>, task: &TaskKind) {
        match task {
            TaskKind::Comm {
                pid,
                tid,
                name,
                exec,
            } => {
                self.comm(py, *pid, *tid, name, *exec);
            }
            TaskKind::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => self.fork(py, *pid, *ppid, *tid, *ptid),
            _ => {}
        }
    }

    fn comm(&mut self, py: Python<'_>, pid: i32, tid: i32, name: &str, exec: bool) -> Py<PyAny> {
        let name = PyString::new(py, name).into_any().unbind();
        self.comms.insert(tid, name.clone_ref(py));
        if exec {
            *self.generations.entry(pid).or_insert(0) += 1;
        }
        name
    }

    fn fork(&mut self, py: Python<'_>, pid: i32, ppid: i32, tid: i32, ptid: i32) {
        // perf drops a thread it knew by this tid (the tid was reused), then names the new
        // one after its parent when the parent's name was ever set
        self.comms.remove(&tid);
        if ptid != 0 {
            if let Some(parent) = self.comms.get(&ptid).map(|name| name.clone_ref(py)) {
                self.comms.insert(tid, parent);
            }
        }
        if pid != ppid {
            self.generations.insert(pid, 0);
        }
    }

    fn comm_of(&mut self, py: Python<'_>, tid: i32) -> Py<PyAny> {
        if let Some(name) = self.comms.get(&tid) {
            return name.clone_ref(py);
        }
        self.unnamed
            .entry(tid)
            .or_insert_with(|| PyString::new(py, &format!(":{tid}")).into_any().unbind())
            .clone_ref(py)
    }

    /// An event with no name, state or chain (a switch-out record, a fork, an exit).
    #[allow(clippy::too_many_arguments)]
    fn push_bare(
        &mut self,
        py: Python<'_>,
        kind: i64,
        time: u64,
        cpu: i64,
        pid: i64,
        tid: i64,
        other: i64,
    ) {
        self.push(py, kind, time, cpu, pid, tid, other, None, None, None);
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        py: Python<'_>,
        kind: i64,
        time: u64,
        cpu: i64,
        pid: i64,
        tid: i64,
        other: i64,
        name: Option<Py<PyAny>>,
        state: Option<Py<PyAny>>,
        chain: Option<Py<PyAny>>,
    ) {
        let columns = &mut self.columns;
        columns.kinds.push(kind);
        columns.times.push(time);
        columns.cpus.push(cpu);
        columns.pids.push(pid);
        columns.tids.push(tid);
        columns.others.push(other);
        columns
            .names
            .push(name.unwrap_or_else(|| self.empty_text.clone_ref(py)));
        columns
            .states
            .push(state.unwrap_or_else(|| self.empty_text.clone_ref(py)));
        columns
            .chains
            .push(chain.unwrap_or_else(|| self.none.clone_ref(py)));
    }

    fn decode(
        &mut self,
        py: Python<'_>,
        attr_index: usize,
        record: &RawEventRecord<'_>,
        time: u64,
    ) {
        match record.record_type.0 {
            SAMPLE => self.sample(py, attr_index, record, time),
            SWITCH | SWITCH_CPU_WIDE => {
                let Some((pid, tid, cpu)) = self.trailer(record) else {
                    return;
                };
                if record.misc & MISC_SWITCH_OUT != 0 {
                    let preempted = i64::from(record.misc & MISC_SWITCH_OUT_PREEMPT != 0);
                    self.push_bare(py, SWITCH_OUT, time, cpu, pid.into(), tid.into(), preempted);
                } else {
                    let name = self.comm_of(py, tid);
                    self.push(
                        py,
                        SWITCH_IN,
                        time,
                        cpu,
                        pid.into(),
                        tid.into(),
                        0,
                        Some(name),
                        None,
                        None,
                    );
                }
            }
            COMM | FORK | EXIT => self.task(py, record, time),
            _ => {}
        }
    }

    /// The pid, tid and CPU of a record other than a sample, from its sample_id; None
    /// (counted as skipped) when it has none.
    fn trailer(&mut self, record: &RawEventRecord<'_>) -> Option<(i32, i32, i64)> {
        let common = record.common_data().ok();
        match common.as_ref().and_then(|c| Some((c.pid?, c.tid?, c.cpu))) {
            Some((pid, tid, cpu)) => Some((pid, tid, cpu.map_or(UNKNOWN_CPU, i64::from))),
            None => {
                self.skipped += 1;
                None
            }
        }
    }

    /// A FORK, EXIT or COMM record, in its place: names and generations change from here on.
    fn task(&mut self, py: Python<'_>, record: &RawEventRecord<'_>, time: u64) {
        let Some((pid, tid, cpu)) = self.trailer(record) else {
            return;
        };
        match record.parse() {
            Ok(linux_perf_event_reader::EventRecord::Fork(fork)) => {
                self.fork(py, fork.pid, fork.ppid, fork.tid, fork.ptid);
                self.push_bare(
                    py,
                    THREAD_FORK,
                    time,
                    cpu,
                    fork.pid.into(),
                    fork.tid.into(),
                    fork.ptid.into(),
                );
            }
            Ok(linux_perf_event_reader::EventRecord::Exit(exit)) => {
                self.push_bare(
                    py,
                    THREAD_EXIT,
                    time,
                    cpu,
                    exit.pid.into(),
                    exit.tid.into(),
                    0,
                );
            }
            Ok(linux_perf_event_reader::EventRecord::Comm(comm)) => {
                let name = perf_file::text(&comm.name.as_slice());
                let name = self.comm(py, comm.pid, comm.tid, &name, comm.is_execve);
                self.push(
                    py,
                    THREAD_COMM,
                    time,
                    cpu,
                    pid.into(),
                    tid.into(),
                    comm.is_execve.into(),
                    Some(name),
                    None,
                    None,
                );
            }
            _ => self.skipped += 1,
        }
    }

    fn sample(
        &mut self,
        py: Python<'_>,
        attr_index: usize,
        record: &RawEventRecord<'_>,
        time: u64,
    ) {
        let Some(event) = self.events.get(attr_index) else {
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
        let cpu = sample.cpu.map_or(UNKNOWN_CPU, i64::from);
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
                        let name = self.prev_comm(py, comm);
                        let state = self.state_name(py, state);
                        Some((SCHED_SWITCH, prev, next, name, Some(state)))
                    }
                    _ => None,
                }
            }
            SampleEvent::Waking { pid: woken } => woken.integer(&raw).map(|woken| {
                (
                    SCHED_WAKING,
                    i64::from(tid),
                    woken,
                    self.comm_of(py, tid),
                    None,
                )
            }),
            SampleEvent::Other => None,
        };
        let Some((kind, thread, other, name, state)) = decoded else {
            self.skipped += 1;
            return;
        };
        let chain = self.chain(py, attr_index, &sample, pid);
        self.push(
            py,
            kind,
            time,
            cpu,
            pid.into(),
            thread,
            other,
            Some(name),
            state,
            Some(chain),
        );
    }

    fn prev_comm(&mut self, py: Python<'_>, raw: &[u8]) -> Py<PyAny> {
        if let Some(name) = self.prev_comms.get(raw) {
            return name.clone_ref(py);
        }
        let name = PyString::new(py, &perf_file::text(raw)).into_any().unbind();
        self.prev_comms.insert(raw.to_vec(), name.clone_ref(py));
        name
    }

    fn state_name(&mut self, py: Python<'_>, state: i64) -> Py<PyAny> {
        let states = &self.states;
        self.state_names
            .entry(state)
            .or_insert_with(|| {
                let name = states
                    .as_ref()
                    .map(|names| names.name(state))
                    .unwrap_or_default();
                PyString::new(py, &name).into_any().unbind()
            })
            .clone_ref(py)
    }

    /// The key of a sample's call chain (b"" when its event takes none). The sample's user
    /// registers and stack copy (`sample.user_regs`, `sample.user_stack`, --call-graph
    /// dwarf) are what an unwinder would extend the chain with.
    fn chain(
        &mut self,
        py: Python<'_>,
        attr_index: usize,
        sample: &SampleRecord<'_>,
        pid: i32,
    ) -> Py<PyAny> {
        let Some(callchain) = sample
            .callchain
            .as_ref()
            .filter(|_| self.chained.get(attr_index) == Some(&true))
        else {
            return self.no_chain.clone_ref(py);
        };
        self.addresses.clear();
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
        if let Some(chain) = known.iter().find(|chain| {
            chain.pid == pid
                && chain.generation == generation
                && *chain.addresses == *self.addresses
        }) {
            return chain.key.clone_ref(py);
        }
        let raw: Vec<u8> = self
            .addresses
            .iter()
            .flat_map(|address| address.to_le_bytes())
            .collect();
        let bytes = PyBytes::new(py, &raw).into_any();
        let key = if user {
            match (pid, generation, bytes).into_pyobject(py) {
                Ok(tuple) => tuple.into_any().unbind(),
                Err(_) => self.no_chain.clone_ref(py),
            }
        } else {
            bytes.unbind()
        };
        known.push(KnownChain {
            pid,
            generation,
            addresses: self.addresses.clone().into_boxed_slice(),
            key: key.clone_ref(py),
        });
        key
    }

    /// The batch so far to Python, as nine lists.
    fn hand_over(&mut self, py: Python<'_>, take: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.columns.kinds.is_empty() {
            return Ok(());
        }
        let columns = std::mem::take(&mut self.columns);
        let lists = (
            PyList::new(py, columns.kinds)?,
            PyList::new(py, columns.times)?,
            PyList::new(py, columns.cpus)?,
            PyList::new(py, columns.pids)?,
            PyList::new(py, columns.tids)?,
            PyList::new(py, columns.others)?,
            PyList::new(py, columns.names)?,
            PyList::new(py, columns.states)?,
            PyList::new(py, columns.chains)?,
        );
        take.call1(lists)?;
        Ok(())
    }
}

/// prev_state as perf prints it by this sched_switch print format (None: a format the
/// reader does not decode).
#[pyfunction]
pub fn prev_state_name(print_fmt: &str, state: i64) -> Option<String> {
    StateNames::of(print_fmt).map(|names| names.name(state))
}
