"""The binaries a profiled process maps are anyone's: one that is a FIFO or a link to a device
by the time of the report is never waited on nor read (its frames go unnamed), whichever backend
recorded it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, example, run_offcpu

REPORT_TIMEOUT_S = 10


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to_a_device(path: Path) -> None:
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize("backend", ["bpf", "perf"])
@pytest.mark.parametrize("plant", [make_fifo, link_to_a_device], ids=["fifo", "device"])
def test_a_mapped_binary_replaced_by_a_fifo_or_a_device_is_not_read(
        recording_perf: str, tmp_path: Path, backend: str, plant: Callable[[Path], None]) -> None:
    program = tmp_path / "program"
    shutil.copy(example("futex_contention"), program)
    capture = tmp_path / "cap"
    recorded = subprocess.run([str(OFFCPU), "record", "--backend", backend, "-o", str(capture), "-d", "0.5", "--",
                               str(program), "-t", "2"], capture_output=True, text=True, timeout=60)
    assert recorded.returncode == 0, recorded.stderr
    program.unlink()
    plant(program)
    started = time.monotonic()
    result = run_offcpu("report", "text", str(capture), timeout=REPORT_TIMEOUT_S * 3)
    assert time.monotonic() - started < REPORT_TIMEOUT_S
    assert result.returncode == 0, result.stderr
    assert "program" in result.stdout
