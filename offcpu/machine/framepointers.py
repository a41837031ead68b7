"""Does a binary keep frame pointers? Decides whether `--call-graph fp` can
walk user stacks through it, or whether they stop at its leaf (DOMAIN.md:
Debian's glibc does not keep them).

It reads the ELF symbol table and looks at how functions begin: code built
with frame pointers starts almost every function with `push %rbp; mov %rsp,%rbp`.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from offcpu.files import open_regular
from offcpu.machine.system import proc_text

X86_64 = 62
SHT_SYMTAB, SHT_DYNSYM = 2, 11
SHF_EXECINSTR = 0x4
STT_FUNC = 2
ENDBR64 = bytes.fromhex("f30f1efa")
PUSH_RBP = 0x55
MOV_RSP_RBP = bytes.fromhex("4889e5")  # compilers may schedule other instructions between the two
PROLOGUE_BYTES = 16
STARTUP_CODE = {b"_start", b"_init", b"_fini"}  # hand-written, never has a frame
KEPT_FROM = 0.5  # share of functions with the frame setup that means "kept"
SAMPLE = 4000  # functions looked at, enough for a stable share


@dataclass(frozen=True)
class FramePointerCheck:
    path: str
    verdict: str  # "kept", "omitted" or "unknown"
    share: float | None  # functions that set up a frame pointer
    reason: str


@dataclass(frozen=True)
class _Section:
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int


def check_binary(path: str | Path) -> FramePointerCheck:
    """What a regular file at `path` says, mapped rather than read (a binary may be of any
    size); "unknown" when it is none, or no ELF file this can read (offsets past its end...)."""
    try:
        with open_regular(path) as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _check(str(path), data)
    except OSError as error:
        return FramePointerCheck(str(path), "unknown", None, f"cannot read it: {error.strerror}")
    except (struct.error, IndexError, ValueError, OverflowError):  # offsets past its end; an empty file (no map)
        return FramePointerCheck(str(path), "unknown", None, "cannot read it: a damaged or truncated ELF file")


def _check(path: str, data: mmap.mmap) -> FramePointerCheck:
    if data[:4] != b"\x7fELF" or data[4] != 2 or struct.unpack_from("<H", data, 0x12)[0] != X86_64:
        return FramePointerCheck(path, "unknown", None, "only x86-64 ELF files are checked")
    starts = _function_starts(data)
    if not starts:
        return FramePointerCheck(path, "unknown", None, "it has no function symbols")
    with_frame = sum(_sets_up_frame(data, offset) for offset in starts)
    share = with_frame / len(starts)
    verdict = "kept" if share >= KEPT_FROM else "omitted"
    return FramePointerCheck(path, verdict, share, f"{with_frame} of {len(starts)} functions set up %rbp")


def _sections(data: mmap.mmap) -> list[_Section]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for index in range(count):
        _, kind, flags, addr, offset, size, link = struct.unpack_from("<IIQQQQI", data, shoff + index * entsize)
        sections.append(_Section(kind, flags, addr, offset, size, link))
    return sections


def _function_starts(data: mmap.mmap) -> list[int]:
    """File offsets of up to SAMPLE distinct functions, from .symtab, else .dynsym."""
    sections = _sections(data)
    tables = [s for s in sections if s.type == SHT_SYMTAB] or [s for s in sections if s.type == SHT_DYNSYM]
    starts: set[int] = set()
    for table in tables:
        for entry in range(table.offset, table.offset + table.size, 24):
            name, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", data, entry)
            if info & 0xF != STT_FUNC or size < 8 or not 0 < shndx < len(sections):
                continue
            if _name_at(data, sections[table.link], name) in STARTUP_CODE:
                continue
            code = sections[shndx]
            if code.flags & SHF_EXECINSTR and code.addr <= value < code.addr + code.size:
                starts.add(code.offset + value - code.addr)
    return sorted(starts)[:: max(1, len(starts) // SAMPLE)]


def _name_at(data: mmap.mmap, strings: _Section, offset: int) -> bytes:
    start = strings.offset + offset
    end = data.find(b"\0", start)
    if end < 0:
        raise ValueError("a symbol's name runs past the end of the file")
    return data[start:end]


def _sets_up_frame(data: mmap.mmap, offset: int) -> bool:
    if data[offset : offset + 4] == ENDBR64:
        offset += 4
    return data[offset] == PUSH_RBP and MOV_RSP_RBP in data[offset + 1 : offset + PROLOGUE_BYTES]


def libc_of(pid: int | str) -> str | None:
    """The C library mapped into a process ('self' for this one)."""
    for line in proc_text(f"/proc/{pid}/maps").splitlines():
        path = line.split(maxsplit=5)[-1]
        name = Path(path).name
        if name.startswith("libc.so") or (name.startswith("libc-") and ".so" in name):
            return path
    return None
