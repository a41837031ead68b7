"""runtime-stacks.json: the stacks of a BPF recording's runtimes (CPython, HotSpot, MRI Ruby), read while it
recorded (offcpu.recording.runtime_stacks), and how they join its waits.

Each sample is one thread's runtime stack, read at a time (CLOCK_MONOTONIC, the records'
clock) when the thread was off CPU the whole time the stack was read. A thread's runtime
stack cannot change while it is off CPU, so a sample is the stack of the one wait of its
thread that covers its time (joined in the core, core/src/bpf/decode.rs): that wait's stack
takes the sample's frames after its native ones (nearer the root).

```json
{"schema": "offcpu-runtime-stacks/1", "interval_ms": 200,
 "processes": [{"pid": 4242, "runtime": "CPython", "version": "3.11", "reader": "py-spy dump",
                "reads": 25, "failed": 0, "error": null},
               {"pid": 4300, "runtime": "HotSpot", "version": "17.0.15+6-Debian-1deb12u1",
                "reader": "HotSpot attach: threaddump", "interval_ms": 1000, "reads": 5, "failed": 0,
                "error": null, "read_ms": 12.5}],
 "stacks": [[{"function": "work", "file": "/srv/app.py", "line": 57}, ...],
            [{"function": "MonitorSleep.lambda$main$0", "file": "MonitorSleep.java", "line": 25}, ...]],
 "samples": [{"pid": 4242, "tid": 4250, "time_ns": 51234567890123, "stack": 0},
             {"pid": 4300, "tid": 4310, "time_ns": 51234667890123, "stack": 1,
              "state": "BLOCKED (on object monitor)",
              "locks": [{"kind": "waiting to lock", "address": "0x000000069ec197c0",
                         "class": "java.lang.Object", "frame": 0}]}]}
```

`stacks` holds each distinct stack once, innermost frame first; a sample names one by its
index. A process's `interval_ms`, where it has one, is its own reads' (a JVM's); a Java
thread's sample keeps its state and the monitors its frames lock or wait for (`frame`: the
index in its stack of the frame that does; `owner`, for a monitor it waits to lock, the
thread of the same dump whose frames locked it: its name and its stack's index).

What a Java thread waits for becomes a frame of its own, innermost of its Java frames (`wait_frames`):
`[waiting to lock a java.lang.Object]`, `[parking to wait for a
java.util.concurrent.locks.ReentrantLock$NonfairSync]`, `[waiting on a java.lang.Object]`, and
before it, where the dump names the monitor's owner, `[held by worker-2: java.lang.Thread.sleep at
MonitorSleep.pause (MonitorSleep.java:36)]`. The lock table names the waits by these frames
(locks.toml's Java monitor, ReentrantLock, Object.wait), so a Java lock's finding is its own and not
libjvm's futex, and the finding says who held it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from offcpu import _core
from offcpu.capture import RUNTIME_STACKS
from offcpu.files import read_json
from offcpu.stacks import HELD_BY, JDK_PACKAGES, RUBY_WAITS, RUNTIME_MARK, RUNTIME_MARKS

SCHEMA = "offcpu-runtime-stacks/1"
RUNTIME_STACKS_MAX = 64 << 20  # the most runtime-stacks.json is read of
NO_RUNTIME_STACK = _core.NO_RUNTIME_STACK  # a wait that no sample joined
NO_OWNER = -1
# The lock lines of a Java thread's innermost frame that say what it waits for (hotspot_dump.LOCK_KINDS)
WAITS_TO_LOCK = ("waiting to lock", "waiting to re-lock in wait()")  # a monitor, which has an owner
WAITS_FOR_GVL, WAITS_FOR_JOIN, ASLEEP_UNTIL_WOKEN = RUBY_WAITS  # and these, which name no object
WAIT_KINDS = ("waiting to lock", "waiting to re-lock in wait()", "parking to wait for", "waiting on", *RUBY_WAITS)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    def name(self, runtime: str = "CPython") -> str:
        """The frame as a stack shows it: `work (app.py:57) [py]`."""
        where = f"{os.path.basename(self.file)}:{self.line}" if self.line > 0 else os.path.basename(self.file)
        return f"{self.function} ({where}) {RUNTIME_MARKS.get(runtime, RUNTIME_MARK)}"


@dataclass(frozen=True)
class WaitFrame:
    """What a runtime's thread waits for, or who held it, as a frame: `[waiting to lock a java.lang.Object]`."""

    text: str

    def name(self, runtime: str = "CPython") -> str:
        return f"[{self.text}]"


