"""Causes outside the waiting thread, on programs nobody here wrote, recorded as a new user
records them (the default backend, BPF, through the installed command) and read in the JSON
report: tar behind the gzip it pipes into, CPython threads sleeping holding a threading.Lock,
Java threads sleeping inside a synchronized block, and compileall's processes on 2 CPUs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import example, run_offcpu

SEVERE = ("warning", "critical")
STDLIB = Path("/usr/lib/python3.11")
# Enough of the standard library for compileall -j 4 to run about a second on 2 CPUs
PACKAGES = ("email", "json", "asyncio", "xml", "unittest", "logging", "http", "urllib")


def recorded(capture: Path, *command: str, seconds: float = 3, cwd: Path | None = None) -> list[dict]:
    """The findings of a recording of `command` (cut at `seconds`) with the default backend."""
    result = run_offcpu("record", "-d", str(seconds), "-o", str(capture), "--", *command, cwd=cwd)
    assert result.returncode == 0, result.stderr
    report = run_offcpu("report", "json", str(capture))
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["capture"]["backend"] == "bpf"  # (falling back to perf here fails, as in CI it must)
    return data["findings"]


def severe(found: list[dict]) -> list[dict]:
    return [finding for finding in found if finding["severity"] in SEVERE]


def test_tar_is_held_back_by_the_gzip_it_pipes_into(tmp_path: Path) -> None:
    found = recorded(tmp_path / "cap", "tar", "czf", str(tmp_path / "out.tgz"), "-C", str(STDLIB.parent),
                     STDLIB.name, seconds=1)
    top = found[0]
    assert (top["id"], top["severity"]) == ("busy_peer", "critical"), top["summary"]
    assert top["subject"].startswith("gzip (") and re.search(r"it sets (its|their) pace", top["summary"])
    assert "idle" not in {finding["id"] for finding in severe(found)}


@pytest.mark.parametrize(("program", "twin"), [
    (("python_lock", "-t", "4", "-s", "1"), ("python_lock", "-t", "4", "-s", "1", "-o")),
    (("java_monitor_sleep", "-t", "4", "-s", "1.5"), ("java_monitor_sleep_fixed", "-t", "4", "-s", "1.5")),
])
def test_threads_sleeping_holding_a_lock_contend_for_it_and_the_twins_do_not(
        tmp_path: Path, program: tuple[str, ...], twin: tuple[str, ...]) -> None:
    name, *arguments = program
    top = severe(recorded(tmp_path / "cap", str(example(name)), *arguments))[0]
    # CPython's lock is a semaphore its waiters post (a lock, told by its release); HotSpot's
    # monitor lets the next go through a condition variable (a queue where they take turns)
    assert top["id"] in ("lock_contention", "serialization") and top["severity"] == "critical", top["summary"]
    assert "a blocking call" in top["summary"] and "a timer (a sleep or a timeout)" in top["summary"]
    assert top["remedy"].startswith("Make no blocking call while holding the lock")
    twin_name, *twin_arguments = twin
    assert severe(recorded(tmp_path / "twin", str(example(twin_name)), *twin_arguments)) == []


def test_processes_fighting_for_the_cpus_are_cpu_saturation(tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    for package in PACKAGES:
        shutil.copytree(STDLIB / package, sources / package, ignore=shutil.ignore_patterns("__pycache__"))
    found = recorded(tmp_path / "cap", "/usr/bin/python3", "-m", "compileall", "-q", "-j", "4", str(sources))
    assert (found[0]["id"], found[0]["severity"]) == ("runqueue", "critical"), found[0]["summary"]
    assert "serialization" not in {finding["id"] for finding in severe(found)}
