"""Threads named to break offcpu (examples/hostile_names: markup, quotes, ';', a tab, newlines,
a carriage return, a cut UTF-8 character, a terminal escape, perf's own field names, no name),
recorded for real, and the program names that go with them."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from offcpu.model.loading import READERS
from tests.conftest import example, run_offcpu
from tests.fixtures import HOSTILE_NAMES

SVG = "{http://www.w3.org/2000/svg}"



def test_every_name_is_read(example_capture):
    # Given a recording of threads with hostile names
    capture = str(example_capture("hostile_names"))
    # Then the JSON report has every thread, under the name it gave itself, and nothing unread,
    # whether perf.data is read directly or through perf script's text (but the empty name: the
    # engine takes "" for no name, and keeps the creator's)
    for reader in READERS:
        result = run_offcpu("report", "json", "--reader", reader, capture)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert HOSTILE_NAMES - {""} <= {thread["comm"] for thread in report["threads"]}, reader
        assert report["counts"]["unreadable_events"] == 0, reader
        assert not [caveat for caveat in report["caveats"] if "could not be read" in caveat], reader
    # and a folded line a stack (a name's newline is written out), and the check runs to its end
    folded = run_offcpu("report", "folded", capture)
    assert folded.returncode == 0 and all(re.fullmatch(r"\S.* \d+", line) for line in folded.stdout.splitlines())
    result = run_offcpu("check", capture)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr


def test_a_newline_in_a_program_s_name_does_not_hide_its_contention(tmp_path):
    # Given mmap_contention run under a name with a newline (its threads take that name)
    program = tmp_path / "mm\nap"
    os.symlink(example("mmap_contention"), program)
    verdict = tmp_path / "verdict.json"
    # When it is checked
    result = run_offcpu("check", "--backend", "perf", "-o", str(tmp_path / "run"), "--json", str(verdict), "--",
                        str(program), "-t", "8", "-s", "1")
    # Then it fails on its mmap_lock, as it does under its own name
    assert result.returncode == 1, result.stdout + result.stderr
    failed = {check["name"] for check in json.loads(verdict.read_text())["checks"] if not check["passed"]}
    assert "mmap_lock not above info" in failed
    # and so does what perf script prints of it, every event read
    report = json.loads(run_offcpu("report", "json", "--reader", "perf-script", str(tmp_path / "run")).stdout)
    assert report["counts"]["unreadable_events"] == 0
    assert {finding["id"]: finding["severity"] for finding in report["findings"]}["mmap_lock"] != "info"


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what must not reach a terminal or a page, but \t and \n
ESCAPE_NAME = "--\x1b[31mred"


def test_no_name_reaches_a_terminal_or_a_page_raw(workload, tmp_path):
    # Given the hostile program running, its main thread named with a terminal escape
    program = workload("hostile_names", "-s", "30", threads=22)
    wait_for_name(program.pid, ESCAPE_NAME.encode())
    capture = tmp_path / "cap"
    # When it is recorded by pid, then reported and checked
    # (with a ring buffer big enough that a loaded machine loses no more than a check allows)
    recorded = run_offcpu("record", "--pid", str(program.pid), "-d", "1", "--mmap-pages", "1024", "-o", str(capture))
    text = run_offcpu("report", "text", "--top", "100", str(capture))  # every thread's row: the names' too
    checked = run_offcpu("check", str(capture))
    graph, page = tmp_path / "graph.svg", tmp_path / "page.html"
    assert run_offcpu("report", "svg", str(capture), "-o", str(graph)).returncode == 0
    assert run_offcpu("report", "html", str(capture), "-o", str(page)).returncode == 0
    # Then the summary names the target with the escape written out, and nothing prints raw
    assert recorded.returncode == 0, recorded.stderr
    assert f"Recorded {ESCAPE_NAME!r}"[:-1].replace("Recorded '", "Recorded ") in recorded.stderr
    for output in (recorded.stderr, text.stdout, text.stderr, checked.stdout, checked.stderr,
                   graph.read_text(), page.read_text()):
        assert not CONTROL.search(output)
    assert text.returncode == 0 and "--\\x1b[31mred" in text.stdout and "tab\\there\\nnl" in text.stdout
    assert checked.returncode in (0, 1), checked.stderr
    # and the flame graph is XML, its frames the escaped names
    frames = {title.text or "" for title in ElementTree.parse(graph).getroot().iter(f"{SVG}title")}
    # (a backslash as a look-alike, ∖, for a renderer that would run it as script: flamegraph.pl)
    assert any(frame.replace("\u2216", "\\").startswith("tab\\there\\nnl ") for frame in frames)
    assert "&lt;script&gt;" in page.read_text() and "--\\x1b[31mred" in page.read_text()


def test_a_process_named_with_a_cut_character_is_recorded_by_pid(workload, tmp_path):
    # Given the hostile program with its main thread, the process, named "ąąąąąąą" and half an 'ą'
    program = workload("hostile_names", "-m", "4", "-s", "30", threads=22)
    wait_for_name(program.pid, b"\xc4\x85" * 7 + b"\xc4")
    # Then offcpu reads the name, with U+FFFD for the half character, to record it and look at it
    recorded = run_offcpu("record", "--pid", str(program.pid), "-d", "0.5", "-o", str(tmp_path / "cap"))
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stderr.startswith(f"Recorded {'ą' * 7}\ufffd (pid {program.pid})")
    doctor = run_offcpu("doctor", "--pid", str(program.pid))
    assert doctor.returncode in (0, 1) and "Traceback" not in doctor.stderr, doctor.stderr


def wait_for_name(pid: int, name: bytes) -> None:
    """Until process `pid` has renamed itself `name` (its main thread does once its workers run)."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/comm").read_bytes() != name + b"\n":
        assert time.monotonic() < deadline, f"pid {pid} did not take its name"
        time.sleep(0.01)


def test_check_outputs_for_github_hold_nothing_raw(example_capture, tmp_path):
    # Given a capture kept where a path holds a terminal escape and a newline
    capture = tmp_path / "run\x1b[2J\nhere"
    shutil.copytree(example_capture("hostile_names"), capture)
    summary = tmp_path / "summary.md"
    # When it is checked on GitHub Actions
    result = run_offcpu("check", str(capture), env={**os.environ, "GITHUB_ACTIONS": "true",
                                                    "GITHUB_STEP_SUMMARY": str(summary)})
    # Then the table and the step summary show the path escaped, and nothing prints raw
    assert result.returncode in (0, 1), result.stderr
    for output in (result.stdout, summary.read_text()):
        assert "run\\x1b[2J\\nhere" in output
    for output in (result.stdout, result.stderr, summary.read_text()):
        assert not CONTROL.search(output)
