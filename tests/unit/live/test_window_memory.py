"""offcpu top's window lets go of what it no longer needs, however long it runs: the forks and
execs of processes no record of the window is of (let_go), and the chains its model no longer
uses (stacks). Hand-made records (tests.helpers.bpf_records); times in µs from the start."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from offcpu.capture import BPF_STACKS, load
from offcpu.live import window as live_window
from offcpu.live.window import LiveWindow
from offcpu.reading.bpf_reader import EXEC, RECORD
from offcpu.recording.process_maps import read_maps
from offcpu.stacks import UNKNOWN
from tests.helpers.bpf_records import COMM, EXIT, FORK, NO_STACK, PID, WAIT, S, SavedStacks, at, record, write_capture

# Pids no process has: above the kernel's greatest pid_max (PID_MAX_LIMIT, 4M)
GONE, OTHER = 4_194_305, 4_194_306


def of(pid: int, data: bytes, waker_pid: int | None = None) -> np.ndarray:
    """A record of process `pid` (the helper makes the test's own), woken by `waker_pid`'s."""
    rows = np.frombuffer(data, RECORD).copy()
    rows["pid"] = pid
    if waker_pid is not None:
        rows["waker_pid"] = waker_pid
    return rows


def user_address() -> int:
    """An address in the test's own program (its executable's first executable mapping)."""
    mappings = read_maps(PID, {})
    assert mappings
    return mappings[0].start + 0x10


def window_of(tmp_path: Path) -> LiveWindow:
    """A window on a capture with the stack table {1: a user stack in this program, 2: a kernel one}
    and the maps of this process, read now (after every record's time: filed under its generation
    as the window counts it then)."""
    directory = tmp_path / "capture"
    directory.mkdir()
    write_capture(directory, [], {1: [user_address()], 2: [0xFFFFFFFF81000000]})
    table = shutil.copyfile(directory / BPF_STACKS, tmp_path / "stack-table")
    return LiveWindow(directory, SavedStacks(table), load(directory))  # type: ignore[arg-type]


def forks_and_execs(window: LiveWindow) -> list[tuple[int, int, int]]:
    """(pid, kind, µs) of the forks and execs it holds."""
    return [(int(row["pid"]), int(row["kind"]), (int(row["since_ns"]) - at(0)) // 1000) for row in window.begins]


def first_interval() -> np.ndarray:
    """0-1000 µs: GONE forks at 100, execs at 150, waits 200-300, exits at 400 (and its pid is
    free now); this process's pid was had by a process forked at 100 and by another forked at 500
    (a pid used again: the one now)."""
    return np.concatenate([
        of(GONE, record(FORK, GONE, 100)), of(GONE, record(COMM, GONE, 150, state=EXEC)),
        of(GONE, record(WAIT, GONE, 200, back_us=300, state=S)), of(GONE, record(EXIT, GONE, 400)),
        of(PID, record(FORK, PID, 100)), of(PID, record(FORK, PID, 500))])


def test_the_forks_and_execs_of_processes_out_of_the_window_go(tmp_path: Path) -> None:
    window = window_of(tmp_path)
    window.add(first_interval(), np.zeros(0, RECORD), at(1_000))
    # Given a second interval, 1000-2000 µs, with a wait of another process alone (no fork of it)
    window.add(of(OTHER, record(WAIT, OTHER, 1_200, back_us=1_300, state=S)), np.zeros(0, RECORD), at(2_000))
    window.slide(1_000 * 1000)  # the window: the second interval alone, from 1000 µs + 1 ns
    assert [interval.first_ns for interval in window.intervals] == [at(1_000) + 1]
    window.let_go()
    # Then GONE's fork and exec go: it began before the window, no record of the window is of it,
    # and its pid is free. Of this process's pid, the fork at 100 goes (the process it made was
    # gone when the fork at 500 used the pid again); the fork at 500 stays: its process lives.
    assert forks_and_execs(window) == [(PID, FORK, 500)]


def test_a_process_that_woke_a_thread_in_the_window_keeps_its_forks_and_execs(tmp_path: Path) -> None:
    window = window_of(tmp_path)
    window.add(first_interval(), np.zeros(0, RECORD), at(1_000))
    # Given a second interval whose one wait, of OTHER, was ended by a wakeup from GONE at 350
    # (before its exit at 400; the woken thread came back on CPU at 1300)
    woken = of(OTHER, record(WAIT, OTHER, 200, woken_us=350, back_us=1_300, state=S, waker=GONE), waker_pid=GONE)
    window.add(woken, np.zeros(0, RECORD), at(2_000))
    window.slide(1_000 * 1000)
    window.let_go()
    # Then GONE's fork and exec stay (its waker's stack is named by the generation they count:
    # one fork and one exec before 350, its second), and this process's fork at 100 goes
    assert forks_and_execs(window) == [(GONE, FORK, 100), (GONE, COMM, 150), (PID, FORK, 500)]


def test_a_process_whose_generations_are_counted_anew_is_named_again(tmp_path: Path) -> None:
    window = window_of(tmp_path)
    # Given this process's wait at 600-700 with the user stack 1 (after both forks of its pid: its
    # second generation), and its maps read now (filed under its second generation too)
    wait = of(PID, record(WAIT, PID, 600, back_us=700, state=S, stacks=(2, 1)))
    window.add(np.concatenate([first_interval(), wait]), np.zeros(0, RECORD), at(1_000))
    assert window.model() is not None
    [before] = [chain for chain in window.named if isinstance(chain, tuple)]
    assert before[:4] == (2, 1, PID, 2)
    named_before = window.named[before]
    assert any(frame != UNKNOWN for frame in named_before.frames[named_before.kernel_frames:])
    # When the intervals after it (with OTHER's wait alone) slide the first out, and the window lets go
    window.add(of(OTHER, record(WAIT, OTHER, 1_200, back_us=1_300, state=S)), np.zeros(0, RECORD), at(2_000))
    window.slide(1_000 * 1000)
    window.let_go()
    # Then the fork at 100 went, and with it the chains named by this process's generations
    assert forks_and_execs(window) == [(PID, FORK, 500)]
    assert not any(isinstance(chain, tuple) and chain[2] == PID for chain in window.named)
    # and the same wait again, at 2100-2200, is of its first generation now (one fork before it),
    # named with the same frames: its maps were filed again under the generation counted anew
    window.add(of(PID, record(WAIT, PID, 2_100, back_us=2_200, state=S, stacks=(2, 1))), np.zeros(0, RECORD),
               at(3_000))
    assert window.model() is not None
    [after] = [chain for chain in window.named if isinstance(chain, tuple) and chain[2] == PID]
    assert after[:4] == (2, 1, PID, 1)
    assert window.named[after] == named_before


def test_chains_the_window_no_longer_uses_are_let_go(tmp_path: Path) -> None:
    window = window_of(tmp_path)
    # Given OTHER's wait with the stacks 2 and 1 in the first interval, named by its model
    window.add(of(OTHER, record(WAIT, OTHER, 100, back_us=200, state=S, stacks=(2, 1))), np.zeros(0, RECORD),
               at(1_000))
    assert window.model() is not None
    assert [chain[:3] for chain in window.named if isinstance(chain, tuple)] == [(2, 1, OTHER)]
    # When a second interval with a wait of no stack slides it out of the window
    window.add(of(OTHER, record(WAIT, OTHER, 1_200, back_us=1_300, state=S)), np.zeros(0, RECORD), at(2_000))
    window.slide(1_000 * 1000)
    assert window.model() is not None
    # Then its chain is named no more (it would be named again if it came back)
    assert not [chain for chain in window.named if isinstance(chain, tuple)]



def test_the_chains_no_slice_holds_go_and_the_rest_are_numbered_anew(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(live_window, "CHAINS_BEFORE_LETTING_GO", 0)  # at every let_go
    window = window_of(tmp_path)
    # Given OTHER's wait with the stacks 2 and 1 in the first interval; in the second, OTHER's wait
    # with the kernel stack alone (100 µs) and this process's with both (200 µs)
    window.add(of(OTHER, record(WAIT, OTHER, 100, back_us=200, state=S, stacks=(2, 1))), np.zeros(0, RECORD),
               at(1_000))
    window.add(np.concatenate([of(OTHER, record(WAIT, OTHER, 1_200, back_us=1_300, state=S, stacks=(2, NO_STACK))),
                               of(PID, record(WAIT, PID, 1_400, back_us=1_600, state=S, stacks=(2, 1)))]),
               np.zeros(0, RECORD), at(2_000))
    assert window.model() is not None
    assert [chain[:3] for chain in window.chains if isinstance(chain, tuple)] == [
        (2, 1, OTHER), (2, NO_STACK, 0), (2, 1, PID)]
    # When the first slides out and the window lets go
    window.slide(1_000 * 1000)
    window.let_go()
    model = window.model()
    # Then the chains are the second interval's two, numbered in their order, and each wait is
    # still under its own: OTHER's with no user frames, this process's with them
    assert model is not None
    assert [chain[:3] for chain in window.chains if isinstance(chain, tuple)] == [(2, NO_STACK, 0), (2, 1, PID)]
    assert window.chains_kept == 2
    rows = {row.tid: (row.offcpu_us, model.stacks[row.stack]) for row in model.rows}
    assert rows[OTHER][0] == 100 and rows[OTHER][1].kernel_frames == len(rows[OTHER][1].frames)
    assert rows[PID][0] == 200 and rows[PID][1].kernel_frames < len(rows[PID][1].frames)


def test_a_process_with_a_wait_open_in_the_window_keeps_its_forks_and_execs(tmp_path: Path) -> None:
    window = window_of(tmp_path)
    window.add(first_interval(), np.zeros(0, RECORD), at(1_000))
    # Given a second interval at whose end a thread of this process has waited since 600, still
    # open (no record of it taken yet: the waits open are read as records with no switch-in)
    still_open = of(PID, record(WAIT, PID, 600, state=S))
    window.add(np.zeros(0, RECORD), still_open, at(2_000))
    window.slide(1_000 * 1000)
    window.let_go()
    # Then both of this process's forks stay (the wait's generation is counted from them: its
    # second), and GONE's fork and exec go
    assert forks_and_execs(window) == [(PID, FORK, 100), (PID, FORK, 500)]
