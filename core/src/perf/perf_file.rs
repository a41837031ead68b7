//! perf.data as a file: its header checked before anything else reads it, the
//! feature sections offcpu uses (build ids, the command line, the tracepoints'
//! formats...), and one walk over the record headers that finds the rounds (runs
//! of records ended by FINISHED_ROUND) and the records that describe tasks.
//!
//! The crates (`linux-perf-data`, `linux-perf-event-reader`) parse the attributes
//! and the records; what is checked here first are the sizes they would allocate
//! by, so that a damaged file is an error and not an allocation of gigabytes.
//! Layout: perf's tools/perf/Documentation/perf.data-file-format.txt.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::Path;

use byteorder::LittleEndian;
use linux_perf_data::{AttributeDescription, PerfFileReader};
use linux_perf_event_reader::{
    get_record_id, get_record_identifier, get_record_timestamp, AttrFlags, PerfEventType, RawData,
    RawEventRecord, RecordIdParseInfo, RecordParseInfo, RecordType, SampleFormat,
};
use memmap2::Mmap;
use zstd_safe::{DCtx, InBuffer, OutBuffer};

use crate::files::{map_regular, open_regular};

/// What a perf.data begins with, and what it begins with written in the other byte order.
pub const MAGIC: &[u8; 8] = b"PERFILE2";
const MAGIC_SWAPPED: &[u8; 8] = b"2ELIFREP";
pub const HEADER_SIZE: usize = 104;
pub(super) const PIPE_HEADER_SIZE: u64 = 16;
pub(super) const SECTION_SIZE: u64 = 16;
pub(super) const MIN_ATTR_SIZE: u64 = 64 + SECTION_SIZE;
pub(super) const MAX_ATTR_SIZE: u64 = 4096;
/// What a perf.data's metadata is read whole by, bounded (a sparse file's size says nothing of
/// what perf wrote): its events' attributes and ids, and its feature sections together. perf
/// writes a few MB of them at most (the tracepoints' formats, a build id per file mapped).
pub(super) const MAX_ATTRS_BYTES: u64 = 16 << 20;
pub(super) const MAX_IDS_BYTES: u64 = 16 << 20;
pub(super) const MAX_FEATURES_BYTES: u64 = 256 << 20;
/// Where the data section's offset and size are in the header.
pub(super) const DATA_SECTION_AT: usize = 40;
pub(super) const FEATURES_AT: usize = 72;
/// The size of the event_types section, which perf no longer writes.
pub(super) const EVENT_TYPES_SIZE_AT: usize = 64;

pub const FEATURE_TRACING_DATA: u32 = 1;
pub const FEATURE_BUILD_ID: u32 = 2;
pub const FEATURE_ARCH: u32 = 6;
pub const FEATURE_NRCPUS: u32 = 7;
pub const FEATURE_CMDLINE: u32 = 11;
pub const FEATURE_EVENT_DESC: u32 = 12;
pub const FEATURE_SAMPLE_TIME: u32 = 21;
pub(super) const FEATURE_COMPRESSED: u32 = 27;

// Record types
pub(super) const MMAP: u32 = 1;
pub const COMM: u32 = 3;
pub const EXIT: u32 = 4;
pub const FORK: u32 = 7;
pub const SAMPLE: u32 = 9;
pub const FINISHED_ROUND: u32 = 68;
pub const COMPRESSED: u32 = 81;
/// A compressed record that says how long its compressed bytes are (perf 6.16 on).
pub(super) const COMPRESSED2: u32 = 83;
/// Where the COMPRESSED feature says how much perf compressed at once (after version, type,
/// level and ratio).
pub(super) const COMPRESSED_MMAP_LEN_AT: usize = 16;
/// The most a compressed record may decompress to, whatever the file says.
pub(super) const MAX_DECOMPRESSED: u64 = 256 << 20;
pub(super) const DECOMPRESS_BUFFER: usize = 1 << 20;
/// Followed by the AUX area's trace, of the size it says, which the crate would allocate as read.
pub(super) const AUXTRACE: u32 = 71;
/// The kernel's record types that offcpu knows (1..=21), and perf's own (64..=82).
pub(super) const LAST_KERNEL_TYPE: u32 = 21;
pub(super) const PERF_TYPES: std::ops::RangeInclusive<u32> = 64..=82;
pub(super) const LOST: u32 = 2;
pub(super) const LOST_SAMPLES: u32 = 13;
pub(super) const SWITCH: u32 = 14;
pub(super) const SWITCH_CPU_WIDE: u32 = 15;
/// A LOST_SAMPLES record of samples a BPF filter dropped (perf 6.4 on), not of lost ones.
pub(super) const MISC_LOST_SAMPLES_BPF: u16 = 1 << 15;

