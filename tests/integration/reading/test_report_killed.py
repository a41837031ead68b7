"""A report killed while it reads perf.data (`timeout 60 offcpu report ...` in CI, a closed
terminal, kill -9) leaves no process behind: its workers end with it, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import OFFCPU

DEADLINE_S = 10.0


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (dead, waiting for init to reap it) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going as it is read
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


# The native reader has no worker processes: it pairs in threads of the report's own process.
@pytest.mark.parametrize("reader", ["perf-script"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_no_worker_outlives_a_killed_report(example_capture, reader, sig):
    # Given a report reading a capture of thread churn in a pool of workers (--time: a model built anew each time)
    report = subprocess.Popen([str(OFFCPU), "report", "json", "--reader", reader, "--time", "0,100",
                               str(example_capture("thread_churn")), "-o", os.devnull, "--force"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + DEADLINE_S
    # (its workers at work: one that is starting or done may be seen for an instant)
    while not (workers := [pid for pid in children(report.pid) if alive(pid)]) and report.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.005)
    family = [*workers, *(grandchild for worker in workers for grandchild in children(worker))]
    assert family, "the report had no worker at work to kill it under"
    # When it is killed
    report.send_signal(sig)
    assert report.wait(timeout=DEADLINE_S) == -sig
    # Then its workers (and their perf script) end with it
    while any(map(alive, family)) and time.monotonic() < deadline + DEADLINE_S:
        time.sleep(0.05)
    left = [pid for pid in family if alive(pid)]
    for pid in left:  # not to leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(family)} processes outlived the report"
