"""A capture whose perf.data offcpu could not read enough of: every report says first that
its numbers cannot be trusted, and check cannot check (exit 2), never passes.

perf prints nothing offcpu cannot read on purpose (every kind of event it prints is read),
so the saved model of a real capture, made to count unreadable events as a model built by
an offcpu that could not read them would, stands in for such a perf.data."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import assert_one_line_error, run_offcpu


@pytest.fixture
def unreadable_capture(example_capture, tmp_path):
    """A copy of a real capture of futex_contention, its model counting 1% of its events unread."""
    capture = tmp_path / "cap"
    shutil.copytree(example_capture("futex_contention"), capture)
    assert run_offcpu("report", "json", str(capture)).returncode == 0  # saves model.json
    saved = json.loads((capture / "model.json").read_text())
    saved["unreadable_events"] = (saved["capture"]["samples"] + saved["capture"]["switch_records"]) // 100
    (capture / "model.json").write_text(json.dumps(saved))
    return capture


def test_check_cannot_check_it(unreadable_capture, tmp_path):
    summary = tmp_path / "summary.md"
    result = run_offcpu("check", str(unreadable_capture), env={"PATH": "/usr/bin:/bin",
                                                                "GITHUB_STEP_SUMMARY": str(summary)})
    assert_one_line_error(result, "could not check", "could not be read", "cannot be trusted")
    assert "PASS" not in result.stdout and "could not check" in summary.read_text()


def test_every_report_says_first_that_its_numbers_cannot_be_trusted(unreadable_capture, tmp_path):
    text = run_offcpu("report", "text", str(unreadable_capture))
    assert text.returncode == 0 and text.stdout.startswith("WARNING: ") and "cannot be trusted" in text.stdout
    report = json.loads(run_offcpu("report", "json", str(unreadable_capture)).stdout)
    assert "cannot be trusted" in report["caveats"][0] and report["counts"]["unreadable_share"] > 0.009
    page = tmp_path / "page.html"
    assert run_offcpu("report", "html", str(unreadable_capture), "-o", str(page)).returncode == 0
    assert page.read_text().split("</h1>\n", 1)[1].startswith('<p class="alarm"><b>Warning:</b> ')
    folded = run_offcpu("report", "folded", str(unreadable_capture))  # no room for it but stderr
    assert folded.returncode == 0 and "cannot be trusted" in folded.stderr
