"""Threads that never run while recording: their stacks read from the live process at the
end, on examples/deadlock (two threads on two mutexes in opposite orders, one behind them,
one idle on a condition variable, the main thread asleep) and its fixed twin."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import run_offcpu

SETTLED_S = 0.3  # the example's threads have taken their first mutexes after 0.05 s, late its wait after 0.1 s


def findings(capture: Path) -> dict[str, dict]:
    report = run_offcpu("report", "json", str(capture))
    assert report.returncode == 0, report.stderr
    return {finding["id"]: finding for finding in json.loads(report.stdout)["findings"]}


def record(workload, tmp_path: Path, *program: str, snapshot: bool = True) -> Path:  # type: ignore[no-untyped-def]
    running = workload(*program, threads=5)
    time.sleep(SETTLED_S)
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(running.pid), "-d", "1", "-o", str(capture),
                        *(() if snapshot else ("--no-snapshot",)))
    assert result.returncode == 0, result.stderr
    assert running.alive()  # the snapshot's brief ptrace stop left it running
    return capture


def test_a_deadlock_is_found_in_the_stacks_the_threads_slept_in(workload, tmp_path: Path) -> None:
    # Given the deadlock example, deadlocked, recorded for 1 s: perf records nothing of it
    capture = record(workload, tmp_path, "deadlock", "-s", "30")
    info = json.loads((capture / "capture.json").read_text())
    assert info["samples"] == 0
    # Then the stacks of its 5 threads, read at the end, name the deadlock and who waits for whom
    found = findings(capture)
    deadlock = found["deadlock"]
    assert deadlock["severity"] == "critical" and deadlock["threads"] == 3
    assert "left (" in deadlock["summary"] and "which waits for one held by left (" in deadlock["summary"]
    assert "1 more thread waits behind them (late (" in deadlock["summary"]
    # the thread waiting on a condition variable and the sleeping main thread wait for work
    assert found["idle"]["threads"] == 2 and set(found) == {"deadlock", "idle"}
    # and offcpu check fails on it (it used to say there was nothing to check)
    checked = run_offcpu("check", str(capture))
    assert checked.returncode == 1 and "deadlock" in checked.stdout, checked.stdout + checked.stderr


def test_threads_behind_a_holder_that_sleeps_are_stuck(workload, tmp_path: Path) -> None:
    capture = record(workload, tmp_path, "deadlock", "-s", "30", "-H", "1")
    found = findings(capture)
    stuck = found["stuck"]
    assert stuck["severity"] in ("warning", "critical") and stuck["threads"] == 2
    assert "held by left (" in stuck["summary"] and "itself asleep all the recording" in stuck["summary"]
    assert "deadlock" not in found


def test_the_fixed_twin_is_neither_stuck_nor_deadlocked(workload, tmp_path: Path) -> None:
    running = workload("deadlock_fixed", "-s", "30", threads=6)  # main, the timer, waiter and 3 workers
    capture = tmp_path / "cap"
    assert run_offcpu("record", "--pid", str(running.pid), "-d", "1", "-o", str(capture)).returncode == 0
    found = findings(capture)
    assert not {"deadlock", "stuck"} & found.keys(), found.keys()


@pytest.mark.parametrize("option", ["--no-snapshot"])
def test_no_snapshot_takes_no_stack(workload, tmp_path: Path, option: str) -> None:
    capture = record(workload, tmp_path, "deadlock", "-s", "30", snapshot=False)
    assert not (capture / "snapshot.json").exists()
    found = findings(capture)
    assert set(found) == {"idle"} and found["idle"]["threads"] == 5  # as before snapshots: no stack to tell
