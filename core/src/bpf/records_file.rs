//! bpf-records.bin read for the engine (`RecordsFile`), a few MB at a time whatever its
//! length: walked once when opened (its fields checked, the processes' exec generations, what
//! the notes count, the span of times of each chunk), then each time slice decoded from the
//! chunks that hold its events and paired, in a pool of threads.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::decode::{count_generation, Keys, RuntimeSamples, SliceDecoder};
use super::record::{
    u32_at, u64_at, Record, BACK_AT, COMM, EXIT, FORK, KIND_AT, NOT_TAKEN, RECORD_SIZE, SINCE_AT,
    WAIT,
};
use crate::engine::{SliceBuilder, SliceResult};
use crate::files::open_regular;
use crate::generations::Generations;
use crate::perf::perf_file::FileError;
use crate::quick::QuickMap;
use crate::slice_pool;

/// Records read at a time (3.7 MB).
const CHUNK_RECORDS: usize = 1 << 15;
/// What a record's fields can be, the kernel's limits: a pid or tid at most PID_MAX_LIMIT, a
/// CPU's number below NR_CPUS (8,192 at most: this leaves room), a weight of 2^20 at most
/// (the BPF program's), a time of CLOCK_MONOTONIC in nanoseconds (an int64), a comm's state
/// 0 or EXEC.
const PID_MAX_LIMIT: u64 = 1 << 22;
const CPUS_MAX: u64 = 1 << 16;
const MAX_WEIGHT_SHIFT: u64 = 20;
const TIME_MAX: u64 = (1 << 63) - 1;
/// A user stack's walk that found no user frames (a kernel thread has none): not a failure.
const EFAULT: i32 = 14;
/// Parts of the window counted apart to cut it into slices of as many events each.
const BUCKETS: usize = 1 << 16;
/// The most events the threads that pair the slices hold together (48 bytes each, and half
/// as much again while they are sorted): each slice is decoded and paired a part at a time.
const EVENTS_HELD: usize = 2 << 20;
/// Parts of a slice counted apart to cut it into parts of at most so many events.
const PART_BUCKETS: usize = 1 << 12;

/// What the notes say of the switches the tracepoint did not report: how many switch-outs
/// and switch-ins were placed by the threads' run time, in how many waits, how long they were.
#[derive(Default, Clone, Copy)]
pub struct Estimated {
    pub since: u64,
    pub back: u64,
    pub waits: u64,
    pub ns: i64,
}

/// The largest value of each checked field, in the order they are checked.
struct Maxima([u64; 10]);

const CHECKED: [(&str, u64); 10] = [
    ("pid", PID_MAX_LIMIT),
    ("tid", PID_MAX_LIMIT),
    ("waker_pid", PID_MAX_LIMIT),
    ("waker_tid", PID_MAX_LIMIT),
    ("cpu", CPUS_MAX - 1),
    ("weight_shift", MAX_WEIGHT_SHIFT),
    ("state", super::decode::EXEC as u64),
    ("since_ns", TIME_MAX),
    ("woken_ns", TIME_MAX),
    ("back_ns", TIME_MAX),
];

impl Maxima {
    fn add(&mut self, record: &Record) {
        let known = (WAIT..=COMM).contains(&record.kind);
        let wait = record.kind == WAIT;
        let values = [
            (known, u64::from(record.pid)),
            (known, u64::from(record.tid)),
            (known, u64::from(record.waker_pid)),
            (known, u64::from(record.waker_tid)),
            (known, u64::from(record.cpu)),
            (wait, u64::from(record.weight_shift)),
            (record.kind == COMM, u64::from(record.state)),
            (wait, record.since_ns),
            (wait, record.woken_ns),
            (wait, record.back_ns),
        ];
        for (largest, (counted, value)) in self.0.iter_mut().zip(values) {
            if counted {
                *largest = (*largest).max(value);
            }
        }
    }

