"""The runtime stacks of a BPF recording's CPython and HotSpot (Java) processes, read while it
records.

A thread's Python stack cannot change while the thread is off CPU, so a stack read at any
moment inside a wait is that wait's (offcpu.runtime_frames joins them). A thread
of its own reads, every INTERVAL_S, the stacks of the recorded processes that run CPython
with `py-spy dump --json --nonblocking` (py-spy's binary, installed with offcpu beside its
Python; it reads the process's memory without stopping it), and keeps a thread's stack only
when the thread stayed off CPU the whole time it was read: its state S or D and its context
switch counts (/proc/PID/task/TID/status) the same before and after the dump. A process that
runs neither costs nothing: it is never read.

A JVM (a process that maps libjvm.so) is read through HotSpot's attach mechanism by offcpu's
own client (offcpu.recording.jvm_attach: its `threaddump` command, parsed by
offcpu.recording.hotspot_dump), every JVM_INTERVAL_S: a thread dump stops the JVM at a
safepoint for a moment, so it is read less often than a Python program, whose reads stop
nothing. The same check keeps a thread's stack only when it stayed off CPU from just before
the command was sent to the end of the reply; a sample of a Java thread also keeps its state
and the monitors its frames lock or wait for (`locks`).

The cost is bounded: one dump at a time (py-spy takes ~20 ms, ~10 ms of CPU, for a process of
a few threads), INTERVAL_S between the end of one round and the next, at most
MAX_PROCESSES processes a round, DUMP_TIMEOUT_S a dump before it is killed. py-spy runs in a
session of its own (a terminal's Ctrl-C is offcpu's to handle), ends with offcpu
(workers.end_with_parent: the signal comes when the thread that forked it ends, and the
sampler's thread outlives every dump it starts, ending only with offcpu or after `stop`
waited for the dump under way), so none is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import cast

from offcpu.capture import RUNTIME_STACKS
from offcpu.files import PRIVATE, write_whole
from offcpu.recording import hotspot_dump
from offcpu.recording.jvm_attach import Attacher, AttachError, target_of
from offcpu.recording.mri_stacks import SUPPORTED, MriError, MriReader, RubyThread, ruby_version
from offcpu.recording.process_maps import Inode, Snapshot, read_maps
from offcpu.runtime_frames import (
    NO_OWNER,
    WAITS_FOR_GVL,
    Frame,
    monitor_waited,
    owner_of,
    sample_stack,
    to_json,
)
from offcpu.stacks import RUBY_MUTEX
from offcpu.workers import child_environment, end_with_parent

INTERVAL_S = 0.2
MAX_PROCESSES = 8  # read a round, at most
DUMP_TIMEOUT_S = 2.0
MAX_OUTPUT = 16 << 20  # the most of a dump's output that is read
MAX_READER_MAPS = 3000  # py-spy's maps kept, one set a dump (a few hundred bytes each): 10 minutes' worth
READER = "py-spy dump"
JVM_INTERVAL_S = 1.0  # a JVM's reads, one this long at least after the last
JVM_READER = "HotSpot attach: threaddump"
MRI_READER = "offcpu's MRI 3.1 reader (/proc/PID/mem)"
_LIBJVM = re.compile(r"/libjvm\.so$")
# A CPython interpreter: the executable's name (python3.11) or a libpython it maps
_PYTHON_EXE = re.compile(r"^python(\d+\.\d+)?$")
_LIBPYTHON = re.compile(r"/libpython(\d+\.\d+)[^/]*\.so")


def py_spy() -> Path | None:
    """py-spy's binary, beside offcpu's Python (never found on PATH: offcpu runs as root)."""
    path = Path(sys.executable).parent / "py-spy"
    return path if os.access(path, os.X_OK) else None


def cpython_version(pid: int) -> str | None:
    """The CPython version a process runs ('3.11', '' when it runs one of an unknown version),
    or None when it runs none (or is gone)."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        match = _PYTHON_EXE.match(exe.removesuffix(" (deleted)"))
        if match:
            return match.group(1) or ""
        with open(f"/proc/{pid}/maps", errors="replace") as maps:
            for line in maps:
                found = _LIBPYTHON.search(line)
                if found:
                    return found.group(1)
    except OSError:
        return None
    return None


