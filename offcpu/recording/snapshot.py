"""Threads asleep through a recording, found and their stacks read at its end.

A thread that never switches during the window leaves nothing in perf.data: a deadlocked
thread, a session waiting for another's row lock and an idle worker look the same. Their
context switch counts (/proc/TID/status, kept by every kernel), read when the recording
starts and again at its end, tell them. Their stacks are then read from the live process:
the kernel's (/proc/PID/task/TID/stack), the system call each sleeps in and, in a futex,
the thread glibc records as the owner of the mutex; the user's with elfutils' eu-stack,
which stops the process with ptrace for a few milliseconds.
"""

from __future__ import annotations

import platform
import re
import struct
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from offcpu.capture import AsleepThread, Snapshot
from offcpu.escaping import printable
from offcpu.machine.system import proc_text
from offcpu.workers import child_environment, find_program

UNWINDER = "eu-stack"
UNWINDER_TIMEOUT_S = 5.0  # for one process
UNWINDING_S = 10.0  # for them all: the recording's end waits for it, with Ctrl-C held
MAX_PROCESSES = 64  # whose user stacks are read: each is stopped for a few milliseconds
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}  # the system call's number, by architecture
FUTEX_COMMAND = 0x7F  # the operation, without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME
FUTEX_WAITS = {0, 9}  # FUTEX_WAIT, FUTEX_WAIT_BITSET: the word is glibc's mutex __lock
FUTEX_LOCKS_PI = {6, 13}  # FUTEX_LOCK_PI, FUTEX_LOCK_PI2: the word holds the owner's tid
FUTEX_TID_MASK = 0x3FFFFFFF
MUTEX_OWNER_OFFSET = 8  # glibc's struct __pthread_mutex_s: int __lock, unsigned __count, int __owner
KERNEL_FRAME = re.compile(r"\[<[0-9a-f]+>\] ([^+\s]+)")
# eu-stack's output: a line per thread, then one per frame, numbered from 0. A symbol's name is
# printed as it is, newlines included: what follows one is no line of eu-stack's own.
THREAD_LINE = re.compile(r"TID (\d+):")
FRAME = re.compile(r"#(\d+)\s+0x[0-9a-f]+\s*(.*)")
FAILED_WORDS = 200  # of why a snapshot failed, kept in the capture


