"""What a capture directory holds is not taken on trust: capture.json's values must be
possible, perf.data must be the recording capture.json describes (its own header says
how perf recorded it), and a saved model.json is used only for the perf.data it was
built from (its size and a hash of its header), never for another one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_offcpu


@pytest.fixture
def copy(example_capture, tmp_path) -> Path:
    """A copy of a real capture of futex_contention, without its saved model."""
    target = tmp_path / "cap"
    shutil.copytree(example_capture("futex_contention"), target)
    (target / "model.json").unlink(missing_ok=True)
    return target


def edited(capture: Path, **fields: object) -> Path:
    path = capture / "capture.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    return capture


@pytest.mark.parametrize("field, value", [
    ("cpus", -5), ("cpus", 0), ("lost_events", -5), ("samples", -1), ("switch_records", -1),
    ("perf_data_bytes", -1), ("duration_requested_s", 0), ("duration_actual_s", -1.0),
    ("window_start_ns", -1), ("threads_at_start", {"1a": ["x", "S"]}), ("threads_at_start", {"7": "S"}),
    ("processes_at_start", {"7": "1"}), ("processes_at_start", {"x": 7}), ("processes_at_start", {"7": 0}),
    ("events", [{"name": 3}]), ("events_skipped", ["sched:sched_stat_sleep"]),
    ("limits", {"pid": 1, "threads": 2, "limits": [{"name": "x", "used": "many"}]}),
])
def test_an_impossible_value_in_capture_json_is_refused(copy, field, value):
    result = run_offcpu("report", "text", str(edited(copy, **{field: value})))
    assert_one_line_error(result, "capture.json", field, "record it again")


def test_a_target_that_is_not_the_one_recorded_is_refused(copy):
    target = json.loads((copy / "capture.json").read_text())["target"]
    init = {**target, "kind": "pid", "pid": 1, "command": []}
    assert_one_line_error(run_offcpu("report", "text", str(edited(copy, target=init))), "capture.json", "target",
                          "not what perf recorded")


def test_the_perf_data_of_another_recording_is_refused(example_capture, copy):
    # Given another recording's perf.data under this capture's capture.json
    shutil.copy(example_capture("futex_contention_fixed") / "perf.data", copy / "perf.data")
    # Then neither a report nor a check takes one for the other
    for args in (["report", "text"], ["check"]):
        assert_one_line_error(run_offcpu(*args, str(copy)), "perf.data", "another recording")


def test_a_saved_model_is_used_only_for_the_perf_data_it_was_built_from(example_capture, copy):
    # Given this capture's report, and another recording's saved model put beside its perf.data,
    # carrying this perf.data's size and modification time
    expected = json.loads(run_offcpu("report", "json", str(copy)).stdout)
    other = example_capture("futex_contention_fixed")
    assert run_offcpu("report", "json", str(other)).returncode == 0  # saves its model.json
    forged = json.loads((other / "model.json").read_text())
    stat = (copy / "perf.data").stat()
    forged["perf_data"] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    (copy / "model.json").write_text(json.dumps(forged))
    # Then the report is this capture's, read from its perf.data again
    report = json.loads(run_offcpu("report", "json", str(copy)).stdout)
    assert [thread["tid"] for thread in report["threads"]] == [thread["tid"] for thread in expected["threads"]]
    assert report["totals"] == expected["totals"]