def _forked_by(pid: int, parent: int) -> bool:
    """Whether process `pid` is offcpu (`parent`) forked, before its exec."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            ppid = int(file.read().rpartition(b")")[2].split()[1])
        return ppid == parent and os.readlink(f"/proc/{pid}/exe") == os.readlink(f"/proc/{parent}/exe")
    except (OSError, ValueError, IndexError):
        return False


def is_hotspot(pid: int) -> bool:
    """Whether the process runs a HotSpot JVM (maps libjvm.so)."""
    try:
        with open(f"/proc/{pid}/maps", errors="replace") as maps:
            return any(_LIBJVM.search(line.rstrip("\n").removesuffix(" (deleted)")) for line in maps)
    except OSError:
        return False


def runtime_of(pid: int) -> str | None:
    """The runtime whose frames offcpu reads that a process runs, in words ("CPython 3.11"), or
    None when it runs none (or is gone)."""
    if (python := cpython_version(pid)) is not None:
        return f"CPython {python}".rstrip()
    if is_hotspot(pid):
        return "a HotSpot JVM"
    if (ruby := ruby_version(pid)) is not None:
        return f"MRI Ruby {ruby[0]}".rstrip()
    return None


def namespace_tids(pid: int) -> dict[int, int]:
    """Each thread's tid as the process's own pid namespace numbers it: tid (the last of NSpid)."""
    tids = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{name}/status", errors="replace") as file:
                    nspid = next((line.split()[-1] for line in file if line.startswith("NSpid:")), name)
                tids[int(nspid)] = int(name)
            except (OSError, ValueError):
                continue
    return tids


def _thread_states(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread's state letter and context switches so far."""
    states = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{name}/status", errors="replace") as file:
                    fields = dict(line.split(":", 1) for line in file if ":" in line)
                switches = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
                states[int(name)] = (fields["State"].strip()[:1], switches)
            except (OSError, KeyError, ValueError):
                continue
    return states


