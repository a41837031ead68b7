"""A real program nobody here wrote, CPython writing to SQLite in autocommit (an fdatasync a row),
recorded for under a second with the default backend (BPF) and a stack budget of 20 a second on
each CPU, so that most of its waits carry no stack (issue 35, part 6). Before, the waits in D of
strata with no stack taken (whatever thread ran when the disk's interrupt came ended each few of
them) were a finding's evidence as `[stack not sampled]`, under "waiting for work"."""

from __future__ import annotations

import json

import pytest

from offcpu.stacks import BEFORE_WINDOW, STACK_NOT_TAKEN
from tests.conftest import run_offcpu

DEBIANS_PYTHON = "/usr/bin/python3"  # (python3-venv, scripts/setup) with Debian's SQLite
WRITER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("create table t(a integer, b text)")
end = time.monotonic() + 0.8
while time.monotonic() < end:
    db.execute("insert into t values(1, ?)", ("row " * 8,))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The JSON report of the recording (the database on the disk under the tests' temporary directory)."""
    directory = tmp_path_factory.mktemp("unsampled")
    recorded = run_offcpu("record", "--stack-budget", "20", "-o", str(directory / "capture"), "--",
                          DEBIANS_PYTHON, "-I", "-c", WRITER, str(directory / "rows.db"))
    assert recorded.returncode == 0, recorded.stderr
    reported = run_offcpu("report", "json", str(directory / "capture"))
    assert reported.returncode == 0, reported.stderr
    return json.loads(reported.stdout)


def test_the_recording_is_sampled(report: dict) -> None:
    assert report["capture"]["backend"] == "bpf"
    assert report["sampling"]["stacked_waits"] < report["sampling"]["waits"] / 2, report["sampling"]


def test_no_findings_evidence_is_a_wait_without_a_stack(report: dict) -> None:
    shown = [(finding["id"], site["frames"]) for finding in report["findings"] for site in finding["evidence"]]
    assert shown and not [(finding, frames) for finding, frames in shown if STACK_NOT_TAKEN in frames]


def test_the_writers_waits_in_d_are_disk_io_and_none_idle(report: dict) -> None:
    [uninterruptible] = [state for state in report["states"] if state["state"] == "D"]
    found = {finding["id"]: finding for finding in report["findings"]}
    assert found["io_wait"]["offcpu_us"] >= 0.95 * uninterruptible["offcpu_us"], (found["io_wait"], uninterruptible)
    # (but for the command's wait for offcpu to let it go, held before its exec until recording
    # began: in D, under way when the recording began, and ended by offcpu, as it was in 1 run of 7)
    assert "D" not in [site["state"] for site in found.get("idle", {"evidence": []})["evidence"]
                       if site["frames"] != [BEFORE_WINDOW]]
