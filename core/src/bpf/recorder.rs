//! A recording in the kernel: the BPF programs loaded, configured and attached;
//! the ring buffer drained to the capture's records file, each wait's stacks numbered
//! in the recording's stack table (`stack_store`); at the end the waits still open and
//! the stack table written out. A live recording (`offcpu top`) drains to memory
//! instead, which its caller takes from as it goes, and reads the stack table and the
//! waits still open whenever it needs them.
//!
//! Everything the kernel holds for the recording (programs, links, maps) is
//! held here by file descriptors and never pinned, so it goes away with the
//! process on every path: `finish`, a Python exception, or SIGKILL.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
use libbpf_rs::{
    Iter, Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder, Program, RingBufferBuilder,
};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::record::{
    u32_at, u64_at, BACK_AT, KIND_AT, RECORD_SIZE, SINCE_AT, WAIT, WAKER_PID_AT,
    WAKER_USER_STACK_AT,
};
use super::stack_store::{held_ids, KernelStacks, StackStore};
use crate::files::create_private;
use crate::BpfError;

static PROGRAMS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/offcpu.bpf.o"));

/// The task iterator that writes the waits still open at the end.
const OPEN_WAITS: &str = "dump_open_waits";
const POLL: Duration = Duration::from_millis(50);
/// Between emptying the kernel's stack table and reading the waits open: the programs that
/// found a stack there just before have stored its id in their wait (they run for microseconds)
const EMPTIED_SETTLE: Duration = Duration::from_millis(5);
/// The records a live recording holds for its caller at most, between two takes: a
/// caller that stops taking loses the newest (counted), never grows the process.
const LIVE_CAP: usize = 64 << 20;

/// The counters of `struct counters` in offcpu.bpf.c, in their order.
const COUNTERS: [&str; 8] = [
    "waits",
    "sampled",
    "unsampled",
    "waker_stacks",
    "lost_records",
    "lost_waits",
    "stack_errors",
    "unseen_switches",
];

/// `struct config` in offcpu.bpf.c.
struct Config {
    filter: u32,
    follow_forks: bool,
    stacks_per_window: u32,
    /// offcpu itself, never recorded: its reading of the records would be recorded in turn
    own_process: u32,
    long_wait_ns: u64,
}

impl Config {
    fn bytes(&self) -> [u8; 24] {
        let mut bytes = [0u8; 24];
        bytes[0..4].copy_from_slice(&self.filter.to_le_bytes());
        bytes[4..8].copy_from_slice(&u32::from(self.follow_forks).to_le_bytes());
        bytes[8..12].copy_from_slice(&self.stacks_per_window.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.own_process.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.long_wait_ns.to_le_bytes());
        bytes
    }
}

fn bpf_error(what: &str, error: impl std::fmt::Display) -> PyErr {
    BpfError::new_err(format!("{what}: {error}"))
}

/// A file of the capture that could not be made or written (the disk full, a read-only file
/// system, a name taken): OSError(errno, strerror, path), for the caller to say which.
fn file_error(path: &Path, error: &std::io::Error) -> PyErr {
    // io::Error's text ends with " (os error N)", which OSError says its own way
    let text = error.to_string();
    let strerror = text
        .split(" (os error")
        .next()
        .unwrap_or_default()
        .to_owned();
    PyOSError::new_err((
        error.raw_os_error().unwrap_or(0),
        strerror,
        path.to_path_buf(),
    ))
}

/// A recording, from its start (`new`) to `finish`.
#[pyclass(unsendable)]
pub struct BpfRecording {
    object: Object,
    links: Vec<Link>,
    records: PathBuf,
    stop: Arc<AtomicBool>,
    size: Arc<Size>,
    /// The wakers the drain saw first since `new_wakers` last took them
    wakers: Arc<Mutex<Vec<u32>>>,
    /// Ends with the records file, whole, for the waits still open to be appended
    /// (None: a live recording's, in memory)
    drain: Option<JoinHandle<std::io::Result<Option<File>>>>,
    /// A live recording's records not yet taken
    live: Option<Arc<Live>>,
    stacks: Arc<Stacks>,
    /// The task iterator's link that reads the waits open
    open_waits: Arc<Link>,
}

