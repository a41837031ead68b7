"""Names for the addresses of call chains, as perf script shows them.

Kernel addresses are named from a copy of /proc/kallsyms saved beside the capture
at record time (save_kernel_symbols), or from /proc/kallsyms itself when the
running kernel is the one recorded (same build id). User addresses are named from
the ELF symbol tables of the files the process had mapped (its MMAP2 records),
found as perf finds them: by build id in /usr/lib/debug/.build-id and perf's cache
~/.debug, else at their path when the build id matches. Where perf keeps several
symbols at one address, the same one is kept (see _better).

A file that cannot be found with the recorded build id is said once (`missing`)
and its frames are shown as [file+0xoffset]; perf script shows them as [unknown],
or by name when its own cache still holds the file. Without a build id (perf before
5.12), the file at the path names them, as in perf script, and when it is another file
than the one mapped (another inode) that is said. The vdso is named from the image
saved with the capture, else from this process's own when the kernel is the recorded one.
"""

from __future__ import annotations

import io
import os
import re
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import cxxfilt
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import NoteSection, SymbolTableSection
from rust_demangler import demangle as rust_demangle

from offcpu.capture import KERNEL_SYMBOLS, VDSO_IMAGE
from offcpu.errors import OffcpuError, more_in
from offcpu.files import PRIVATE, write_whole
from offcpu.stacks import UNKNOWN, Stack, without_tracing

# Call chain markers: entries at or above CONTEXT_MAX say whose addresses follow (the kernel's, the user's...).
CONTEXT_USER = 0xFFFF_FFFF_FFFF_FE00
CONTEXT_MAX = 0xFFFF_FFFF_FFFF_F001
# All the markers there are (hypervisor, kernel, user, and a guest's): perf drops a chain
# holding any other entry at or above CONTEXT_MAX as invalid, and prints its sample without one.
CONTEXTS = frozenset({0xFFFF_FFFF_FFFF_FFE0, 0xFFFF_FFFF_FFFF_FF80, CONTEXT_USER, 0xFFFF_FFFF_FFFF_F800,
                      0xFFFF_FFFF_FFFF_F780, 0xFFFF_FFFF_FFFF_F600})
# An entry of perf.data's BUILD_ID section (offcpu._core.PerfData.build_ids): pid, build id, file, the kernel's
BuildId = tuple[int, bytes, str, bool]
VDSO = "[vdso]"  # how perf names the mapping of the kernel's vdso
KERNEL_START = 0xFFFF_0000_0000_0000  # perf script prints these as 16 hex digits from ffff: kernel frames
KERNEL_NOTES = Path("/sys/kernel/notes")
PROC_KALLSYMS = Path("/proc/kallsyms")
SAVED_BUILD_ID = re.compile(rb"# build-id ((?:[0-9a-f]{2})*)")  # the first line of a capture's kallsyms
NT_GNU_BUILD_ID = 3
PAGE = 4096
# kallsyms types perf keeps (text, weak, data, bss; upper or lower case)
KALLSYMS_TYPES = frozenset("TtWwDdBb")
DEBUG_DIRS = (Path("/usr/lib/debug/.build-id"),)
# Mappings of memory that no file on disk holds: perf names nothing in them.
ANONYMOUS_FILES = ("/memfd:", "//anon", "/dev/zero", "/anon_hugepage", "/SYSV")


def perf_cache() -> Path:
    """perf's build-id cache (perf record copies the files it saw samples in there)."""
    return Path(os.environ.get("PERF_BUILDID_DIR") or Path.home() / ".debug")


# Kernel -----------------------------------------------------------------------

