//! Unwinding user stacks offline: the samples of a `--call-graph dwarf` capture carry
//! the user registers and a copy of the top of the user stack, and the unwind tables
//! (`.eh_frame` with `.eh_frame_hdr`, or `.debug_frame` where the compiler wrote one) of
//! the files mapped executable give the return addresses in it, with framehop.
//!
//! Each file's tables are read once, shared by every process that maps it and by the
//! unwinders of every time slice (`UnwindFiles`). Code that
//! no file describes (the vdso without a copy in perf's build-id cache, JIT code in
//! anonymous maps) is unwound by its frame pointers; a file that cannot be read (gone,
//! or not the build perf recorded) ends the stacks that pass through it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use object::{Object, ObjectSection, ObjectSegment, ReadCache, SectionKind};

use super::elf_files::{copies, debug_files, same_build_id, Bounded, MAX_READ};
use crate::files::open_regular;
use crate::unless_panics;

/// A guard against a stack that loops: perf's own limit (kernel.perf_event_max_stack) is 127.
const MAX_FRAMES: usize = 1024;
/// framehop keys its cache by address and a 16-bit count of changes to the modules of
/// any process, which wraps: a cache no older than half the count's range never sees
/// a count it held before.
const CHANGES_PER_CACHE: u64 = 1 << 15;
/// The pages the kernel maps a file's segments by (x86_64)
const PAGE_SIZE: u64 = 4096;

/// The user registers of a sample that unwinding needs, from perf's
/// PERF_SAMPLE_REGS_USER (x86_64: PERF_REG_X86_IP, _SP and _BP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Section bytes, shared by all the mappings of a file.
type Bytes = Arc<[u8]>;

/// A file as perf recorded it: its path, and its build id when perf recorded one.
type FileKey = (Vec<u8>, Option<Vec<u8>>);

/// What unwinding needs from one file, read once.
struct UnwindTables {
    sections: ExplicitModuleSectionInfo<Bytes>,
    /// The PT_LOAD segments: (file offset, file size, address in the file).
    segments: Vec<(u64, u64, u64)>,
}

impl UnwindTables {
    /// The address at which the file's address 0 lands when `file_offset` is mapped at `start`.
    fn base_address(&self, start: u64, file_offset: u64) -> u64 {
        // The kernel maps a segment from its offset rounded down to a page, which may lie in
        // the segment before (lld puts code at offset 0x70fb8, address 0x71fb8): the segment
        // is the last one whose mapping can begin at `file_offset`.
        let segment = self.segments.iter().rev().find(|(offset, size, _)| {
            (offset & !(PAGE_SIZE - 1)..offset.saturating_add(*size)).contains(&file_offset)
        });
        let file_address = match segment {
            Some((offset, _, address)) => address.wrapping_add(file_offset.wrapping_sub(*offset)),
            None => file_offset,
        };
        start.wrapping_sub(file_address)
    }
}

/// The unwind tables of the files read so far (None: the file could not be read), for the
/// unwinders of all of a reading's time slices.
#[derive(Default)]
pub struct UnwindFiles(Mutex<HashMap<FileKey, Option<Arc<UnwindTables>>>>);

impl UnwindFiles {
    fn tables(&self, path: &[u8], build_id: Option<&[u8]>) -> Option<Arc<UnwindTables>> {
        let key = (path.to_vec(), build_id.map(<[u8]>::to_vec));
        // Held while a file is read: another slice that maps it waits for it, not reads it again
        let mut files = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        files
            .entry(key)
            .or_insert_with(|| unless_panics(|| read_tables(path, build_id)).map(Arc::new))
            .clone()
    }
}

/// One process's mapped files, as framehop's modules.
#[derive(Clone, Default)]
struct Process {
    modules: UnwinderX86_64<Bytes>,
    /// Where its code is: every executable mapping, by start.
    mappings: Vec<Range<u64>>,
    /// The mappings of files that could not be read: a stack ends there.
    unreadable: Vec<Range<u64>>,
}

impl Process {
    /// Takes out the mappings that `range` covers; returns how many modules went.
    fn remove_overlapping(&mut self, range: &Range<u64>) -> u64 {
        let overlaps =
            |mapping: &Range<u64>| mapping.start < range.end && range.start < mapping.end;
        let mut removed = 0;
        for mapping in self.mappings.iter().filter(|m| overlaps(m)) {
            // framehop ignores a start that is not one of its modules'.
            self.modules.remove_module(mapping.start);
            removed += 1;
        }
        self.mappings.retain(|m| !overlaps(m));
        self.unreadable.retain(|m| !overlaps(m));
        removed
    }

    fn add(&mut self, range: Range<u64>) {
        let at = self.mappings.partition_point(|m| m.start < range.start);
        self.mappings.insert(at, range);
    }

    /// Whether an address is in code the process mapped (a return address must be).
    fn is_code(&self, address: u64) -> bool {
        let after = self.mappings.partition_point(|m| m.start <= address);
        after
            .checked_sub(1)
            .and_then(|at| self.mappings.get(at))
            .is_some_and(|m| m.contains(&address))
    }

