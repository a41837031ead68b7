"""Findings on software nobody here wrote: Debian's Ruby, OpenJDK, RocksDB, SQLite,
memcached and nginx, loaded and recorded through the installed offcpu command
(tests/programs.py starts them). The contended ones must show their own waits on
each other at warning or above, with where they wait and where they are let go;
the uncontended twins and the servers waiting for their clients must not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import programs
from tests.conftest import run_offcpu

# What the program's own waits go to: a lock its frames name, or its threads taking turns.
OWN_WAITS = ("lock_contention", "serialization")
SEVERE = ("warning", "critical")


def report(capture: Path, *options: str) -> dict:
    result = run_offcpu("report", "json", str(capture), *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def busy_findings(capture: Path, *options: str) -> list[dict]:
    return [finding for finding in report(capture, *options)["findings"] if finding["id"] != "idle"]


@pytest.mark.parametrize(("name", "options", "subject"), [
    ("ruby_gvl", (), "Ruby GVL"),  # the interpreter lock, named by the reads of its threads (MRI 3.1)
    ("java_monitor", (), "worker"),  # one synchronized monitor
    ("rocksdb_writers", (), "writer"),  # followers waiting for the write group's leader
    # the busy handler's sleeps: only its frames tell them from sleeping (glibc has no frame pointers)
    ("sqlite_writers", ("--call-graph", "dwarf"), "SQLite database lock"),
])
def test_a_contended_program_shows_its_own_waits(perf: str, tmp_path: Path, name: str, options: tuple[str, ...],
                                                 subject: str) -> None:
    recording = programs.record(name, tmp_path / "cap", 1.0, *options)
    assert recording.result.returncode == 0, recording.result.stderr
    top = busy_findings(recording.capture)[0]
    assert top["id"] in OWN_WAITS and top["severity"] in SEVERE, top["summary"]
    assert subject in top["subject"], top
    # where they wait, and where they are let go (or, waiting with sleeps, what the holders did)
    assert top["evidence"], top
    assert top["release_sites"] or "holding it" in top["summary"], top
    assert top["wakers"] and top["share_of_wall"] >= 0.05


@pytest.mark.parametrize("name", ["ruby_gvl_twin", "java_monitor_twin", "rocksdb_writers_twin", "sqlite_writers_twin",
                                  "memcached", "nginx"])
def test_uncontended_programs_and_servers_waiting_for_clients_are_quiet(perf: str, tmp_path: Path, name: str) -> None:
    recording = programs.record(name, tmp_path / "cap", 1.0)
    assert recording.result.returncode == 0, recording.result.stderr
    # a server is recorded with the whole machine (its clients' wakeups are recorded); its own
    # threads are the ones judged
    pids = ",".join(str(pid) for pid in recording.running.service_pids)
    found = busy_findings(recording.capture, "--pid", pids)
    # Waiting for a CPU is what else the machine runs (a shared test machine can keep one thread
    # waiting half its time): it is not judged here; nothing else reaches a warning.
    assert not [finding for finding in found if finding["severity"] in SEVERE and finding["id"] != "runqueue"], found


@pytest.mark.parametrize(("options", "held_off_cpu", "tolerance"), [
    (("-u", "2000"), "a timer (a sleep or a timeout)", 0.1),  # the holder sleeps 2 ms under the lock
    # the holder calls fsync under the lock: the program cannot tell where in the call its time
    # on CPU falls (it takes it to come first; it is a third of the call here, in several parts
    # between the waits for the data, the journal and the flush), so its own clock is less sure:
    # it was off by 17-23% of itself, either way, in runs that failed at 15%
    ((), "disk I/O", 0.25),
])
def test_the_chain_of_a_lock_held_across_a_slow_call(perf: str, tmp_path: Path, options: tuple[str, ...],
                                                      held_off_cpu: str, tolerance: float) -> None:
    # Given 4 threads on a mutex whose holder sleeps or calls fsync while holding it, and the
    # program's own clock of the waiters' time waiting while the holder was off CPU in that call
    run = programs.record_run("lock_chain", tmp_path / "cap", 1.0, "-t", "4", *options,
                              offcpu_args=("--backend", "perf"))
    assert run.result.returncode == 0 and run.summary, run.result.stderr
    lock_blocked_s, held_waited_s = (float(run.summary[key]) for key in ("lock_blocked_s", "held_waited_s"))
    # (the share of the lock's waits that waited while the holder was off CPU in the slow call)
    expected = held_waited_s / lock_blocked_s
    # Then the lock is named, then the holder's wait, at the root of the waits, near that share
    lock = next(finding for finding in busy_findings(run.capture) if finding["id"] == "lock_contention")
    assert lock["subject"] == "pthread mutex" and lock["severity"] == "critical"
    root = {item["what"]: item["share"] for item in lock["roots"]}
    assert abs(root.get(held_off_cpu, 0.0) - expected) <= tolerance * expected, (root, expected)
    assert lock["chain"][0]["what"] in (f"waited for {held_off_cpu}", "waited for pthread mutex")


def test_threads_handing_a_token_through_a_pipe_hand_work_over(perf: str, tmp_path: Path) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "perf", "-d", "10", "-o", str(capture), "--", "sh", "-c",
                        "exec perf bench sched pipe -T -l 20000 >/dev/null")
    assert result.returncode == 0, result.stderr
    found = busy_findings(capture)
    handoff = next(finding for finding in found if finding["id"] == "handoff")
    assert "through a pipe" in handoff["summary"] and handoff["severity"] == "info"
    assert not [finding for finding in found if finding["id"] in OWN_WAITS and finding["severity"] in SEVERE], found