pub(super) const MISC_CPUMODE_MASK: u16 = 0x7;
pub(super) const MISC_KERNEL: u16 = 1;
pub(super) const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
pub(super) const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
pub(super) const MMAP2: u32 = 10;
/// Where an MMAP2 record's build id size is, in its body (after pid, tid, address, length, offset).
pub(super) const MMAP2_BUILD_ID_SIZE_AT: usize = 32;
pub(super) const PROT_EXEC: u32 = 4;
pub(super) const KERNEL_MAP: &[u8] = b"[kernel.kallsyms]";

/// What is wrong with a file that is not a perf.data this reader can read: said to
/// the user as "PATH is not a readable perf.data (WHAT)", or as an OS error.
pub enum FileError {
    Io(String),
    Damaged(String),
}

impl From<std::io::Error> for FileError {
    fn from(error: std::io::Error) -> Self {
        FileError::Io(error.to_string())
    }
}

pub(super) fn damaged(what: impl Into<String>) -> FileError {
    FileError::Damaged(what.into())
}

/// How many bytes `compressed` decompresses to (the stream goes on across records, as perf
/// writes it), counted up to just past `limit`.
pub(super) fn decompressed_size(
    zstd: &mut DCtx<'_>,
    compressed: &[u8],
    out: &mut [u8],
    limit: u64,
) -> Result<u64, FileError> {
    let mut input = InBuffer::around(compressed);
    let mut made = 0u64;
    loop {
        let mut output = OutBuffer::around(&mut *out);
        zstd.decompress_stream(&mut output, &mut input)
            .map_err(|code| {
                damaged(format!(
                    "a compressed record does not decompress ({})",
                    zstd_safe::get_error_name(code)
                ))
            })?;
        let written = output.pos();
        made += written as u64;
        if made > limit || (written < out.len() && input.pos() == compressed.len()) {
            return Ok(made);
        }
    }
}

pub(super) fn aux_trace(position: u64) -> FileError {
    damaged(format!("the record at byte {position} holds an AUX area trace (perf record -e intel_pt// and the like), which offcpu does not read"))
}

pub(super) fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

pub(super) fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

pub(super) fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// Text up to its first NUL, as Python's bytes.decode(errors="replace") makes it.
pub fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// What kind of perf.data a file is.
pub enum Shape {
    /// Written to a file: its header says where everything is.
    File(Box<Opened>),
    /// Written through a pipe (perf record -o -): metadata comes as records.
    Pipe,
    /// Written on a machine of the other byte order.
    Swapped,
}

/// One event as its attributes describe it.
pub struct Attr {
    pub tracepoint: Option<u64>,
    pub sample_type: u64,
    pub sample_id_all: bool,
    pub ids: Vec<u64>,
    pub parse_info: RecordParseInfo,
}

/// A file perf saw samples in, as the BUILD_ID feature section lists it.
pub struct BuildId {
    pub pid: i32,
    pub build_id: Vec<u8>,
    pub filename: String,
    pub kernel: bool,
}

/// A perf.data written to a file, its header and feature sections read, and the whole file
/// mapped: its records are read where they are (`bytes`).
pub struct Opened {
    pub file_size: u64,
    map: Mmap,
    pub data_start: u64,
    pub data_end: u64,
    pub attrs: Vec<Attr>,
    pub features: HashMap<u32, Vec<u8>>,
    ids: IdLayout,
    id_to_attr: HashMap<u64, usize>,
}

/// How a record's event is found (as the crate finds it): the only event, an id at the
/// same place for every event, or the PERF_SAMPLE_IDENTIFIER every event puts first or last.
pub(super) enum IdLayout {
    One,
    Same(RecordIdParseInfo),
    Identifier(bool),
}

