//! Names for addresses, as perf gives them: the kernel's from kallsyms (a copy saved with
//! the capture, or /proc/kallsyms), a mapped file's from its ELF symbol tables (its
//! separate debug file's when there is one) and its PLT stubs.
//!
//! perf's fix-ups are kept: a symbol without a size ends where the next begins (the
//! last of the kernel or of a module at the next page), and of the symbols at one
//! address perf keeps one (see `better`). They are made for the addresses looked up
//! only: a kernel has ~150,000 symbols, a capture's stacks use a few thousand.

use std::cmp::Ordering;
use std::convert::Infallible;
use std::ops::Range;
use std::path::PathBuf;

use object::elf::{
    SHF_EXECINSTR, SHN_LORESERVE, SHT_DYNSYM, SHT_SYMTAB, STB_GLOBAL, STB_WEAK, STT_FUNC,
    STT_GNU_IFUNC, STT_NOTYPE,
};
use object::read::elf::{ElfFile64, SectionHeader, Sym};
use object::read::SectionIndex;
use object::{Endian, Endianness, Object, ObjectSegment, ObjectSymbol, ReadCache, ReadRef};
use pyo3::prelude::*;

use super::elf_files::{copies, debug_files, same_build_id, Bounded};
use crate::files::open_regular;
use crate::unless_panics;

const PAGE: u64 = 4096;
/// The size of a PLT stub on x86-64
const PLT_ENTRY: u64 = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Binding {
    Global,
    Weak,
    Local,
}

impl Binding {
    fn of_elf(bind: u8) -> Self {
        match bind {
            STB_GLOBAL => Binding::Global,
            STB_WEAK => Binding::Weak,
            _ => Binding::Local,
        }
    }

    /// kallsyms' type letter: weak (W, w), else global when upper case.
    fn of_kallsyms(kind: u8) -> Self {
        match kind {
            b'W' | b'w' => Binding::Weak,
            kind if kind.is_ascii_uppercase() => Binding::Global,
            _ => Binding::Local,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Binding::Global => "global",
            Binding::Weak => "weak",
            Binding::Local => "local",
        }
    }
}

/// One symbol as its table holds it: its name is a range of the table's `names`.
#[derive(Clone, Debug)]
struct Entry {
    start: u64,
    end: u64,
    name: Range<usize>,
    binding: Binding,
}

/// A symbol found for an address.
#[pyclass(frozen, get_all, module = "offcpu._core")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub start: u64,
    pub end: u64,
    pub name: String,
    pub binding: &'static str,
}

/// A symbol with its end fixed up, borrowed from its table.
struct Ended<'a> {
    start: u64,
    end: u64,
    name: &'a [u8],
    binding: Binding,
}

/// Symbols sorted by address (equal addresses in the order given).
struct Table {
    entries: Vec<Entry>,
    names: Vec<u8>,
    /// kallsyms' names may carry their module ("name\t[module]"), which bounds sizes and is not shown
    kallsyms: bool,
}

impl Table {
    fn new(mut entries: Vec<Entry>, names: Vec<u8>, kallsyms: bool) -> Self {
        entries.sort_by_key(|entry| entry.start);
        Table {
            entries,
            names,
            kallsyms,
        }
    }

    fn name(&self, entry: &Entry) -> &[u8] {
        self.names.get(entry.name.clone()).unwrap_or_default()
    }

    /// The symbol perf names `address` by; `shown(name)`: a name as perf weighs it among
    /// others at one address (an ELF file's demangled, as perf loads them).
    fn find<E>(
        &self,
        address: u64,
        shown: impl Fn(&[u8]) -> Result<String, E>,
    ) -> Result<Option<Symbol>, E> {
        let Some(last) = self
            .entries
            .partition_point(|entry| entry.start <= address)
            .checked_sub(1)
        else {
            return Ok(None);
        };
        let start = self.entries[last].start;
        let first = self.entries.partition_point(|entry| entry.start < start);
        let mut kept = self.ended(first);
        let mut kept_weight = None;
        for index in first + 1..=last {
            let symbol = self.ended(index);
            match kind(&symbol).cmp(&kind(&kept)) {
                Ordering::Less => {}
                Ordering::Greater => (kept, kept_weight) = (symbol, None),
                Ordering::Equal => {
                    let kept_by = match kept_weight {
                        Some(weight) => weight,
                        None => weight(&shown(kept.name)?),
                    };
                    let symbol_by = weight(&shown(symbol.name)?);
                    // of two alike, the first
                    (kept, kept_weight) = if symbol_by > kept_by {
                        (symbol, Some(symbol_by))
                    } else {
                        (kept, Some(kept_by))
                    };
                }
            }
        }
        if !(kept.start <= address && address < kept.end) {
            return Ok(None);
        }
        let name = String::from_utf8_lossy(kept.name);
        let name = if self.kallsyms {
            name.split('\t')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        } else {
            name.into_owned()
        };
        Ok(Some(Symbol {
            start: kept.start,
            end: kept.end,
            name,
            binding: kept.binding.word(),
        }))
    }

