"""Threads named to break offcpu (examples/hostile_names: markup, quotes, ';', a tab, newlines,
a carriage return, a cut UTF-8 character, a terminal escape, perf's own field names, no name),
recorded for real, and the program names that go with them."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import example, run_offcpu
from tests.fixtures import HOSTILE_NAMES

pytestmark = pytest.mark.usefixtures("perf")


def test_every_report_reads_every_name(example_capture, tmp_path):
    # Given a recording of threads with hostile names
    capture = str(example_capture("hostile_names"))
    # Then the JSON report has every thread, under the name it gave itself, and nothing unread
    # (but the empty name: the engine takes "" for no name, and keeps the creator's)
    result = run_offcpu("report", "json", capture)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert HOSTILE_NAMES - {""} <= {thread["comm"] for thread in report["threads"]}
    assert report["counts"]["unreadable_events"] == 0 and report["caveats"] == []
    # and every other report and the check run through to their end
    for args in (["text"], ["folded"], ["svg", "-o", str(tmp_path / "graph.svg")],
                 ["html", "-o", str(tmp_path / "page.html")]):
        result = run_offcpu("report", *args, capture)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
    result = run_offcpu("check", capture)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr


def test_a_newline_in_a_program_s_name_does_not_hide_its_contention(tmp_path):
    # Given mmap_contention run under a name with a newline (its threads take that name)
    program = tmp_path / "mm\nap"
    os.symlink(example("mmap_contention"), program)
    verdict = tmp_path / "verdict.json"
    # When it is checked
    result = run_offcpu("check", "-d", "1", "-o", str(tmp_path / "run"), "--json", str(verdict), "--",
                        str(program), "-t", "8", "-s", "5")
    # Then it fails on its mmap_lock, as it does under its own name
    assert result.returncode == 1, result.stdout + result.stderr
    failed = {check["name"] for check in json.loads(verdict.read_text())["checks"] if not check["passed"]}
    assert "mmap_lock not above info" in failed
