"""The memory maps of a BPF recording's processes, read from /proc while they live.

A BPF recording keeps user stacks as bare addresses; what they mean depends on the
files each process had mapped, and the process may be gone (or have exec'd another
program) by the time the capture is read. So the recording reads /proc/PID/maps of
its processes, and of the processes outside it whose stacks were taken as wakers, as it
goes (`MapsRecorder.update`, as often as it likes and at the end), with the build id of
each mapped ELF file, and keeps them in bpf-maps.json:
a list of snapshots, one per read of a process whose executable mappings changed
since its last, with when it was read (CLOCK_MONOTONIC, the records' clock).

The reader (`load`, offcpu.reading.symbols.TaskHistory.of_snapshots) files each snapshot
under the process's exec generation at the time it was read, which the records tell
(offcpu.reading.bpf_reader; a process outside the target has no fork or exec records: one
generation): a user stack is named from the snapshots of its own process and generation,
the latest first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offcpu._core import elf_build_id
from offcpu.capture import BPF_MAPS
from offcpu.files import PRIVATE, read_json, write_whole

SCHEMA = "offcpu-process-maps/1"
PROC = Path("/proc")
Inode = tuple[int, int, int]  # device major, minor, inode number
# The most bpf-maps.json is read of: a few hundred bytes a mapping, for thousands of processes
MAPS_MAX = 256 << 20


def process_gone(pid: int) -> bool:
    """Whether process `pid` has ended (its pid may be another process's by now)."""
    return not (PROC / str(pid)).exists()


@dataclass(frozen=True)
class Mapping:
    """An executable mapping of a file into a process (an MMAP or MMAP2 record of perf, a line of /proc/PID/maps)."""

    start: int
    end: int
    offset: int  # in the file
    path: str
    build_id: bytes | None  # when the MMAP2 record carries one
    inode: tuple[int, int, int] | None  # major, minor, inode number, when the MMAP2 record carries them


@dataclass(frozen=True)
class Snapshot:
    """A process's executable mappings as read at `read_ns`."""

    pid: int
    read_ns: int
    mappings: tuple[Mapping, ...]

    def to_json(self) -> dict:
        return {"pid": self.pid, "read_ns": self.read_ns, "maps": [
            {"start": mapping.start, "end": mapping.end, "offset": mapping.offset, "path": mapping.path,
             "build_id": mapping.build_id.hex() if mapping.build_id else None,
             "inode": list(mapping.inode) if mapping.inode else None} for mapping in self.mappings]}

    @classmethod
    def from_json(cls, data: Any) -> Snapshot:
        """ValueError when `data` is not a snapshot as written here."""
        if not isinstance(data, dict) or not isinstance(data.get("maps"), list):
            raise ValueError("a snapshot of bpf-maps.json is not one as offcpu writes it")
        return cls(_number(data.get("pid")), _number(data.get("read_ns")), tuple(map(_mapping, data["maps"])))


def _number(value: Any) -> int:
    """A count, an address or a time of bpf-maps.json: an integer of 64 bits (JSON's true is none)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
        raise ValueError(f"{json.dumps(value)[:40]} is not a number of bpf-maps.json")
    return value


def _mapping(item: Any) -> Mapping:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str) or \
            not isinstance(item.get("build_id"), str | None) or not isinstance(item.get("inode"), list | None):
        raise ValueError("a mapping of bpf-maps.json is not one as offcpu writes it")
    inode = tuple(map(_number, item["inode"])) if item["inode"] else None
    if inode is not None and len(inode) != 3:
        raise ValueError("a mapping's inode is not a device's major and minor and a number")
    return Mapping(_number(item.get("start")), _number(item.get("end")), _number(item.get("offset")), item["path"],
                   bytes.fromhex(item["build_id"]) if item["build_id"] else None, inode)  # type: ignore[arg-type]


def read_maps(pid: int, build_ids: dict[Inode, bytes | None]) -> tuple[Mapping, ...] | None:
    """The executable mappings of process `pid` (None when it is gone or cannot be read), with
    the build ids of their files (cached in `build_ids` by inode: many processes map the same)."""
    try:
        text = (PROC / str(pid) / "maps").read_text()
    except OSError:
        return None
    mappings = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or "x" not in parts[1]:
            continue  # not executable, or anonymous (no path): nothing to name there
        bounds, _, offset, device, inode, path = parts
        start, end = (int(bound, 16) for bound in bounds.split("-"))
        major, minor = (int(number, 16) for number in device.split(":"))
        identity = (major, minor, int(inode))
        build_id = None
        if path.startswith("/") and identity[2]:
            if identity not in build_ids:
                # the file mapped, even if deleted or replaced since: map_files (root), else the path
                build_ids[identity] = elf_build_id(PROC / str(pid) / "map_files" / bounds) or \
                    elf_build_id(Path(path))
            build_id = build_ids[identity]
        mappings.append(Mapping(start, end, int(offset, 16), path, build_id, identity if identity[2] else None))
    return tuple(mappings)


@dataclass
class MapsRecorder:
    """The maps of a recording's processes, kept in `directory`'s bpf-maps.json."""

    directory: Path
    snapshots: list[Snapshot] = field(default_factory=list)
    latest: dict[int, tuple[Mapping, ...]] = field(default_factory=dict)  # each process's last snapshot
    build_ids: dict[Inode, bytes | None] = field(default_factory=dict)
    keep_ns: int | None = None  # a live recording's: the maps no record of the last keep_ns needs go (None: none go)
    gone: dict[int, int] = field(default_factory=dict)  # pid: when its process was first found gone

    def update(self, pids: Iterable[int]) -> None:
        """Read the maps of these processes (those gone are left out) and, when any changed
        since they were last read, write bpf-maps.json again, whole. Call it when the recording
        starts, as processes appear (forks, execs) or every second or so, and at its end.
        OSError as raised when the file cannot be written."""
        changed = False
        for pid in pids:
            mappings = read_maps(pid, self.build_ids)
            # Timed after the read: maps of a new program were read after its exec, so the
            # reader files them under the generation after the exec.
            read_ns = time.monotonic_ns()
            if mappings is not None:
                self.gone.pop(pid, None)  # (its pid's next process, if it was)
            # None: gone. No file mapped: a kernel thread, or a process in the middle of an exec
            # (its maps are being replaced): nothing to name frames with.
            if mappings is None or mappings == self.latest.get(pid) or \
                    not any(mapping.path.startswith("/") for mapping in mappings):
                continue
            self.latest[pid] = mappings
            self.snapshots.append(Snapshot(pid, read_ns, mappings))
            changed = True
        if self.keep_ns is not None:
            changed = self.let_go(time.monotonic_ns() - self.keep_ns) or changed
        if changed or not (self.directory / BPF_MAPS).exists():
            data = {"schema": SCHEMA, "snapshots": [snapshot.to_json() for snapshot in self.snapshots]}
            write_whole(self.directory / BPF_MAPS, json.dumps(data, separators=(",", ":")), mode=PRIVATE)

    def let_go(self, oldest_ns: int) -> bool:
        """Let go of the snapshots that no record from `oldest_ns` on can be named by: those of
        processes gone before then, and those a later snapshot of their process, read before
        then, stands for (the records after it are named from it, or from one later still).
        Whether any went."""
        now = time.monotonic_ns()
        for pid in self.latest:
            if pid not in self.gone and process_gone(pid):
                self.gone[pid] = now
        done = {pid for pid, when in self.gone.items() if when < oldest_ns}
        for pid in done:
            del self.gone[pid], self.latest[pid]
        later = {snapshot.pid: snapshot.read_ns for snapshot in self.snapshots if snapshot.read_ns < oldest_ns}
        kept = [snapshot for snapshot in self.snapshots
                if snapshot.pid not in done and snapshot.read_ns >= later.get(snapshot.pid, 0)]
        changed = len(kept) != len(self.snapshots)
        self.snapshots = kept
        return changed

    def add(self, snapshots: Iterable[Snapshot]) -> None:
        """Snapshots read elsewhere (of processes offcpu ran while recording), kept and written.
        OSError as raised when the file cannot be written."""
        self.snapshots += snapshots
        data = {"schema": SCHEMA, "snapshots": [snapshot.to_json() for snapshot in self.snapshots]}
        write_whole(self.directory / BPF_MAPS, json.dumps(data, separators=(",", ":")), mode=PRIVATE)


def load(directory: Path) -> list[Snapshot] | None:
    """The snapshots of a capture's bpf-maps.json; None when it is missing or damaged (its
    user frames cannot be named: the reader says so)."""
    try:
        data = read_json(directory / BPF_MAPS, MAPS_MAX)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("snapshots"), list):
            return None
        return [Snapshot.from_json(item) for item in data["snapshots"]]
    except (OSError, ValueError):
        return None