def running_kernel_build_id(notes: Path = KERNEL_NOTES) -> bytes | None:
    """The build id of the running kernel, from its ELF notes (None if unreadable)."""
    try:
        raw = notes.read_bytes()
    except OSError:
        return None
    at = 0
    while at + 12 <= len(raw):
        name_size, desc_size, kind = struct.unpack_from("<III", raw, at)
        name_at = at + 12
        desc_at = name_at + (name_size + 3) // 4 * 4
        if kind == NT_GNU_BUILD_ID and raw[name_at:name_at + name_size].rstrip(b"\0") == b"GNU":
            return raw[desc_at:desc_at + desc_size]
        at = desc_at + (desc_size + 3) // 4 * 4
    return None


def save_kernel_symbols(directory: Path) -> Path:
    """Save /proc/kallsyms in `directory` (mode 0600), its first line the running
    kernel's build id, so that kernel frames can be named on another machine or
    after a reboot. An OffcpuError when the addresses are hidden (kptr_restrict)."""
    try:
        text = PROC_KALLSYMS.read_text()
    except OSError as error:
        raise OffcpuError(f"cannot read {PROC_KALLSYMS}: {error.strerror}") from None
    if not re.search(r"^0*[1-9a-f]", text, re.MULTILINE):
        raise OffcpuError(f"{PROC_KALLSYMS} shows no addresses (kernel.kptr_restrict): kernel frames could not be "
                          "named; record as root, or set kernel.kptr_restrict=0")
    build_id = running_kernel_build_id()
    target = directory / KERNEL_SYMBOLS
    write_whole(target, f"# build-id {build_id.hex() if build_id else ''}\n{text}", mode=PRIVATE)
    return target


# The vdso ---------------------------------------------------------------------

def running_vdso() -> bytes | None:
    """The vdso image of the running kernel, read from this process: the kernel maps the
    same one into every process (None if it cannot be read)."""
    try:
        maps = Path("/proc/self/maps").read_text()
        line = next(line for line in maps.splitlines() if line.endswith(f" {VDSO}"))
        start, end = (int(bound, 16) for bound in line.split()[0].split("-"))
        with open("/proc/self/mem", "rb") as memory:
            memory.seek(start)
            return memory.read(end - start)
    except (OSError, StopIteration, ValueError):
        return None


def save_vdso(directory: Path) -> None:
    """Save the running kernel's vdso image in `directory`, so that vdso frames (clock_gettime
    and gettimeofday, interrupted by a timer) are named on another machine or kernel.
    OSError as raised; nothing is saved when the image cannot be read."""
    image = running_vdso()
    if image is not None:
        write_whole(directory / VDSO_IMAGE, image, mode=PRIVATE)


@dataclass(frozen=True)
class Symbol:
    start: int
    end: int
    name: str
    binding: str  # "global", "local" or "weak"


class SymbolTable:
    """Symbols sorted by address, with perf's fix-ups: a symbol without a size ends
    where the next begins, and of symbols at one address only perf's choice is kept.
    The fix-ups are made for the addresses looked up only, and names and bindings are
    read only then (a kernel has ~150,000 symbols; a capture's stacks use a few thousand):
    `names` and `bindings` are indexed as `starts` and `ends` were given."""

    def __init__(self, starts: list[int], ends: list[int], names: Sequence[str], bindings: Sequence[str],
                 kallsyms: bool) -> None:
        order = sorted(range(len(starts)), key=starts.__getitem__)  # equal starts keep their order
        self.starts = [starts[index] for index in order]  # for bisect: a look-up in a list is fastest
        self.ends = [ends[index] for index in order]
        self.order = order
        self.names, self.bindings = names, bindings
        self.kallsyms = kallsyms

    @classmethod
    def of(cls, symbols: list[Symbol], kallsyms: bool = False) -> SymbolTable:
        return cls([symbol.start for symbol in symbols], [symbol.end for symbol in symbols],
                   [symbol.name for symbol in symbols], [symbol.binding for symbol in symbols], kallsyms)

    def find(self, address: int) -> Symbol | None:
        last = bisect_right(self.starts, address) - 1
        if last < 0:
            return None
        first = bisect_left(self.starts, self.starts[last])
        kept = None
        for index in range(first, last + 1):  # the symbols at this address: perf keeps one
            symbol = self._ended(index)
            if kept is None or not _better(kept, symbol):
                kept = symbol
        assert kept is not None
        if not kept.start <= address < kept.end:
            return None
        return Symbol(kept.start, kept.end, kept.name.split("\t", 1)[0].strip(), kept.binding) if self.kallsyms \
            else kept

    def _ended(self, index: int) -> Symbol:
        """The symbol at `index`, a symbol without a size ending where the next begins."""
        start, end, name = self.starts[index], self.ends[index], self.names[self.order[index]]
        if end == start:
            if index + 1 == len(self.starts):
                end = start // PAGE * PAGE + 2 * PAGE if start % PAGE else start + PAGE
            elif self.kallsyms and ("[" in name) != ("[" in self.names[self.order[index + 1]]):
                end = (end + PAGE + PAGE - 1) // PAGE * PAGE  # the last symbol of the kernel or a module
            else:
                end = self.starts[index + 1]
        return Symbol(start, end, name, self.bindings[self.order[index]])