def switch_counts(tids: Iterable[int]) -> dict[int, int]:
    """How many times each thread has switched out so far (those still there)."""
    counts = {}
    for tid in tids:
        try:
            status = proc_text(f"/proc/{tid}/status")
        except OSError:
            continue  # gone
        counts[tid] = sum(int(line.split()[1]) for line in status.splitlines()
                          if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")))
    return counts


def take(at_start: dict[int, int], process_of: dict[int, int]) -> Snapshot:
    """The threads of `at_start` (switch counts) that have not switched since, with their stacks.
    It never fails: what it reads, the processes control (their names, their symbols), and a
    snapshot that cannot be taken must not cost the recording; the snapshot then says why."""
    try:
        return _take(at_start, process_of)
    except Exception as error:  # whatever a process made of it: the recording is kept without it
        return Snapshot(failed=printable(f"{type(error).__name__}: {error}")[:FAILED_WORDS])


def _take(at_start: dict[int, int], process_of: dict[int, int]) -> Snapshot:
    asleep = [tid for tid, count in switch_counts(at_start).items() if count == at_start[tid]]
    kernel_side = [thread for tid in asleep if (thread := _kernel_side(tid, process_of.get(tid, tid)))]
    by_process: dict[int, list[AsleepThread]] = defaultdict(list)
    for thread in kernel_side:
        by_process[thread.pid].append(thread)
    unwinder = find_program(UNWINDER)
    if unwinder is None:
        return Snapshot(tuple(kernel_side), f"no user stacks: {UNWINDER} is not installed (Debian: elfutils)")
    threads = []
    deadline = time.monotonic() + UNWINDING_S
    unwound = 0
    for pid, in_process in sorted(by_process.items()):
        within = unwound < MAX_PROCESSES and time.monotonic() < deadline
        timeout_s = min(UNWINDER_TIMEOUT_S, deadline - time.monotonic())
        user = _user_stacks(unwinder, pid, {thread.tid for thread in in_process}, timeout_s) if within else {}
        unwound += within
        threads += [replace(thread, user_frames=user.get(thread.tid, ())) for thread in in_process]
    said = UNWINDER if unwound == len(by_process) else (
        f"{UNWINDER}, in {unwound:,} of the {len(by_process):,} processes: at most {MAX_PROCESSES} in "
        f"{UNWINDING_S:g} s")
    return Snapshot(tuple(threads), said)


def _kernel_side(tid: int, pid: int) -> AsleepThread | None:
    """What /proc says of a sleeping thread; None once it is gone."""
    task = f"/proc/{pid}/task/{tid}"
    try:
        stat = proc_text(f"{task}/stat")
        comm = proc_text(f"{task}/comm").rstrip("\n")
        wchan = proc_text(f"{task}/wchan")
        syscall = proc_text(f"{task}/syscall").strip()
        stack = proc_text(f"{task}/stack")
    except OSError:
        return None
    state = stat[stat.rindex(")") + 2:].split(" ", 1)[0]
    frames = tuple(found[1] for line in stack.splitlines() if (found := KERNEL_FRAME.match(line)))
    return AsleepThread(tid, pid, comm, state, wchan, syscall, frames, (), _mutex_owner(pid, syscall))


def _mutex_owner(pid: int, syscall: str) -> int | None:
    """The owner of the mutex a futex wait is on, as glibc records it; None when the
    thread is not in a futex wait or the memory cannot be read."""
    arguments = syscall.split()
    if len(arguments) < 3 or not arguments[0].isdecimal() \
            or int(arguments[0]) != FUTEX_SYSCALL.get(platform.machine()):
        return None
    try:
        address, command = int(arguments[1], 16), int(arguments[2], 16) & FUTEX_COMMAND
    except ValueError:
        return None
    if command in FUTEX_LOCKS_PI:
        word = _read_int(pid, address)
        return word & FUTEX_TID_MASK if word else None
    if command in FUTEX_WAITS:
        owner = _read_int(pid, address + MUTEX_OWNER_OFFSET)
        return owner if owner and owner > 0 else None
    return None


def _read_int(pid: int, address: int) -> int | None:
    try:
        with open(f"/proc/{pid}/mem", "rb") as memory:
            memory.seek(address)
            raw = memory.read(4)
    except (OSError, ValueError, OverflowError):
        return None
    return struct.unpack("<i", raw)[0] if len(raw) == 4 else None


def _user_stacks(unwinder: str, pid: int, tids: set[int], timeout_s: float) -> dict[int, tuple[str, ...]]:
    """The user stacks of the threads `tids` of process `pid`, leaf first, as eu-stack unwinds
    them (DWARF, through a brief ptrace stop); empty when it cannot."""
    try:
        done = subprocess.run([unwinder, "-p", str(pid)], capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, stdin=subprocess.DEVNULL, env=child_environment())
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_stacks(done.stdout, tids)


def parse_stacks(text: str, tids: set[int]) -> dict[int, tuple[str, ...]]:
    """eu-stack's stacks of the threads `tids`. A line that a symbol's name made (it holds a
    newline) is left out, unless it reads as a line of eu-stack's own: then a thread heard of
    twice, one not asked for, or a frame out of its order ends the stack it is in."""
    stacks: dict[int, list[str]] = {}
    frames: list[str] | None = None  # the stack being read, while its lines are in order
    for line in text.splitlines():
        if thread := THREAD_LINE.fullmatch(line):
            tid = int(thread[1])
            frames = stacks.setdefault(tid, []) if tid in tids and tid not in stacks else None
        elif (frame := FRAME.fullmatch(line)) and frames is not None:
            if int(frame[1]) != len(frames):
                frames = None
                continue
            name = frame[2].strip()
            frames.append("[unknown]" if name in ("", "??") else name)
    return {tid: tuple(frames) for tid, frames in stacks.items()}
