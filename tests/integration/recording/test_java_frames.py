"""A running JVM recorded as a user would (`offcpu record --pid PID`, BPF, no flag): its waits
carry its Java methods and lines, read through HotSpot's attach mechanism by offcpu's own
client while recording, in the json and folded reports.

java_monitor_sleep runs 4 workers that take one monitor and sleep holding it; with a sleep of
1 s each waits ~3 s for the monitor at a time, longer than the 1 s between two reads of the
JVM's threads, so most of that time is in waits that a read falls in."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import example, run_offcpu
from tests.programs import named_threads, need

WORKERS = 4
SLEEP_MS = 1000
SOURCE = Path(__file__).parents[3] / "examples" / "MonitorSleep.java"


def line_of(text: str) -> int:
    return next(number for number, line in enumerate(SOURCE.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def monitor_sleep(recording_perf: str) -> Iterator[subprocess.Popen[str]]:
    need("java", "default-jdk-headless")
    program = subprocess.Popen([str(example("java_monitor_sleep")), "-t", str(WORKERS), "-s", "60", "-u",
                                str(SLEEP_MS)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(named_threads(program.pid, "worker-")) < WORKERS:
            assert program.poll() is None and time.monotonic() < deadline, "java_monitor_sleep did not start"
            time.sleep(0.05)
        yield program
    finally:
        program.terminate()  # a JVM ended so removes its attach socket (one killed leaves it in /tmp)
        try:
            program.wait(timeout=10)
        except subprocess.TimeoutExpired:
            program.kill()
            program.wait()


def test_a_jvms_waits_carry_its_methods_and_lines(tmp_path: Path, monitor_sleep: subprocess.Popen[str]) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(monitor_sleep.pid), "-d", "6", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    runtime = json.loads((capture / "runtime-stacks.json").read_text())
    [process] = runtime["processes"]
    assert (process["pid"], process["runtime"], process["reader"], process["failed"], process["interval_ms"]) == \
        (monitor_sleep.pid, "HotSpot", "HotSpot attach: threaddump", 0, 1000)
    assert process["reads"] >= 4 and process["version"].startswith(("11", "17", "21"))
    # a blocked worker's sample names the monitor it waits for, the holder's the same one, locked
    waiting = {lock["address"] for sample in runtime["samples"] for lock in sample["locks"]
               if lock["kind"] == "waiting to lock" and sample["state"] == "BLOCKED (on object monitor)"}
    locked = {lock["address"] for sample in runtime["samples"] for lock in sample["locks"] if lock["kind"] == "locked"}
    assert len(waiting) == 1 and waiting <= locked, runtime["samples"]

    # where the workers queue: the synchronized block (HotSpot names its first line, where the one that holds
    # the monitor is too, in the call to pause()); where the holder sleeps: pause()'s
    entry = f"MonitorSleep.lambda$main$0 (MonitorSleep.java:{line_of('pause(); // the bug')}) [java]"
    sleep = f"MonitorSleep.pause (MonitorSleep.java:{line_of('Thread.sleep(sleepMillis)')}) [java]"
    report = json.loads(run_offcpu("report", "json", "--top", "200", str(capture)).stdout)
    frames = [frame for stack in report["stacks"] for frame in stack["frames"]]
    assert entry in frames and sleep in frames, [stack["frames"] for stack in report["stacks"]]
    assert any(f"Java frames of process {monitor_sleep.pid} (HotSpot " in caveat
               and "read with HotSpot attach: threaddump every 1000 ms" in caveat for caveat in report["caveats"]), \
        report["caveats"]

    # the workers' off-CPU time: most of it under the synchronized block's line (the waits for the monitor,
    # and the holder's sleep, which is inside the block too; the waits that began before the recording take
    # none: ~15% here)
    folded = run_offcpu("report", "folded", "--by-thread", str(capture))
    assert folded.returncode == 0, folded.stderr
    workers_us = framed_us = 0
    for line in folded.stdout.splitlines():
        stack, _, microseconds = line.rpartition(" ")
        if not stack.startswith("worker-"):
            continue
        workers_us += int(microseconds)
        framed_us += int(microseconds) * (f";{entry};" in f"{stack};" or f";{entry}" in stack)
    assert workers_us > 4 * 4_000_000, folded.stdout
    assert framed_us > 0.6 * workers_us, (framed_us, workers_us)
