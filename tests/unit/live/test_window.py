"""offcpu top's window, built an interval at a time (each paired once, then merged), against the
model `report` builds from scratch of a capture of the window's records (as a flight record of
the window is): a recorded BPF capture (python_lock_bpf) cut into the takes and open waits a
live recording would have handed over, with the Python stacks read while it recorded."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from offcpu.capture import BPF_RECORDS, BPF_STACKS, RUNTIME_STACKS, load, save
from offcpu.live.runtime import LiveRuntime
from offcpu.live.window import LiveWindow
from offcpu.model import SUB_WINDOWS, Model
from offcpu.model.loading import build
from offcpu.model.wakeups import from_interrupt
from offcpu.reading.bpf_reader import RECORD, WAIT
from offcpu.recording.runtime_stacks import RuntimeSampler
from offcpu.runtime_frames import Frame
from offcpu.stacks import Stack
from tests.fixtures import HERE as FIXTURES
from tests.helpers.bpf_records import FORK, PID, S, SavedStacks, at, record, write_capture

INTERVALS = 8
KEPT = 5  # intervals in the window


def open_at(records: np.ndarray, time_ns: int) -> np.ndarray:
    """The waits open at `time_ns`, as the recording's map of them holds them then: not back, and
    not woken if their wakeup came later."""
    waits = records[(records["kind"] == WAIT) & (records["since_ns"] <= time_ns) & (records["back_ns"] > time_ns)]
    waits["back_ns"] = 0
    later = waits["woken_ns"] > time_ns
    for field in ("woken_ns", "waker_pid", "waker_tid"):
        waits[field][later] = 0
    waits["waker_kernel_stack"][later] = waits["waker_user_stack"][later] = -10000
    return waits


def taken_in(records: np.ndarray, after_ns: int, upto_ns: int) -> np.ndarray:
    """The records a live recording hands over between two times: waits as they end, the others as they happen."""
    when = np.where(records["kind"] == WAIT, records["back_ns"], records["since_ns"])
    return records[(when > after_ns) & (when <= upto_ns)]


def by_thread_and_state(model: Model) -> dict[tuple[int, str], tuple[int, int, int]]:
    sums: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in model.rows:
        sums[row.tid, row.state][0] += row.offcpu_us
        sums[row.tid, row.state][1] += row.blocked_us
        sums[row.tid, row.state][2] += row.count
    return {key: (offcpu, blocked, count) for key, (offcpu, blocked, count) in sums.items()}


def stacks_of_wakers(model: Model, interrupted: bool) -> list[Stack]:
    stacks = [model.stacks[waker.stack] for waker in model.wakers]
    return [stack for stack in stacks if from_interrupt(stack.frames[:stack.kernel_frames]) == interrupted]


def stacks_in_use(model: Model, interrupted_alone: bool) -> set[Stack]:
    """The stacks of the rows and of their wakers, the latter with their kernel frames alone when
    an interrupt's handler made the wakeup (`interrupted_alone`)."""
    wakers = {Stack(stack.frames[:stack.kernel_frames], stack.kernel_frames) if interrupted_alone else stack
              for stack in stacks_of_wakers(model, interrupted=True)}
    return {model.stacks[row.stack] for row in model.rows} | set(stacks_of_wakers(model, interrupted=False)) | wakers


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    directory = tmp_path / "capture"
    shutil.copytree(FIXTURES / "python_lock_bpf", directory)
    (directory / RUNTIME_STACKS).unlink()  # the window shows native frames
    return directory