pub fn open(path: &Path) -> Result<Shape, FileError> {
    let file = open_regular(path)?;
    let file_size = file.metadata()?.len();
    if file_size == 0 {
        return Err(damaged("it is empty"));
    }
    let mut header = [0u8; HEADER_SIZE];
    let got = file.read_at(&mut header, 0)?;
    let magic = header.get(..8).unwrap_or_default();
    if got < PIPE_HEADER_SIZE as usize || (magic != MAGIC && magic != MAGIC_SWAPPED) {
        return Err(damaged(
            "no perf.data header: another tool's file, or not perf's at all",
        ));
    }
    if magic == MAGIC_SWAPPED {
        return Ok(Shape::Swapped);
    }
    if u64_at(&header, 8) == Some(PIPE_HEADER_SIZE) {
        return Ok(Shape::Pipe);
    }
    if got < HEADER_SIZE {
        return Err(damaged("cut short inside its header"));
    }
    let field = |at: usize| u64_at(&header, at).unwrap_or(0);
    let (data_offset, data_size) = (field(DATA_SECTION_AT), field(DATA_SECTION_AT + 8));
    let data_end = data_offset.saturating_add(data_size);
    if data_size == 0 || data_end > file_size || data_offset % 8 != 0 {
        return Err(damaged(format!(
            "its data section ends at byte {data_end}, the file at {file_size}: cut short, or perf did not finish writing it"
        )));
    }
    check_attrs(&file, &header, file_size)?;
    let features = feature_sections(&file, &header, data_end, file_size)?;
    match features.get(&FEATURE_EVENT_DESC) {
        Some(section) => check_event_desc(section)?,
        // The crate would allocate by the sizes of the layout perf left in 2012, unchecked
        None if field(EVENT_TYPES_SIZE_AT) != 0 => {
            return Err(damaged(
                "its events are described as perf did before 2012 (event_types), which offcpu does not read",
            ))
        }
        None => {}
    }
    let reader = PerfFileReader::parse_file(BufReader::new(open_regular(path)?))
        .map_err(|error| damaged(format!("{error}")))?;
    let described = reader.perf_file.event_attributes();
    let attrs: Vec<Attr> = described.iter().map(attr_of).collect();
    let ids = id_layout(described, &attrs);
    let id_to_attr = attrs
        .iter()
        .enumerate()
        .flat_map(|(index, attr)| attr.ids.iter().map(move |&id| (id, index)))
        .collect();
    Ok(Shape::File(Box::new(Opened {
        file_size,
        map: map_regular(path)?,
        data_start: data_offset,
        data_end,
        attrs,
        features,
        ids,
        id_to_attr,
    })))
}

pub(super) fn attr_of(described: &AttributeDescription) -> Attr {
    let attr = &described.attr;
    Attr {
        tracepoint: match attr.type_ {
            PerfEventType::Tracepoint(config) => Some(config),
            _ => None,
        },
        sample_type: attr.sample_format.bits(),
        sample_id_all: attr.flags.contains(AttrFlags::SAMPLE_ID_ALL),
        ids: described.event_ids.clone(),
        parse_info: RecordParseInfo::new(attr, linux_perf_event_reader::Endianness::LittleEndian),
    }
}

pub(super) fn id_layout(described: &[AttributeDescription], attrs: &[Attr]) -> IdLayout {
    match attrs.split_first() {
        Some((first, rest)) if !rest.is_empty() => {
            if rest
                .iter()
                .all(|attr| attr.parse_info.id_parse_info == first.parse_info.id_parse_info)
            {
                IdLayout::Same(first.parse_info.id_parse_info)
            } else {
                let all_identified = described
                    .iter()
                    .all(|d| d.attr.sample_format.contains(SampleFormat::IDENTIFIER));
                IdLayout::Identifier(all_identified && first.sample_id_all)
            }
        }
        _ => IdLayout::One,
    }
}

