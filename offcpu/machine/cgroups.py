"""A process's cgroups and what limits them, read from /proc and the cgroup file systems.

/proc/PID/cgroup names a process's cgroup in each hierarchy: `N:cpu,cpuacct:/path` for a
cgroup v1 hierarchy (its controllers), `0::/path` for v2. Each is a directory under the
mount of its hierarchy (/proc/mounts), where the kernel keeps the cgroup's CPU limit
(v1 cpu.cfs_quota_us and cpu.cfs_period_us, v2 cpu.max) and how often it throttled the
cgroup (cpu.stat), its memory.high events (v2 memory.events) and its process limit
(pids.max, pids.current). A limit set on a cgroup holds for the cgroups below it, so a
process's cgroups are its own and each above it, up to the hierarchy's root (which has
no limits). Read as root: the paths are the processes' text, so each is resolved under
its mount and refused when it leads out of it, and every file is read regular and bounded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from offcpu.capture import V2, Cgroup, Counters
from offcpu.files import read_regular

# The most a cgroup file read here holds (a few counters), and /proc/PID/cgroup (a line per hierarchy)
FILE_MAX = 4096
CGROUP_LIST_MAX = 64 << 10
# A recording of the whole machine reads the cgroups of this many processes at most (the lowest
# pids: the services started at boot), and keeps this many cgroups at most
MAX_PROCESSES = 4096
MAX_CGROUPS = 512
MOUNTS = "/proc/self/mounts"  # the cgroup hierarchies are where offcpu's own mounts say
# The v1 controllers whose files are read here (v1's memory controller has no memory.events)
V1_CONTROLLERS = frozenset({"cpu", "pids"})
NO_LIMIT = ("max", "-1")  # how cpu.max, cpu.cfs_quota_us and pids.max say there is none


def own_cgroup_paths(cgroups: Iterable[Cgroup]) -> dict[int, str]:
    """Each process's own cgroup, as a container or a systemd unit names it: of the v2 hierarchy
    where it has one (systemd's units), else its deepest; in one pass over the cgroups."""
    found: dict[int, Cgroup] = {}
    for cgroup in cgroups:
        for pid in cgroup.pids:
            kept = found.get(pid)
            if kept is None or (cgroup.controllers == V2, len(cgroup.path)) > (kept.controllers == V2, len(kept.path)):
                found[pid] = cgroup
    return {pid: cgroup.path for pid, cgroup in found.items()}


def cgroups_of(pid: int, cgroups: Iterable[Cgroup]) -> list[Cgroup]:
    """The cgroups process `pid` was in: each of its own and those above it."""
    cgroups = list(cgroups)
    own = [(cgroup.controllers, cgroup.path) for cgroup in cgroups if pid in cgroup.pids]
    return [cgroup for cgroup in cgroups
            if any(controllers == cgroup.controllers and cgroup.holds(path) for controllers, path in own)]


# -- reading -------------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    """A cgroup file system as /proc/mounts has it."""

    point: Path
    v2: bool
    options: frozenset[str]  # a v1 hierarchy's controllers are among them


def cgroup_mounts(mounts: str) -> list[Mount]:
    """The cgroup file systems, from the text of /proc/mounts."""
    found = []
    for line in mounts.splitlines():
        words = line.split()
        if len(words) > 3 and words[2] in ("cgroup", "cgroup2"):
            found.append(Mount(Path(words[1]), words[2] == "cgroup2", frozenset(words[3].split(","))))
    return found


def mount_for(controllers: str, mounts: list[Mount]) -> Path | None:
    """Where the hierarchy /proc/PID/cgroup names by its controllers is mounted: v2's for V2, the v1
    mount with those controllers among its options; None for a hierarchy not read here."""
    if controllers == V2:
        return next((mount.point for mount in mounts if mount.v2), None)
    names = set(controllers.split(","))
    if not names & V1_CONTROLLERS:
        return None
    return next((mount.point for mount in mounts if not mount.v2 and names <= mount.options), None)


def process_cgroups(text: str) -> dict[str, str]:
    """{controllers: path} from the text of /proc/PID/cgroup ('N:controllers:path' a line)."""
    found = {}
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, colon, path = rest.partition(":")
        if number.isdecimal() and colon and path.startswith("/"):
            found[controllers] = path
    return found


def directory_of(mount: Path, path: str) -> Path | None:
    """The cgroup's directory under its mount; None when the path leads out of it (or is the root)."""
    parts = PurePosixPath(path).parts[1:]
    if not parts or any(part in (".", "..") for part in parts):
        return None
    directory = mount.joinpath(*parts)
    return directory if os.path.realpath(directory).startswith(os.path.realpath(mount) + "/") else None


def read_counters(directory: Path) -> Counters | None:
    """The cgroup's limits and counters now; None when none of its files could be read (gone)."""
    texts = {name: _text(directory / name, FILE_MAX) for name in
             ("cpu.max", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat", "memory.events", "pids.max",
              "pids.current")}
    if all(text is None for text in texts.values()):
        return None
    quota, period = _cpu_limit(texts)
    stat = _keyed(texts["cpu.stat"])
    throttled_usec = stat.get("throttled_usec")
    return Counters(
        cpu_quota_us=quota, cpu_period_us=period, nr_periods=stat.get("nr_periods"),
        nr_throttled=stat.get("nr_throttled"),
        throttled_ns=stat.get("throttled_time", throttled_usec * 1000 if throttled_usec is not None else None),
        memory_high=_keyed(texts["memory.events"]).get("high"),
        pids_max=_number(texts["pids.max"]), pids_current=_number(texts["pids.current"]))


def _text(path: Path | str, limit: int) -> str | None:
    try:
        return read_regular(path, limit).decode(errors="replace")
    except OSError:
        return None


def _cpu_limit(texts: dict[str, str | None]) -> tuple[int | None, int | None]:
    """(quota, period) in µs, from v2's cpu.max ('max 100000', '20000 100000') or v1's two files."""
    cpu_max = texts["cpu.max"]
    if cpu_max is not None:
        words = cpu_max.split()
        return (_number(words[0]), _number(words[1])) if len(words) == 2 else (None, None)
    return _number(texts["cpu.cfs_quota_us"]), _number(texts["cpu.cfs_period_us"])


def _number(text: str | None) -> int | None:
    """A file's one number; None for none, no limit, or something else."""
    if text is None or text.strip() in NO_LIMIT:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _keyed(text: str | None) -> dict[str, int]:
    """'name value' lines (cpu.stat, memory.events) as numbers."""
    found = {}
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdecimal():
            found[words[0]] = int(words[1])
    return found


def read_at_start(pids: Iterable[int], mounts: str) -> list[Cgroup]:
    """The cgroups of the processes `pids` (the MAX_PROCESSES lowest), each with those above it and
    its counters now; MAX_CGROUPS at most. A process gone meanwhile is left out."""
    mounted = cgroup_mounts(mounts)
    read: dict[tuple[str, str], Counters] = {}  # (controllers, path): its counters, in the order found
    own: dict[tuple[str, str], list[int]] = {}  # the processes whose own cgroup it is
    for pid in sorted(pids)[:MAX_PROCESSES]:
        for controllers, path in process_cgroups(_text(f"/proc/{pid}/cgroup", CGROUP_LIST_MAX) or "").items():
            mount = mount_for(controllers, mounted)
            if mount is not None:
                _read_up(read, mount, controllers, path)
                if (controllers, path) in read:
                    own.setdefault((controllers, path), []).append(pid)
    return [Cgroup(controllers, path, tuple(own.get((controllers, path), ())), counters)
            for (controllers, path), counters in read.items()]


def _read_up(read: dict[tuple[str, str], Counters], mount: Path, controllers: str, path: str) -> None:
    """The cgroup `path` and each above it (the root left out) into `read`, unless they are there."""
    parts = PurePosixPath(path).parts
    for depth in range(len(parts), 1, -1):
        key = (controllers, str(PurePosixPath(*parts[:depth])))
        if key in read or len(read) >= MAX_CGROUPS:
            return  # (and those above it were read with it)
        directory = directory_of(mount, key[1])
        counters = read_counters(directory) if directory is not None else None
        if counters is None:
            return
        read[key] = counters


def read_at_end(cgroups: Iterable[Cgroup], mounts: str) -> list[Cgroup]:
    """The same cgroups with their counters now."""
    mounted = cgroup_mounts(mounts)
    ended = []
    for cgroup in cgroups:
        mount = mount_for(cgroup.controllers, mounted)
        directory = directory_of(mount, cgroup.path) if mount is not None else None
        ended.append(Cgroup(cgroup.controllers, cgroup.path, cgroup.pids, cgroup.start,
                            read_counters(directory) if directory is not None else None))
    return ended
