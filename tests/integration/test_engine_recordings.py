"""The engine on real recordings where the target's threads do little: they must still count."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import run_offcpu

pytestmark = pytest.mark.usefixtures("perf")


def model(capture) -> dict:
    assert run_offcpu("report", "folded", str(capture)).returncode == 0
    return json.loads((capture / "model.json").read_text())


def test_an_idle_pool_counts_every_thread(workload, tmp_path):
    # Given 16 workers that wait on a condition variable nearly all the time
    program = workload("idle_pool", "-t", "16", "-s", "30")
    capture = tmp_path / "cap"
    assert run_offcpu("record", "--pid", str(program.pid), "-d", "1", "-o", str(capture)).returncode == 0
    # Then all 17 threads are in the model, off CPU nearly all of the window
    data = model(capture)
    wall_us = (data["window_end_ns"] - data["window_start_ns"]) / 1000
    threads = {thread["tid"]: thread for thread in data["threads"]}
    assert set(threads) == program.threads()
    for thread in threads.values():
        assert abs(thread["oncpu_us"] + thread["offcpu_us"] - wall_us) <= 0.02 * wall_us, thread
        assert thread["offcpu_us"] >= 0.9 * wall_us


def test_a_process_that_only_sleeps_is_shown_sleeping(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        capture = tmp_path / "cap"
        assert run_offcpu("record", "--pid", str(sleeper.pid), "-d", "0.5", "-o", str(capture)).returncode == 0
        result = run_offcpu("report", "folded", str(capture))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    stack, _, microseconds = result.stdout.strip().rpartition(" ")
    assert stack == "sleep;[off CPU since before the recording]"
    assert int(microseconds) >= 450_000
