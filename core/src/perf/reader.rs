//! perf.data read for the engine (`PerfReader`): its header, then its records walked once
//! when first needed (rounds, task records); the events of a time slice decoded from the
//! round that may hold its first record, and the slices paired in a thread each.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use linux_perf_data::{PerfFileReader, PerfFileRecord};

use super::decoder::{Decoder, Keys, BATCH};
use super::index::Index;
use super::perf_file::{self, FileError, Opened, Shape, HEADER_SIZE};
use super::tracing_formats::{self, Tracepoint};
use crate::engine::{Event, SliceBuilder, SliceResult};
use crate::files::open_regular;
use crate::slice_pool;

const READ_BUFFER: usize = 1 << 20;

/// A perf.data, its header read; its records walked once when first needed.
pub struct PerfReader {
    pub path: PathBuf,
    pub shape: Shape,
    pub tracepoints: HashMap<u64, Tracepoint>,
    index: OnceLock<Result<Index, String>>,
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
            opened.index(&self.path).map_err(|error| match error {
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
    pub fn decode<E: From<FileError>>(
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
            decoder.replay(task);
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
