"""The real programs of tests/programs.py start, get loaded, are recorded
through the installed offcpu command, and stop without leaving anything behind.
What is checked is each workload's own facts (its threads, its load, the
requests served, its CPU use) by the kernel's counters, perf's own reading of
the capture and the programs' own output: never offcpu's findings."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests import programs
from tests.conftest import run_offcpu
from tests.programs import started

RECORD_S = 1.0
PROGRAMS = [name for name in programs.WORKLOADS if name not in ("memcached", "nginx")]


def recorded_threads(capture: Path) -> dict[int, int]:
    """tid -> pid of the threads perf itself reads in the capture's samples (recorded with perf)."""
    done = subprocess.run(["perf", "script", "-i", str(capture / "perf.data"), "-F", "pid,tid"],
                          capture_output=True, text=True, check=True)
    return {int(tid): int(pid) for pid, tid in (line.split("/") for line in done.stdout.split())}


def record(running: programs.Running, capture: Path) -> programs.Usage:
    """Record the workload for RECORD_S through offcpu; what its workers did meanwhile, by the kernel."""
    before, start = programs.snapshot(running.service_pids), time.monotonic()
    result = run_offcpu("record", "--backend", "perf", *running.record_target, "-d", str(RECORD_S), "-o",
                        str(capture))
    workers = programs.usage_between(before, programs.snapshot(running.service_pids), time.monotonic() - start,
                                     running.worker_tids)
    assert result.returncode == 0, result.stderr
    return workers


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_is_recorded_with_its_worker_threads(name, tmp_path):
    # Given a contended program, or its twin, running with its worker threads
    with started(name) as running:
        assert set(running.worker_tids) <= set(programs.thread_names(running.pid)) and running.worker_tids
        # When offcpu records its process
        workers = record(running, tmp_path / "cap")
        # Then the program is still running, and its workers ran while it was recorded
        assert programs.process_exists(running.pid)
        assert workers.threads == len(running.worker_tids) and workers.oncpu_s > 0
    # and perf reads its worker threads, and no thread of another process, in the capture
    recorded = recorded_threads(tmp_path / "cap")
    assert recorded.keys() & set(running.worker_tids)
    assert set(recorded.values()) == {running.pid}
    assert json.loads((tmp_path / "cap" / "capture.json").read_text())["target"]["pid"] == running.pid
    # and nothing of it is left
    assert not programs.process_exists(running.pid) and not running.directory.exists()


def test_ruby_threads_share_one_cpu_through_the_interpreter_lock(tmp_path):
    # Given 8 Ruby threads doing pure-Ruby work
    with started("ruby_gvl") as running:
        # When they are recorded
        workers = record(running, tmp_path / "cap")
    # Then, holding the interpreter lock in turn, they use one CPU at most together, on 2 or more
    assert len(running.worker_tids) == 8
    assert workers.cpus <= 1.2, workers


@pytest.mark.parametrize("name", ["memcached", "nginx"])
def test_a_server_under_load_is_recorded_with_its_clients(name, tmp_path):
    # Given a server serving requests from its load generator
    with started(name) as running:
        assert running.requests is not None and running.load_pid is not None
        served = running.requests()
        # When the whole machine is recorded
        workers = record(running, tmp_path / "cap")
        # Then it went on serving, its workers ran, and all of it still runs
        assert running.requests() > served
        assert workers.oncpu_s > 0
        assert all(programs.process_exists(pid) for pid in (*running.service_pids, running.load_pid))
        load_tids = set(programs.thread_names(running.load_pid))
    # and perf reads both its serving threads and the load generator's in the capture
    recorded = recorded_threads(tmp_path / "cap").keys()
    assert recorded & set(running.worker_tids)
    assert recorded & load_tids
    # and nothing of it is left
    assert not any(programs.process_exists(pid) for pid in (*running.service_pids, running.load_pid))
    assert not running.directory.exists()


def test_lock_chain_prints_its_own_clock_for_the_recorded_run(tmp_path):
    # When lock_chain's whole run is recorded as offcpu's command
    run = programs.record_run("lock_chain", tmp_path / "cap", 1.0, "-t", "4")
    # Then its summary gives its own clock over the window offcpu recorded
    assert run.result.returncode == 0, run.result.stderr
    info = json.loads((tmp_path / "cap" / "capture.json").read_text())
    window_s = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    assert abs(float(run.summary["wall_s"]) - window_s) < 0.25, (run.summary, window_s)
    # every record was made durable under the lock, and the others waited for it
    assert run.summary["call"] == "fsync"
    assert int(run.summary["held_calls"]) == int(run.summary["ops"]) > 0
    assert 0 < float(run.summary["held_s"]) <= float(run.summary["wall_s"])
    assert int(run.summary["lock_waits"]) > 0 and float(run.summary["lock_wait_s"]) > 0
    assert int(run.summary["free_calls"]) == 0