    /// The symbol at `index`, a symbol without a size ending where the next begins.
    fn ended(&self, index: usize) -> Ended<'_> {
        let entry = &self.entries[index];
        let name = self.name(entry);
        let mut end = entry.end;
        if end == entry.start {
            let start = entry.start;
            end = match self.entries.get(index + 1) {
                None if !start.is_multiple_of(PAGE) => {
                    (start / PAGE * PAGE).saturating_add(2 * PAGE)
                }
                None => start.saturating_add(PAGE),
                // the last symbol of the kernel or of a module
                Some(next) if self.kallsyms && in_module(name) != in_module(self.name(next)) => {
                    end.saturating_add(2 * PAGE - 1) / PAGE * PAGE
                }
                Some(next) => next.start,
            };
        }
        Ended {
            start: entry.start,
            end,
            name,
            binding: entry.binding,
        }
    }
}

fn in_module(name: &[u8]) -> bool {
    name.contains(&b'[')
}

/// What perf weighs first among symbols at one address: one with a size, then not weak, then global.
fn kind(symbol: &Ended<'_>) -> (bool, bool, bool) {
    (
        symbol.end > symbol.start,
        symbol.binding != Binding::Weak,
        symbol.binding == Binding::Global,
    )
}

/// Then, of symbols of one kind, the one with fewer leading underscores, then the longer name.
fn weight(shown: &str) -> (std::cmp::Reverse<usize>, usize) {
    let underscores = shown.len() - shown.trim_start_matches('_').len();
    (std::cmp::Reverse(underscores), shown.chars().count())
}

/// A name as it is.
fn as_it_is(name: &[u8]) -> Result<String, Infallible> {
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// The kernel's symbols.
#[pyclass(frozen, module = "offcpu._core")]
pub struct KernelSymbols {
    table: Table,
}

#[pymethods]
impl KernelSymbols {
    /// The symbols perf takes from kallsyms' "ADDRESS TYPE NAME" lines whose TYPE is one of
    /// `types` (a module's named with its "\t[module]" suffix, which `find` leaves out).
    #[staticmethod]
    fn kallsyms(text: &[u8], types: &[u8]) -> Self {
        // a line is 40 bytes or more ("ffffffff81000000 T " and a name)
        let mut entries = Vec::with_capacity(text.len() / 40);
        let mut line_start = 0;
        for line in text.split(|&byte| byte == b'\n') {
            if let Some((address, kind, name)) = kallsyms_line(line, types) {
                let name_start = line_start + (line.len() - name.len());
                entries.push(Entry {
                    start: address,
                    end: address,
                    name: name_start..line_start + line.len(),
                    binding: Binding::of_kallsyms(kind),
                });
            }
            line_start += line.len() + 1;
        }
        KernelSymbols {
            table: Table::new(entries, text.to_vec(), true),
        }
    }

    fn find(&self, address: u64) -> Option<Symbol> {
        let Ok(found) = self.table.find(address, as_it_is);
        found
    }

    /// Whether any address is shown: kernel.kptr_restrict shows a user every one as 0.
    fn shows_addresses(&self) -> bool {
        self.table.entries.iter().any(|entry| entry.start != 0)
    }
}

/// A kallsyms line perf takes a symbol from: its address (at most 16 hex digits), type and name.
fn kallsyms_line<'a>(line: &'a [u8], types: &[u8]) -> Option<(u64, u8, &'a [u8])> {
    let (address, space) = hex_address(line)?;
    let (&kind, rest) = line.get(space + 1..)?.split_first()?;
    let name = rest.strip_prefix(b" ").filter(|name| !name.is_empty())?;
    types.contains(&kind).then_some((address, kind, name))
}

