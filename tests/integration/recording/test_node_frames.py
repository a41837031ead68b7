"""A Node.js program recorded as a user would (`offcpu record --pid PID`, BPF): started with
--perf-basic-prof --interpreted-frames-native-stack, V8 keeps frame pointers in the code it makes
and names it in /tmp/perf-PID.map; offcpu copies that map at the end of the recording and names
the JavaScript frames of the program's stacks from it.

node_wait's main thread waits in a futex (Atomics.wait, 50 ms at a time), then computes in
busyWork for 50 ms. Those futex waits' stacks end at glibc's futex wrapper (Debian's glibc keeps
no frame pointers: the walk cannot get past it to V8's code); its time in busyWork is off CPU
when another thread takes its CPU: two of them pinned to one CPU take turns, and those waits'
stacks run from the timer's interrupt up through busyWork's compiled code."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import example, missing, run_offcpu

NODE = "/usr/bin/node"  # Debian's


def line_of(path: Path, text: str) -> int:
    """The number of the first line of `path` that holds `text` (the example's own, not written here)."""
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def node_wait(recording_perf: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    if not os.access(NODE, os.X_OK):
        missing(f"{NODE} is not installed: scripts/setup installs it")
    command = ["taskset", "-c", "0", NODE, "--perf-basic-prof", "--interpreted-frames-native-stack",
               str(example("node_wait.js")), "60", "50"]
    # (in tmp_path: V8 writes an isolate-*-v8.log of each isolate where it runs)
    programs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                                 cwd=tmp_path) for _ in range(2)]
    perf_map = Path(f"/tmp/perf-{programs[0].pid}.map")
    try:
        deadline = time.monotonic() + 20
        while "busyWork" not in (perf_map.read_text() if perf_map.exists() else ""):  # until it computes
            assert programs[0].poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        yield programs[0]
    finally:
        for program in programs:
            program.kill()
            program.wait()
            Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)


def test_a_node_programs_stacks_carry_its_javascript_functions(tmp_path: Path,
                                                               node_wait: subprocess.Popen[str]) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(node_wait.pid), "-d", "2", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    [copied] = json.loads((capture / "perf-maps.json").read_text())["processes"]
    assert copied["pid"] == node_wait.pid and "busyWork" in copied["map"], copied.get("error")
    source = example("node_wait.js")
    # V8 names a function by where it is declared: `JS:*busyWork`, compiled (`~`: interpreted)
    working = f"busyWork ({source.name}:{line_of(source, 'function busyWork')}) [js]"

    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    assert any(frame.endswith(working) for stack in report["stacks"] for frame in stack["frames"]), \
        [stack["frames"] for stack in report["stacks"]]
    assert any(f"the perf map of process {node_wait.pid} (node) was read" in caveat for caveat in report["caveats"]), \
        report["caveats"]

    # the main thread's time off CPU while it could run (taken from it: not in a futex): most of it under busyWork
    folded = run_offcpu("report", "folded", "--by-thread", str(capture))
    assert folded.returncode == 0, folded.stderr
    preempted_us = framed_us = 0
    for line in folded.stdout.splitlines():
        stack, _, microseconds = line.rpartition(" ")
        if not stack.startswith(f"node-{node_wait.pid};") or "futex" in stack or "[off CPU since" in stack:
            continue
        preempted_us += int(microseconds)
        framed_us += int(microseconds) * (working in stack)
    assert preempted_us > 100_000, folded.stdout  # (0.29-0.6 s of the 2 s here, by the machine's other load)
    assert framed_us > 0.8 * preempted_us, (framed_us, preempted_us, folded.stdout)


def test_a_node_program_without_a_perf_map_is_said(tmp_path: Path, recording_perf: str) -> None:
    if not os.access(NODE, os.X_OK):
        missing(f"{NODE} is not installed: scripts/setup installs it")
    program = subprocess.Popen([NODE, str(example("node_wait.js")), "60"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        time.sleep(0.5)
        capture = tmp_path / "cap"
        result = run_offcpu("record", "--pid", str(program.pid), "-d", "1", "-o", str(capture))
        assert result.returncode == 0, result.stderr
    finally:
        program.kill()
        program.wait()
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    assert any(f"process {program.pid} runs node: its JavaScript frames are [unknown]: start node with "
               "--perf-basic-prof --interpreted-frames-native-stack" in caveat for caveat in report["caveats"]), \
        report["caveats"]