/// The recording's stack table, and the kernel's it is copied from.
struct Stacks {
    store: Mutex<StackStore>,
    kernel: KernelTable,
}

impl Stacks {
    fn store(&self) -> std::sync::MutexGuard<'_, StackStore> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The waits open now, their stacks numbered.
    fn open_waits(&self, link: &Link) -> PyResult<Vec<u8>> {
        let mut open = read_open_waits(link)?;
        self.store()
            .renumber(&self.kernel, &mut open, monotonic_ns());
        Ok(open)
    }

    /// The stack table to `path`.
    fn write(&self, path: &Path) -> PyResult<()> {
        let failed = |e: std::io::Error| file_error(path, &e);
        let mut writer = BufWriter::new(create_private(path).map_err(failed)?);
        self.store().write(&mut writer).map_err(failed)?;
        let file = writer.into_inner().map_err(|e| failed(e.into_error()))?;
        file.sync_data().map_err(failed)
    }
}

/// A live recording's records, drained to memory, bounded by LIVE_CAP.
struct Live {
    records: Mutex<Vec<u8>>,
    dropped: AtomicU64,
}

/// The drain's writer for a live recording.
struct LiveSink(Arc<Live>);

impl Write for LiveSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut records = self
            .0
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if records.len() + bytes.len() <= LIVE_CAP {
            records.extend_from_slice(bytes);
        } else {
            self.0
                .dropped
                .fetch_add((bytes.len() / RECORD_SIZE) as u64, Ordering::Relaxed);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[pymethods]
impl BpfRecording {
    /// Load, configure and attach the programs, and start writing records to `records`
    /// (to memory, for `take_records`, when it is empty).
    /// `filter`: "all", "processes" (the `processes`' tgids, and with `follow_forks` the
    /// processes they create), "cgroups" (the cgroup v2 ids in `cgroups`) or "thread" (the
    /// one thread id in `processes`).
    /// `stacks_per_second`: the stack budget of each CPU; `long_wait_ns`: waits blocked this
    /// long take their waker's stack whatever the budget says.
    #[new]
    #[pyo3(signature = (records, filter, processes, cgroups, follow_forks, stacks_per_second, long_wait_ns))]
    fn new(
        records: PathBuf,
        filter: &str,
        processes: Vec<u32>,
        cgroups: Vec<u64>,
        follow_forks: bool,
        stacks_per_second: u32,
        long_wait_ns: u64,
    ) -> PyResult<Self> {
        let filter = match filter {
            "all" => 0,
            "processes" => 1,
            "cgroups" => 2,
            "thread" => 3,
            other => return Err(bpf_error("unknown filter", other)),
        };
        let config = Config {
            filter,
            follow_forks,
            stacks_per_window: (stacks_per_second / 10).max(1),
            own_process: std::process::id(),
            long_wait_ns,
        };
        let mut object = load(&config)?;
        fill_targets(&object, &processes, &cgroups)?;
        let live = records.as_os_str().is_empty().then(|| {
            Arc::new(Live {
                records: Mutex::new(Vec::new()),
                dropped: AtomicU64::new(0),
            })
        });
        let file = match live {
            Some(_) => None,
            None => Some(create_private(&records).map_err(|e| file_error(&records, &e))?),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let size = Arc::new(Size {
            written: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            reached_ns: AtomicU64::new(0),
        });
        let wakers = Arc::new(Mutex::new(Vec::new()));
        let ring = MapHandle::try_from(&map(&object, "records")?)
            .map_err(|e| bpf_error("the ring buffer", e))?;
        let stacks = Arc::new(Stacks {
            store: Mutex::new(StackStore::default()),
            kernel: KernelTable::of(&object)?,
        });
        let open_waits = Arc::new(open_waits_link(&mut object)?);
        let drain = {
            let reader = Reader {
                stop: Arc::clone(&stop),
                size: Arc::clone(&size),
                wakers: Arc::clone(&wakers),
                stacks: Arc::clone(&stacks),
                open_waits: Arc::clone(&open_waits),
            };
            let sink = live.clone().map(LiveSink);
            std::thread::Builder::new()
                .name("offcpu-drain".into())
                .spawn(move || match (file, sink) {
                    (Some(file), _) => drain(ring, file, &reader).and_then(|file| {
                        file.sync_data()?;
                        Ok(Some(file))
                    }),
                    (None, Some(sink)) => drain(ring, sink, &reader).map(|_| None),
                    (None, None) => Ok(None),
                })
                .map_err(|e| bpf_error("the ring buffer's reader", e))?
        };
        let mut recording = Self {
            object,
            links: Vec::new(),
            records,
            stop,
            size,
            wakers,
            drain: Some(drain),
            live,
            stacks,
            open_waits,
        };
        for program in recording
            .object
            .progs_mut()
            .filter(|program| program.name() != OPEN_WAITS)
        {
            let link = program.attach().map_err(|e| {
                bpf_error(
                    &format!("attaching {}", program.name().to_string_lossy()),
                    e,
                )
            })?;
            recording.links.push(link);
        }
        Ok(recording)
    }

    /// What the recording counted so far: waits, stacks, losses, bytes written.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counts = PyDict::new(py);
        for (name, value) in COUNTERS.iter().zip(sum_counters(&self.object)?) {
            counts.set_item(*name, value)?;
        }
        counts.set_item("missed_runs", missed_runs(&self.object))?;
        counts.set_item("stacks_held", self.stacks.store().sizes().0)?;
        counts.set_item("bytes_written", self.size.written.load(Ordering::Relaxed))?;
        if let Some(live) = &self.live {
            counts.set_item("live_dropped", live.dropped.load(Ordering::Relaxed))?;
        }
        Ok(counts)
    }

    /// Hold the records to `bytes` (--max-size, less the room the waits still open will take):
    /// once they reach it, only the waits that began before go on being written.
    fn set_size_limit(&self, bytes: u64) {
        self.size.limit.store(bytes, Ordering::Relaxed);
    }

    /// When the records reached the size limit (CLOCK_MONOTONIC ns, as the programs' times),
    /// the recording's end; None while they have not.
    fn size_limit_reached_ns(&self) -> Option<u64> {
        Some(self.size.reached_ns.load(Ordering::Relaxed)).filter(|&at| at != 0)
    }

    /// Whether records are still written: false once writing failed (the disk full), which
    /// `finish` then raises, or once finished.
    fn writing(&self) -> bool {
        self.drain
            .as_ref()
            .is_some_and(|drain| !drain.is_finished())
    }

    /// The processes whose user stacks were taken as wakers, each once, since the last
    /// call: those outside the target too, whose memory maps the recording reads to name
    /// their frames.
    fn new_wakers(&self) -> Vec<u32> {
        std::mem::take(&mut *self.wakers.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A live recording's records drained since the last call (empty for one to a file).
    fn take_records<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let taken = self.live.as_ref().map_or_else(Vec::new, |live| {
            std::mem::take(&mut *live.records.lock().unwrap_or_else(PoisonError::into_inner))
        });
        PyBytes::new(py, &taken)
    }

    /// The waits open now, as records with no switch-in (back_ns 0), while the recording goes on.
    fn open_waits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.stacks.open_waits(&self.open_waits)?))
    }

    /// The stack table as it stands, to `stacks` (as `finish` writes it), while the recording goes on.
    fn save_stacks(&self, stacks: PathBuf) -> PyResult<()> {
        self.stacks.write(&stacks)
    }

    /// A live recording's: the stacks that no record named for `keep_ns` are let go.
    fn keep_stacks(&self, keep_ns: u64) {
        self.stacks.store().keep_for(keep_ns);
    }

    /// End the recording: detach the programs, drain what is left, write the waits still
    /// open, then the stack table to `stacks`. Returns the final counters.
    fn finish<'py>(&mut self, py: Python<'py>, stacks: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        self.links.clear();
        self.stop.store(true, Ordering::Relaxed);
        let Some(drain) = self.drain.take() else {
            return Err(bpf_error("writing records", "the recording has finished"));
        };
        let mut file = match py.detach(|| drain.join()) {
            Ok(Ok(Some(file))) => file,
            Ok(Ok(None)) => {
                return Err(bpf_error("writing records", "a live recording has no file"))
            }
            Ok(Err(e)) => return Err(file_error(&self.records, &e)),
            Err(_) => return Err(bpf_error("writing records", "the reader thread failed")),
        };
        let open = self.stacks.open_waits(&self.open_waits)?;
        file.write_all(&open)
            .and_then(|()| file.sync_data())
            .map_err(|e| file_error(&self.records, &e))?;
        still_named(&file, &self.records).map_err(|e| file_error(&self.records, &e))?;
        self.size
            .written
            .fetch_add(open.len() as u64, Ordering::Relaxed);
        self.stacks.write(&stacks)?;
        self.counters(py)
    }
}