/// The attributes section: entries of attr_size bytes, each ending with the section of its ids.
pub(super) fn check_attrs(file: &File, header: &[u8], file_size: u64) -> Result<(), FileError> {
    let field = |at: usize| u64_at(header, at).unwrap_or(0);
    let (attr_size, offset, size) = (field(16), field(24), field(32));
    if !(MIN_ATTR_SIZE..=MAX_ATTR_SIZE).contains(&attr_size)
        || size % attr_size != 0
        || size == 0
        || size > MAX_ATTRS_BYTES
        || offset.saturating_add(size) > file_size
    {
        return Err(damaged(
            "its event attributes are not where its header says",
        ));
    }
    let mut entries = vec![0u8; size as usize];
    file.read_exact_at(&mut entries, offset)?;
    let mut ids_total = 0u64;
    for entry in entries.chunks_exact(attr_size as usize) {
        let at = entry.len() - SECTION_SIZE as usize;
        let (ids_offset, ids_size) = (
            u64_at(entry, at).unwrap_or(u64::MAX),
            u64_at(entry, at + 8).unwrap_or(u64::MAX),
        );
        ids_total = ids_total.saturating_add(ids_size);
        if ids_offset.saturating_add(ids_size) > file_size
            || ids_size % 8 != 0
            || ids_total > MAX_IDS_BYTES
        {
            return Err(damaged(
                "the ids of its events are not where its header says",
            ));
        }
    }
    Ok(())
}

/// The feature sections, one (offset, size) after the data for each bit set, read whole.
pub(super) fn feature_sections(
    file: &File,
    header: &[u8],
    data_end: u64,
    file_size: u64,
) -> Result<HashMap<u32, Vec<u8>>, FileError> {
    let mut sections = HashMap::new();
    let mut index = 0u64;
    let mut total = 0u64;
    for bit in 0..256u32 {
        let word = u64_at(header, FEATURES_AT + (bit as usize / 64) * 8).unwrap_or(0);
        if word >> (bit % 64) & 1 == 0 {
            continue;
        }
        let at = data_end + index * SECTION_SIZE;
        index += 1;
        let mut section = [0u8; SECTION_SIZE as usize];
        if at + SECTION_SIZE > file_size {
            return Err(damaged("cut short after its data"));
        }
        file.read_exact_at(&mut section, at)?;
        let (start, size) = (
            u64_at(&section, 0).unwrap_or(u64::MAX),
            u64_at(&section, 8).unwrap_or(u64::MAX),
        );
        if start.saturating_add(size) > file_size {
            return Err(damaged("cut short after its data"));
        }
        total = total.saturating_add(size);
        if total > MAX_FEATURES_BYTES {
            return Err(damaged(format!(
                "its header sections say {total} bytes, more than perf writes"
            )));
        }
        let mut bytes = vec![0u8; size as usize];
        file.read_exact_at(&mut bytes, start)?;
        sections.insert(bit, bytes);
    }
    Ok(sections)
}

/// The EVENT_DESC section as the crate reads it, each count checked against what is left.
pub(super) fn check_event_desc(section: &[u8]) -> Result<(), FileError> {
    let bad = || damaged("its event descriptions are damaged");
    let count = u32_at(section, 0).ok_or_else(bad)? as usize;
    let attr_size = u32_at(section, 4).ok_or_else(bad)? as usize;
    if attr_size < 64 || count.saturating_mul(attr_size) > section.len() {
        return Err(bad());
    }
    let mut at = 8usize;
    for _ in 0..count {
        at = at.checked_add(attr_size).ok_or_else(bad)?;
        let ids = u32_at(section, at).ok_or_else(bad)? as usize;
        let name = u32_at(section, at + 4).ok_or_else(bad)? as usize;
        at = at
            .checked_add(8 + name)
            .and_then(|at| at.checked_add(ids.checked_mul(8)?))
            .ok_or_else(bad)?;
        if at > section.len() {
            return Err(bad());
        }
    }
    Ok(())
}

impl Opened {
    /// The whole file, as it was mapped when it was opened.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The file up to its data section's end, as it was mapped when it was opened: records are
    /// read where they are, at their offsets in the file; an error when the file is now shorter.
    pub fn up_to_data_end(&self) -> Result<&[u8], FileError> {
        usize::try_from(self.data_end)
            .ok()
            .and_then(|end| self.map.get(..end))
            .ok_or_else(|| {
                damaged(format!(
                    "it ends before byte {}, its data section's end",
                    self.data_end
                ))
            })
    }