@dataclass(frozen=True)
class Process:
    pid: int
    runtime: str
    version: str | None
    reader: str
    interval_ms: int | None  # its reads' own interval, where not the file's
    reads: int  # how many times its stacks were read
    failed: int  # of which the reader failed
    error: str | None  # why it could not be read at all, or its last failure


@dataclass(frozen=True)
class RuntimeStacks:
    interval_ms: int
    processes: tuple[Process, ...]
    stacks: tuple[tuple[Frame | WaitFrame, ...], ...]
    pids: np.ndarray  # the samples, by column
    tids: np.ndarray
    times: np.ndarray
    stack_ids: np.ndarray
    owners: np.ndarray  # the tid of the thread holding the monitor a sample waits to lock (NO_OWNER: none named)

    def last_owners(self) -> dict[int, int]:
        """{waiter tid: owner tid} of the threads that wait to lock a monitor whose owner the last
        dump of their process named: a cycle of them is a Java deadlock (one dump is one moment,
        and a deadlock never ends, so its threads are in the last; samples of different dumps
        could make a cycle of waits that never were at once)."""
        last = {pid: int(self.times[self.pids == pid].max()) for pid in set(self.pids.tolist())}
        return {int(tid): int(owner) for pid, tid, time_ns, owner in zip(self.pids, self.tids, self.times, self.owners,
                                                                          strict=True)
                if owner != NO_OWNER and time_ns == last[int(pid)]}

    def runtime_of(self, pid: int) -> str:
        return next((process.runtime for process in self.processes if process.pid == pid), "CPython")


class RuntimeNames(Protocol):
    """What names the runtime frames of a chain (its runtime stack id): a capture's RuntimeStacks,
    or the live window's (offcpu.live.runtime)."""

    @property
    def stacks(self) -> Sequence[tuple[Frame | WaitFrame, ...]]: ...

    def runtime_of(self, pid: int) -> str: ...


def sample_stack(sample: dict, stacks: Sequence[tuple[Frame, ...]]) -> tuple[Frame | WaitFrame, ...]:
    """A sample's frames (runtime_stacks.RuntimeSampler's form): what its thread waits for and who
    held it (a Java or Ruby thread's, `wait_frames`), then its stack."""
    return wait_frames(sample.get("locks") or [], stacks) + stacks[sample["stack"]]


def to_json(interval_ms: int, processes: list[dict], stacks: list[tuple[Frame, ...]], samples: list[dict]) -> str:
    return json.dumps({"schema": SCHEMA, "interval_ms": interval_ms, "processes": processes,
                       "stacks": [[{"function": frame.function, "file": frame.file, "line": frame.line}
                                   for frame in stack] for stack in stacks],
                       "samples": samples}, separators=(",", ":"))