impl Drop for BpfRecording {
    fn drop(&mut self) {
        self.links.clear();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }
}

fn load(config: &Config) -> PyResult<Object> {
    // libbpf's own messages would go to stderr; its errors come back to us instead.
    libbpf_rs::set_print(None);
    let mut open = ObjectBuilder::default()
        .open_memory(PROGRAMS)
        .map_err(|e| bpf_error("opening the BPF programs", e))?;
    let mut rodata = open
        .maps_mut()
        .find(|map| map.name().to_string_lossy().ends_with(".rodata"));
    let Some(value) = rodata
        .as_mut()
        .and_then(|map| map.initial_value_mut())
        .and_then(|value| value.get_mut(..24))
    else {
        return Err(bpf_error(
            "configuring the BPF programs",
            "no .rodata to hold the configuration",
        ));
    };
    value.copy_from_slice(&config.bytes());
    open.load()
        .map_err(|e| bpf_error("loading the BPF programs", e))
}

fn map<'obj>(object: &'obj Object, name: &str) -> PyResult<libbpf_rs::Map<'obj>> {
    object
        .maps()
        .find(|map| map.name() == name)
        .ok_or_else(|| bpf_error("the BPF programs have no map", name))
}

fn fill_targets(object: &Object, processes: &[u32], cgroups: &[u64]) -> PyResult<()> {
    let targets = map(object, "target_processes")?;
    for tgid in processes {
        targets
            .update(&tgid.to_ne_bytes(), &[1u8], MapFlags::ANY)
            .map_err(|e| bpf_error("adding a process", e))?;
    }
    let targets = map(object, "target_cgroups")?;
    for id in cgroups {
        targets
            .update(&id.to_ne_bytes(), &[1u8], MapFlags::ANY)
            .map_err(|e| bpf_error("adding a cgroup", e))?;
    }
    Ok(())
}