/// The address a line begins with and where the space after it is: 1 to 16 hex digits, read
/// in the one pass (a kernel's kallsyms is 100,000 lines and more, read at every report).
fn hex_address(line: &[u8]) -> Option<(u64, usize)> {
    let mut address = 0u64;
    for (at, &byte) in line.iter().enumerate().take(17) {
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            b'A'..=b'F' => byte - b'A' + 10,
            b' ' if at > 0 => return Some((address, at)),
            _ => return None,
        };
        address = address << 4 | u64::from(digit);
    }
    None
}

/// A mapped file's function symbols, and the segments that place them in the file.
#[pyclass(frozen, module = "offcpu._core")]
pub struct ElfSymbols {
    table: Table,
    /// Each PT_LOAD segment with bytes in the file: (file offset, size, address)
    segments: Vec<(u64, u64, u64)>,
}

/// What one ELF file holds of symbols.
struct ElfFacts {
    build_id: Option<Vec<u8>>,
    segments: Vec<(u64, u64, u64)>,
    /// From .symtab, else .dynsym (None: the file has neither)
    functions: Option<(Vec<Entry>, Vec<u8>)>,
    plt: Vec<(u64, String)>,
}

#[pymethods]
impl ElfSymbols {
    /// A mapped file's symbols, from the first of its copies (at `path`, else in perf's
    /// build-id cache) that can be read and has the recorded build id (without one, the file
    /// at `path`), named by its separate debug file when there is one. None when there is
    /// no such copy.
    #[staticmethod]
    #[pyo3(signature = (path, build_id))]
    fn load(py: Python<'_>, path: PathBuf, build_id: Option<Vec<u8>>) -> Option<Self> {
        py.detach(|| {
            let on_disk = path.is_absolute().then_some(path);
            copies(on_disk, build_id.as_deref())
                .into_iter()
                .find_map(|candidate| {
                    let file = open_regular(&candidate).ok()?;
                    let facts = elf_facts(Bounded(&ReadCache::new(file)))?;
                    Self::of_recorded(facts, build_id.as_deref())
                })
        })
    }

    /// The symbols of an ELF image in memory (the vdso's): None when it is not one, or not
    /// the one recorded.
    #[staticmethod]
    #[pyo3(signature = (image, build_id))]
    fn of_image(image: &[u8], build_id: Option<Vec<u8>>) -> Option<Self> {
        Self::of_recorded(elf_facts(image)?, build_id.as_deref())
    }

    /// The symbol at an offset in the file; `shown(name)`: a name as perf weighs it among others at
    /// its address (demangled: identical code folded puts a C++ library's trivial destructors at one).
    fn find(&self, file_offset: u64, shown: Bound<'_, PyAny>) -> PyResult<Option<Symbol>> {
        let segment = self.segments.iter().find(|(offset, size, _)| {
            (*offset..offset.saturating_add(*size)).contains(&file_offset)
        });
        let address = match segment {
            Some((offset, _, address)) => (file_offset - offset).wrapping_add(*address),
            None => file_offset,
        };
        self.table.find(address, |name| {
            shown.call1((String::from_utf8_lossy(name),))?.extract()
        })
    }
}

impl ElfSymbols {
    fn of_recorded(facts: ElfFacts, recorded: Option<&[u8]>) -> Option<Self> {
        if let Some(recorded) = recorded {
            if !facts
                .build_id
                .as_deref()
                .is_some_and(|actual| same_build_id(recorded, actual))
            {
                return None;
            }
        }
        // by the file's own build id: perf pads the ones it records, which no debug file is named by
        let debug = facts
            .build_id
            .as_deref()
            .or(recorded)
            .and_then(debug_functions);
        let (mut entries, mut names) = debug.or(facts.functions).unwrap_or_default();
        for (start, name) in facts.plt {
            let at = names.len();
            names.extend_from_slice(name.as_bytes());
            entries.push(Entry {
                start,
                end: start + PLT_ENTRY,
                name: at..names.len(),
                binding: Binding::Global,
            });
        }
        Some(ElfSymbols {
            table: Table::new(entries, names, false),
            segments: facts.segments,
        })
    }
}

/// The function symbols of a file's separate debug file, if one has any.
fn debug_functions(build_id: &[u8]) -> Option<(Vec<Entry>, Vec<u8>)> {
    debug_files(build_id).into_iter().find_map(|candidate| {
        let facts = elf_facts(Bounded(&ReadCache::new(open_regular(&candidate).ok()?)))?;
        facts.functions.filter(|(entries, _)| !entries.is_empty())
    })
}