class RuntimeSampler:
    """Samples the runtime stacks of the processes last `offer`ed (the recorded ones, as the
    recording lists them: the sampler never scans /proc for them itself) until `stop`, then writes
    runtime-stacks.json into `directory` (when any runtime was found)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: tuple[int, ...] = ()
        self.binary = py_spy()
        self.found: dict[int, dict] = {}  # pid: what runtime-stacks.json says of it
        self.not_runtime: set[int] = set()
        self.stacks: dict[tuple[Frame, ...], int] = {}
        self._attachers: dict[int, Attacher] = {}
        self._mri_readers: dict[int, MriReader] = {}
        self._last_read: dict[int, float] = {}  # a JVM's, by pid (time.monotonic)
        self.samples: list[dict] = []
        self.keep_ns: int | None = None  # a live recording's: the samples older than this go (None: none go)
        # py-spy's own maps, read as each dump starts: a timer that fires while it runs on a CPU wakes a
        # recorded thread in its name (and with its stack), and it is gone before offcpu reads its wakers'
        self.reader_maps: list[Snapshot] = []
        self._build_ids: dict[Inode, bytes | None] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offcpu-runtime-stacks", daemon=True)
        self._parent = os.getpid()

    def offer(self, processes: Iterable[int]) -> None:
        """The processes recorded now (a new tuple: what the sampler's thread reads is always whole)."""
        self.processes = tuple(processes)

    def start(self) -> None:
        self._thread.start()

    def stop(self, write: bool = True) -> None:
        """End the sampling (the dump under way finishes or is killed) and write what was read.
        OSError as raised when the file cannot be written."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        if write:
            self.write(self.directory)

    def write(self, directory: Path, since_ns: int = 0) -> None:
        """runtime-stacks.json of the samples read from `since_ns` on into `directory` (when any
        runtime was found); while sampling too (a live recording's flight record). OSError as raised
        when the file cannot be written."""
        # copies made at once (the sampler's thread adds to them): each sample's stack is in `stacks`
        found, samples = {pid: dict(entry) for pid, entry in dict(self.found).items()}, list(self.samples)
        stacks = list(self.stacks.copy())
        if found:
            write_whole(directory / RUNTIME_STACKS, to_json(
                int(INTERVAL_S * 1000), [found[pid] for pid in sorted(found)], stacks,
                [sample for sample in samples if sample["time_ns"] >= since_ns]), mode=PRIVATE)

    def frames_by_thread(self) -> dict[int, tuple[str, ...]]:
        """Each thread's last stack read, as frames are named in a stack (`work (app.py:57) [py]`),
        with what it waits for (a Java thread's: `[waiting to lock a java.lang.Object]`)."""
        stacks = list(self.stacks)
        return {sample["tid"]: tuple(frame.name(self.found[sample["pid"]]["runtime"])
                                     for frame in sample_stack(sample, stacks)) for sample in self.samples}

    def owners_by_thread(self) -> dict[int, int | None]:
        """Of each thread whose last stack read waits to lock a Java monitor, the thread that held it
        (None: not named): for a thread asleep all the recording, what glibc's mutex owner is for a mutex."""
        last = {sample["tid"]: sample.get("locks", []) for sample in self.samples}
        return {tid: None if (owner := owner_of(locks)) == NO_OWNER else owner for tid, locks in last.items()
                if monitor_waited(locks) is not None}

    def _run(self) -> None:
        while not self._stopping.is_set():
            # (ValueError: what a process controls, its names and paths in /proc, read as text,
            # never ends the recording)
            with contextlib.suppress(OSError, ValueError):
                for pid in self._due()[:MAX_PROCESSES]:
                    if self._stopping.is_set():
                        break
                    self._sample(pid)
            if self.keep_ns is not None:  # bounded memory, however long a live recording runs
                oldest = time.monotonic_ns() - self.keep_ns
                self.samples = [sample for sample in self.samples if sample["time_ns"] >= oldest]
            self._stopping.wait(INTERVAL_S)

    def _due(self) -> list[int]:
        """The recorded processes that run CPython, and those that run a JVM not read for
        JVM_INTERVAL_S, each looked at once (a command offcpu forked is looked at once it has
        left offcpu's program for its own). A process no longer recorded is forgotten as no
        runtime's: its pid, used again, may run one (and a whole machine's would fill the set)."""
        due = []
        now = time.monotonic()
        self.not_runtime &= set(self.processes)
        for pid in self.processes:
            if pid == self._parent or pid in self.not_runtime:
                continue
            if pid not in self.found:
                if _forked_by(pid, self._parent):
                    continue  # not exec'd yet: offcpu's own Python, for now
                version = cpython_version(pid)
                if version is not None:
                    self.found[pid] = {"pid": pid, "runtime": "CPython", "version": version or None, "reader": READER,
                                       "reads": 0, "failed": 0, "error": None if self.binary else
                                       "py-spy is not installed beside offcpu's Python"}
                elif is_hotspot(pid):
                    self.found[pid] = {"pid": pid, "runtime": "HotSpot", "version": None, "reader": JVM_READER,
                                       "interval_ms": int(JVM_INTERVAL_S * 1000), "reads": 0, "failed": 0,
                                       "error": None, "read_ms": 0.0}
                elif (ruby := ruby_version(pid)) is not None:
                    self._found_mri(pid, *ruby)
                else:
                    self.not_runtime.add(pid)
                    continue
            if self.found[pid]["runtime"] == "MRI":
                if pid in self._mri_readers:
                    due.append(pid)
            elif self.found[pid]["runtime"] == "HotSpot":
                if now - self._last_read.get(pid, -JVM_INTERVAL_S) >= JVM_INTERVAL_S:
                    due.append(pid)
            elif self.binary is not None:
                due.append(pid)
        return due

    def _sample(self, pid: int) -> None:
        """One dump of a process: the stacks of its threads that stayed off CPU all the while."""
        entry = self.found[pid]
        if entry["runtime"] == "HotSpot":
            self._sample_hotspot(pid, entry)
            return
        if entry["runtime"] == "MRI":
            self._sample_mri(pid, entry)
            return
        before = _thread_states(pid)
        start_ns = time.monotonic_ns()
        output, error = self._dump(pid)
        end_ns = time.monotonic_ns()
        after = _thread_states(pid)
        entry["reads"] += 1
        if output is None:
            entry["failed"] += 1
            entry["error"] = error
            return
        try:
            threads = json.loads(output)
        except ValueError:
            entry["failed"] += 1
            entry["error"] = "py-spy's output is not JSON"
            return
        time_ns = (start_ns + end_ns) // 2
        for thread in threads if isinstance(threads, list) else []:
            tid = thread.get("os_thread_id") if isinstance(thread, dict) else None
            state = before.get(tid) if isinstance(tid, int) else None
            if state is None or state[0] not in "SD" or after.get(cast(int, tid)) != state:
                continue  # it ran while its stack was read, or is gone: its stack may be of several waits
            frames = tuple(Frame(str(frame.get("name", "?")), str(frame.get("filename", "?")),
                                 int(frame.get("line") or 0))
                           for frame in thread.get("frames") or [] if isinstance(frame, dict))
            if not frames:
                continue
            stack = self.stacks.setdefault(frames, len(self.stacks))
            self.samples.append({"pid": pid, "tid": tid, "time_ns": time_ns, "stack": stack})

    def _sample_hotspot(self, pid: int, entry: dict) -> None:
        """One thread dump of a JVM through its attach socket, its threads that stayed off CPU
        from just before the command was sent to the end of the reply kept."""
        self._last_read[pid] = time.monotonic()
        entry["reads"] += 1
        before: dict[int, tuple[str, int]] = {}
        start_ns = 0

        def just_before() -> None:
            nonlocal before, start_ns
            before = _thread_states(pid)
            start_ns = time.monotonic_ns()

        try:
            attacher = self._attachers.get(pid)
            if attacher is None:
                attacher = self._attachers[pid] = Attacher(target_of(pid), self._parent)
            text = attacher.command("threaddump", before=just_before)
        except (AttachError, OSError) as error:
            # Not read again: what kept it from being read holds for the rest of the recording, and a
            # JVM that did not answer within the timeout would hold up every read that follows
            entry["failed"] += 1
            entry["error"] = str(error) if isinstance(error, AttachError) else "it is gone"
            self.not_runtime.add(pid)
            return
        end_ns = time.monotonic_ns()
        after = _thread_states(pid)
        entry["read_ms"] = round(entry["read_ms"] + (end_ns - start_ns) / 1e6, 3)
        dump = hotspot_dump.parse(text)
        if dump.version is not None:
            entry["version"] = dump.version
        host = namespace_tids(pid) if attacher.target.nspid != pid else None
        time_ns = (start_ns + end_ns) // 2
        holders = hotspot_dump.holders(dump)
        for thread in dump.threads:
            tid = thread.tid if host is None else host.get(thread.tid)
            state = before.get(tid) if tid is not None else None
            if tid is None or state is None or state[0] not in "SD" or after.get(tid) != state or not thread.frames:
                continue
            stack = self.stacks.setdefault(thread.frames, len(self.stacks))
            self.samples.append({"pid": pid, "tid": tid, "time_ns": time_ns, "stack": stack, "state": thread.state,
                                 "locks": [self._lock(lock, holders, host) for lock in thread.locks]})

    def _found_mri(self, pid: int, version: str, path: str) -> None:
        """A process that runs MRI: read when it runs the version offcpu knows the structures of,
        and its VM is found; otherwise said why not."""
        entry = self.found[pid] = {"pid": pid, "runtime": "MRI", "version": version or None, "reader": MRI_READER,
                                   "reads": 0, "failed": 0, "error": None, "read_ms": 0.0}
        if version != SUPPORTED:
            entry["error"] = (f"Ruby {version or 'of an unknown version'} is not read: offcpu knows the structures "
                              f"of MRI {SUPPORTED} only")
            return
        try:
            self._mri_readers[pid] = MriReader(pid, path)
        except (MriError, OSError) as error:
            entry["error"] = str(error) if isinstance(error, MriError) else "it is gone"

    def _sample_mri(self, pid: int, entry: dict) -> None:
        """One read of an MRI process's threads from its memory, those that stayed off CPU all the
        while kept, with what their fields say they wait for."""
        before = _thread_states(pid)
        start_ns = time.monotonic_ns()
        try:
            threads, gvl_owner = self._mri_readers[pid].read()
        except MriError as error:
            entry["reads"] += 1
            entry["failed"] += 1
            entry["error"] = str(error)
            return
        end_ns = time.monotonic_ns()
        after = _thread_states(pid)
        entry["reads"] += 1
        entry["read_ms"] = round(entry["read_ms"] + (end_ns - start_ns) / 1e6, 3)
        # {the process's own tid: the recording's}, where it runs in a pid namespace of its own
        host = (namespace_tids(pid) if self._mri_readers[pid].namespaced
                else {thread.tid: thread.tid for thread in threads})
        stacks = {thread.tid: self.stacks.setdefault(tuple(Frame(frame.function, frame.file, frame.line)
                                                           for frame in thread.frames), len(self.stacks))
                  for thread in threads}
        holders = {mutex: thread for thread in threads for mutex in thread.held}  # who holds each Mutex
        gvl_holder = next((thread for thread in threads if thread.address == gvl_owner), None)
        for thread in threads:
            tid = host.get(thread.tid)
            state = before.get(tid) if tid is not None else None
            if tid is None or state is None or state[0] not in "SD" or after.get(tid) != state or not thread.frames:
                continue
            self.samples.append({"pid": pid, "tid": tid, "time_ns": (start_ns + end_ns) // 2,
                                 "stack": stacks[thread.tid],
                                 "locks": _mri_locks(thread, holders, gvl_holder, host, stacks)})

    def _lock(self, lock: hotspot_dump.Lock, holders: dict[str, hotspot_dump.JavaThread],
              host: dict[int, int] | None) -> dict:
        """A lock line of a sample, with the owner of a monitor it waits to lock: the thread of
        the same dump whose frames locked it (on CPU or not: its stack is kept for the owner's
        sake), its tid as the recording numbers threads (None where the JVM's namespace hides it)."""
        entry: dict = {"kind": lock.kind, "address": lock.address, "class": lock.class_name, "frame": lock.frame}
        owner = holders.get(lock.address or "") if lock.kind in hotspot_dump.WAITS_TO_LOCK else None
        if owner is not None:
            entry["owner"] = {"name": owner.name, "tid": owner.tid if host is None else host.get(owner.tid),
                              "stack": self.stacks.setdefault(owner.frames, len(self.stacks))}
        return entry

    def _dump(self, pid: int) -> tuple[bytes | None, str]:
        """py-spy's JSON dump of the process, or None and why not."""
        parent = self._parent
        try:
            process = subprocess.Popen(
                [str(self.binary), "dump", "--pid", str(pid), "--json", "--nonblocking"], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_environment(), start_new_session=True,
                preexec_fn=lambda: end_with_parent(parent, signal.SIGKILL))
        except OSError as error:
            return None, f"py-spy could not run ({error.strerror})"
        mappings = read_maps(process.pid, self._build_ids) if len(self.reader_maps) < MAX_READER_MAPS else None
        if mappings:  # (exec'd: Popen returns once it has)
            self.reader_maps.append(Snapshot(process.pid, time.monotonic_ns(), mappings))
        try:
            output, errors = process.communicate(timeout=DUMP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return None, f"py-spy took more than {DUMP_TIMEOUT_S:g} s"
        if process.returncode != 0:
            said = errors.decode(errors="replace").strip().splitlines()
            return None, (said[0][:200] if said else f"py-spy exited with status {process.returncode}")
        return output[:MAX_OUTPUT], ""


def _mri_locks(thread: RubyThread, holders: dict[int, RubyThread], gvl_holder: RubyThread | None,
               host: dict[int, int], stacks: dict[int, int]) -> list[dict]:
    """What a Ruby thread waits for, as a sample's lock line (the form of a Java thread's): a Mutex
    or the GVL, with the thread holding it; a join; asleep until woken."""
    if thread.waits is None and not thread.mutex:
        return []
    if thread.waits is None:
        entry: dict = {"kind": "waiting to lock", "address": hex(thread.mutex), "class": RUBY_MUTEX, "frame": 0}
        owner = holders.get(thread.mutex)
    else:
        entry = {"kind": thread.waits, "address": None, "class": None, "frame": 0}
        owner = gvl_holder if thread.waits == WAITS_FOR_GVL else None
    if owner is not None:
        entry["owner"] = {"name": owner.name or f"thread {owner.tid}", "tid": host.get(owner.tid),
                          "stack": stacks[owner.tid]}
    return [entry]
