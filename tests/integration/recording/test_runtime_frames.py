"""A running CPython program recorded as a user would (`offcpu record --pid PID`, BPF, no flag):
its waits carry its own functions and lines (read with py-spy while recording), in the json and
folded reports, and the recording leaves no py-spy behind however it ends.

python_lock runs 4 workers that take one threading.Lock and sleep holding it; with a sleep of
100 ms each waits ~300 ms for the lock at a time, longer than the ~200 ms between two reads of
the process's stacks, so most of that time is in waits that a read falls in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, example, missing, programs_running, run_offcpu, wait_for_threads

PYTHON = "/usr/bin/python3"  # the example's own (Debian's CPython)
WORKERS = 4
SLEEP_US = 100_000


def line_of(path: Path, text: str) -> int:
    """The number of the first line of `path` that holds `text` (the example's own, not written here)."""
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def python_lock(recording_perf: str) -> Iterator[subprocess.Popen[str]]:
    if not os.access(PYTHON, os.X_OK):
        missing(f"{PYTHON} is not installed: scripts/setup installs it")
    program = subprocess.Popen([PYTHON, str(example("python_lock")), "-t", str(WORKERS), "-s", "60", "-u",
                                str(SLEEP_US)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_for_threads(program.pid, WORKERS + 1)
        yield program
    finally:
        program.kill()
        program.wait()


def py_spy_of(pid: int) -> list[int]:
    """The py-spy processes reading process `pid`."""
    return [reader for reader, argv in programs_running("py-spy").items() if str(pid).encode() in argv]


def test_a_python_programs_waits_carry_its_functions_and_lines(tmp_path: Path,
                                                              python_lock: subprocess.Popen[str]) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(python_lock.pid), "-d", "3", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    assert py_spy_of(python_lock.pid) == []
    runtime = json.loads((capture / "runtime-stacks.json").read_text())
    [process] = runtime["processes"]
    assert (process["pid"], process["runtime"], process["reader"], process["failed"]) == \
        (python_lock.pid, "CPython", "py-spy dump", 0)
    assert process["reads"] >= 5 and runtime["samples"]

    source = example("python_lock")
    # where the workers queue: the `with lock:` of the sleep made holding it (the line before the bug)
    with_lock = f"work ({source.name}:{line_of(source, '# the bug') - 1}) [py]"
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    framed = [stack for stack in report["stacks"] if any(frame.endswith(with_lock) for frame in stack["frames"])]
    assert framed, [stack["frames"] for stack in report["stacks"]]
    # the program's frames come after the native ones: root first in the report, so before them
    frames = framed[0]["frames"]
    assert frames.index(next(frame for frame in frames if frame.endswith(with_lock))) < \
        frames.index("__futex_abstimed_wait_common")
    # the lock's finding names the line in its evidence, and in the text report's words
    [lock] = [finding for finding in report["findings"] if finding["id"] == "lock_contention"]
    assert any(frame.endswith(with_lock) for frame in lock["evidence"][0]["frames"]), lock["evidence"]
    text = run_offcpu("report", "text", str(capture)).stdout
    assert f"waits (S): …;main.<locals>.{with_lock};…" in text, text
    assert any(f"frames of process {python_lock.pid} (CPython 3." in caveat and "read with py-spy dump" in caveat
               for caveat in report["caveats"]), report["caveats"]

    # the workers' waits for the lock (their futex waits; the main thread's join began before the recording):
    # most of their time is under the frame of the line where they take it
    folded = run_offcpu("report", "folded", "--by-thread", str(capture))
    assert folded.returncode == 0, folded.stderr
    lock_us = framed_us = 0
    for line in folded.stdout.splitlines():
        stack, _, microseconds = line.rpartition(" ")
        if stack.startswith(f"python3-{python_lock.pid};") or "__futex_abstimed_wait_common" not in stack:
            continue
        lock_us += int(microseconds)
        framed_us += int(microseconds) * (f";main.<locals>.{with_lock};" in stack)
    assert lock_us > 1_000_000, folded.stdout
    assert framed_us > 0.6 * lock_us, (framed_us, lock_us)
    # the main thread, asleep in its join all the recording (its stack read at the end), carries its frames too
    joining = f"main ({source.name}:{line_of(source, 'worker.join()')}) [py]"
    [main] = [line for line in folded.stdout.splitlines() if line.startswith(f"python3-{python_lock.pid};")]
    assert main.startswith(f"python3-{python_lock.pid};[asleep all the recording];<module> ") and joining in main, main


def test_ctrl_c_ends_the_reads_and_leaves_no_py_spy(tmp_path: Path, python_lock: subprocess.Popen[str]) -> None:
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), "record", "--pid", str(python_lock.pid), "-o", str(capture)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not py_spy_of(python_lock.pid):  # until a read is under way
            assert recording.poll() is None and time.monotonic() < deadline, recording.communicate()
            time.sleep(0.005)
        recording.send_signal(signal.SIGINT)
        _, stderr = recording.communicate(timeout=30)
    finally:
        if recording.poll() is None:
            recording.kill()
            recording.wait()
    assert recording.returncode == 0, stderr
    assert json.loads((capture / "capture.json").read_text())["ended_by"] == "SIGINT"
    assert py_spy_of(python_lock.pid) == []
    assert json.loads((capture / "runtime-stacks.json").read_text())["processes"][0]["pid"] == python_lock.pid


SPINNER_AND_SLEEPER = """
import threading, time
lock = threading.Lock()
lock.acquire()

def blocked():
    lock.acquire()  # off CPU until the process ends

def spinning():
    end = time.monotonic() + 60
    while time.monotonic() < end:  # on CPU (or waiting for one) all the time
        pass

for target in (blocked, spinning):
    threading.Thread(target=target, name=target.__name__, daemon=True).start()
time.sleep(60)
"""


def test_a_threads_stack_is_kept_only_when_it_stayed_off_cpu_while_it_was_read(tmp_path: Path) -> None:
    from offcpu.recording.runtime_stacks import RuntimeSampler, py_spy

    if py_spy() is None:
        pytest.fail("py-spy is not installed beside offcpu's Python (scripts/setup installs it)")
    program = subprocess.Popen([PYTHON, "-c", SPINNER_AND_SLEEPER])
    try:
        wait_for_threads(program.pid, 3)
        sampler = RuntimeSampler(tmp_path)
        sampler.offer([program.pid])
        sampler.start()
        time.sleep(1.5)
        sampler.stop()
    finally:
        program.kill()
        program.wait()
    runtime = json.loads((tmp_path / "runtime-stacks.json").read_text())
    [process] = runtime["processes"]
    assert process["reads"] >= 3 and process["failed"] == 0
    stacks = runtime["stacks"]
    kept = {(sample["tid"], stacks[sample["stack"]][0]["function"], stacks[sample["stack"]][0]["line"])
            for sample in runtime["samples"]}
    functions = {function for _, function, _ in kept}
    # the blocked thread and the main thread asleep are read at their lines; the spinning one never (it ran
    # while it was read)
    assert functions == {"blocked", "<module>"}, kept
    lines = SPINNER_AND_SLEEPER.splitlines()
    assert {(function, line) for _, function, line in kept} == {
        ("blocked", lines.index("    lock.acquire()  # off CPU until the process ends") + 1),
        ("<module>", lines.index("time.sleep(60)") + 1)}


def test_a_perf_recording_says_it_leaves_a_python_programs_frames_native(tmp_path: Path,
                                                                       python_lock: subprocess.Popen[str]) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "perf", "--pid", str(python_lock.pid), "-d", "1", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    assert f"note: the program's own frames (functions, files and lines) of process {python_lock.pid} (CPython 3." \
        in result.stderr and "read only when offcpu records with BPF" in result.stderr, result.stderr
    assert py_spy_of(python_lock.pid) == [] and not (capture / "runtime-stacks.json").exists()
