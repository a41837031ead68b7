"""Captures from anywhere: a file of a capture that is a FIFO, a link to a device or a sparse
20 GB file, records whose fields are out of the kernel's range, JSON nested past any limit or
of the wrong types. Each report ends at once with a report (what it could not read is left out
and said) or with one line saying what is wrong (exit 2); never a hang, a traceback or exit 1."""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from offcpu.errors import OffcpuError
from offcpu.reading.bpf_reader import RECORD, WAIT
from offcpu.reading.describe import describe
from tests.conftest import assert_one_line_error, example, run_offcpu
from tests.hostile_files import PLANTS, device, sparse

QUICK_S = 20  # a report of a small capture, whatever its files are
MAX_RSS_KB = 1 << 20  # 1 GiB: /dev/zero as bpf-stacks.bin took 3.4 GB before
# The files a report cannot do without: anything but a regular file of their size there is an error
NEEDED = {"capture.json", "bpf-records.bin", "bpf-stacks.bin", "perf.data"}


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """lock_chain recorded for 0.3 s with each backend, reported once (model.json saved)."""
    made = {}
    for backend in ("bpf", "perf"):
        made[backend] = tmp_path_factory.mktemp(backend) / "cap"
        recorded = run_offcpu("record", "--backend", backend, "-o", str(made[backend]), "-d", "0.3", "--",
                              str(example("lock_chain")), "-t", "4", "-u", "1000", "-s", "0.2")
        assert recorded.returncode == 0, recorded.stderr
        assert run_offcpu("report", "text", str(made[backend])).returncode == 0
    return made


@pytest.fixture
def copy(captures: dict[str, Path], tmp_path: Path):  # noqa: ANN201
    def copied(backend: str) -> Path:
        return Path(shutil.copytree(captures[backend], tmp_path / backend))

    return copied


def report(capture: Path):  # noqa: ANN201
    return run_offcpu("report", "text", str(capture), timeout=QUICK_S)


@pytest.mark.parametrize("plant", PLANTS)
@pytest.mark.parametrize(("backend", "name"), [
    ("bpf", "capture.json"), ("bpf", "bpf-records.bin"), ("bpf", "bpf-stacks.bin"), ("bpf", "bpf-maps.json"),
    ("bpf", "perf-maps.json"), ("bpf", "snapshot.json"), ("bpf", "kallsyms"), ("bpf", "vdso"), ("bpf", "model.json"),
    ("perf", "perf.data"), ("perf", "snapshot.json"), ("perf", "model.json")])
def test_a_file_that_is_no_regular_file_of_its_size_is_never_waited_on_nor_read(copy, backend, name, plant):
    capture = copy(backend)
    (capture / "model.json").unlink()  # every file is read
    (capture / name).unlink(missing_ok=True)
    plant(capture / name)
    started = time.monotonic()
    result = report(capture)
    # at once, and in bounded memory (the largest child's so far: none of the others takes 1 GiB)
    assert time.monotonic() - started < QUICK_S / 2
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < MAX_RSS_KB
    if name in NEEDED or (plant is sparse and name == "kallsyms"):
        # what cannot be left out: said in one line (a FIFO or a device at capture.json: no capture there)
        assert_one_line_error(result, name)
    elif plant is sparse and name == "vdso" and result.returncode:  # read when a frame is in the vdso
        assert_one_line_error(result, name)
    else:  # left out: snapshot.json, bpf-maps.json (said in the report), perf-maps.json, model.json (built again)
        assert result.returncode == 0, result.stderr
        assert "Off-CPU time of" in result.stdout


def test_a_fifo_given_as_the_capture_is_refused(tmp_path):
    os.mkfifo(tmp_path / "perf.data")
    assert_one_line_error(report(tmp_path / "perf.data"), "not a capture directory")


@pytest.mark.parametrize(("field", "value"), [("cpu", 0xFFFFFFFF), ("waker_pid", 0x80000000), ("tid", 0xFFFFFFFF),
                                              ("since_ns", 1 << 63), ("weight_shift", 0xFFFF)])
