//! perf.data read for the engine (`PerfReader`): its header, then its records walked once
//! when first needed (rounds, task records); the events of a time slice decoded from the
//! round that may hold its first record, and the slices paired in a thread each.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use linux_perf_data::{PerfFileReader, PerfFileRecord};
use linux_perf_event_reader::RawEventRecord;

use super::decoder::{Decoder, Keys, BATCH};
use super::index::Index;
use super::perf_file::{self, FileError, Opened, Shape};
use super::rounds::Rounds;
use super::tracing_formats::{self, Tracepoint};
use super::unwind::UnwindFiles;
use crate::engine::{Event, SliceBuilder, SliceResult};
use crate::slice_pool;

/// A perf.data, its header read; its records walked once when first needed.
pub struct PerfReader {
    pub path: PathBuf,
    pub shape: Shape,
    pub tracepoints: HashMap<u64, Tracepoint>,
    index: OnceLock<Result<Index, String>>,
    /// The mapped files' unwind tables, read once for every slice's unwinder.
    pub unwind_files: Arc<UnwindFiles>,
}

impl PerfReader {
    /// Read the header, attributes and feature sections of the perf.data at `path`.
    pub fn new(path: PathBuf) -> Result<Self, FileError> {
        let shape = perf_file::open(&path)?;
        let tracepoints = match &shape {
            Shape::File(opened) => opened
                .features
                .get(&perf_file::FEATURE_TRACING_DATA)
                .map(|section| tracing_formats::tracepoints(section))
                .unwrap_or_default(),
            _ => HashMap::new(),
        };
        Ok(PerfReader {
            path,
            shape,
            tracepoints,
            index: OnceLock::new(),
            unwind_files: Arc::default(),
        })
    }

    pub fn opened(&self) -> Option<&Opened> {
        match &self.shape {
            Shape::File(opened) => Some(opened),
            _ => None,
        }
    }

    pub fn tracepoint(&self, name: &str) -> Option<&Tracepoint> {
        self.tracepoints.values().find(|tp| tp.full_name == name)
    }

    /// The file and its index (its records walked once, the first time).
    pub fn index(&self) -> Result<(&Opened, &Index), FileError> {
        let opened = self
            .opened()
            .ok_or_else(|| FileError::Damaged("it was not written to a file".into()))?;
        let index = self.index.get_or_init(|| {
            opened.index().map_err(|error| match error {
                FileError::Io(what) | FileError::Damaged(what) => what,
            })
        });
        match index {
            Ok(index) => Ok((opened, index)),
            Err(what) => Err(FileError::Damaged(what.clone())),
        }
    }

    /// `count` consecutive slices of start_ns..end_ns (both included) of about the same number
    /// of records: cut at the first time of the rounds nearest equal parts of the file.
    pub fn time_slices(
        &self,
        start_ns: i64,
        end_ns: i64,
        count: usize,
    ) -> Result<Vec<(i64, i64)>, FileError> {
        let (opened, index) = self.index()?;
        let length = i128::from(opened.data_end - opened.data_start);
        let cuts = (1..count.max(1)).map(|part| {
            let target = i128::from(opened.data_start) + length * part as i128 / count as i128;
            let nearest = index
                .rounds
                .iter()
                .enumerate()
                .min_by_key(|(number, (offset, _))| {
                    ((i128::from(*offset) - target).abs(), *number)
                });
            nearest
                .and_then(|(_, (_, time))| *time)
                .map_or(-1, |time| time as i64)
        });
        Ok(slice_pool::cut_at(start_ns, end_ns, cuts))
    }

    /// Each of `slices` decoded and paired, in a pool of threads (crate::slice_pool);
    /// `poll(slices done, waiting)` as the pool calls it.
    pub fn pair<E: From<FileError>>(
        &self,
        slices: &[(i64, i64)],
        counted: (i64, i64),
        switch_cost_ns: i64,
        keys: &Mutex<Keys>,
        poll: impl FnMut(usize, bool) -> Result<(), E>,
    ) -> Result<Vec<SliceResult>, E> {
        let (opened, index) = self.index()?;
        slice_pool::pair_in_pool(
            slices.len(),
            |slice, stop| {
                self.pair_slice(
                    opened,
                    index,
                    keys,
                    slices[slice],
                    counted,
                    switch_cost_ns,
                    stop,
                )
            },
            poll,
        )
    }

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
        // The builder takes no event before `first`: no stack of those is unwound
        let skipped = self.decode(opened, index, keys, Some((first, last)), false, |events| {
            builder.take(events);
            match stop.load(Ordering::Relaxed) {
                true => Err(FileError::Io("interrupted".into())),
                false => Ok(()),
            }
        })?;
        Ok(builder.finish(skipped))
    }

    /// The events of `time_slice` (first, last ns; None: all), from the round that may hold
    /// its first record, to `take` a batch at a time (those before its first with their call
    /// chains when `chains_before`); returns how many records could not be decoded.
    pub fn decode<E: From<FileError>>(
        &self,
        opened: &Opened,
        index: &Index,
        keys: &Mutex<Keys>,
        time_slice: Option<(i64, i64)>,
        chains_before: bool,
        mut take: impl FnMut(&[Event]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let first = time_slice.map_or(0, |(first, _)| u64::try_from(first).unwrap_or(0));
        let start = index
            .rounds
            .get(round_for_time(index, first))
            .map_or(opened.data_end, |round| round.0);
        let mut decoder = Decoder::new(self, opened, keys);
        decoder.chains_from = if chains_before { 0 } else { first };
        for task in index.tasks.iter().filter(|task| task.offset < start) {
            decoder.replay(task);
        }
        let last = time_slice.map_or(i128::MAX, |(_, last)| i128::from(last));
        let mut each = |attr_index: usize, record: &RawEventRecord<'_>| -> Result<bool, E> {
            let Some(time) = record.timestamp() else {
                return Ok(true);
            };
            if i128::from(time) > last {
                return Ok(false);
            }
            decoder.follow(&index.tasks, time);
            decoder.decode(attr_index, record, time);
            if decoder.events.len() >= BATCH {
                take(&decoder.events)?;
                decoder.events.clear();
            }
            Ok(true)
        };
        if opened.compressed() {
            decompressed_records(opened, each)?;
        } else {
            let mut rounds = Rounds::new(opened, start)?;
            while let Some((attr_index, record)) = rounds.next_record()? {
                if !each(attr_index, &record)? {
                    break;
                }
            }
        }
        take(&decoder.events)?;
        Ok(decoder.skipped)
    }
}

/// The records of a compressed file, all of it one round (see `Opened::index_compressed`),
/// decompressed by the crate, to `each` while it returns true.
fn decompressed_records<E: From<FileError>>(
    opened: &Opened,
    mut each: impl FnMut(usize, &RawEventRecord<'_>) -> Result<bool, E>,
) -> Result<(), E> {
    let damaged = |e: linux_perf_data::Error| FileError::Damaged(e.to_string());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(Cursor::new(opened.bytes())).map_err(damaged)?;
    while let Some(record) = record_iter.next_record(&mut perf_file).map_err(damaged)? {
        if let PerfFileRecord::EventRecord { attr_index, record } = record {
            if !each(attr_index, &record)? {
                break;
            }
        }
    }
    Ok(())
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