def _better(first: Symbol, second: Symbol) -> bool:
    """Whether perf keeps `first` over `second` at the same address: one with a size,
    then not weak, then global, then fewer leading underscores, then the longer name,
    then the first."""
    for first_key, second_key in (
            (first.end > first.start, second.end > second.start),
            (first.binding != "weak", second.binding != "weak"),
            (first.binding == "global", second.binding == "global"),
            (-_underscores(first.name), -_underscores(second.name)),
            (len(first.name), len(second.name))):
        if first_key != second_key:
            return first_key > second_key
    return True


def _underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


def recorded_kernel_build_id(build_ids: list[BuildId], mapped_build_id: bytes | None) -> bytes | None:
    """The recorded kernel's build id: from perf.data's BUILD_ID section, or from the kernel's
    MMAP2 record."""
    return next((build_id for _, build_id, _, kernel in build_ids if kernel), mapped_build_id)


def saved_kernel_build_id(saved: Path | None) -> bytes | None:
    """The build id a capture's saved kallsyms names on its first line (None: no saved copy,
    no such line, or it names none): the recorded kernel's, for a capture with no perf.data."""
    if saved is None:
        return None
    try:
        with open(saved, "rb") as file:
            header = SAVED_BUILD_ID.fullmatch(file.readline().rstrip(b"\n"))
    except OSError:
        return None
    return bytes.fromhex(header[1].decode()) if header and header[1] else None


def kernel_symbols_for(saved: Path | None, recorded: bytes | None) -> SymbolTable | None:
    """The kernel's symbols: the copy saved with the capture, else /proc/kallsyms when
    the running kernel is the `recorded` one (recorded_kernel_build_id, saved_kernel_build_id);
    None when neither can be trusted."""
    if saved is not None and saved.is_file():
        first, _, rest = saved.read_bytes().partition(b"\n")
        header = SAVED_BUILD_ID.fullmatch(first)
        # Without the line offcpu writes first (a copy of /proc/kallsyms, a damaged file), nothing
        # says which kernel the copy is of: it is left out, as the copy of another kernel is.
        if header and (recorded is None or not header[1] or bytes.fromhex(header[1].decode()) == recorded):
            return _kallsyms(rest)
    running = running_kernel_build_id()
    if recorded is not None and running == recorded:
        try:
            table = _kallsyms(PROC_KALLSYMS.read_bytes())
        except OSError:
            return None
        # a user from whom kernel.kptr_restrict hides the addresses reads them all as 0
        return table if table.starts and table.starts[-1] else None
    return None




