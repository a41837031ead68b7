"""Every integration test records perf sessions: as root."""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

ORPHAN_PASSES = 3  # an orphan's children are orphans once it is killed
ENDING_GRACE_S = 1.0  # an orphan already killed (by the kernel, when its parent died) may still be exiting


@pytest.fixture(scope="session", autouse=True)
def _as_root(recording_perf: str) -> None:
    """Ask for root (and perf) before each test: a failure in CI, elsewhere a skip."""


def orphans_of_this_session(since: set[int]) -> list[tuple[int, str]]:
    """The live processes of the tests' session (pid, name), not in `since`, that their parent
    left to init: nothing waits for them or will end them."""
    session = os.getsid(0)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in since:
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        state, parent, process_session = fields[0], int(fields[1]), int(fields[3])
        if parent == 1 and process_session == session and state != "Z":  # a zombie runs nothing
            found.append((int(entry.name), name))
    return found


@pytest.fixture(autouse=True)
def _no_orphans_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Ends what a test left running with no parent (a killed program's children): a busy one
    would load the CPUs under the next tests' recordings. Says so as a warning."""
    before = {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    yield
    deadline = time.monotonic() + ENDING_GRACE_S
    while orphans_of_this_session(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(ORPHAN_PASSES):
        orphans = orphans_of_this_session(before)
        if not orphans:
            return
        for pid, name in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            warnings.warn(f"{request.node.nodeid} left {name} (pid {pid}) running without a parent: killed",
                          stacklevel=1)
        time.sleep(0.1)
