"""The running kernel's build id, symbols and vdso, saved with a capture at record time so
that its kernel and vdso frames can be named on another machine or after a reboot
(offcpu.reading.symbols reads them back)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from offcpu.capture import KERNEL_SYMBOLS, VDSO_IMAGE
from offcpu.errors import OffcpuError
from offcpu.files import PRIVATE, write_whole

KERNEL_NOTES = Path("/sys/kernel/notes")
PROC_KALLSYMS = Path("/proc/kallsyms")
SAVED_BUILD_ID = re.compile(rb"# build-id ((?:[0-9a-f]{2})*)")  # the first line of a capture's kallsyms
NT_GNU_BUILD_ID = 3
VDSO = "[vdso]"  # how /proc/PID/maps names the mapping of the kernel's vdso


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