/// What the drain shares with the recording.
struct Reader {
    stop: Arc<AtomicBool>,
    size: Arc<Size>,
    /// Each process whose user stack was taken as a waker, once
    wakers: Arc<Mutex<Vec<u32>>>,
    stacks: Arc<Stacks>,
    open_waits: Arc<Link>,
}

/// The ring buffer's records, their stacks numbered, to `file` until `stop`, then what is
/// left in it; the kernel's stack table emptied whenever it is half full.
fn drain<W: Write>(ring: MapHandle, file: W, reader: &Reader) -> std::io::Result<W> {
    let Reader {
        stop,
        size,
        wakers,
        stacks,
        open_waits,
    } = reader;
    let writer = RefCell::new(BufWriter::with_capacity(1 << 20, file));
    let failed = RefCell::new(None);
    let mut seen = BTreeSet::new();
    // When the records were read, to the poll: what a live recording keeps its stacks by
    let now = Cell::new(monotonic_ns());
    let mut builder = RingBufferBuilder::new();
    builder
        .add(&ring, |record: &[u8]| {
            if !size.keeps(record) {
                return 0;
            }
            // (on the stack: the drain's hot path allocates nothing per record)
            let mut numbered = [0u8; RECORD_SIZE];
            let numbered = match numbered.get_mut(..record.len()) {
                Some(copy) => {
                    copy.copy_from_slice(record);
                    stacks.store().renumber(&stacks.kernel, copy, now.get());
                    &*copy
                }
                None => record, // (longer than any record: written as it came)
            };
            if let Err(error) = writer.borrow_mut().write_all(numbered) {
                failed.replace(Some(error));
                return -1;
            }
            size.written
                .fetch_add(record.len() as u64, Ordering::Relaxed);
            if let Some(pid) = waker_with_user_stack(record) {
                if seen.insert(pid) {
                    wakers
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(pid);
                }
            }
            0
        })
        .map_err(std::io::Error::other)?;
    let buffer = builder.build().map_err(std::io::Error::other)?;
    while !stop.load(Ordering::Relaxed) && failed.borrow().is_none() {
        // The programs wake this thread only once the buffer fills up (a wakeup per record
        // would cost the recorded threads more than the record): it reads at every POLL too.
        // EINTR (a signal to the process) is not an end: only `stop` is.
        let _ = buffer.poll(POLL);
        now.set(monotonic_ns());
        let _ = buffer.consume();
        if stacks.store().wants_new_epoch(&stacks.kernel) {
            new_stack_epoch(stacks, open_waits, || {
                let _ = buffer.consume();
            });
        }
        // Whole records for a reader that follows them (`offcpu top`), within a POLL
        if let Err(error) = writer.borrow_mut().flush() {
            failed.replace(Some(error));
        }
    }
    let _ = buffer.consume();
    drop(buffer);
    if let Some(error) = failed.take() {
        return Err(error);
    }
    let file = writer
        .into_inner()
        .into_inner()
        .map_err(|e| e.into_error())?;
    Ok(file)
}

