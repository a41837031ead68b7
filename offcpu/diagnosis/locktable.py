"""The lock table: wait sites named by the frames of off-CPU stacks, read from the
package's locks.toml and from users' files ([[lock]] entries), and matched against
stacks. See locks.toml for what an entry says."""

from __future__ import annotations

import errno
import fnmatch
import re
import tomllib
from dataclasses import dataclass, replace
from functools import cached_property
from importlib import resources
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.files import read_regular
from offcpu.stacks import RUNTIME_MARKS, Stack, normal

KINDS = ("lock", "condition", "handoff", "io", "sleep", "work", "join")
# The finding a kind feeds when an entry does not say; the others go by what ended each wait.
DEFAULT_FINDINGS = {"lock": "lock_contention", "io": "io_wait", "sleep": "idle", "work": "idle"}
# The findings an entry may feed (offcpu.diagnosis.rules has a rule for each).
FINDINGS = ("mmap_lock", "stack_cache_lock", "lock_contention", "io_wait", "idle")
LIMITS = ("max_share", "max_ms_per_s")
KEYS = ("name", "kind", "finding", "wait", "callers", "release", "retry", "what", "remedy", *LIMITS)
MAX_FILE_BYTES = 1 << 20
GENERIC_FUTEX = "futex"  # the name of the entry for a futex its stack says nothing more of (locks.toml)


@dataclass(frozen=True)
class Lock:
    """A wait site, and what it is."""

    name: str
    kind: str  # one of KINDS
    finding: str  # "" when what ended each wait decides
    wait: tuple[str, ...]  # frame patterns, one of which is in a waiting stack
    callers: tuple[str, ...] = ()  # and one of these further from the leaf, when given
    release: tuple[str, ...] = ()  # frame patterns of the waker's stack where it is let go
    retry: bool = False  # waiters sleep and try again: woken by a timer, not by the holder
    what: str = ""
    remedy: str = ""
    max_share: float | None = None  # offcpu check's limits on its waits (a user's entry)
    max_ms_per_s: float | None = None

    @cached_property
    def _wait(self) -> Globs:
        return Globs.of(self.wait)

    @cached_property
    def _callers(self) -> Globs | None:
        return Globs.of(self.callers) if self.callers else None

    @cached_property
    def _release(self) -> Globs | None:
        return Globs.of(self.release) if self.release else None

    def waits_at(self, frames: tuple[str, ...]) -> int | None:
        """Where (an index into leaf-first normal frames) a stack waits at this site, if it does."""
        index = next((index for index, frame in enumerate(frames) if self._wait.match(frame)), None)
        return index if index is not None and self.called_as(frames, index) else None

    def called_as(self, frames: tuple[str, ...], index: int) -> bool:
        """Whether the frames above the wait's (at `index`) hold one of its callers, when it has them."""
        return self._callers is None or any(self._callers.match(caller) for caller in frames[index + 1:])

    def released_at(self, frames: tuple[str, ...]) -> int | None:
        """Where a waker's leaf-first normal frames let this site go, if a frame says so."""
        if self._release is None:
            return None
        return next((index for index, frame in enumerate(frames) if self._release.match(frame)), None)

    def releases(self, frames: tuple[str, ...]) -> bool:
        """Whether a waker's leaf-first normal frames let this lock go: a release frame, under
        one of its callers when it has them (the holder lets the mmap_lock go in madvise)."""
        index = self.released_at(frames)
        return index is not None and (self._callers is None or
                                      any(self._callers.match(caller) for caller in frames[index + 1:]))


@dataclass(frozen=True)
class Globs:
    """Frame patterns (fnmatch's): names and names' beginnings are matched as strings, the
    rest as one regular expression (compiling one for every entry was a third of a first
    report's diagnosis)."""

    names: frozenset[str]
    beginnings: tuple[str, ...]
    others: re.Pattern[str] | None

    @classmethod
    def of(cls, globs: tuple[str, ...]) -> Globs:
        names: set[str] = set()
        beginnings: list[str] = []
        others: list[str] = []
        for glob in map(_literal_mark, globs):
            beginning = glob.removesuffix("*")
            if any(character in beginning for character in "*?["):
                others.append(glob)
            elif beginning != glob:
                beginnings.append(beginning)
            else:
                names.add(glob)
        return cls(frozenset(names), tuple(beginnings),
                   re.compile("|".join(fnmatch.translate(glob) for glob in others)) if others else None)

    def match(self, frame: str) -> bool:
        return (frame in self.names or frame.startswith(self.beginnings)
                or (self.others is not None and self.others.match(frame) is not None))


