"""Captures recorded with BPF, written by hand byte by byte after the C layout of `struct record`
(core/src/bpf/offcpu.bpf.c; the format is offcpu's own, not the kernel's), for the tests of its
reader and of the reports. Times are microseconds from the window's start; the records' process
is the test's own, so that the memory maps read of it are real."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from offcpu import capture
from offcpu.capture import CaptureInfo, Target
from offcpu.recording.process_maps import MapsRecorder

# struct record: u32 kind, cpu, pid, tid; u64 since_ns, woken_ns, back_ns; s32 kernel_stack,
# user_stack, waker_kernel_stack, waker_user_stack; u32 waker_pid, waker_tid, state, exit_state;
# u16 weight_shift, preempted; u32 estimated; char comm[16], waker_comm[16]
RECORD = struct.Struct("<IIIIQQQiiiiIIIIHHI16s16s")
WAIT, FORK, EXIT, COMM = 1, 2, 3, 4
NO_STACK = -10000
US = 1000
BASE_NS = 1_000_000_000  # the window's start (CLOCK_MONOTONIC)
WINDOW_US = 10_000
PID = os.getpid()
WAITER, WAKER, CHILD = 11, 12, 13
S, D, DEAD, EXIT_DEAD = 0x1, 0x2, 0x80, 0x10


def at(us: int) -> int:
    return BASE_NS + us * US


def record(kind: int, tid: int, since_us: int | None, *, cpu: int = 0, woken_us: int | None = None,
           back_us: int | None = None, stacks: tuple[int, int] = (NO_STACK, NO_STACK),
           waker_stacks: tuple[int, int] = (NO_STACK, NO_STACK), waker: int = 0, state: int = 0,
           exit_state: int = 0, shift: int = 0, preempted: bool = False, estimated: int = 0,
           comm: str = "") -> bytes:
    """One record; None (or absent) times are 0 (not seen)."""
    return RECORD.pack(kind, cpu, PID, tid, *(0 if us is None else at(us) for us in (since_us, woken_us, back_us)),
                       *stacks, *waker_stacks, PID if waker else 0, waker, state, exit_state, shift, preempted,
                       estimated, (comm or f"t{tid}").encode(), f"t{waker}".encode() if waker else b"")


def stack_table(stacks: dict[int, list[int]]) -> bytes:
    """bpf-stacks.bin: {u32 id, u32 depth, depth x u64 addresses} each."""
    return b"".join(struct.pack(f"<II{len(addresses)}Q", number, len(addresses), *addresses)
                    for number, addresses in stacks.items())


def write_capture(directory: Path, records: list[bytes], stacks: dict[int, list[int]] | None = None,
                  maps: bool = True) -> None:
    info = CaptureInfo(target=Target("pid", "test", pid=PID, pids=(PID,)), perf_command=[], kernel_release="",
                       perf_version="", cpus=2, call_graph="fp", events=[], events_skipped=[],
                       duration_requested_s=0.01, schedstats="absent", limits=None, window_start_ns=at(0),
                       window_end_ns=at(WINDOW_US), samples=len(records), backend="bpf")
    capture.save(directory, info)
    (directory / "bpf-records.bin").write_bytes(b"".join(records))
    (directory / "bpf-stacks.bin").write_bytes(stack_table(stacks or {}))
    if maps:
        MapsRecorder(directory).update([PID])


def lost_and_unseen(directory: Path) -> None:
    """A capture whose recording lost 3 waits (a number the reader acts on: a warning), and 2 of
    whose switches the kernel did not report (placed by run time, totals whole: a note); for the
    reports' tests of how each is said."""
    write_capture(directory, [record(WAIT, WAITER, 100, back_us=200, state=S, estimated=2),
                              record(WAIT, WAITER, 300, back_us=400, estimated=1)], {})
    saved = json.loads((directory / "capture.json").read_text())
    (directory / "capture.json").write_text(json.dumps({**saved, "lost_events": 3}))


class SavedStacks:
    """What the window asks of the recording, its stack table: the capture's."""

    def __init__(self, table: Path) -> None:
        self.table = table

    def save_stacks(self, path: str) -> None:
        shutil.copyfile(self.table, path)