/// The kernel's stack table emptied for a new epoch, with the stacks of the waits open before
/// and after copied (`consume`: the records in the ring buffer read, those of waits that
/// ended meanwhile); then the copies no record can name any more let go.
fn new_stack_epoch(stacks: &Stacks, link: &Link, consume: impl Fn()) {
    let Ok(mut open) = read_open_waits(link) else {
        return; // (the table stays full: stacks are counted lost, no wrong stack named)
    };
    let mut held = held_ids(&open);
    stacks
        .store()
        .new_epoch(&stacks.kernel, &mut open, monotonic_ns());
    std::thread::sleep(EMPTIED_SETTLE);
    consume();
    if let Ok(mut open) = read_open_waits(link) {
        held.extend(held_ids(&open));
        consume();
        let mut store = stacks.store();
        store.renumber(&stacks.kernel, &mut open, monotonic_ns());
        store.let_go(&held, monotonic_ns());
    }
}

/// An error unless `path` still names `file` (its records went to the file made at the start,
/// whatever was put at the name since: a capture whose name leads elsewhere is no capture).
fn still_named(file: &File, path: &Path) -> std::io::Result<()> {
    let (ours, named) = (file.metadata()?, std::fs::symlink_metadata(path));
    match named {
        Ok(named) if named.dev() == ours.dev() && named.ino() == ours.ino() => Ok(()),
        _ => Err(std::io::Error::from_raw_os_error(libc::EEXIST)),
    }
}

/// The records written, and the size they are held to.
struct Size {
    written: AtomicU64,
    limit: AtomicU64,
    /// When the records reached `limit` (0: not yet)
    reached_ns: AtomicU64,
}

impl Size {
    /// Whether a record is written: every record until the records reach the limit; then the
    /// waits that began before only (the reader cuts them at the recording's end), so that the
    /// records pass the limit by the waits in flight at most, whatever their rate.
    fn keeps(&self, record: &[u8]) -> bool {
        let mut reached = self.reached_ns.load(Ordering::Relaxed);
        if reached == 0 {
            let after = self.written.load(Ordering::Relaxed) + record.len() as u64;
            if after <= self.limit.load(Ordering::Relaxed) {
                return true;
            }
            // The wait's end: the records still in the ring buffer before it are kept (their
            // waits began earlier), those after are the waits then in flight, and no more
            reached = Some(u64_at(record, BACK_AT))
                .filter(|&back| back != 0 && u32_at(record, KIND_AT) == WAIT)
                .unwrap_or_else(monotonic_ns);
            self.reached_ns.store(reached, Ordering::Relaxed);
        }
        u32_at(record, KIND_AT) == WAIT && u64_at(record, SINCE_AT) < reached
    }
}

/// CLOCK_MONOTONIC, the clock of the programs' times (bpf_ktime_get_ns) and of Python's
/// time.monotonic_ns().
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64) * 1_000_000_000 + now.tv_nsec as u64
}

