//! One walk over a perf.data's record headers (`Opened::index`), where they are in the file's
//! map: the rounds (runs of records ended by FINISHED_ROUND), the records that describe tasks
//! (names, births, deaths, mappings of files), and the counts of samples, switches and losses;
//! the sizes the crates would allocate by checked first, compressed records decompressed only
//! up to their limit.

use std::io::Cursor;

use linux_perf_data::{PerfFileReader, PerfFileRecord};
use linux_perf_event_reader::{EventRecord, Mmap2FileId};
use zstd_safe::DCtx;

use super::perf_file::*;

/// A record that describes a task: its name, birth, death or a mapping of a file.
pub enum TaskKind {
    Comm {
        pid: i32,
        tid: i32,
        name: String,
        exec: bool,
    },
    Fork {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
    },
    Exit {
        pid: i32,
        tid: i32,
    },
    Map(Mapping),
}

/// A mapping of a file into a process (MMAP or MMAP2).
pub struct Mapping {
    pub pid: i32,
    pub start: u64,
    pub length: u64,
    pub offset: u64,
    pub path: String,
    pub build_id: Option<Vec<u8>>,
    pub inode: Option<(u32, u32, u64)>,
    /// MMAP2's PROT_EXEC (an MMAP record maps code)
    pub executable: bool,
    /// The kernel's build id, when this is an MMAP2 of its text that carries one.
    pub kernel_build_id: Option<Vec<u8>>,
}

pub struct Task {
    pub offset: u64,
    pub time: Option<u64>,
    pub kind: TaskKind,
}

/// What one walk over every record header finds.
pub struct Index {
    /// The offset of each round's first record, and the time of its first timed record.
    pub rounds: Vec<(u64, Option<u64>)>,
    /// The task records, in time order (file order for equal times).
    pub tasks: Vec<Task>,
    /// Records of types this reader does not know, or too short to hold their fields.
    pub unknown: u64,
    /// The times of the first and last samples.
    pub sample_times: Option<(u64, u64)>,
    /// How many records of some kinds, and what the records of losses say was lost.
    pub counts: RecordCounts,
}

/// How many samples and switch records a file holds, and how many events its records of
/// losses say were lost.
#[derive(Clone, Copy, Default)]
pub struct RecordCounts {
    pub samples: u64,
    pub switches: u64,
    /// What the LOST records carry: the events a ring buffer had no room for, written once
    /// it had room again (a loss at the very end may never be written).
    pub lost: u64,
    /// What the LOST_SAMPLES records carry: each event's own count of what it lost, which
    /// perf reads as recording ends.
    pub lost_samples: u64,
}

impl RecordCounts {
    /// Count one record; false for a record of losses too short to say how many.
    pub(super) fn count(&mut self, kind: u32, misc: u16, body: &[u8]) -> bool {
        match kind {
            SAMPLE => self.samples += 1,
            SWITCH | SWITCH_CPU_WIDE => self.switches += 1,
            LOST => match u64_at(body, 8) {
                Some(lost) => self.lost += lost, // after the event's id
                None => return false,
            },
            LOST_SAMPLES => match u64_at(body, 0) {
                Some(_) if misc & MISC_LOST_SAMPLES_BPF != 0 => {}
                Some(lost) => self.lost_samples += lost,
                None => return false,
            },
            _ => {}
        }
        true
    }

    /// The events lost: the two counts see the same losses from two sides, each of which
    /// can miss some (the last loss of a buffer; a count perf did not read), so the larger.
    pub fn lost_events(&self) -> u64 {
        self.lost.max(self.lost_samples)
    }
}

/// The `length` bytes at `position` of `data`; None when they run past its end.
fn at(data: &[u8], position: u64, length: u64) -> Option<&[u8]> {
    let from = usize::try_from(position).ok()?;
    data.get(from..from.checked_add(usize::try_from(length).ok()?)?)
}