/// The GNU build id in an ELF file's notes (None: not ELF, none, or unreadable).
#[pyfunction]
pub fn elf_build_id(py: Python<'_>, path: PathBuf) -> Option<Vec<u8>> {
    py.detach(|| {
        let cache = ReadCache::new(open_regular(&path).ok()?);
        unless_panics(|| {
            let elf = object::File::parse(Bounded(&cache)).ok()?;
            Some(elf.build_id().ok()??.to_vec())
        })
    })
}

/// Where an ELF file's symbol `name` (of .dynsym, else .symtab) lies when the file is loaded:
/// (its address, and the file offset and address of the first loaded segment, which say where
/// the file was put in a process's memory). None: no such file, symbol or segment.
#[pyfunction]
pub fn elf_symbol_address(py: Python<'_>, path: PathBuf, name: &str) -> Option<(u64, u64, u64)> {
    py.detach(|| {
        let cache = ReadCache::new(open_regular(&path).ok()?);
        unless_panics(|| {
            let elf = object::File::parse(Bounded(&cache)).ok()?;
            let symbol = elf.dynamic_symbols().chain(elf.symbols()).find(|symbol| {
                symbol.name_bytes() == Ok(name.as_bytes()) && symbol.is_definition()
            })?;
            let (offset, _, address) = *loaded_segments(&elf).first()?;
            Some((symbol.address(), offset, address))
        })
    })
}

/// What perf reads of an ELF file for symbols (a 64-bit little-endian one: what it records on
/// x86-64); None for a file the ELF reader fails on.
fn elf_facts<'data, R: ReadRef<'data>>(data: R) -> Option<ElfFacts> {
    unless_panics(|| read_elf_facts(data))
}

fn read_elf_facts<'data, R: ReadRef<'data>>(data: R) -> Option<ElfFacts> {
    let elf = match ElfFile64::<Endianness, R>::parse(data) {
        Ok(elf) if elf.endian().is_little_endian() => elf,
        _ => return other_elf_facts(data),
    };
    Some(ElfFacts {
        build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
        segments: loaded_segments(&elf),
        functions: functions(&elf),
        plt: plt_stubs(&elf).unwrap_or_default(),
    })
}

/// Each PT_LOAD segment with bytes in the file: (file offset, size, address).
fn loaded_segments<'data>(elf: &impl Object<'data>) -> Vec<(u64, u64, u64)> {
    let ranges = elf
        .segments()
        .map(|segment| (segment.file_range(), segment.address()));
    ranges
        .filter(|((_, size), _)| *size != 0)
        .map(|((offset, size), address)| (offset, size, address))
        .collect()
}

/// Another kind of ELF file (32-bit, big-endian): its build id and segments, and no
/// symbols (its frames are [unknown], as perf on x86-64 names none of them either).
fn other_elf_facts<'data, R: ReadRef<'data>>(data: R) -> Option<ElfFacts> {
    let elf = object::File::parse(data).ok()?;
    if elf.format() != object::BinaryFormat::Elf {
        return None;
    }
    Some(ElfFacts {
        build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
        segments: loaded_segments(&elf),
        functions: None,
        plt: vec![],
    })
}

type Elf64 = object::elf::FileHeader64<Endianness>;

/// The bytes of a string table, read whole: names are looked up in them, not one read
/// each (object's reads through a file stop looking for a name's end after 4096 bytes,
/// which a C++ template's name can pass).
fn string_table<'data, R: ReadRef<'data>>(
    elf: &ElfFile64<'data, Endianness, R>,
    index: SectionIndex,
) -> &'data [u8] {
    let section = elf.elf_section_table().section(index).ok();
    let data = section.and_then(|section| section.data(elf.endian(), elf.data()).ok());
    data.unwrap_or_default()
}

/// The NUL-terminated name at `offset` in a string table.
fn name_at(strings: &[u8], offset: u32) -> Option<&[u8]> {
    let rest = strings.get(offset as usize..)?;
    rest.iter()
        .position(|&byte| byte == 0)
        .map(|end| &rest[..end])
}

