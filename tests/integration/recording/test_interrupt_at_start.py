"""Ctrl-C while offcpu starts (Python importing click, rich and the commands takes a few
tenths of a second): 'offcpu: interrupted' and exit 130, as later, never a traceback.

The moments are not guessed with sleeps: Python reports each import as it completes
(PYTHONPROFILEIMPORTTIME), and SIGINT is sent as soon as the chosen one is reported."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import OFFCPU

ENTRY_POINTS = {"console script": [str(OFFCPU)], "python -m offcpu": [str(OFFCPU.parent / "python"), "-m", "offcpu"]}
# From offcpu's entry module on: before it, Python itself is starting (its own site module).
IMPORTED = ["offcpu.cli", "click.types", "click", "offcpu.commands", "offcpu.commands.report", "rich.console",
            "offcpu.commands.report.diff"]


def start_waiting(entry_point: list[str], fifo: Path) -> subprocess.Popen[str]:
    """offcpu report diff reading a folded file from a FIFO: once started it waits there until
    interrupted. Ctrl-C does what it does to a terminal's foreground job, whatever the harness's
    own SIGINT is (a suite started in the background by a shell without job control ignores it,
    and so would offcpu, as Python leaves an ignored SIGINT ignored)."""
    return subprocess.Popen([*entry_point, "report", "diff", "--text", str(fifo), str(fifo)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}, preexec_fn=default_sigint)


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def open_for_writing(fifo: Path, timeout_s: float = 60) -> int:
    """Open the FIFO's writing end once offcpu has opened it to read (never blocking for ever)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:  # ENXIO: no reader yet
            if error.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def interrupt_after_import(process: subprocess.Popen[str], module: str) -> list[str]:
    """Send SIGINT once Python reports `module` imported; the lines of stderr read so far."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module:
            process.send_signal(signal.SIGINT)
            return lines
    pytest.fail(f"{module} was never imported: {''.join(lines)[-2000:]}")


def assert_interrupted(process: subprocess.Popen[str], stderr: str) -> None:
    said = [line for line in stderr.splitlines() if line.strip() and not line.startswith("import time:")]
    assert process.returncode == 130 and said == ["offcpu: interrupted"], (process.returncode, said)


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize("module", IMPORTED)
def test_ctrl_c_while_importing(tmp_path, entry_point, module):
    fifo = tmp_path / "folded"
    os.mkfifo(fifo)  # nobody writes it: offcpu never gets past it by itself
    process = start_waiting(ENTRY_POINTS[entry_point], fifo)
    try:
        before = interrupt_after_import(process, module)
        rest = process.communicate(timeout=60)[1]
    finally:
        process.kill()
        process.wait()
    assert_interrupted(process, "".join(before) + rest)


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_ctrl_c_once_started(tmp_path: Path, entry_point: str) -> None:
    # Given offcpu started and reading a folded file (it has opened the FIFO, and waits for its lines)
    fifo = tmp_path / "folded"
    os.mkfifo(fifo)
    process = start_waiting(ENTRY_POINTS[entry_point], fifo)
    stderr: list[str] = []
    drain = threading.Thread(target=lambda: stderr.extend(process.stderr or []))
    drain.start()
    try:
        writer = open_for_writing(fifo)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        os.close(writer)
    finally:
        process.kill()
        process.wait()
        drain.join()
    assert_interrupted(process, "".join(stderr))
