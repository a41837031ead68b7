"""A BPF capture whose records or stack table is a FIFO, a link to a device or a sparse file of
20 GB: its report ends in a few seconds with exit 2 and one line, in bounded memory."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, assert_one_line_error, example, run_offcpu

SPARSE_BYTES = 20 << 30
REPORT_TIMEOUT_S = 10
MAX_RSS_KB = 1 << 20  # 1 GiB: /dev/zero as bpf-stacks.bin took 3.4 GB before


@pytest.fixture(scope="module")
def bpf_capture(tmp_path_factory: pytest.TempPathFactory, recording_perf: str) -> Path:
    capture = tmp_path_factory.mktemp("bpf") / "cap"
    recorded = subprocess.run([str(OFFCPU), "record", "--backend", "bpf", "-o", str(capture), "-d", "1", "--",
                               str(example("futex_contention")), "-t", "4"], capture_output=True, text=True,
                              timeout=60)
    assert recorded.returncode == 0, recorded.stderr
    return capture


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to_a_device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def make_sparse(path: Path) -> None:
    with open(path, "wb") as file:
        file.truncate(SPARSE_BYTES)


@pytest.mark.parametrize("name", ["bpf-records.bin", "bpf-stacks.bin"])
@pytest.mark.parametrize("plant", [make_fifo, link_to_a_device, make_sparse], ids=["fifo", "device", "sparse"])
def test_a_capture_file_that_is_no_such_file_is_refused_promptly(bpf_capture: Path, tmp_path: Path, name: str,
                                                                 plant: Callable[[Path], None]) -> None:
    capture = tmp_path / "cap"
    shutil.copytree(bpf_capture, capture)
    (capture / "model.json").unlink(missing_ok=True)
    (capture / name).unlink()
    plant(capture / name)
    started = time.monotonic()
    result = run_offcpu("report", "text", str(capture), timeout=REPORT_TIMEOUT_S * 3)
    elapsed = time.monotonic() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child's so far
    assert elapsed < REPORT_TIMEOUT_S and peak_kb < MAX_RSS_KB, (elapsed, peak_kb)
    assert_one_line_error(result, name)