class _KallsymsColumn(Sequence[str]):
    """Names or bindings of kallsyms' lines, each read from the text when looked up."""

    def __init__(self, text: bytes, name_starts: list[int], line_ends: list[int], kinds: list[int],
                 names: bool) -> None:
        self.text, self.name_starts, self.line_ends, self.kinds, self.names = text, name_starts, line_ends, kinds, names

    def __len__(self) -> int:
        return len(self.kinds)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        if self.names:
            return self.text[self.name_starts[index]:self.line_ends[index]].decode(errors="replace")
        kind = chr(self.kinds[index])
        return "weak" if kind in "Ww" else "global" if kind.isupper() else "local"


def _kallsyms(text: bytes) -> SymbolTable:
    """The symbols perf takes from kallsyms' "ADDRESS TYPE NAME" lines: text, weak, data and
    bss (a module's named with its "\t[module]" suffix, which find() leaves out). The lines
    are read in the core; a name is read when it is looked up."""
    from offcpu import _core

    addresses, name_starts, line_ends, kinds = _core.kallsyms_lines(text, "".join(sorted(KALLSYMS_TYPES)).encode())
    return SymbolTable(addresses, addresses, _KallsymsColumn(text, name_starts, line_ends, kinds, names=True),
                       _KallsymsColumn(text, name_starts, line_ends, kinds, names=False), kallsyms=True)


# User space -------------------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    """An executable mapping of a file into a process (an MMAP or MMAP2 record)."""

    start: int
    end: int
    offset: int  # in the file
    path: str
    build_id: bytes | None  # when the MMAP2 record carries one
    inode: tuple[int, int, int] | None  # major, minor, inode number, when the MMAP2 record carries them


@dataclass
class TaskHistory:
    """Each process's executable mappings per exec generation: as perf knows them at the
    end (replay: a forked process starts with its parent's, and an exec keeps the mappings
    the new program's do not cover, as perf replaces only what a new mapping overlaps), or
    as offcpu read them from /proc for a BPF recording (recording.process_maps.history)."""

    mappings: dict[tuple[int, int], list[Mapping]] = field(default_factory=dict)
    # the kernel's build id from its MMAP2 record (perf record --buildid-mmap writes it there,
    # and leaves the BUILD_ID section empty)
    kernel_build_id: bytes | None = None

    @classmethod
    def replay(cls, records: list[tuple]) -> TaskHistory:
        """The maps from perf.data's task records in time order (offcpu._core.PerfData.task_records)."""
        history = cls()
        generation: dict[int, int] = {}
        for record in records:
            kind, pid = record[0], record[1]
            if kind == "comm" and record[2]:  # an exec
                before = history.mappings.get((pid, generation.get(pid, 0)), [])
                generation[pid] = generation.get(pid, 0) + 1
                history.mappings[(pid, generation[pid])] = list(before)
            elif kind == "fork" and pid != record[2]:  # a new process, not a thread
                generation[pid] = 0
                history.mappings[(pid, 0)] = list(history.mappings.get((record[2], generation.get(record[2], 0)), []))
            elif kind == "map":
                _, _, start, end, offset, path, build_id, inode, executable, kernel_build_id = record
                history.kernel_build_id = history.kernel_build_id or kernel_build_id
                if executable:
                    history.mappings.setdefault((pid, generation.get(pid, 0)), []).append(
                        Mapping(start, end, offset, path, build_id, inode))
        return history

    def find(self, pid: int, generation: int, address: int) -> Mapping | None:
        for mapping in reversed(self.mappings.get((pid, generation), ())):
            if mapping.start <= address < mapping.end:
                return mapping
        return None


@dataclass
class ElfSymbols:
    """A file's function symbols and the segments that place them in the file."""

    table: SymbolTable
    segments: list[tuple[int, int, int]]  # file offset, size, virtual address of each PT_LOAD

    def find(self, file_offset: int) -> Symbol | None:
        for offset, size, address in self.segments:
            if offset <= file_offset < offset + size:
                return self.table.find(file_offset - offset + address)
        return self.table.find(file_offset)