    /// Which event a record belongs to (0 when its id is unknown, as the crate does).
    pub fn attr_index(&self, kind: RecordType, body: &[u8]) -> usize {
        let data = RawData::Single(body);
        let id = match &self.ids {
            IdLayout::One => return 0,
            IdLayout::Same(info) => get_record_id::<LittleEndian>(kind, data, info),
            IdLayout::Identifier(all) => get_record_identifier::<LittleEndian>(kind, data, *all),
        };
        id.and_then(|id| self.id_to_attr.get(&id).copied())
            .unwrap_or(0)
    }

    pub fn raw_record<'a>(
        &self,
        kind: u32,
        misc: u16,
        body: &'a [u8],
    ) -> Option<RawEventRecord<'a>> {
        let kind = RecordType(kind);
        let attr = self.attrs.get(self.attr_index(kind, body))?;
        Some(RawEventRecord::new(
            kind,
            misc,
            RawData::Single(body),
            attr.parse_info,
        ))
    }

    /// A record's time, for the kernel's record types.
    pub fn time_of(&self, kind: u32, body: &[u8]) -> Option<u64> {
        if kind == 0 || kind > LAST_KERNEL_TYPE {
            return None;
        }
        let record_type = RecordType(kind);
        let attr = self.attrs.get(self.attr_index(record_type, body))?;
        get_record_timestamp::<LittleEndian>(record_type, RawData::Single(body), &attr.parse_info)
    }

    /// A feature section holding one string (a u32 length, then NUL-padded bytes).
    pub fn feature_string(&self, feature: u32) -> Option<String> {
        let section = self.features.get(&feature)?;
        let length = u32_at(section, 0)? as usize;
        Some(text(section.get(4..4usize.checked_add(length)?)?))
    }

    /// The arguments perf recorded with; Err when the section is damaged.
    pub fn command_line(&self) -> Result<Option<Vec<String>>, FileError> {
        let Some(section) = self.features.get(&FEATURE_CMDLINE) else {
            return Ok(None);
        };
        let bad = || damaged("the command it was recorded with is damaged");
        let count = u32_at(section, 0).ok_or_else(bad)?;
        let mut at = 4usize;
        let mut arguments = Vec::new();
        for _ in 0..count {
            let length = u32_at(section, at).ok_or_else(bad)? as usize;
            let argument = section.get(at + 4..at + 4 + length).ok_or_else(bad)?;
            arguments.push(text(argument));
            at += 4 + length;
        }
        Ok(Some(arguments))
    }

    /// The CPUs online when it was recorded (perf's nr_cpus_available, then nr_cpus_online).
    pub fn cpus_online(&self) -> Result<Option<u32>, FileError> {
        match self.features.get(&FEATURE_NRCPUS) {
            None => Ok(None),
            Some(section) => u32_at(section, 4)
                .map(Some)
                .ok_or_else(|| damaged("its count of CPUs is damaged")),
        }
    }

    /// The first and last sample times perf wrote in its header (0, 0 when it skipped them).
    pub fn header_sample_times(&self) -> Result<Option<(u64, u64)>, FileError> {
        match self.features.get(&FEATURE_SAMPLE_TIME) {
            None => Ok(None),
            Some(section) => match (u64_at(section, 0), u64_at(section, 8)) {
                (Some(first), Some(last)) => Ok(Some((first, last))),
                _ => Err(damaged("its sample times are damaged")),
            },
        }
    }

    /// The BUILD_ID section: build_id_event records (header, pid, 24 bytes of build id, of
    /// which misc says how many are used, then the file's name).
    pub fn build_ids(&self) -> Vec<BuildId> {
        let Some(section) = self.features.get(&FEATURE_BUILD_ID) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut at = 0usize;
        while let (Some(misc), Some(length)) = (u16_at(section, at + 4), u16_at(section, at + 6)) {
            let length = length as usize;
            let Some(record) = section.get(at..at + length).filter(|_| length >= 36) else {
                break;
            };
            let raw = &record[12..36];
            let used = if misc & MISC_BUILD_ID_SIZE != 0 && raw[20] <= 20 {
                raw[20] as usize
            } else {
                20
            };
            found.push(BuildId {
                pid: i32::from_le_bytes([record[8], record[9], record[10], record[11]]),
                build_id: raw[..used].to_vec(),
                filename: text(&record[36..]),
                kernel: misc & MISC_CPUMODE_MASK == MISC_KERNEL,
            });
            at += length;
        }
        found
    }
}
