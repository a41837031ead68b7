"""What a capture directory holds is not taken on trust: capture.json's values must be
possible, perf.data must be the recording capture.json describes (its own header says
how perf recorded it), and a saved model.json is used only for the perf.data it was
built from (its size and a hash of its header), never for another one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, assert_one_line_error, run_offcpu


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
    ("process_titles", {"x": "postgres: idle"}), ("process_titles", {"7": 3}),
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


@pytest.mark.parametrize("kallsyms", [b"copy", b"# build-id 4a5\n", b"random"])
def test_a_kallsyms_without_offcpus_first_line_is_left_out(example_capture, copy, kallsyms):
    # Given a capture whose kallsyms does not start with the '# build-id' line offcpu writes (a copy of
    # /proc/kallsyms, an odd number of digits, random bytes)
    expected = json.loads(run_offcpu("report", "json", str(example_capture("futex_contention"))).stdout)
    saved = (copy / "kallsyms").read_bytes()
    damaged = {b"copy": saved.partition(b"\n")[2], b"random": os.urandom(len(saved))}.get(kallsyms, kallsyms + saved)
    (copy / "kallsyms").write_bytes(damaged)
    # Then reports and checks read the capture as if it had none: on this machine, which runs the kernel
    # recorded, its kernel frames are named from the running kernel's symbols, as they were
    report = run_offcpu("report", "json", str(copy))
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["stacks"] == expected["stacks"]
    (copy / "model.json").unlink()
    check = run_offcpu("check", str(copy))
    assert check.returncode in (0, 1) and "Traceback" not in check.stderr, check.stderr


@pytest.fixture
def shared_directory() -> Iterator[Path]:
    """A directory anybody may enter (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="offcpu-shared-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(OFFCPU), *args],
                          capture_output=True, text=True, timeout=120, cwd="/")


@pytest.mark.parametrize("directory_mode", [0o700, 0o755])
def test_a_capture_the_user_cannot_read_is_one_line(copy, shared_directory, directory_mode):
    # Given root's capture (its files 0600), in a directory others may enter or not
    capture = shared_directory / "cap"
    shutil.copytree(copy, capture)
    capture.chmod(directory_mode)
    # Then a user who cannot read it is told so in one line by reports and check alike
    for args in (["report", "text"], ["report", "json"], ["check"]):
        assert_one_line_error(as_nobody(*args, str(capture)), str(capture), "Permission denied")