def elf_build_id(elf: ELFFile) -> bytes | None:
    for section in elf.iter_sections():
        if isinstance(section, NoteSection):
            for note in section.iter_notes():
                # pyelftools decodes the desc of GNU's note only: another owner's note of type 3 is raw bytes
                if note["n_type"] == "NT_GNU_BUILD_ID" and isinstance(note["n_desc"], str):
                    return bytes.fromhex(note["n_desc"])
    return None


def _open_elf(path: Path) -> tuple[ELFFile, object] | None:
    try:
        stream = open(path, "rb")
    except OSError:
        return None
    try:
        return ELFFile(stream), stream
    except (ELFError, OSError, ValueError, struct.error):
        stream.close()
        return None


ELF64_SYMBOL = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
ELF64_RELOCATION = struct.Struct("<QQq")  # r_offset, r_info (symbol << 32 | type), r_addend
STT_NOTYPE, STT_FUNC, STT_GNU_IFUNC = 0, 2, 10
STB_GLOBAL, STB_WEAK = 1, 2
SHN_RESERVED = 0xFF00  # from here on, section indexes are special (absolute, common...)
SHF_EXECINSTR = 0x4


def _function_symbols(elf: ELFFile) -> list[Symbol] | None:
    """What perf takes from .symtab, else .dynsym: functions, and labels (symbols without a
    type, such as assembly entry points) in executable sections; None without either table.
    pyelftools finds the tables; their entries are unpacked here in bulk (pyelftools parses
    one symbol at a time: seconds for a libc's debug symbols)."""
    if elf.elfclass != 64 or not elf.little_endian:
        return None  # not what perf records on x86-64
    for name in (".symtab", ".dynsym"):
        table = elf.get_section_by_name(name)
        if not isinstance(table, SymbolTableSection) or table["sh_type"] == "SHT_NOBITS":
            continue
        executable = {index for index, section in enumerate(elf.iter_sections())
                      if section["sh_flags"] & SHF_EXECINSTR}
        names = elf.get_section(table["sh_link"]).data()
        symbols = []
        for name_at, info, _, index, start, size in ELF64_SYMBOL.iter_unpack(table.data()):
            kind = info & 0xF
            if not name_at or not index or index >= SHN_RESERVED:  # unnamed, undefined or special
                continue
            if kind not in (STT_FUNC, STT_GNU_IFUNC) and not (kind == STT_NOTYPE and index in executable):
                continue
            bind = info >> 4
            binding = "global" if bind == STB_GLOBAL else "weak" if bind == STB_WEAK else "local"
            symbol_name = names[name_at:names.index(b"\0", name_at)].decode(errors="replace")
            symbols.append(Symbol(start, start + size, symbol_name, binding))
        return symbols
    return None


PLT_ENTRY = 16  # x86-64


def _plt_symbols(elf: ELFFile) -> list[Symbol]:
    """perf names each PLT stub after the function it jumps to ("name@plt"): the stubs of
    .plt.sec, or those of .plt after its first (the resolver's), in .rela.plt's order. A stub
    whose relocation names no symbol (an IFUNC's, R_X86_64_IRELATIVE) is "@plt" in perf 6.1."""
    relocations = elf.get_section_by_name(".rela.plt")
    secure = elf.get_section_by_name(".plt.sec")
    plt = secure or elf.get_section_by_name(".plt")
    if not isinstance(relocations, RelocationSection) or plt is None:
        return []
    dynamic = elf.get_section(relocations["sh_link"])
    if not isinstance(dynamic, SymbolTableSection):
        return []
    if elf.elfclass != 64 or not elf.little_endian:
        return []
    first = plt["sh_addr"] + (0 if secure else PLT_ENTRY)
    dynamic_entries, names = dynamic.data(), elf.get_section(dynamic["sh_link"]).data()
    symbols = []
    for number, (_, info, _) in enumerate(ELF64_RELOCATION.iter_unpack(relocations.data())):
        entry = (info >> 32) * ELF64_SYMBOL.size  # the relocation's symbol, in .dynsym
        if entry + ELF64_SYMBOL.size > len(dynamic_entries):
            continue
        name_at = ELF64_SYMBOL.unpack_from(dynamic_entries, entry)[0]
        name = names[name_at:names.index(b"\0", name_at)].decode(errors="replace") if name_at else ""
        start = first + number * PLT_ENTRY
        if start + PLT_ENTRY <= plt["sh_addr"] + plt["sh_size"]:
            symbols.append(Symbol(start, start + PLT_ENTRY, f"{name}@plt", "global"))
    return symbols