def test_a_bpf_record_out_of_the_kernels_range_says_the_capture_is_damaged(copy, field, value):
    capture = copy("bpf")
    (capture / "model.json").unlink()
    records = np.fromfile(capture / "bpf-records.bin", RECORD)
    records[field][np.flatnonzero(records["kind"] == WAIT)[0]] = value
    records.tofile(capture / "bpf-records.bin")
    assert_one_line_error(report(capture), "the capture is damaged", field, f"{value:,}")


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_capture_json_nested_past_any_limit_is_refused_in_one_line(copy):
    capture = copy("bpf")
    (capture / "capture.json").write_text(nested(100_000))
    assert_one_line_error(report(capture), "capture.json", "nested too deeply")


@pytest.mark.parametrize("name", ["bpf-maps.json", "perf-maps.json", "snapshot.json"])
def test_a_nested_file_the_report_can_do_without_is_left_out(copy, name):
    capture = copy("bpf")
    (capture / "model.json").unlink()
    (capture / name).write_text(nested(100_000))
    result = report(capture)
    assert result.returncode == 0, result.stderr
    if name == "bpf-maps.json":
        assert "no readable bpf-maps.json" in " ".join(result.stdout.split())


@pytest.mark.parametrize("backend", ["bpf", "perf"])
def test_a_model_json_of_wrong_types_is_built_again(copy, backend):
    capture = copy(backend)
    saved = json.loads((capture / "model.json").read_text())
    expected = report(capture).stdout
    for key, value in (("links", [[0, 0, None, "x"]]), ("threads", [{**saved["threads"][0], "oncpu_us": "x"}]),
                       ("window_start_ns", "x"), ("runqueue_delays_us", [["x", 1]]),
                       ("timeline", [[*saved["timeline"][0][:2], 1, "x", 2, None]])):
        (capture / "model.json").write_text(json.dumps({**saved, key: value}))
        result = report(capture)
        assert result.returncode == 0 and result.stdout == expected, (key, result.stderr)
        assert json.loads((capture / "model.json").read_text())[key] == saved[key]  # saved again, whole


def test_perf_data_is_made_private_through_the_file_never_a_link_at_its_name(copy, tmp_path, perf):
    """A link planted at perf.data while perf recorded: its target's mode is left as it was."""
    capture = copy("perf")
    victim = tmp_path / "victim"
    victim.write_text("someone else's")
    victim.chmod(0o644)
    os.replace(capture / "perf.data", tmp_path / "perf.data")
    (capture / "perf.data").symlink_to(victim)
    from offcpu.capture import load

    with pytest.raises(OffcpuError, match="replaced it while perf recorded"):
        describe(capture / "perf.data", load(capture))
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


@pytest.mark.parametrize("plant", PLANTS)
def test_a_baseline_that_is_no_regular_file_of_its_size_is_refused(captures, tmp_path, plant):
    planted = tmp_path / "planted"
    plant(planted)
    checked = run_offcpu("check", str(captures["perf"]), "--baseline", str(planted), timeout=QUICK_S)
    assert_one_line_error(checked, "cannot read the baseline", str(planted))


@pytest.mark.parametrize("plant", [device, sparse])
def test_a_folded_file_that_is_a_device_or_too_large_is_refused(captures, tmp_path, plant):
    planted = tmp_path / "planted"
    plant(planted)
    compared = run_offcpu("report", "diff", str(planted), str(captures["perf"]), "-o", str(tmp_path / "d.svg"),
                          timeout=QUICK_S)
    assert_one_line_error(compared, f"cannot read {planted}")


def test_a_folded_file_from_a_pipe_is_read(captures, tmp_path):
    # Given the folded stacks of a capture, written into a FIFO as a shell's <(command) would
    folded = run_offcpu("report", "folded", str(captures["perf"]))
    assert folded.returncode == 0, folded.stderr
    pipe = tmp_path / "folded"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text(folded.stdout))
    writer.start()
    # Then report diff reads it to its end, as it would a file
    compared = run_offcpu("report", "diff", "--text", str(pipe), str(captures["perf"]), timeout=QUICK_S)
    writer.join()
    assert compared.returncode == 0, compared.stderr
