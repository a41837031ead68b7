"""Limits read from /proc of processes that may exit while they are read."""

from __future__ import annotations

import os

import pytest

from offcpu.machine import limits


def test_a_process_that_exits_while_its_files_are_read_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a process whose /proc/PID/limits read fails as the kernel fails it for a process
    # that exited after the file was opened (ESRCH: seen in CI on a tree that churns)
    def gone(pid: int) -> int | None:
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(limits, "_soft_rlimit_nproc", gone)
    # Then it is left out, as a process gone before its files were opened is: none is left here
    assert limits.nearest([os.getpid()]) is None


def test_this_process_is_read() -> None:
    snapshot = limits.nearest([os.getpid()])
    assert snapshot is not None and snapshot.pid == os.getpid()