def _segments(elf: ELFFile) -> list[tuple[int, int, int]]:
    return [(segment["p_offset"], segment["p_filesz"], segment["p_vaddr"]) for segment in elf.iter_segments()
            if segment["p_type"] == "PT_LOAD" and segment["p_filesz"]]


def demangle(name: str) -> str:
    """A symbol's name as perf 6.1 shows it: C++ and Rust names demangled without
    their parameters (libiberty's cplus_demangle without DMGL_PARAMS), others as they are."""
    if name.startswith("_R") or (name.startswith("_ZN") and re.search(r"17h[0-9a-f]{16}E$", name)):
        try:
            # a legacy name without its hash (::h and 16 hex digits), as perf shows it
            return re.sub(r"::h[0-9a-f]{16}$", "", rust_demangle(name))
        except Exception:  # the library raises bare Exceptions for names it does not take
            return name
    if not name.startswith("_Z"):
        return name
    try:
        full = cxxfilt.demangle(name)
    except cxxfilt.InvalidName:
        return name
    return without_parameters(full)


def without_parameters(demangled: str) -> str:
    """`ns::f<T>(int) const` -> `ns::f<T>`, and a template function's return type dropped:
    what the demangler prints when it is not asked for parameters."""
    depth = 0
    cut = len(demangled)
    # the parameter list is the last top-level (...) group; operator names may hold brackets
    index = len(demangled) - 1
    while index >= 0:
        char = demangled[index]
        if char == ")":
            if depth == 0:
                cut_end = index
            depth += 1
        elif char == "(":
            depth -= 1
            if depth == 0 and not demangled[:index].endswith("operator"):
                cut = index
                break
        index -= 1
    else:
        return demangled
    del cut_end
    name = demangled[:cut]
    return _without_return_type(name)


def _without_return_type(name: str) -> str:
    """The text after the last space outside <>, () and {}: a template function's return
    type comes first, separated by a space."""
    depth = 0
    for index in range(len(name) - 1, -1, -1):
        char = name[index]
        if char in ">)}":
            depth += 1
        elif char in "<({":
            depth -= 1
        elif char == " " and depth == 0 and not name[:index].endswith("operator"):
            return name[index + 1:]
    return name