/// What perf takes from .symtab, else .dynsym: functions, and labels (symbols without a
/// type, such as assembly entry points) in executable sections.
fn functions<'data, R: ReadRef<'data>>(
    elf: &ElfFile64<'data, Endianness, R>,
) -> Option<(Vec<Entry>, Vec<u8>)> {
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let has = |kind: u32| {
        sections
            .iter()
            .any(|section| section.sh_type(endian) == kind)
    };
    let table = if has(SHT_SYMTAB) {
        elf.elf_symbol_table()
    } else if has(SHT_DYNSYM) {
        elf.elf_dynamic_symbol_table()
    } else {
        return None;
    };
    let executable: Vec<bool> = sections
        .iter()
        .map(|section| section.sh_flags(endian) & u64::from(SHF_EXECINSTR) != 0)
        .collect();
    let strings = string_table(elf, table.string_section());
    let (mut entries, mut names) = (vec![], vec![]);
    for symbol in table.iter() {
        let index = usize::from(symbol.st_shndx(endian));
        if symbol.st_name(endian) == 0 || index == 0 || index >= usize::from(SHN_LORESERVE) {
            continue; // unnamed, undefined or special
        }
        let kind = symbol.st_type();
        let label = kind == STT_NOTYPE && executable.get(index).copied().unwrap_or(false);
        if kind != STT_FUNC && kind != STT_GNU_IFUNC && !label {
            continue;
        }
        let Some(name) = name_at(strings, symbol.st_name(endian)) else {
            continue;
        };
        let at = names.len();
        names.extend_from_slice(name);
        let start = symbol.st_value(endian);
        entries.push(Entry {
            start,
            end: start.saturating_add(symbol.st_size(endian)),
            name: at..names.len(),
            binding: Binding::of_elf(symbol.st_bind()),
        });
    }
    Some((entries, names))
}