impl Opened {
    /// Walk every record header of the data section; an error when the sizes do not chain
    /// the records to its end.
    pub fn index(&self) -> Result<Index, FileError> {
        if self.compressed() {
            return self.index_compressed();
        }
        let data = self.up_to_data_end()?;
        let mut position = self.data_start;
        let mut rounds: Vec<(u64, Option<u64>)> = vec![(position, None)];
        let mut tasks = Vec::new();
        let mut unknown = 0u64;
        let mut sample_times: Option<(u64, u64)> = None;
        let mut counts = RecordCounts::default();
        while position < self.data_end {
            let Some(head) = at(data, position, 8) else {
                return Err(damaged(format!("a record at byte {position} is cut short")));
            };
            let kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let misc = u16::from_le_bytes([head[4], head[5]]);
            let size = u16::from_le_bytes([head[6], head[7]]) as u64;
            if kind == AUXTRACE {
                return Err(aux_trace(position));
            }
            let sampled = kind == SAMPLE || kind == SWITCH || kind == SWITCH_CPU_WIDE;
            if size < 8 || (!sampled && (!size.is_multiple_of(8) || kind > 0xffff)) {
                return Err(damaged(format!(
                    "the record at byte {position} has size {size} and type {kind}"
                )));
            }
            let Some(record) = at(data, position, size) else {
                break;
            };
            let body = &record[8..];
            let counted = counts.count(kind, misc, body);
            if let Some(last) = rounds.last_mut() {
                if last.1.is_none() {
                    last.1 = self.time_of(kind, body);
                }
            }
            if kind == SAMPLE {
                if let Some(time) = self.time_of(kind, body) {
                    sample_times = Some(sample_times.map_or((time, time), |(first, last)| {
                        (first.min(time), last.max(time))
                    }));
                }
            }
            match kind {
                FINISHED_ROUND => rounds.push((position + size, None)),
                MMAP | COMM | EXIT | FORK | MMAP2 => match self.task(kind, misc, body, position) {
                    Some(task) => tasks.push(task),
                    None => unknown += 1,
                },
                LOST | LOST_SAMPLES => unknown += u64::from(!counted),
                _ if kind <= LAST_KERNEL_TYPE && kind > 0 => {}
                _ if PERF_TYPES.contains(&kind) && kind != COMPRESSED => {}
                _ => unknown += 1,
            }
            position += size;
        }
        if position != self.data_end {
            return Err(damaged(format!(
                "its last record runs past the end of its data section (byte {})",
                self.data_end
            )));
        }
        tasks.sort_by_key(|task| task.time);
        Ok(Index {
            rounds,
            tasks,
            unknown,
            sample_times,
            counts,
        })
    }

    /// Whether the records are compressed (perf record -z): they are read from the start only.
    pub fn compressed(&self) -> bool {
        self.features.contains_key(&FEATURE_COMPRESSED)
    }

    /// The index of compressed records, which only the crate's reading from the start
    /// decompresses: one round (a time slice cannot start elsewhere), the task records found
    /// on the way (at no offset in the file: a read, from the start, replays none of them).
    pub(super) fn index_compressed(&self) -> Result<Index, FileError> {
        self.check_before_the_crate()?;
        let bad = |error: linux_perf_data::Error| damaged(error.to_string());
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(Cursor::new(self.bytes())).map_err(bad)?;
        let mut tasks = Vec::new();
        let mut unknown = 0u64;
        let mut sample_times: Option<(u64, u64)> = None;
        let mut counts = RecordCounts::default();
        while let Some(record) = record_iter.next_record(&mut perf_file).map_err(bad)? {
            let (kind, misc, body) = match &record {
                PerfFileRecord::EventRecord { record, .. } => {
                    (record.record_type.0, record.misc, record.data.as_slice())
                }
                PerfFileRecord::UserRecord(_) => continue, // perf's own: nothing offcpu reads
            };
            let counted = counts.count(kind, misc, &body);
            match kind {
                SAMPLE => {
                    if let Some(time) = self.time_of(kind, &body) {
                        sample_times = Some(sample_times.map_or((time, time), |(first, last)| {
                            (first.min(time), last.max(time))
                        }));
                    }
                }
                MMAP | COMM | EXIT | FORK | MMAP2 => match self.task(kind, misc, &body, u64::MAX) {
                    Some(task) => tasks.push(task),
                    None => unknown += 1,
                },
                LOST | LOST_SAMPLES => unknown += u64::from(!counted),
                _ if kind <= LAST_KERNEL_TYPE && kind > 0 => {}
                _ => unknown += 1,
            }
        }
        tasks.sort_by_key(|task| task.time);
        Ok(Index {
            rounds: vec![(self.data_start, None)],
            tasks,
            unknown,
            sample_times,
            counts,
        })
    }

