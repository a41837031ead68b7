"""The snapshot of the threads asleep at a recording's end reads what the recorded processes
control (their names, their symbols through eu-stack): whatever it finds there, the recording
is kept, and a snapshot that fails is said in the capture, not lost with it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from offcpu.recording import snapshot
from tests.conftest import run_offcpu

ASLEEP = r"""
#include <unistd.h>
__attribute__((noinline)) void hostile_symbol(void) { pause(); }
int main(void) { hostile_symbol(); return 0; }
"""
# A symbol's name that reads as a line of eu-stack's own after its first line
HOSTILE_NAME = "asleep\nTID x:"


@pytest.fixture(scope="module")
def hostile_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A program asleep in pause() called from a function whose symbol is HOSTILE_NAME
    (renamed in its object file by objcopy)."""
    directory = tmp_path_factory.mktemp("hostile")
    (directory / "asleep.c").write_text(ASLEEP)
    for command in (["gcc", "-O0", "-g", "-c", "asleep.c", "-o", "asleep.o"],
                    ["objcopy", f"--redefine-sym=hostile_symbol={HOSTILE_NAME}", "asleep.o", "renamed.o"],
                    ["gcc", "renamed.o", "-o", "asleep"]):
        subprocess.run(command, cwd=directory, check=True)
    return directory / "asleep"


def asleep_in(function: str, pid: int) -> None:
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/wchan").read_text() != function:
        assert time.monotonic() < deadline, f"pid {pid} did not sleep in {function}"
        time.sleep(0.01)


@pytest.mark.parametrize("backend", ["bpf", "perf"])
def test_a_symbol_holding_a_thread_line_of_eu_stack_keeps_the_recording(hostile_program, tmp_path, backend):
    program = subprocess.Popen([str(hostile_program)])
    try:
        asleep_in("__do_sys_pause", program.pid)
        capture = tmp_path / "cap"
        result = run_offcpu("record", "--backend", backend, "--pid", str(program.pid), "-d", "0.3", "-o", str(capture))
    finally:
        program.kill()
        program.wait()
    assert result.returncode == 0, result.stderr
    threads = json.loads((capture / "snapshot.json").read_text())["threads"]
    assert [thread["tid"] for thread in threads] == [program.pid]
    frames = threads[0]["user_frames"]
    # the name's first line is the frame's; the line after it is no thread of eu-stack's
    assert frames[:3] == ["pause", "asleep", "main"], frames
    shown = run_offcpu("report", "text", str(capture))
    assert shown.returncode == 0 and "main;asleep;pause" in shown.stdout, shown.stderr


def test_a_snapshot_that_fails_says_why_instead_of_failing(monkeypatch):
    def fails(tid: int, pid: int) -> None:
        raise RuntimeError("something a process made\nof it")

    monkeypatch.setattr(snapshot, "_kernel_side", fails)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        asleep_in("hrtimer_nanosleep", sleeper.pid)
        taken = snapshot.take(snapshot.switch_counts([sleeper.pid]), {})
    finally:
        sleeper.kill()
        sleeper.wait()
    assert taken.threads == () and taken.failed.startswith("RuntimeError: something a process made")
    assert "\n" not in taken.failed and taken.failed_note is not None and taken.failed in taken.failed_note