    /// The first field whose largest value is more than it can be, said in a phrase.
    fn damage(&self) -> Option<String> {
        let (largest, (name, most)) = self
            .0
            .iter()
            .zip(CHECKED)
            .find(|(largest, (_, most))| *largest > most)?;
        Some(format!(
            "a record whose {name} is {}, more than the {} it can be",
            grouped(*largest),
            grouped(most)
        ))
    }
}

/// A number with its thousands grouped by commas (Python's format `,`).
fn grouped(number: u64) -> String {
    let digits = number.to_string();
    let mut text = String::new();
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// The times of a record's events: a wait's switch-out, wakeup (no earlier than the
/// switch-out) and switch-in, where they were recorded; a fork's, exit's or rename's.
fn event_times((kind, since, woken, back): (u32, u64, u64, u64)) -> impl Iterator<Item = u64> {
    let times = match kind {
        WAIT => [
            (since > 0).then_some(since),
            (woken > 0).then_some(woken.max(since)),
            (back > 0).then_some(back),
        ],
        FORK | EXIT | COMM => [Some(since), None, None],
        _ => [None; 3],
    };
    times.into_iter().flatten()
}

/// A record's kind and times (since, woken, back), read alone.
fn times_of(raw: &[u8]) -> (u32, u64, u64, u64) {
    let u64_at = |at: usize| u64_at(raw, at);
    let kind = u32_at(raw, KIND_AT);
    (
        kind,
        u64_at(SINCE_AT),
        u64_at(SINCE_AT + 8),
        u64_at(BACK_AT),
    )
}

/// Times from `first` to `last` ns cut into equal parts, told apart by a multiply (a u128
/// division per time took most of a walk): a later time is never in an earlier part.
struct Buckets {
    first: u64,
    scale: f64,
    count: usize,
}

impl Buckets {
    fn new(first: i64, last: i64, count: usize) -> Self {
        let width = (i128::from(last) - i128::from(first) + 1).max(1) as f64;
        Buckets {
            first: first.max(0) as u64,
            scale: count as f64 / width,
            count,
        }
    }

    /// The part of a time from `first` on (no later than `last`).
    fn of(&self, time: u64) -> usize {
        ((time.saturating_sub(self.first) as f64 * self.scale) as usize).min(self.count - 1)
    }
}

/// A part of a slice (first, last ns) and how many events it holds.
type Part = ((i64, i64), usize);

/// bpf-records.bin, walked once.
pub struct RecordsFile {
    path: PathBuf,
    records: usize,
    cut_short: bool,
    pub unknown: u64,
    pub generations: Generations,
    chunks: Vec<(u64, u64)>, // the first and last event time of each chunk's records
    pub estimated: Estimated,
    /// How many stacks were taken with each id (a negative id: -errno of a walk that failed).
    pub taken_stacks: QuickMap<i32, u64>,
    /// Each process's last name: of its main thread (if it had a record), of any thread.
    pub process_names: QuickMap<u32, (Option<[u8; 16]>, [u8; 16])>,
}

impl RecordsFile {
    /// The file at `path` walked: FileError::Damaged naming the first field of a record of a
    /// known kind that holds what the kernel never gives (a damaged or crafted file).
    pub fn open(path: &Path) -> Result<Self, FileError> {
        let file = open_regular(path)?;
        let size = file.metadata()?.len();
        let mut walked = RecordsFile {
            path: path.to_owned(),
            records: (size / RECORD_SIZE as u64) as usize,
            cut_short: size % RECORD_SIZE as u64 != 0,
            unknown: 0,
            generations: Generations::default(),
            chunks: Vec::new(),
            estimated: Estimated::default(),
            taken_stacks: QuickMap::default(),
            process_names: QuickMap::default(),
        };
        let mut maxima = Maxima([0; 10]);
        let mut generations = Generations::default();
        walked.walk(&file, |walked, chunk| {
            let mut span = (u64::MAX, 0);
            for record in Record::all(chunk) {
                maxima.add(&record);
                count_generation(&mut generations, &record);
                walked.count(&record);
                let times = (
                    record.kind,
                    record.since_ns,
                    record.woken_ns,
                    record.back_ns,
                );
                for time in event_times(times) {
                    span = (span.0.min(time), span.1.max(time));
                }
            }
            walked.chunks.push(span);
        })?;
        if let Some(what) = maxima.damage() {
            return Err(FileError::Damaged(what));
        }
        walked.generations = generations.sorted();
        Ok(walked)
    }

    /// `each(self, chunk)` of each chunk of the records in turn.
    fn walk(
        &mut self,
        file: &File,
        mut each: impl FnMut(&mut Self, &[u8]),
    ) -> Result<(), FileError> {
        let mut buffer = Vec::new();
        for chunk in 0..self.records.div_ceil(CHUNK_RECORDS) {
            read_chunk(file, self.records, chunk, &mut buffer)?;
            each(self, &buffer);
        }
        Ok(())
    }

    /// What the notes count of a record.
    fn count(&mut self, record: &Record) {
        if !(WAIT..=COMM).contains(&record.kind) {
            self.unknown += 1;
        }
        let names = self
            .process_names
            .entry(record.pid)
            .or_insert((None, record.comm));
        names.1 = record.comm;
        if record.tid == record.pid {
            names.0 = Some(record.comm);
        }
        if record.kind != WAIT {
            return;
        }
        if record.estimated != 0 {
            let estimated = &mut self.estimated;
            estimated.since += u64::from(record.estimated & 1);
            estimated.back += u64::from(record.estimated >> 1 & 1);
            estimated.waits += 1;
            let ns = (record.back_ns as i64).wrapping_sub(record.since_ns as i64);
            estimated.ns = estimated.ns.wrapping_add(ns);
        }
        for (stack, user) in [
            (record.kernel_stack, false),
            (record.user_stack, true),
            (record.waker_kernel_stack, false),
            (record.waker_user_stack, true),
        ] {
            if stack != NOT_TAKEN && !(user && stack == -EFAULT) {
                *self.taken_stacks.entry(stack).or_default() += 1;
            }
        }
    }

    /// Records that could not be read: of a kind this offcpu does not know, or cut short.
    pub fn unreadable(&self) -> u64 {
        self.unknown + u64::from(self.cut_short)
    }

    /// `count` consecutive slices of start_ns..end_ns (both included), cut where equal
    /// shares of the waits' times fall (their switch-outs', wakeups' and switch-ins').
    pub fn time_slices(
        &self,
        start_ns: i64,
        end_ns: i64,
        count: usize,
    ) -> Result<Vec<(i64, i64)>, FileError> {
        let (start, end) = (start_ns.max(0) as u64, end_ns.max(0) as u64);
        let buckets = Buckets::new(start_ns, end_ns, BUCKETS);
        let bucket = |time: u64| buckets.of(time);
        let inside = |time: &u64| start_ns <= end_ns && (start..=end).contains(time);
        let times = |record: &Record| {
            let chosen = record.kind == WAIT;
            [record.since_ns, record.woken_ns, record.back_ns]
                .into_iter()
                .filter(move |_| chosen)
        };
        let file = open_regular(&self.path)?;
        let mut counts = vec![0u64; BUCKETS];
        self.read_all(&file, |record| {
            for time in times(record).filter(inside) {
                counts[bucket(time)] += 1;
            }
        })?;
        // each cut is the time whose rank is a share of them: found in its bucket's times
        let total: u64 = counts.iter().sum();
        let ranks: Vec<u64> = (1..if total > 0 { count } else { 1 })
            .map(|part| total * part as u64 / count as u64)
            .collect();
        let mut wanted: QuickMap<usize, (u64, Vec<u64>)> = QuickMap::default(); // bucket: rank of its first, its times
        for &rank in &ranks {
            let (mut before, mut at) = (0, 0);
            while before + counts[at] <= rank {
                before += counts[at];
                at += 1;
            }
            wanted.entry(at).or_insert((before, Vec::new()));
        }
        self.read_all(&file, |record| {
            for time in times(record).filter(inside) {
                if let Some((_, kept)) = wanted.get_mut(&bucket(time)) {
                    kept.push(time);
                }
            }
        })?;
        let mut cuts = Vec::with_capacity(ranks.len());
        for rank in ranks {
            let (_, (before, kept)) = wanted
                .iter_mut()
                .find(|(_, (before, kept))| (*before..*before + kept.len() as u64).contains(&rank))
                .ok_or_else(|| {
                    FileError::Damaged("records that changed while it was read".into())
                })?;
            kept.sort_unstable();
            cuts.push(kept[(rank - *before) as usize] as i64);
        }
        Ok(slice_pool::cut_at(start_ns, end_ns, cuts))
    }

    /// Of each process, how many waits of `min_ns` or more (whose start was recorded and
    /// stacks taken) it had, and how many of them carry a runtime's frames.
    pub fn runtime_counts(
        &self,
        samples: &RuntimeSamples,
        min_ns: i64,
    ) -> Result<QuickMap<u32, (u64, u64)>, FileError> {
        let mut counts: QuickMap<u32, (u64, u64)> = QuickMap::default();
        self.read_all(&open_regular(&self.path)?, |record| {
            let (since, back) = (record.since_ns as i64, record.back_ns as i64);
            let taken = record.kernel_stack != NOT_TAKEN || record.user_stack != NOT_TAKEN;
            if record.kind == WAIT
                && taken
                && since > 0
                && (back == 0 || back.wrapping_sub(since) >= min_ns)
            {
                let count = counts.entry(record.pid).or_default();
                count.0 += 1;
                let stack = samples.stack_of(record.tid, record.since_ns, record.back_ns);
                count.1 += u64::from(stack != super::decode::NO_RUNTIME_STACK);
            }
        })?;
        Ok(counts)
    }

    fn read_all(&self, file: &File, mut each: impl FnMut(&Record)) -> Result<(), FileError> {
        let mut buffer = Vec::new();
        for chunk in 0..self.chunks.len() {
            read_chunk(file, self.records, chunk, &mut buffer)?;
            Record::all(&buffer).for_each(|record| each(&record));
        }
        Ok(())
    }

    /// Each of `slices` decoded and paired, in a pool of threads (crate::slice_pool);
    /// `poll(slices done, waiting)` as the pool calls it. The first slice counts the records
    /// that could not be read.
    pub fn pair<E: From<FileError>>(
        &self,
        slices: &[(i64, i64)],
        counted: Option<(i64, i64)>,
        switch_cost_ns: i64,
        keys: &Mutex<Keys>,
        runtime: Option<&RuntimeSamples>,
        poll: impl FnMut(usize, bool) -> Result<(), E>,
    ) -> Result<Vec<SliceResult>, E> {
        let most = (EVENTS_HELD / slice_pool::threads_for(slices.len())).max(1 << 16) as u64;
        slice_pool::pair_in_pool(
            slices.len(),
            |index, stop| {
                let skipped = if index == 0 { self.unreadable() } else { 0 };
                let held = (skipped, most);
                self.pair_slice(
                    slices[index],
                    counted,
                    switch_cost_ns,
                    keys,
                    runtime,
                    held,
                    stop,
                )
            },
            poll,
        )
    }

    /// One slice decoded and paired a part at a time (parts of at most `most` events), each
    /// from the chunks that hold its events.
    #[allow(clippy::too_many_arguments)]
    fn pair_slice(
        &self,
        (first, last): (i64, i64),
        counted: Option<(i64, i64)>,
        switch_cost_ns: i64,
        keys: &Mutex<Keys>,
        runtime: Option<&RuntimeSamples>,
        (skipped, most): (u64, u64),
        stop: &AtomicBool,
    ) -> Result<SliceResult, FileError> {
        let file = open_regular(&self.path)?;
        let mut buffer = Vec::new();
        let mut builder = SliceBuilder::new(first, last, counted, switch_cost_ns);
        for (part, count) in self.parts(&file, (first, last), most, stop, &mut buffer)? {
            let mut decoder = SliceDecoder::new(part, keys, &self.generations, runtime);
            decoder.reserve(count);
            self.each_touching(&file, part, stop, &mut buffer, |raw| {
                if let Ok(raw) = raw.try_into() {
                    decoder.take(&Record::parse(raw));
                }
            })?;
            builder.take(&decoder.events());
        }
        Ok(builder.finish(skipped))
    }

    /// `slice` cut where its events' times are, into parts of at most `most` events (but for
    /// a part of one instant that holds more), each with how many it holds.
    fn parts(
        &self,
        file: &File,
        (first, last): (i64, i64),
        most: u64,
        stop: &AtomicBool,
        buffer: &mut Vec<u8>,
    ) -> Result<Vec<Part>, FileError> {
        let bucket = Buckets::new(first, last, PART_BUCKETS);
        let mut counts = vec![(0u64, u64::MAX); PART_BUCKETS]; // events, the first one's time
        let within =
            |time: &u64| (i128::from(first)..=i128::from(last)).contains(&i128::from(*time));
        self.each_touching(file, (first, last), stop, buffer, |raw| {
            for time in event_times(times_of(raw)).filter(within) {
                let (count, earliest) = &mut counts[bucket.of(time)];
                (*count, *earliest) = (*count + 1, (*earliest).min(time));
            }
        })?;
        let mut parts = Vec::new();
        let (mut start, mut held) = (first, 0);
        for &(count, earliest) in &counts {
            if held > 0 && held + count > most {
                let bound = earliest as i64; // (a bucket of events: its first is a time)
                parts.push(((start, bound - 1), held as usize));
                (start, held) = (bound, 0);
            }
            held += count;
        }
        parts.push(((start, last), held as usize));
        Ok(parts)
    }

    /// `each(record's bytes)` of each record with an event from first to last ns (both
    /// included), in the file's order, read from the chunks whose times reach them.
    fn each_touching(
        &self,
        file: &File,
        (first, last): (i64, i64),
        stop: &AtomicBool,
        buffer: &mut Vec<u8>,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), FileError> {
        let within = |time: u64| (i128::from(first)..=i128::from(last)).contains(&i128::from(time));
        for (chunk, &(earliest, latest)) in self.chunks.iter().enumerate() {
            if i128::from(latest) < i128::from(first) || i128::from(earliest) > i128::from(last) {
                continue;
            }
            if stop.load(Ordering::Relaxed) {
                return Err(FileError::Io("interrupted".into()));
            }
            read_chunk(file, self.records, chunk, buffer)?;
            for raw in buffer.chunks_exact(RECORD_SIZE) {
                if event_times(times_of(raw)).any(within) {
                    each(raw);
                }
            }
        }
        Ok(())
    }
}

/// The records of chunk number `chunk` of a file of `records` records, into `buffer`.
fn read_chunk(
    file: &File,
    records: usize,
    chunk: usize,
    buffer: &mut Vec<u8>,
) -> Result<(), FileError> {
    let first = chunk * CHUNK_RECORDS;
    let count = CHUNK_RECORDS.min(records - first);
    buffer.resize(count * RECORD_SIZE, 0);
    file.read_exact_at(buffer, (first * RECORD_SIZE) as u64)
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                FileError::Damaged("fewer records than it did when the report began".into())
            }
            _ => FileError::from(error),
        })
}

#[cfg(test)]
#[path = "records_file_tests.rs"]
mod tests;