class Symbolizer:
    """Names the frames of call chains (raw ones of perf.data, see native_reader; a BPF
    capture's, see bpf_reader), once per address."""

    def __init__(self, maps: TaskHistory, kernel: SymbolTable | None, recorded_here: bool,
                 vdso: Path | None = None, build_ids: dict[str, bytes] | None = None) -> None:
        """`recorded_here`: this machine runs the recorded kernel; `build_ids`: of the mapped
        files by path, where the maps do not carry them (perf.data's BUILD_ID section)."""
        self.history = maps
        self.kernel = kernel
        self.recorded_here = recorded_here
        self.vdso = vdso
        self.build_ids = build_ids or {}
        self.files: dict[tuple[str, bytes | None], ElfSymbols | None] = {}
        self.names: dict[tuple[int, int, int], str] = {}
        self.kernel_names: dict[int, str] = {}  # chains share most kernel frames: each address is looked up once
        self.missing: list[str] = []  # sentences, one per file whose frames could not be named
        self.unchecked: list[str] = []  # files named from another file at their path (see _unchecked)

    @classmethod
    def of_perf_data(cls, build_ids: list[BuildId], history: TaskHistory, kernel_symbols: Path | None,
                     vdso: Path | None = None) -> Symbolizer:
        """`build_ids`: perf.data's BUILD_ID section (offcpu._core.PerfData.build_ids)."""
        recorded = recorded_kernel_build_id(build_ids, history.kernel_build_id)
        by_file = {filename: build_id for _, build_id, filename, kernel in build_ids if not kernel}
        return cls(history, kernel_symbols_for(kernel_symbols, recorded), recorded == running_kernel_build_id(), vdso,
                   by_file)

    @property
    def notes(self) -> list[str]:
        """What the reports say of the mapped files: each one that could not be read, and
        those named from a file that could not be checked, in one sentence."""
        return self.missing + ([unchecked_note(self.unchecked)] if self.unchecked else [])

    def stack(self, chain: object) -> Stack:
        if isinstance(chain, tuple):
            pid, generation, raw = chain
        else:
            pid, generation, raw = -1, 0, chain
        addresses = struct.unpack(f"<{len(raw) // 8}Q", raw)
        frames = []
        kernel = 0
        in_user = False  # the chain's context: the kernel's frames come first, then the user's marker
        for address in addresses:
            if address >= CONTEXT_MAX:
                if address not in CONTEXTS:
                    return Stack((), 0)  # an invalid chain: perf shows none
                in_user = in_user or address == CONTEXT_USER
                continue
            if not in_user and address >= KERNEL_START:
                kernel += 1
                frames.append(self.kernel_name(address))
            else:  # a kernel-like address among the user's frames is junk of the walk: perf names it so
                frames.append(self.user_name(pid, generation, address) if address < KERNEL_START else UNKNOWN)
        return without_tracing(Stack(tuple(frames), kernel))

    def kernel_name(self, address: int) -> str:
        name = self.kernel_names.get(address)
        if name is None:
            symbol = self.kernel.find(address) if self.kernel else None
            name = self.kernel_names[address] = symbol.name if symbol else UNKNOWN
        return name

    def user_name(self, pid: int, generation: int, address: int) -> str:
        key = (pid, generation, address)
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = self._name_in_maps(pid, generation, address)
        return name

    def _name_in_maps(self, pid: int, generation: int, address: int) -> str:
        mapping = self.history.find(pid, generation, address)
        if mapping is None or not (mapping.path.startswith("/") or mapping.path == VDSO) \
                or mapping.path.startswith(ANONYMOUS_FILES):
            return UNKNOWN
        file_offset = address - mapping.start + mapping.offset
        symbols = self._symbols(mapping)
        if symbols is None:
            return f"[{Path(mapping.path).name}+0x{file_offset:x}]"
        symbol = symbols.find(file_offset)
        return demangle(symbol.name) if symbol else UNKNOWN

    def _symbols(self, mapping: Mapping) -> ElfSymbols | None:
        build_id = mapping.build_id or self.build_ids.get(mapping.path)
        key = (mapping.path, build_id)
        if key in self.files:
            return self.files[key]
        if mapping.path == VDSO:
            symbols = self._vdso_symbols(build_id)
        else:
            symbols = load_symbols(mapping.path, build_id)
            if symbols is not None and build_id is None and _another_file(mapping):
                self.unchecked.append(mapping.path)
        if symbols is None:
            self.missing.append(self._missing_note(mapping.path, build_id))
        self.files[key] = symbols
        return symbols

    def _vdso_symbols(self, build_id: bytes | None) -> ElfSymbols | None:
        """The vdso's symbols: from the image saved with the capture, else from this
        process's own when the kernel that runs is the one recorded (as perf script
        does), else from perf's cache by build id."""
        if self.vdso is not None:
            symbols = load_symbols(str(self.vdso), build_id)
            if symbols is not None:
                return symbols
        image = running_vdso() if self.recorded_here else None
        if image is not None:
            elf = ELFFile(io.BytesIO(image))
            if build_id is None or elf_build_id(elf) == build_id:
                return _elf_symbols(elf, build_id)
        return load_symbols(VDSO, build_id) if build_id else None

    def _missing_note(self, path: str, build_id: bytes | None) -> str:
        if path == VDSO:
            why = ("the capture holds no copy of the recorded kernel's vdso, and this machine runs another kernel"
                   if self.vdso is None else "the vdso saved with the capture cannot be read")
            return f"{VDSO}: {why}: its frames are shown as its name and offset" + more_in(
                "a-capture-read-on-another-machine")
        return (f"{path} is gone or changed since the recording" + (f" (build id {build_id.hex()})" if build_id else "")
                + ": its frames are shown as its name and offset" + more_in("a-capture-read-on-another-machine"))