/// perf names each PLT stub after the function it jumps to ("name@plt"): the stubs of
/// .plt.sec, or those of .plt after its first (the resolver's), in .rela.plt's order. A
/// stub whose relocation names no symbol (an IFUNC's, R_X86_64_IRELATIVE) is "@plt" in perf 6.1.
fn plt_stubs<'data, R: ReadRef<'data>>(
    elf: &ElfFile64<'data, Endianness, R>,
) -> Option<Vec<(u64, String)>> {
    let (endian, data) = (elf.endian(), elf.data());
    let sections = elf.elf_section_table();
    let (_, relocations) = sections.section_by_name(endian, b".rela.plt")?;
    let secure = sections.section_by_name(endian, b".plt.sec");
    let (_, plt) = secure.or_else(|| sections.section_by_name(endian, b".plt"))?;
    let (relocations, link) = relocations.rela(endian, data).ok()??;
    let dynamic = sections.section(link).ok()?;
    if ![SHT_DYNSYM, SHT_SYMTAB].contains(&dynamic.sh_type(endian)) {
        return None;
    }
    let symbols =
        object::read::elf::SymbolTable::<Elf64, R>::parse(endian, data, sections, link, dynamic)
            .ok()?;
    let strings = string_table(elf, symbols.string_section());
    let first = plt
        .sh_addr(endian)
        .saturating_add(if secure.is_some() { 0 } else { PLT_ENTRY });
    let plt_end = plt.sh_addr(endian).saturating_add(plt.sh_size(endian));
    let mut stubs = vec![];
    for (number, relocation) in (0u64..).zip(relocations) {
        let index = relocation.r_sym(endian, false) as usize;
        let Some(symbol) = symbols.symbols().get(index) else {
            continue;
        };
        let name = match symbol.st_name(endian) {
            0 => &[][..],
            offset => name_at(strings, offset).unwrap_or_default(),
        };
        let name = String::from_utf8_lossy(name);
        let start = first.saturating_add(number.saturating_mul(PLT_ENTRY));
        if start.saturating_add(PLT_ENTRY) <= plt_end {
            stubs.push((start, format!("{name}@plt")));
        }
    }
    Some(stubs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(symbols: &[(u64, u64, &str, Binding)], kallsyms: bool) -> Table {
        let (mut entries, mut names) = (vec![], vec![]);
        for &(start, end, name, binding) in symbols {
            let at = names.len();
            names.extend_from_slice(name.as_bytes());
            entries.push(Entry {
                start,
                end,
                name: at..names.len(),
                binding,
            });
        }
        Table::new(entries, names, kallsyms)
    }

    fn name_at(table: &Table, address: u64) -> Option<String> {
        let Ok(found) = table.find(address, as_it_is);
        found.map(|symbol| symbol.name)
    }

    #[test]
    fn of_symbols_at_one_address_perf_keeps_a_sized_global_one_with_fewer_underscores() {
        use Binding::*;
        let symbols = table(
            &[
                (0x100, 0x100, "label", Global),
                (0x100, 0x110, "weak_one", Weak),
                (0x100, 0x110, "__libc_write", Global),
                (0x100, 0x110, "write", Global),
                (0x100, 0x110, "local_write", Local),
                (0x200, 0x210, "next", Global),
            ],
            false,
        );
        assert_eq!(name_at(&symbols, 0x104).as_deref(), Some("write"));
        assert_eq!(name_at(&symbols, 0x110), None); // past its size, before the next
        assert_eq!(name_at(&symbols, 0xff), None);
    }

    #[test]
    fn of_symbols_alike_at_one_address_perf_keeps_the_longest_as_it_shows_them() {
        use Binding::*;
        // identical code folded: two destructors at one address, the shorter mangled the longer
        // demangled (as in Rust 1.95's libLLVM, whose perf 6.1 showed the longer demangled)
        let symbols = table(
            &[
                (0x100, 0x104, "_ZN1b6bbbbbbD0Ev", Global),
                (0x100, 0x120, "_ZN1aD0Ev", Global),
            ],
            false,
        );
        let demangled = |name: &[u8]| -> Result<String, Infallible> {
            Ok(match name {
                b"_ZN1aD0Ev" => "a::a::~a_destructor_named_long".into(),
                other => String::from_utf8_lossy(other).into_owned(),
            })
        };
        let Ok(found) = symbols.find(0x110, demangled);
        // and the address is in it by its own size, not the other's
        assert_eq!(
            found.map(|symbol| symbol.name).as_deref(),
            Some("_ZN1aD0Ev")
        );
        assert_eq!(
            name_at(&symbols, 0x102).as_deref(),
            Some("_ZN1b6bbbbbbD0Ev")
        );
    }

    #[test]
    fn a_symbol_without_a_size_ends_where_the_next_begins_or_past_the_next_page() {
        use Binding::*;
        let symbols = table(
            &[(0x1000, 0x1000, "a", Global), (0x1800, 0x1800, "b", Global)],
            false,
        );
        assert_eq!(name_at(&symbols, 0x17ff).as_deref(), Some("a"));
        // the last: to the end of the page after its own
        assert_eq!(name_at(&symbols, 0x2fff).as_deref(), Some("b"));
        assert_eq!(name_at(&symbols, 0x3000), None);
    }

    #[test]
    fn kallsyms_lines_hold_one_to_sixteen_hex_digits_a_kept_type_and_a_name() {
        let types = b"Tt";
        assert_eq!(
            kallsyms_line(b"ffffffffC0000010 t mod_fn\t[mod]", types),
            Some((0xffff_ffff_c000_0010, b't', &b"mod_fn\t[mod]"[..]))
        );
        assert_eq!(kallsyms_line(b"0 T x", types), Some((0, b'T', &b"x"[..])));
        assert_eq!(kallsyms_line(b"1ffffffff81000000 T x", types), None); // 17 digits
        assert_eq!(kallsyms_line(b" ffffffff81000000 T x", types), None);
        assert_eq!(kallsyms_line(b"ffffffff8100000g T x", types), None);
        assert_eq!(kallsyms_line(b"ffffffff81000000 U x", types), None);
        assert_eq!(kallsyms_line(b"ffffffff81000000 T ", types), None); // no name
        assert_eq!(kallsyms_line(b"ffffffff81000000 Tx", types), None);
        assert_eq!(kallsyms_line(b"ffffffff81000000", types), None);
        assert_eq!(kallsyms_line(b"", types), None);
    }

    #[test]
    fn kallsyms_lines_name_the_kernel_and_its_modules_apart() {
        let text = b"ffffffff81000000 T _text\nffffffff81000100 t schedule\nbad line\n\
                     ffffffff81000200 W weak_one\nffffffffc0000000 t mod_fn\t[mod]\n\
                     ffffffff81000300 U undefined\n";
        let kernel = KernelSymbols::kallsyms(text, b"TtWwDdBb");
        let found = kernel.find(0xffffffff81000104).expect("schedule");
        assert_eq!((found.name.as_str(), found.binding), ("schedule", "local"));
        assert_eq!(
            kernel.find(0xffffffff81000204).map(|s| s.binding),
            Some("weak")
        );
        // the last of the kernel before a module's ends at the next page
        assert_eq!(
            kernel.find(0xffffffff81001fff).map(|s| s.name).as_deref(),
            Some("weak_one")
        );
        assert_eq!(kernel.find(0xffffffff81002000), None);
        let module = kernel.find(0xffffffffc0000010).expect("in the module");
        assert_eq!(module.name, "mod_fn");
        assert!(kernel.shows_addresses());
    }
}
