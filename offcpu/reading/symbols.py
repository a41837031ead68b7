"""Names for the addresses of call chains, as perf script shows them.

Kernel addresses are named from a copy of /proc/kallsyms saved beside the capture
at record time (offcpu.machine.running_kernel), or from /proc/kallsyms itself when the
running kernel is the one recorded (same build id). User addresses are named from
the ELF symbol tables of the files the process had mapped (its MMAP2 records),
found as perf finds them: at their path, else in perf's build-id cache ($PERF_BUILDID_DIR,
else ~/.debug), with the recorded build id; named by their debug files by build id
(/usr/lib/debug/.build-id, perf's cache) when there are some. The tables are read in the
core (offcpu._core.KernelSymbols, ElfSymbols), with perf's rules: where perf keeps several
symbols at one address, the same one is kept.

A file that cannot be found with the recorded build id is said once (`missing`)
and its frames are shown as [file+0xoffset]; perf script shows them as [unknown],
or by name when its own cache still holds the file. Without a build id (perf before
5.12), the file at the path names them, as in perf script, and when it is another file
than the one mapped (another inode) that is said. The vdso is named from the image
saved with the capture, else from this process's own when the kernel is the recorded one.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from offcpu._core import ElfSymbols, KernelSymbols
from offcpu.capture import KERNEL_SYMBOLS, VDSO_IMAGE
from offcpu.errors import OffcpuError, more_in
from offcpu.files import open_regular, read_regular
from offcpu.machine.running_kernel import (
    PROC_KALLSYMS,
    SAVED_BUILD_ID,
    VDSO,
    running_kernel_build_id,
    running_vdso,
)
from offcpu.recording.perf_maps import PerfMap, frame_name
from offcpu.recording.process_maps import Mapping, Snapshot
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
PLT_SUFFIX = "@plt"  # of the names the core gives PLT stubs
KERNEL_START = 0xFFFF_0000_0000_0000  # perf script prints these as 16 hex digits from ffff: kernel frames
SAVED_HEADER_MAX = 256  # of that line: a build id is 20 bytes (notes allow more), in hex
# kallsyms types perf keeps (text, weak, data, bss; upper or lower case)
KALLSYMS_TYPES = b"TtWwDdBb"
# The most a capture's copies of the kernel's symbols and of its vdso are read of: /proc/kallsyms
# holds a few hundred thousand lines, tens of MB with every module; a vdso is a few pages
KALLSYMS_MAX = 256 << 20
VDSO_MAX = 1 << 20
# Mappings of memory that no file on disk holds: perf names nothing in them.
ANONYMOUS_FILES = ("/memfd:", "//anon", "/dev/zero", "/anon_hugepage", "/SYSV")


# Kernel -----------------------------------------------------------------------

def read_capture_file(path: Path, limit: int) -> bytes:
    """A file of a capture, whole: an OffcpuError when it is no regular file, or larger than
    `limit` (what such a file holds at most)."""
    try:
        return read_regular(path, limit)
    except OSError as error:
        raise OffcpuError(f"cannot read {path} ({error.strerror}): the capture is damaged; record it again") from None


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
        with open_regular(saved) as file:
            header = SAVED_BUILD_ID.fullmatch(file.readline(SAVED_HEADER_MAX).rstrip(b"\n"))
    except OSError:
        return None
    return bytes.fromhex(header[1].decode()) if header and header[1] else None


def kernel_symbols_for(saved: Path | None, recorded: bytes | None) -> KernelSymbols | None:
    """The kernel's symbols: the copy saved with the capture, else /proc/kallsyms when
    the running kernel is the `recorded` one (recorded_kernel_build_id, saved_kernel_build_id);
    None when neither can be trusted."""
    if saved is not None and saved.is_file():
        text = read_capture_file(saved, KALLSYMS_MAX)
        first_line_end = text.find(b"\n")
        header = SAVED_BUILD_ID.fullmatch(text, 0, first_line_end if first_line_end >= 0 else len(text))
        # Without the line offcpu writes first (a copy of /proc/kallsyms, a damaged file), nothing
        # says which kernel the copy is of: it is left out, as the copy of another kernel is.
        if header and (recorded is None or not header[1] or bytes.fromhex(header[1].decode()) == recorded):
            return KernelSymbols.kallsyms(text, KALLSYMS_TYPES)  # that line is no symbol's: not copied off
    running = running_kernel_build_id()
    if recorded is not None and running == recorded:
        try:
            table = KernelSymbols.kallsyms(PROC_KALLSYMS.read_bytes(), KALLSYMS_TYPES)
        except OSError:
            return None
        # a user from whom kernel.kptr_restrict hides the addresses reads them all as 0
        return table if table.shows_addresses() else None
    return None




# User space -------------------------------------------------------------------

@dataclass
class TaskHistory:
    """Each process's executable mappings per exec generation: as perf knows them at the
    end (replay: a forked process starts with its parent's, and an exec keeps the mappings
    the new program's do not cover, as perf replaces only what a new mapping overlaps), or
    as offcpu read them from /proc for a BPF recording (of_snapshots)."""

    mappings: dict[tuple[int, int], list[Mapping]] = field(default_factory=dict)
    # the kernel's build id from its MMAP2 record (perf record --buildid-mmap writes it there,
    # and leaves the BUILD_ID section empty)
    kernel_build_id: bytes | None = None

    @classmethod
    def replay(cls, records: list[tuple]) -> TaskHistory:
        """The maps from perf.data's task records in time order, each with the exec generation
        the core counted for it (offcpu._core.PerfData.task_records)."""
        history = cls()
        for record in records:
            if record[0] == "begin":  # a fork that made a process, or an exec
                _, pid, generation, begun_from = record
                history.mappings[(pid, generation)] = list(history.mappings.get(begun_from, []))
            else:
                _, pid, generation, start, end, offset, path, build_id, inode, executable, kernel_build_id = record
                history.kernel_build_id = history.kernel_build_id or kernel_build_id
                if executable:
                    history.mappings.setdefault((pid, generation), []).append(
                        Mapping(start, end, offset, path, build_id, inode))
        return history

    @classmethod
    def of_snapshots(cls, snapshots: list[Snapshot], generation: Callable[[int, int], int]) -> TaskHistory:
        """A BPF recording's snapshots (offcpu.recording.process_maps) as each process's mappings
        by exec generation, the latest read last (find looks there first). `generation(pid,
        time_ns)`: the process's exec generation at that time."""
        history = cls()
        for snapshot in sorted(snapshots, key=lambda snapshot: snapshot.read_ns):
            key = (snapshot.pid, generation(snapshot.pid, snapshot.read_ns))
            history.mappings.setdefault(key, []).extend(snapshot.mappings)
        return history

    def find(self, pid: int, generation: int, address: int) -> Mapping | None:
        for mapping in reversed(self.mappings.get((pid, generation), ())):
            if mapping.start <= address < mapping.end:
                return mapping
        return None


_RUST_LEGACY = re.compile(r"17h[0-9a-f]{16}E(\.llvm\.\d+)?$")  # a Rust legacy name ends in its hash
_LLVM_SUFFIX = re.compile(r"\.llvm\.\d+$")


def demangle(name: str) -> str:
    """A symbol's name as perf 6.1 shows it: C++ and Rust names demangled without
    their parameters (libiberty's cplus_demangle without DMGL_PARAMS), others as they are;
    a PLT stub's as the function's, "@plt" after it."""
    if name.endswith(PLT_SUFFIX):
        return demangle(name.removesuffix(PLT_SUFFIX)) + PLT_SUFFIX
    if name.startswith("_R") or (name.startswith("_ZN") and _RUST_LEGACY.search(name)):
        from rust_demangler import demangle as rust_demangle  # the demanglers load only for the names they take

        try:
            # a legacy name without its hash (::h and 16 hex digits), and without the suffix LLVM
            # gives a function it made local (.llvm. and digits), as perf shows it. The library
            # prints what it made of a v0 name it cannot finish (a `dyn for<'a>` binder) on
            # stdout, where a report writes its json: it goes nowhere
            with contextlib.redirect_stdout(io.StringIO()):
                return re.sub(r"::h[0-9a-f]{16}$", "", rust_demangle(_LLVM_SUFFIX.sub("", name)))
        except Exception:  # the library raises bare Exceptions for names it does not take
            return name
    if not name.startswith("_Z"):
        return name
    import cxxfilt  # runs ldconfig twice to find libstdc++: 10-20 ms of a report, not spent on C programs

    try:
        full = cxxfilt.demangle(name)
    except cxxfilt.InvalidName:
        return name
    # a special name (a thunk, a guard variable, a vtable: _ZT..., _ZGV...) is printed whole,
    # its function's parameters too, as c++filt -p and perf print it
    return full if name.startswith(("_ZT", "_ZGV")) else without_parameters(full)


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

    def __init__(self, maps: TaskHistory, kernel: KernelSymbols | None, recorded_here: bool,
                 vdso: Path | None = None, build_ids: dict[str, bytes] | None = None,
                 perf_maps: dict[int, PerfMap] | None = None) -> None:
        """`recorded_here`: this machine runs the recorded kernel; `build_ids`: of the mapped
        files by path, where the maps do not carry them (perf.data's BUILD_ID section);
        `perf_maps`: by pid, for addresses in no file (a JIT's code, offcpu.recording.perf_maps)."""
        self.history = maps
        self.kernel = kernel
        self.recorded_here = recorded_here
        self.vdso = vdso
        self.build_ids = build_ids or {}
        self.perf_maps = perf_maps or {}
        self.perf_map_named: dict[int, int] = {}  # by pid, how many addresses its perf map named
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

    @classmethod
    def of_bpf_capture(cls, directory: Path, history: TaskHistory, perf_maps: dict[int, PerfMap]) -> Symbolizer:
        """For a BPF capture's `directory`: its saved kernel symbols and vdso (offcpu.machine.running_kernel)."""
        saved, vdso = directory / KERNEL_SYMBOLS, directory / VDSO_IMAGE
        recorded = saved_kernel_build_id(saved)
        return cls(history, kernel_symbols_for(saved, recorded), recorded == running_kernel_build_id(),
                   vdso if vdso.is_file() else None, perf_maps=perf_maps)

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
            return self._perf_map_name(pid, address)
        file_offset = address - mapping.start + mapping.offset
        symbols = self._symbols(mapping)
        if symbols is None:
            return f"[{Path(mapping.path).name}+0x{file_offset:x}]"
        # (not past a damaged offset; of symbols alike at one address, perf weighs them demangled)
        symbol = symbols.find(file_offset, demangle) if file_offset < 1 << 64 else None
        return demangle(symbol.name) if symbol else UNKNOWN

    def _perf_map_name(self, pid: int, address: int) -> str:
        """An address in no file, named by the process's perf map when it has one (a JIT's code)."""
        perf_map = self.perf_maps.get(pid)
        name = perf_map.find(address) if perf_map else None
        if name is None:
            return UNKNOWN
        self.perf_map_named[pid] = self.perf_map_named.get(pid, 0) + 1
        return frame_name(name)

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
            symbols = ElfSymbols.of_image(read_capture_file(self.vdso, VDSO_MAX), build_id)
            if symbols is not None:
                return symbols
        image = running_vdso() if self.recorded_here else None
        symbols = ElfSymbols.of_image(image, build_id) if image is not None else None
        if symbols is not None:
            return symbols
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
    """A file's symbols (once per process: a file's symbols do not change for its build id):
    from the first of its copies whose build id is the recorded one (at its path, or in
    perf's cache), named by its debug file when there is one (see offcpu._core.ElfSymbols)."""
    return ElfSymbols.load(path, build_id)