def _literal_mark(glob: str) -> str:
    """A pattern whose runtime mark (`work (app.py:*) [py]`) is the mark itself, not a set of characters."""
    for mark in RUNTIME_MARKS.values():
        if glob.endswith(f" {mark}"):
            return f"{glob.removesuffix(mark)}[[]{mark[1:]}"
    return glob


@dataclass(frozen=True)
class Site:
    """Where a stack waits: the lock table's entry, and the frame it matched."""

    lock: Lock
    frame: str


class LockTable:
    """Entries in the order they are tried: a user's first, then the package's."""

    def __init__(self, locks: list[Lock]) -> None:
        self.locks = locks
        self._sites: dict[tuple[str, ...], Site | None] = {}
        self._releases: dict[tuple[str, ...], Lock | None] = {}
        self._waiting_at: dict[str, tuple[int, ...]] = {}  # a frame: the entries (by number) whose wait it matches

    def site(self, stack: Stack) -> Site | None:
        """The first entry whose wait site a stack is at (once per distinct stack): Lock.waits_at
        of each entry in turn, each frame matched once against all of them (a whole machine's live
        window brings hundreds of new stacks a second, of frames mostly seen)."""
        frames = tuple(normal(frame) for frame in stack.frames)
        if frames not in self._sites:
            first: dict[int, int] = {}  # an entry: the first frame its wait matches
            for index, frame in enumerate(frames):
                if (entries := self._waiting_at.get(frame)) is None:
                    entries = self._waiting_at[frame] = tuple(
                        number for number, lock in enumerate(self.locks) if lock._wait.match(frame))
                for number in entries:
                    first.setdefault(number, index)
            self._sites[frames] = next((Site(self.locks[number], frames[first[number]]) for number in sorted(first)
                                        if self.locks[number].called_as(frames, first[number])), None)
        return self._sites[frames]

    def released(self, stack: Stack) -> Lock | None:
        """The first entry a waker's stack lets go (once per distinct stack)."""
        frames = tuple(normal(frame) for frame in stack.frames)
        if frames not in self._releases:
            self._releases[frames] = next((lock for lock in self.locks if lock.releases(frames)), None)
        return self._releases[frames]

    def named(self, name: str) -> Lock | None:
        return next((lock for lock in self.locks if lock.name == name), None)

    def names(self) -> list[str]:
        return list(dict.fromkeys(lock.name for lock in self.locks))

    def limits(self) -> dict[str, Lock]:
        """The entries that set limits for offcpu check, by lock name."""
        return {lock.name: lock for lock in self.locks if lock.max_share is not None or lock.max_ms_per_s is not None}


def builtin_locks() -> list[Lock]:
    text = resources.files("offcpu.diagnosis").joinpath("locks.toml").read_text()
    return _Entries("offcpu/diagnosis/locks.toml", text).locks(tomllib.loads(text), builtin=[])


def load_table(path: Path | None = None) -> LockTable:
    """The package's table, after the entries of a user's file when given (a policy file
    may hold them, among its other keys: only [[lock]] is read here)."""
    if path is None:
        return LockTable(builtin_locks())
    text = read_toml_text(path, "locks")
    return table_with(str(path), text, parse_toml(text, str(path), "read"))


_DEFAULT_TABLE: list[LockTable] = []


def default_table() -> LockTable:
    """The package's lock table, read once."""
    if not _DEFAULT_TABLE:
        _DEFAULT_TABLE.append(load_table())
    return _DEFAULT_TABLE[0]


def lock_table(path: Path | None) -> LockTable:
    """The lock table a report or a check reads: the package's, after a user's entries."""
    return load_table(path) if path is not None else default_table()


def table_with(source: str, text: str, data: dict) -> LockTable:
    """The package's table, after the [[lock]] entries of a file already read and parsed."""
    builtin = builtin_locks()
    own = _Entries(source, text).locks(data, builtin)
    named = {lock.name for lock in own if lock.wait}
    limits = {lock.name: lock for lock in own if not lock.wait}  # a built-in lock's limits
    merged = [replace(lock, max_share=limits[lock.name].max_share, max_ms_per_s=limits[lock.name].max_ms_per_s)
              if lock.name in limits and lock.name not in named else lock for lock in builtin]
    return LockTable([lock for lock in own if lock.wait] + merged)


