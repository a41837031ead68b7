"""Threads asleep through the whole recording: perf records nothing of a thread that never
switches, so `offcpu record` reads their stacks from the live process at the window's end
(offcpu.recording.snapshot) and keeps them in the capture as snapshot.json. Here they are
read back and given to the model: such a thread's one wait, "off CPU since before the
recording", gets the stack it was asleep in, and the lock table then says what it waited
for, as for any other wait.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from offcpu.capture import SNAPSHOT
from offcpu.files import PRIVATE, read_json, write_whole
from offcpu.model import ASLEEP_ALL_WINDOW, WHOLE_WINDOW, Model
from offcpu.stacks import BEFORE_WINDOW, Stack

SCHEMA = "offcpu-snapshot/1"
# The most snapshot.json is read of: a few KB for each thread asleep (its stacks), for
# thousands of threads
SNAPSHOT_MAX = 64 << 20


@dataclass(frozen=True)
class AsleepThread:
    """A thread that did not switch during the recording, as it was at its end."""

    tid: int
    pid: int
    comm: str
    state: str  # as in /proc/PID/stat: S, D...
    wchan: str  # the kernel function it sleeps in
    syscall: str  # /proc/PID/task/TID/syscall: the system call's number and arguments
    kernel_frames: tuple[str, ...]  # leaf first
    user_frames: tuple[str, ...]  # leaf first; empty when they could not be read
    # For a wait in a futex: the thread glibc records as the owner of the mutex that futex is
    # the lock word of (its __owner field); meaningful when the stack waits in pthread_mutex_lock
    # (claims.Claims.mutex_owners keeps those alone)
    mutex_owner: int | None = None

    @property
    def stack(self) -> Stack:
        """Its stack as the model keeps stacks, leaf first, below the label that says where it came from."""
        return Stack(self.kernel_frames + self.user_frames + (ASLEEP_ALL_WINDOW,), len(self.kernel_frames))


@dataclass(frozen=True)
class Snapshot:
    threads: tuple[AsleepThread, ...] = ()
    user_stacks: str = ""  # what read the user stacks ("eu-stack"), or why none were read
    # Why no snapshot could be taken at the end of the recording (empty when one was): the
    # recording is kept all the same, and its reports say that this is missing
    failed: str = ""
    schema: str = field(default=SCHEMA)

    @property
    def failed_note(self) -> str | None:
        """What a capture whose snapshot failed lacks, in a sentence (None when it did not fail)."""
        if not self.failed:
            return None
        return (f"the stacks of threads that did not run during the recording could not be read at its end "
                f"({self.failed}): such threads are shown off CPU all the recording, with no stack")


def save(directory: Path, snapshot: Snapshot) -> None:
    """Owner only, as the rest of the capture: it holds every thread's name and stacks."""
    write_whole(directory / SNAPSHOT, json.dumps(asdict(snapshot)) + "\n", mode=PRIVATE)


def load(directory: Path) -> Snapshot:
    """The capture's snapshot; an empty one when there is none or it cannot be read (a
    capture made with --no-snapshot, or before snapshots, or damaged)."""
    try:
        data = read_json(directory / SNAPSHOT, SNAPSHOT_MAX)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("threads"), list):
            return Snapshot()
        said = [data.get(name, "") for name in ("user_stacks", "failed")]
        if not all(isinstance(words, str) for words in said):
            return Snapshot()
        return Snapshot(tuple(_thread(item) for item in data["threads"]), *said)
    except (OSError, ValueError):
        return Snapshot()


# The JSON type of each field of AsleepThread (JSON's true is no number: see _typed)
THREAD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "tid": int, "pid": int, "comm": str, "state": str, "wchan": str, "syscall": str, "kernel_frames": list,
    "user_frames": list, "mutex_owner": (int, type(None))}


def _thread(item: Any) -> AsleepThread:
    """A thread of snapshot.json; ValueError unless each field has its type (a damaged file)."""
    if not isinstance(item, dict) or not all(
            isinstance(item.get(name), kind) and not isinstance(item.get(name), bool)
            for name, kind in THREAD_FIELDS.items()):
        raise ValueError("a thread of the snapshot is not one as offcpu writes it")
    frames = {name: tuple(item[name]) for name in ("kernel_frames", "user_frames")}
    if not all(isinstance(frame, str) for stack in frames.values() for frame in stack):
        raise ValueError("a stack of the snapshot holds something other than frames")
    return AsleepThread(**{**{name: item[name] for name in THREAD_FIELDS}, **frames})


def with_asleep_stacks(model: Model, snapshot: Snapshot) -> None:
    """Give each thread of the snapshot that the model has off CPU all the window, with
    no stack (it never switched), the stack it was asleep in, and the owner of the mutex
    it waited for; or, when the snapshot failed, that the model lacks it."""
    if snapshot.failed_note:
        model.lacks.append(snapshot.failed_note)
    asleep = {thread.tid: thread for thread in snapshot.threads}
    stack_index = {stack: index for index, stack in enumerate(model.stacks)}
    for index, row in enumerate(model.rows):
        thread = asleep.get(row.tid)
        if (thread is None or row.waker is not None or model.stacks[row.stack].frames != (BEFORE_WINDOW,)
                or row.offcpu_us < WHOLE_WINDOW * model.wall_us):
            continue
        stack = thread.stack
        if stack not in stack_index:
            stack_index[stack] = len(model.stacks)
            model.stacks.append(stack)
        model.rows[index] = replace(row, stack=stack_index[stack], state=thread.state)
        model.asleep_threads += 1
        if thread.mutex_owner is not None:
            model.mutex_owners[row.tid] = thread.mutex_owner