def test_the_merged_intervals_are_the_model_of_the_window(capture: Path) -> None:
    info = load(capture)
    records = np.fromfile(capture / BPF_RECORDS, RECORD)
    start = info.window_start_ns
    ends = [start + (info.window_end_ns - start) * (number + 1) // (INTERVALS + 1) for number in range(INTERVALS)]
    table = shutil.copyfile(capture / BPF_STACKS, capture.parent / "stack-table")
    window = LiveWindow(capture, SavedStacks(table), info)  # type: ignore[arg-type]
    for before, end in zip([start, *ends], ends, strict=False):
        window.add(taken_in(records, before, end), open_at(records, end), end)
    first_kept = ends[INTERVALS - KEPT - 1] + 1
    window.slide(ends[-1] - first_kept + 1)
    assert [interval.first_ns for interval in window.intervals][0] == first_kept
    live = window.model()
    assert live is not None
    # the capture of the window: the records that end in it, and the waits open at its end
    of_window = capture.parent / "window"
    shutil.copytree(capture, of_window)
    np.concatenate([taken_in(records, first_kept - 1, ends[-1]), open_at(records, ends[-1])]).tofile(
        of_window / BPF_RECORDS)
    save(of_window, replace(info, window_start_ns=first_kept, window_end_ns=ends[-1], threads_at_start={},
                            processes_at_start={}))
    whole = build(of_window)
    assert (live.window_start_ns, live.window_end_ns) == (whole.window_start_ns, whole.window_end_ns)
    assert by_thread_and_state(live) == by_thread_and_state(whole)
    assert {tid: (thread.offcpu_us, thread.blocked_us, thread.oncpu_us) for tid, thread in live.threads.items()} == \
        {tid: (thread.offcpu_us, thread.blocked_us, thread.oncpu_us) for tid, thread in whole.threads.items()}
    # the same stacks, but for the wakeups made by an interrupt's handler: the window leaves out the
    # user frames of the thread it came in (the fixture's: rustc's, running beside the program)
    assert stacks_in_use(live, interrupted_alone=False) == stacks_in_use(whole, interrupted_alone=True)
    assert any(len(stack.frames) > stack.kernel_frames for stack in stacks_of_wakers(whole, interrupted=True))
    assert all(len(stack.frames) == stack.kernel_frames for stack in stacks_of_wakers(live, interrupted=True))
    # each interval's time goes to the window's sub-windows whole (the last interval's to the last)
    assert all(len(row.windows) == SUB_WINDOWS and abs(sum(row.windows) - row.offcpu_us) <= 1 for row in live.rows)
    # the waits that ended in the window, once each, however their records came
    ended = records[(records["kind"] == WAIT) & (records["back_ns"] >= first_kept) & (records["back_ns"] <= ends[-1])
                    & (records["since_ns"] != 0)]
    assert sorted(window.waited_ns().tolist()) == sorted((ended["back_ns"] - ended["since_ns"]).astype(int).tolist())


def recorded_sampler(directory: Path) -> RuntimeSampler:
    """A sampler holding what the recording's sampler had read when it wrote runtime-stacks.json."""
    sampler = RuntimeSampler(directory)
    data = json.loads((directory / RUNTIME_STACKS).read_text())
    sampler.found = {process["pid"]: process for process in data["processes"]}
    sampler.stacks = {tuple(Frame(frame["function"], frame["file"], frame["line"]) for frame in stack): number
                      for number, stack in enumerate(data["stacks"])}
    sampler.samples = data["samples"]
    return sampler


def test_the_window_names_the_python_lines_of_its_waits_as_report_does(tmp_path: Path) -> None:
    # tests/fixtures/python_lock_bpf: python_lock -t 4 -u 100000 (4 workers taking one lock and sleeping 100 ms
    # holding it) recorded 1 s with BPF, its Python stacks read every 200 ms; its waits open read 4 times, and
    # each time the interval up to the read before paired, as top pairs them when it reads a runtime's stacks
    capture = tmp_path / "capture"
    shutil.copytree(FIXTURES / "python_lock_bpf", capture)
    info = load(capture)
    records = np.fromfile(capture / BPF_RECORDS, RECORD)
    start = info.window_start_ns
    reads = [start + (info.window_end_ns - start) * (number + 1) // 4 for number in range(4)]
    table = shutil.copyfile(capture / BPF_STACKS, tmp_path / "stack-table")
    window = LiveWindow(capture, SavedStacks(table), info, LiveRuntime(recorded_sampler(capture)))  # type: ignore[arg-type]
    for before, read in zip([start - 1, *reads], reads, strict=False):
        window.add(taken_in(records, before, read), open_at(records, read), before, read)
    live = window.model()
    assert live is not None and live.window_end_ns == reads[-2]
    with_lock = "main.<locals>.work (python_lock:57) [py]"
    # the workers' waits for the lock (their futex's kernel frames) carry the line that takes it, after
    # their native frames, for most of their time
    pid = info.target.pid
    lock = [row for row in live.rows if row.tid != pid and "futex_do_wait" in live.stacks[row.stack].frames]
    framed = {live.stacks[row.stack] for row in lock if with_lock in live.stacks[row.stack].frames}
    assert framed and all(stack.frames.index(with_lock) >= stack.kernel_frames for stack in framed)
    framed_us = sum(row.offcpu_us for row in lock if live.stacks[row.stack] in framed)
    lock_us = sum(row.offcpu_us for row in lock)
    assert framed_us > 0.99 * lock_us, (framed_us, lock_us)
    # each with the frames report joins to a wait of the whole capture
    whole = build(capture)
    assert framed <= {whole.stacks[row.stack] for row in whole.rows}


def test_a_process_begun_in_an_interval_has_its_first_generation_there(tmp_path: Path) -> None:
    # Given a process made by a fork at 100 µs (its records and the window's kept forks and execs
    # both hold that fork) whose main thread waits from 200 to 300 µs with a user stack (id 1)
    directory = tmp_path / "capture"
    directory.mkdir()
    write_capture(directory, [record(FORK, PID, 100), record(WAIT, PID, 200, back_us=300, state=S, stacks=(2, 1))],
                  {1: [0x401000], 2: [0xFFFFFFFF81000000]})
    records = np.fromfile(directory / BPF_RECORDS, RECORD)
    table = shutil.copyfile(directory / BPF_STACKS, tmp_path / "stack-table")
    window = LiveWindow(directory, SavedStacks(table), load(directory))  # type: ignore[arg-type]
    # When one interval takes both
    window.add(records, records[:0], at(1_000))
    assert window.model() is not None
    # Then its wait's user stack is of the process's first program (one fork before it): the
    # generation its memory maps are filed under, not one per copy of the fork
    [chain] = [chain for chain in window.chains if isinstance(chain, tuple) and chain[1] == 1]
    assert chain[2:4] == (PID, 1)