def unchecked_note(paths: list[str]) -> str:
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3:,} more" if len(paths) > 3 else "")
    return (f"{shown}: named from the file now at the same path, which is another file than the one recorded "
            "(another inode) and cannot be checked without a build id (perf before 5.12, or no --buildid-mmap); "
            "if it changed since the recording, its frames are misnamed" + more_in("a-capture-read-on-another-machine"))


def _another_file(mapping: Mapping) -> bool:
    """Whether the file at the mapping's path is not the one mapped (another inode), as far
    as the MMAP2 record can tell without a build id (not at all for an MMAP record)."""
    if mapping.inode is None or not mapping.path.startswith("/"):
        return False
    try:
        status = os.stat(mapping.path)
    except OSError:
        return False
    major, minor, number = mapping.inode
    return (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino) != (major, minor, number)


@lru_cache(maxsize=256)
def load_symbols(path: str, build_id: bytes | None) -> ElfSymbols | None:
    """A file's symbols (once per process: a file's symbols do not change for its
    build id): from a debug file by build id when there is one, placed by the
    binary itself (at its path, or in perf's cache) whose build id matches."""
    runtime = None
    candidates = []
    if build_id:  # perf's cache: a directory per build id, with a copy of the file
        name = build_id.hex()
        cached = perf_cache() / ".build-id" / name[:2] / name[2:]
        candidates += [cached / "elf", cached / "vdso"]
    if path.startswith("/"):
        candidates.insert(0, Path(path))
    for candidate in candidates:
        opened = _open_elf(candidate)
        if opened is None:
            continue
        elf, stream = opened
        if build_id is None or elf_build_id(elf) == build_id:
            runtime = (elf, stream)
            break
        stream.close()  # type: ignore[attr-defined]
    if runtime is None:
        return None
    elf, stream = runtime
    try:
        return _elf_symbols(elf, build_id)
    finally:
        stream.close()  # type: ignore[attr-defined]


def _elf_symbols(elf: ELFFile, build_id: bytes | None) -> ElfSymbols:
    """An ELF file's function symbols, from its debug file by build id when there is one."""
    segments = _segments(elf)
    symbols = _debug_symbols(build_id or elf_build_id(elf))
    if symbols is None:
        symbols = _function_symbols(elf) or []
    symbols += _plt_symbols(elf)
    return ElfSymbols(SymbolTable.of(symbols), segments)

def _debug_symbols(build_id: bytes | None) -> list[Symbol] | None:
    if not build_id:
        return None
    name = build_id.hex()
    for directory in (*DEBUG_DIRS, perf_cache() / ".build-id"):
        path = directory / name[:2] / (name[2:] + ".debug") if directory in DEBUG_DIRS else \
            directory / name[:2] / name[2:] / "debug"
        opened = _open_elf(path)
        if opened is None:
            continue
        elf, stream = opened
        try:
            symbols = _function_symbols(elf)
        finally:
            stream.close()  # type: ignore[attr-defined]
        if symbols:
            return symbols
    return None