    fn is_unreadable(&self, address: u64) -> bool {
        self.unreadable.iter().any(|range| range.contains(&address))
    }
}

/// The user stacks of one capture's samples, unwound.
pub struct Unwinder {
    processes: HashMap<i32, Process>,
    files: Arc<UnwindFiles>,
    cache: CacheX86_64,
    /// Changes to modules (framehop counts them) since the cache was made.
    changes_in_cache: u64,
    /// A process with no mappings known: frame pointers only.
    unknown_process: Process,
    stacks_stopped_at_unreadable: u64,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl Unwinder {
    pub fn new() -> Self {
        Self::sharing(Arc::default())
    }

    /// An unwinder that reads files into `files`, or finds them there.
    pub fn sharing(files: Arc<UnwindFiles>) -> Self {
        Self {
            processes: HashMap::new(),
            files,
            cache: CacheX86_64::new(),
            changes_in_cache: 0,
            unknown_process: Process::default(),
            stacks_stopped_at_unreadable: 0,
        }
    }

    /// A mapping made executable in process `pid` (perf's MMAP/MMAP2 records with
    /// PROT_EXEC, files or not: `[vdso]`, `//anon`): its address range, file offset,
    /// path, and the file's build id when perf recorded one.
    pub fn add_mapping(
        &mut self,
        pid: i32,
        start: u64,
        end: u64,
        file_offset: u64,
        path: &[u8],
        build_id: Option<&[u8]>,
    ) {
        let range = start..end;
        let tables = if is_file(path) || build_id.is_some() {
            self.files.tables(path, build_id)
        } else {
            None
        };
        let mut changes = u64::from(!self.processes.contains_key(&pid));
        let process = self.processes.entry(pid).or_default();
        changes += process.remove_overlapping(&range);
        match tables {
            Some(tables) => {
                let base = tables.base_address(start, file_offset);
                let name = String::from_utf8_lossy(path).into_owned();
                let module = Module::new(name, range.clone(), base, tables.sections.clone());
                process.modules.add_module(module);
                changes += 1;
            }
            None if is_file(path) => process.unreadable.push(range.clone()),
            // Not a file (anonymous, JIT, the vdso without perf's copy): frame pointers.
            None => {}
        }
        process.add(range);
        self.changes_in_cache += changes;
        if self.changes_in_cache >= CHANGES_PER_CACHE {
            self.cache = CacheX86_64::new();
            self.changes_in_cache = 0;
        }
    }

    /// Process `child` was forked from `parent`: it has the parent's mappings.
    pub fn fork_process(&mut self, parent: i32, child: i32) {
        if let Some(process) = self.processes.get(&parent).cloned() {
            self.processes.insert(child, process);
        }
    }

    /// The process exec'd or exited: its mappings are gone.
    pub fn forget_process(&mut self, pid: i32) {
        self.processes.remove(&pid);
    }

    /// The user frames of one sample, innermost first (the ip, then return addresses:
    /// perf names a caller by the byte before it), from its user registers and the copy
    /// of its user stack that starts at `regs.sp`; as many as could be unwound.
    pub fn unwind(&mut self, pid: i32, regs: &UserRegs, stack: &[u8]) -> Vec<u64> {
        let process = self.processes.get(&pid).unwrap_or(&self.unknown_process);
        let mut read_stack =
            |address: u64| read_u64(stack, address.checked_sub(regs.sp).ok_or(())?);
        let start = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut frames_iter =
            process
                .modules
                .iter_frames(regs.ip, start, &mut self.cache, &mut read_stack);
        let mut frames = Vec::new();
        while let Ok(Some(frame)) = frames_iter.next() {
            let address = frame.address();
            // Past the ip, an address in no code is a wrong guess (frame pointers in code
            // that keeps none), unless the process's mappings are unknown.
            let known = !process.mappings.is_empty();
            if frame.is_return_address() && known && !process.is_code(address) {
                break;
            }
            frames.push(address);
            if process.is_unreadable(address) {
                self.stacks_stopped_at_unreadable += 1;
                break;
            }
            if frames.len() == MAX_FRAMES {
                break;
            }
        }
        frames
    }

    /// The files mapped executable whose unwind tables could not be read (missing, or
    /// not the build that perf recorded).
    pub fn unreadable_files(&self) -> Vec<Vec<u8>> {
        let files = self.files.0.lock().unwrap_or_else(PoisonError::into_inner);
        files
            .iter()
            .filter(|((path, _), tables)| tables.is_none() && is_file(path))
            .map(|((path, _), _)| path.clone())
            .collect()
    }

    /// How many stacks ended at a frame in a file that could not be read.
    pub fn stacks_stopped_at_unreadable(&self) -> u64 {
        self.stacks_stopped_at_unreadable
    }
}

/// Whether perf's path names a file (not `//anon`, `[vdso]`, `[heap]`, `/memfd:...`).
fn is_file(path: &[u8]) -> bool {
    path.starts_with(b"/") && !path.starts_with(b"//anon") && !path.starts_with(b"/memfd:")
}

fn read_u64(stack: &[u8], offset: u64) -> Result<u64, ()> {
    let start = usize::try_from(offset).map_err(|_| ())?;
    let bytes = stack
        .get(start..start.checked_add(8).ok_or(())?)
        .ok_or(())?;
    Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
}

/// The unwind tables of the file perf recorded: the file at its path when its build id
/// is the recorded one, else perf's copy in its build-id cache; its `.debug_frame`,
/// from it or from its separate debug file, when it has one.
fn read_tables(path: &[u8], build_id: Option<&[u8]>) -> Option<UnwindTables> {
    let on_disk = is_file(path).then(|| PathBuf::from(OsStr::from_bytes(path)));
    for candidate in copies(on_disk, build_id) {
        let Ok(file) = open_regular(&candidate) else {
            continue;
        };
        let cache = ReadCache::new(file);
        let Ok(elf) = object::File::parse(Bounded(&cache)) else {
            continue;
        };
        let actual = elf.build_id().ok().flatten();
        if let (Some(recorded), Some(actual)) = (build_id, actual) {
            if !same_build_id(recorded, actual) {
                continue;
            }
        }
        let mut tables = tables_of(&elf);
        if tables.sections.debug_frame.is_none() {
            tables.sections.debug_frame = actual.and_then(debug_frame_elsewhere);
        }
        // A compiler writes `.debug_frame` only for code it gave no `.eh_frame` (built
        // with -fno-asynchronous-unwind-tables): the file's `.eh_frame` is then only the C
        // runtime's, and framehop reads one table, `.eh_frame` first.
        if tables.sections.debug_frame.is_some() {
            tables.sections.eh_frame = None;
            tables.sections.eh_frame_hdr = None;
        }
        return Some(tables);
    }
    None
}

fn tables_of<'data, R: object::ReadRef<'data>>(elf: &object::File<'data, R>) -> UnwindTables {
    let range = |name: &str| {
        let section = elf.section_by_name(name)?;
        Some(section.address()..section.address().checked_add(section.size())?)
    };
    let sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame: section_bytes(elf, ".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: section_bytes(elf, ".eh_frame_hdr"),
        debug_frame: section_bytes(elf, ".debug_frame"),
        ..Default::default()
    };
    let segments = elf
        .segments()
        .map(|segment| {
            let (offset, size) = segment.file_range();
            (offset, size, segment.address())
        })
        .collect();
    UnwindTables { sections, segments }
}

/// A section's contents (uncompressed), if the file holds them (not NOBITS, as the
/// `.eh_frame` of a separate debug file).
fn section_bytes<'data, R: object::ReadRef<'data>>(
    elf: &object::File<'data, R>,
    name: &str,
) -> Option<Bytes> {
    let section = elf.section_by_name(name)?;
    if section.kind() == SectionKind::UninitializedData {
        return None;
    }
    // a compressed section says the size it is allocated at
    if section.compressed_file_range().ok()?.uncompressed_size > MAX_READ {
        return None;
    }
    let data = section.uncompressed_data().ok()?;
    (!data.is_empty()).then(|| Bytes::from(data.as_ref()))
}

/// The `.debug_frame` of a file's separate debug file, found by build id.
fn debug_frame_elsewhere(build_id: &[u8]) -> Option<Bytes> {
    debug_files(build_id).into_iter().find_map(|candidate| {
        let cache = ReadCache::new(open_regular(&candidate).ok()?);
        let elf = object::File::parse(Bounded(&cache)).ok()?;
        if !same_build_id(build_id, elf.build_id().ok()??) {
            return None;
        }
        section_bytes(&elf, ".debug_frame")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_mapped_from_a_page_of_the_segment_before_is_placed_by_its_own_segment() {
        // offcpu's own core, linked by lld: read-only data at offset 0 (0x70fb8 bytes), code at
        // offset 0x70fb8, address 0x71fb8. The kernel maps the code from offset 0x70000 (the page
        // it begins in, which the first segment also covers) at its address's page, 0x71000
        // past the file's base.
        let tables = UnwindTables {
            sections: ExplicitModuleSectionInfo::default(),
            segments: vec![(0, 0x70fb8, 0), (0x70fb8, 0x1695e8, 0x71fb8)],
        };
        let base = 0x7f12_3400_0000;
        assert_eq!(tables.base_address(base + 0x71000, 0x70000), base);
        // and a file whose code is at the same offset and address (gcc's), from its first page
        let plain = UnwindTables {
            sections: ExplicitModuleSectionInfo::default(),
            segments: vec![(0, 0x1000, 0), (0x1000, 0x2000, 0x1000)],
        };
        assert_eq!(plain.base_address(base + 0x1000, 0x1000), base);
    }
}