def load(directory: Path) -> RuntimeStacks | None:
    """A capture's runtime stacks; None when it has none (recorded without a runtime, or before
    offcpu read them) or they cannot be read."""
    try:
        data = read_json(directory / RUNTIME_STACKS, RUNTIME_STACKS_MAX)
        return _parse(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _number(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
        raise ValueError("not a number of runtime-stacks.json")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not a text of runtime-stacks.json")
    return value


def _parse(data: Any) -> RuntimeStacks:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError("not a runtime-stacks.json as offcpu writes it")
    processes = tuple(Process(_number(item["pid"]), _text(item["runtime"]),
                              None if item.get("version") is None else _text(item["version"]), _text(item["reader"]),
                              None if item.get("interval_ms") is None else _number(item["interval_ms"]),
                              _number(item.get("reads", 0)), _number(item.get("failed", 0)),
                              None if item.get("error") is None else _text(item["error"]))
                      for item in data["processes"])
    read = [tuple(Frame(_text(frame["function"]), _text(frame["file"]), _number(frame["line"])) for frame in stack)
            for stack in data["stacks"]]
    samples = data["samples"]
    columns = [[_number(sample[name]) for sample in samples] for name in ("pid", "tid", "time_ns", "stack")]
    if any(stack >= len(read) for stack in columns[3]):
        raise ValueError("a sample names a stack runtime-stacks.json does not hold")
    # a sample that says what it waits for takes its stack with the wait's frames, a stack of its own
    stacks: dict[tuple[Frame | WaitFrame, ...], int] = {stack: index for index, stack in enumerate(read)}
    owners = []
    for number, sample in enumerate(samples):
        extra = wait_frames(sample.get("locks") or [], read)
        if extra:
            columns[3][number] = stacks.setdefault(extra + read[columns[3][number]], len(stacks))
        owners.append(owner_of(sample.get("locks") or []))
    return RuntimeStacks(_number(data.get("interval_ms", 0)), processes, tuple(stacks),
                         *(np.array(column, np.int64) for column in (*columns, owners)))


def monitor_waited(locks: list[dict]) -> dict | None:
    """The lock line of the monitor a Java sample's innermost frame waits to lock, if it does."""
    return next((lock for lock in locks if lock.get("frame") == 0 and lock.get("kind") in WAITS_TO_LOCK), None)


def owner_of(locks: list[dict]) -> int:
    """The tid of the thread holding the monitor a Java sample's innermost frame waits to lock
    (NO_OWNER: none named)."""
    lock = monitor_waited(locks)
    owner = lock.get("owner") if lock is not None else None
    return _number(owner["tid"]) if isinstance(owner, dict) and owner.get("tid") is not None else NO_OWNER


def _plain(frame: Frame) -> str:
    """`MonitorSleep.pause (MonitorSleep.java:36)`, `java.lang.Thread.sleep` (a native method)."""
    return frame.function if frame.line == 0 else f"{frame.function} ({os.path.basename(frame.file)}:{frame.line})"


def wait_frames(locks: list[dict], stacks: Sequence[tuple[Frame, ...]]) -> tuple[WaitFrame, ...]:
    """A Java sample's frames for what its innermost frame waits for, and who held it (its
    owner's innermost frame, and where the program called it from when that is the JDK's):
    (`[held by worker-2: java.lang.Thread.sleep at MonitorSleep.pause (MonitorSleep.java:36)]`,
    `[waiting to lock a java.lang.Object]`), innermost first; () when it waits for nothing named."""
    lock = next((lock for lock in locks if lock.get("frame") == 0 and lock.get("kind") in WAIT_KINDS
                 and (lock.get("class") or lock.get("kind") in RUBY_WAITS)), None)
    if lock is None:
        return ()
    waits = WaitFrame(f"{_text(lock['kind'])} a {_text(lock['class'])}" if lock.get("class") else _text(lock["kind"]))
    owner = lock.get("owner")
    if not isinstance(owner, dict) or not 0 <= _number(owner["stack"]) < len(stacks) or not stacks[owner["stack"]]:
        return (waits,)
    innermost, *callers = stacks[owner["stack"]]
    where = _plain(innermost)
    if innermost.function.startswith(JDK_PACKAGES):  # the JDK's (Thread.sleep): and where the program called it
        caller = next((frame for frame in callers if not frame.function.startswith(JDK_PACKAGES)), None)
        where += f" at {_plain(caller)}" if caller else ""
    return WaitFrame(f"{HELD_BY[1:]}{_text(owner['name'])}: {where}"), waits
