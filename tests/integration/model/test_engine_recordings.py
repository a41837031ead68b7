"""The engine on real recordings where the target's threads do little: they must still count."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import run_offcpu


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
    # its one wait has the stack it slept in, read from the live process at the end
    assert stack.startswith("sleep;[asleep all the recording];") and stack.endswith(";hrtimer_nanosleep"), stack
    assert int(microseconds) >= 450_000


def test_threads_that_churn_add_up(example_capture):
    # Given thread_churn, thousands of threads that live microseconds, recorded as a command
    capture = example_capture("thread_churn")
    data = model(capture)
    info = data["capture"]
    wall_us = (data["window_end_ns"] - data["window_start_ns"]) / 1000
    threads = data["threads"]
    # Then no thread is on and off CPU for longer than the window, and all of them
    # together were not on CPU longer than the machine's CPUs could run them
    for thread in threads:
        assert thread["oncpu_us"] + thread["offcpu_us"] <= 1.02 * wall_us, thread
    assert sum(thread["oncpu_us"] for thread in threads) <= 1.02 * info["cpus"] * wall_us
    # and every thread the program created was seen to be created and to exit: the
    # command started once the events were on, and ended before the recording did
    program = [thread for thread in threads if thread["pid"] == info["target"]["pid"]]
    created = [thread for thread in program if thread["created_ns"] is not None]
    assert len(created) == len(program) - 1 > 1000  # all but the main thread
    assert all(thread["exited_ns"] is not None for thread in program)