/// The waker's process of a wait record whose waker's user stack was taken.
fn waker_with_user_stack(record: &[u8]) -> Option<u32> {
    let waker_user_stack = u32_at(record, WAKER_USER_STACK_AT) as i32;
    let taken =
        record.len() >= RECORD_SIZE && u32_at(record, KIND_AT) == WAIT && waker_user_stack >= 0;
    taken.then(|| u32_at(record, WAKER_PID_AT))
}

/// How many times the kernel skipped one of our programs because one of them was already
/// running on that CPU (a switch or a wakeup not seen: its wait is lost).
fn missed_runs(object: &Object) -> u64 {
    let ours: Vec<u32> = object
        .progs()
        .filter_map(|program| Program::id_from_fd(program.as_fd()).ok())
        .collect();
    ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default())
        .filter(|info| ours.contains(&info.id))
        .map(|info| info.recursion_misses)
        .sum()
}

fn sum_counters(object: &Object) -> PyResult<Vec<u64>> {
    let counters = map(object, "counters")?;
    let per_cpu = counters
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| bpf_error("reading the counters", e))?
        .unwrap_or_default();
    let mut sums = vec![0u64; COUNTERS.len()];
    for cpu in per_cpu {
        for (sum, value) in sums.iter_mut().zip(cpu.chunks_exact(8)) {
            *sum += u64::from_ne_bytes(value.try_into().unwrap_or([0; 8]));
        }
    }
    Ok(sums)
}

/// The task iterator `dump_open_waits` attached, to read the waits open whenever asked.
fn open_waits_link(object: &mut Object) -> PyResult<Link> {
    let program = object
        .progs_mut()
        .find(|program| program.name() == OPEN_WAITS)
        .ok_or_else(|| bpf_error("the BPF programs have no program", OPEN_WAITS))?;
    program
        .attach()
        .map_err(|e| bpf_error("reading the waits still open", e))
}

/// The waits open now, as records with no switch-in, from the task iterator `dump_open_waits`.
fn read_open_waits(link: &Link) -> PyResult<Vec<u8>> {
    let failed = |e: &dyn std::fmt::Display| bpf_error("reading the waits still open", e);
    let mut open = Vec::new();
    Iter::new(link)
        .map_err(|e| failed(&e))?
        .read_to_end(&mut open)
        .map_err(|e| failed(&e))?;
    Ok(open)
}

/// The kernel's stack table: its maps in offcpu.bpf.c (`stack_ids`, `stacks`,
/// `next_stack_id`, `epoch_start`), their sizes as the program declares them.
struct KernelTable {
    ids: MapHandle,
    stacks: MapHandle,
    next: MapHandle,
    start: MapHandle,
    slots: u32,
    epoch_ids: u32,
}

impl KernelTable {
    fn of(object: &Object) -> PyResult<Self> {
        let handle = |name: &str| {
            MapHandle::try_from(&map(object, name)?)
                .map_err(|e| bpf_error(&format!("the map {name}"), e))
        };
        let (ids, stacks) = (handle("stack_ids")?, handle("stacks")?);
        Ok(Self {
            slots: stacks.max_entries(),
            epoch_ids: ids.max_entries(),
            ids,
            stacks,
            next: handle("next_stack_id")?,
            start: handle("epoch_start")?,
        })
    }
}

impl KernelStacks for KernelTable {
    fn read(&self, id: u32) -> Option<Vec<u64>> {
        let slot = id % self.slots;
        let frames = self
            .stacks
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        Some(
            frames
                .chunks_exact(8)
                .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                .take_while(|&address| address != 0)
                .collect(),
        )
    }

    fn next_id(&self) -> Option<u32> {
        let value = self
            .next
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        Some(u32_at(&value, 0))
    }

    fn new_epoch(&self, start: u32) {
        let _ = self
            .start
            .update(&0u32.to_ne_bytes(), &start.to_ne_bytes(), MapFlags::ANY);
        // All the keys first: deleting while walking them would start the walk again
        let hashes: Vec<Vec<u8>> = self.ids.keys().collect();
        for hash in hashes {
            let _ = self.ids.delete(&hash);
        }
    }

    fn epoch_ids(&self) -> u32 {
        self.epoch_ids
    }
}
