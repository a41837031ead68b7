"""The perf maps of a BPF recording's processes: names of code compiled at run time.

A JIT such as V8's (Node.js started with --perf-basic-prof) writes /tmp/perf-PID.map,
one line `START SIZE NAME` (hex) for each piece of code it makes, in anonymous memory that
no file names. At the end of a BPF recording, offcpu copies the map of each recorded process
that has one into perf-maps.json (`save`); the reader names a user address of that process
that falls in no file mapping from it (`load`, PerfMap.find), marked as a runtime's frame:
`JS:*work (app.js:12) [js]`.

The file is the target's to write and offcpu is root: it is reached as the process names it
(/proc/PID/root/tmp/perf-NSPID.map), never through a link, and read only when it is a regular
file owned by the process's user, of at most PERF_MAP_MAX bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from offcpu.capture import PERF_MAPS
from offcpu.escaping import printable
from offcpu.files import PRIVATE, read_json, read_owned, write_whole
from offcpu.stacks import RUNTIME_MARKS

SCHEMA = "offcpu-perf-maps/1"
PROC = Path("/proc")
PERF_MAP_MAX = 64 << 20  # the most of one process's map copied: a long-running server's holds a few MB
PERF_MAPS_MAX = 1 << 30  # the most perf-maps.json is read of
NODE_PROGRAMS = ("node", "nodejs")  # what Debian and Node's own builds call the program
# V8's name of a script's function ends with where it is: `JS:*work /srv/app.js:12:20`
_LOCATION = re.compile(r"(.*) (\S*?):([0-9]+):[0-9]+")


@dataclass
class PerfMap:
    """One process's perf map: its code ranges by start, the last line for a start kept, as perf does."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> PerfMap:
        """The ranges of a perf map's text; lines that are not `START SIZE NAME` are left out."""
        ranges: dict[int, tuple[int, str]] = {}
        for line in text.splitlines():
            parts = line.split(" ", 2)
            if len(parts) < 3:
                continue
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                continue
            ranges[start] = (start + size, parts[2])  # a later line for the same start wins
        perf_map = cls()
        for start in sorted(ranges):
            perf_map.starts.append(start)
            perf_map.ends.append(ranges[start][0])
            perf_map.names.append(ranges[start][1])
        return perf_map

    def find(self, address: int) -> str | None:
        """V8's name of the code at `address` (in the range that starts last at or before it), or None."""
        index = bisect.bisect_right(self.starts, address) - 1
        return self.names[index] if index >= 0 and address < self.ends[index] else None


def frame_name(v8_name: str) -> str:
    """A frame as a stack shows it, marked as V8's: `JS:*work /srv/app.js:12:20` ->
    `JS:*work (app.js:12) [js]`; code of V8's own (`Builtin:...`) as `Builtin:... (V8) [js]`."""
    found = _LOCATION.fullmatch(v8_name)
    where = f"{os.path.basename(found[2])}:{found[3]}" if found else "V8"
    return f"{found[1] if found else v8_name} ({where}) {RUNTIME_MARKS['V8']}"


@dataclass(frozen=True)
class Process:
    """A recorded process's perf map as read at the end: its text, or why none was (`error`)."""

    pid: int
    exe: str
    text: str | None
    error: str | None = None

    @property
    def node(self) -> bool:
        return os.path.basename(self.exe) in NODE_PROGRAMS


def read_process(pid: int) -> Process | None:
    """Process `pid`'s perf map, or a Process without one when it runs Node (its frames need
    one); None when neither (or it is gone)."""
    try:
        exe = os.readlink(PROC / str(pid) / "exe").removesuffix(" (deleted)")
        status = (PROC / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    nspid = fields.get("NSpid", str(pid)).split()[-1]  # its pid in its own namespace names the file
    uid = int(fields.get("Uid", "-1").split()[1])  # the effective uid, which owns what it creates
    path = PROC / str(pid) / "root" / "tmp" / f"perf-{nspid}.map"
    try:
        text = read_owned(path, uid, PERF_MAP_MAX).decode(errors="replace")
    except FileNotFoundError:
        text, error = None, None
    except OSError as error_read:
        text, error = None, f"{error_read.strerror or error_read}"
    else:
        error = None
    if text is None and error is None and os.path.basename(exe) not in NODE_PROGRAMS:
        return None
    return Process(pid, exe, text, error)


def save(directory: Path, pids: list[int]) -> list[Process]:
    """Copy the perf maps of these processes (and note those that run Node without one) into
    `directory`'s perf-maps.json, when there is any. OSError as raised when it cannot be written."""
    processes = [process for pid in pids if (process := read_process(pid)) is not None]
    if processes:
        data = {"schema": SCHEMA, "processes": [
            {"pid": process.pid, "exe": process.exe, "map": process.text, "error": process.error}
            for process in processes]}
        write_whole(directory / PERF_MAPS, json.dumps(data, separators=(",", ":")), mode=PRIVATE)
    return processes


def load(directory: Path) -> list[Process]:
    """The processes of a capture's perf-maps.json (none when it has none or it is damaged)."""
    with contextlib.suppress(OSError, ValueError):
        data = read_json(directory / PERF_MAPS, PERF_MAPS_MAX)
        if isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("processes"), list):
            return [Process(item["pid"], item["exe"], item["map"], item["error"]) for item in data["processes"]
                    if isinstance(item, dict) and isinstance(item.get("pid"), int) and isinstance(item.get("exe"), str)
                    and isinstance(item.get("map"), str | None) and isinstance(item.get("error"), str | None)]
    return []


def notes(processes: list[Process], named: dict[int, int]) -> list[str]:
    """What the reports say of the perf maps: whose were read (and how many frames they named,
    `named` by pid), and which Node processes had none."""
    said = []
    for process in processes:
        program = printable(os.path.basename(process.exe))
        if process.text is not None:
            said.append(f"the perf map of process {process.pid} ({program}) was read at the end of the recording: "
                        f"it named {named.get(process.pid, 0):,} addresses of its stacks, in code compiled at run time")
        elif process.node:
            why = f" (its perf map could not be read: {printable(process.error)})" if process.error else ""
            said.append(f"process {process.pid} runs {program}{why}: its JavaScript frames are [unknown]: start node "
                        "with --perf-basic-prof --interpreted-frames-native-stack to name them")
        else:
            why = printable(process.error or "")
            said.append(f"the perf map of process {process.pid} ({program}) could not be read ({why}): its frames "
                        "in code compiled at run time are [unknown]")
    return said