def parse_toml(text: str, named: str, meant: str) -> dict:
    """`text` parsed; an OffcpuError saying "`named` is not TOML" or nests too deeply "to be `meant`"."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise OffcpuError(f"{named} is not TOML: {error}") from None
    except RecursionError:
        raise OffcpuError(f"{named} nests arrays or tables too deeply to be {meant}") from None


def read_toml_text(path: Path, what: str) -> str:
    """A TOML file's text, read with a size bound (a device or a huge file is refused)."""
    try:
        data = read_regular(path, MAX_FILE_BYTES)
    except OSError as error:
        if error.errno == errno.EFBIG:
            raise OffcpuError(f"the {what} file {path} is over {MAX_FILE_BYTES >> 20} MiB; give a TOML file") from None
        if error.errno == errno.EINVAL:
            raise OffcpuError(f"the {what} file {path} is not a regular file; give a TOML file") from None
        raise OffcpuError(f"cannot read the {what} file {path} ({error.strerror}); give a TOML file") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise OffcpuError(f"the {what} file {path} is not text (UTF-8); give a TOML file") from None


class _Entries:
    """[[lock]] tables into Locks, with errors that name the file, the entry and its line."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.lines = [number for number, line in enumerate(text.splitlines(), start=1)
                      if line.strip().startswith("[[lock]]")]

    def error(self, number: int, problem: str) -> OffcpuError:
        line = f", line {self.lines[number]}" if number < len(self.lines) else ""
        return OffcpuError(f"{self.source}{line}: lock entry {number + 1} {problem}")

    def locks(self, data: dict, builtin: list[Lock]) -> list[Lock]:
        entries = data.get("lock", [])
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise OffcpuError(f"{self.source}: lock must be an array of tables ([[lock]] entries)")
        known = {lock.name for lock in builtin}
        return [self.lock(number, entry, known) for number, entry in enumerate(entries)]

    def lock(self, number: int, entry: dict, known: set[str]) -> Lock:
        unknown = [key for key in entry if key not in KEYS]
        if unknown:
            raise self.error(number, f"has a key {unknown[0]!r} it does not take; it takes {', '.join(KEYS)}")
        name = self.text(number, entry, "name", required=True)
        if "wait" not in entry:  # limits for a built-in lock
            if name not in known:
                raise self.error(number, f"names {name!r}, which is no lock of offcpu's table: give its wait frames "
                                         "(wait = [...]) and kind, or the name of one of offcpu's locks")
            extra = [key for key in entry if key not in ("name", *LIMITS)]
            if extra:
                raise self.error(number, f"sets {extra[0]} but no wait frames; give wait = [...] to define a lock")
            max_share, max_ms_per_s = self.limits(number, entry)
            return Lock(name, "lock", "", (), max_share=max_share, max_ms_per_s=max_ms_per_s)
        kind = self.text(number, entry, "kind", required=True)
        if kind not in KINDS:
            raise self.error(number, f"has kind {kind!r}; give one of {', '.join(KINDS)}")
        finding = self.text(number, entry, "finding") or DEFAULT_FINDINGS.get(kind, "")
        if finding and finding not in FINDINGS:
            raise self.error(number, f"feeds {finding!r}, which is not a finding a lock feeds ({', '.join(FINDINGS)})")
        retry = entry.get("retry", False)
        if not isinstance(retry, bool):
            raise self.error(number, "has retry that is not true or false")
        max_share, max_ms_per_s = self.limits(number, entry)
        return Lock(name, kind, finding, self.frames(number, entry, "wait", required=True),
                    self.frames(number, entry, "callers"), self.frames(number, entry, "release"), retry,
                    self.text(number, entry, "what"), self.text(number, entry, "remedy"), max_share, max_ms_per_s)

    def text(self, number: int, entry: dict, key: str, required: bool = False) -> str:
        value = entry.get(key, "")
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.error(number, f"needs {key} as a string" if required else f"has {key} that is not a string")
        return value.strip()

    def frames(self, number: int, entry: dict, key: str, required: bool = False) -> tuple[str, ...]:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value) or \
                (required and not value):
            raise self.error(number, f"needs {key} as a list of frame names (globs such as \"mylib::Lock*\")")
        return tuple(value)

    def limits(self, number: int, entry: dict) -> tuple[float | None, float | None]:
        """The entry's max_share and max_ms_per_s (None: not set)."""
        return self.limit(number, entry, "max_share"), self.limit(number, entry, "max_ms_per_s")

    def limit(self, number: int, entry: dict, key: str) -> float | None:
        value = entry.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0 \
                or (key == "max_share" and value > 1):
            bounds = "from 0 to 1 (0.05 is 5%)" if key == "max_share" else "0 or more"
            raise self.error(number, f"has {key} {value!r}; give a number {bounds}")
        return float(value)