    /// The records around the compressed ones walked by their headers before the crate reads
    /// them, for what it would allocate as it reads: an AUXTRACE record's trace, by the size it
    /// says, and each compressed record's contents whole, however much they decompress to.
    pub(super) fn check_before_the_crate(&self) -> Result<(), FileError> {
        let limit = self.decompressed_limit();
        let mut zstd = DCtx::create();
        let mut out = vec![0u8; DECOMPRESS_BUFFER];
        let data = self.up_to_data_end()?;
        let mut position = self.data_start;
        while let Some(head) = at(data, position, 8) {
            let kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let size = u16::from_le_bytes([head[6], head[7]]) as u64;
            if kind == AUXTRACE {
                return Err(aux_trace(position));
            }
            if size < 8 {
                return Err(damaged(format!(
                    "the record at byte {position} has size {size}"
                )));
            }
            if kind == COMPRESSED || kind == COMPRESSED2 {
                let Some(record) = at(data, position, size) else {
                    break; // cut short: the crate says so
                };
                let compressed = match kind {
                    COMPRESSED => record.get(8..),
                    _ => u64_at(record, 8).and_then(|length| {
                        record.get(16..16usize.checked_add(usize::try_from(length).ok()?)?)
                    }),
                };
                let made =
                    decompressed_size(&mut zstd, compressed.unwrap_or_default(), &mut out, limit)?;
                if made > limit {
                    return Err(damaged(format!("the compressed record at byte {position} holds more than the {limit} bytes perf compresses at once")));
                }
            }
            position += size;
        }
        Ok(())
    }

    /// The most one compressed record decompresses to: what perf compressed at once, its ring
    /// buffer's size (the COMPRESSED feature's mmap_len, as perf reads it back), within reason.
    pub(super) fn decompressed_limit(&self) -> u64 {
        let mmap_len = self
            .features
            .get(&FEATURE_COMPRESSED)
            .and_then(|section| u32_at(section, COMPRESSED_MMAP_LEN_AT));
        mmap_len.map_or(MAX_DECOMPRESSED, |length| {
            u64::from(length).min(MAX_DECOMPRESSED)
        })
    }

    pub(super) fn task(&self, kind: u32, misc: u16, body: &[u8], offset: u64) -> Option<Task> {
        // The crate asserts (panics on) an MMAP2 build id longer than 20 bytes: such a record is damaged.
        if kind == MMAP2
            && misc & MISC_MMAP_BUILD_ID != 0
            && body
                .get(MMAP2_BUILD_ID_SIZE_AT)
                .is_some_and(|&size| size > 20)
        {
            return None;
        }
        let record = self.raw_record(kind, misc, body)?;
        let time = record.timestamp();
        let kind = match record.parse().ok()? {
            EventRecord::Comm(comm) => TaskKind::Comm {
                pid: comm.pid,
                tid: comm.tid,
                name: text(&comm.name.as_slice()),
                exec: comm.is_execve,
            },
            EventRecord::Fork(fork) => TaskKind::Fork {
                pid: fork.pid,
                ppid: fork.ppid,
                tid: fork.tid,
                ptid: fork.ptid,
            },
            EventRecord::Exit(exit) => TaskKind::Exit {
                pid: exit.pid,
                tid: exit.tid,
            },
            EventRecord::Mmap(map) => TaskKind::Map(Mapping {
                pid: map.pid,
                start: map.address,
                length: map.length,
                offset: map.page_offset,
                path: text(&map.path.as_slice()),
                build_id: None,
                inode: None,
                executable: true,
                kernel_build_id: None,
            }),
            EventRecord::Mmap2(map) => {
                let path = map.path.as_slice();
                let (build_id, inode) = match map.file_id {
                    Mmap2FileId::BuildId(id) => (Some(id), None),
                    Mmap2FileId::InodeAndVersion(file) => {
                        (None, Some((file.major, file.minor, file.inode)))
                    }
                };
                let kernel_build_id = build_id.clone().filter(|_| path.starts_with(KERNEL_MAP));
                TaskKind::Map(Mapping {
                    pid: map.pid,
                    start: map.address,
                    length: map.length,
                    offset: map.page_offset,
                    path: text(&path),
                    build_id,
                    inode,
                    executable: map.protection & PROT_EXEC != 0,
                    kernel_build_id,
                })
            }
            _ => return None,
        };
        Some(Task { offset, time, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn a_compressed_record_is_decompressed_only_up_to_its_limit() {
        let zeros = vec![0u8; 64 << 20];
        let mut bomb = vec![0u8; zstd_safe::compress_bound(zeros.len())];
        let length = zstd_safe::compress(&mut bomb[..], &zeros, 19).expect("compressed");
        bomb.truncate(length);
        assert!(
            bomb.len() < 64 << 10,
            "{} bytes: more than a record holds",
            bomb.len()
        );
        let mut out = vec![0u8; DECOMPRESS_BUFFER];
        let made = decompressed_size(&mut DCtx::create(), &bomb, &mut out, 1 << 20);
        assert!(matches!(made, Ok(made) if made > 1 << 20 && made <= 2 << 20));
        let whole = decompressed_size(&mut DCtx::create(), &bomb, &mut out, u64::MAX);
        assert!(matches!(whole, Ok(made) if made == zeros.len() as u64));
    }
}
