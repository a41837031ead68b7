"""A running MRI Ruby program recorded as a user would (`offcpu record --pid PID`, BPF, no flag):
its threads' waits carry its own methods and lines, read from its memory while recording, and
what they wait for (a Mutex and who holds it, the GVL, a Queue) is a finding with its name.

ruby_mutex runs 4 workers that take one Thread::Mutex and sleep 100 ms holding it: each waits
~300 ms for it at a time, longer than the ~200 ms between two reads of the process's threads."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import example, missing, run_offcpu, wait_for_threads

RUBY = "/usr/bin/ruby"  # Debian's MRI 3.1
WORKERS = 4


def line_of(path: Path, text: str) -> int:
    """The number of the first line of `path` that holds `text` (the program's own, not written here)."""
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def started(*argv: str, threads: int) -> subprocess.Popen[str]:
    if not os.access(RUBY, os.X_OK):
        missing(f"{RUBY} is not installed: scripts/setup installs it")
    program = subprocess.Popen([RUBY, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    wait_for_threads(program.pid, threads)
    return program


@pytest.fixture
def ruby_mutex(recording_perf: str) -> Iterator[subprocess.Popen[str]]:
    program = started(str(example("ruby_mutex")), "-t", str(WORKERS), "-s", "60", "-u", "100000",
                      threads=WORKERS + 1)
    try:
        yield program
    finally:
        program.kill()
        program.wait()


def test_a_ruby_programs_mutex_waits_carry_its_methods_lines_and_holder(tmp_path: Path,
                                                                      ruby_mutex: subprocess.Popen[str]) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(ruby_mutex.pid), "-d", "3", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    runtime = json.loads((capture / "runtime-stacks.json").read_text())
    [process] = runtime["processes"]
    assert (process["pid"], process["runtime"], process["version"], process["failed"], process["error"]) == \
        (ruby_mutex.pid, "MRI", "3.1", 0, None)
    assert process["reads"] >= 5 and runtime["samples"]

    source = example("ruby_mutex")
    synchronize = f"work ({source.name}:{line_of(source, 'mutex.synchronize do')}) [rb]"
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    [lock] = [finding for finding in report["findings"] if finding["id"] == "lock_contention"]
    assert "Ruby Mutex" in lock["title"], lock["title"]
    evidence = lock["evidence"][0]["frames"]
    assert synchronize in evidence and "[waiting to lock a Thread::Mutex]" in evidence, evidence
    # who held it: another worker, asleep at the line of the bug
    holder = f"{source.name}:{line_of(source, '# the bug')}"
    assert any(frame.startswith("[held by worker-") and holder in frame for frame in evidence), evidence
    assert any(f"frames of process {ruby_mutex.pid} (MRI 3.1" in caveat and "MRI 3.1 reader" in caveat
               for caveat in report["caveats"]), report["caveats"]

    # the workers' waits for the mutex: most of their time is under the line where they take it
    folded = run_offcpu("report", "folded", "--by-thread", str(capture))
    assert folded.returncode == 0, folded.stderr
    waits_us = framed_us = 0
    for line in folded.stdout.splitlines():
        stack, _, microseconds = line.rpartition(" ")
        if not stack.startswith("worker-") or "futex" not in stack or "[asleep all the recording]" in stack:
            continue
        waits_us += int(microseconds)
        framed_us += int(microseconds) * (f";{synchronize};[waiting to lock a Thread::Mutex];" in stack)
    assert waits_us > 1_000_000, folded.stdout
    assert framed_us > 0.5 * waits_us, (framed_us, waits_us)


QUEUE_AND_GVL = """
queue = Queue.new
def take(queue)
  queue.pop # asleep until another thread pushes
end
def spin(n)
  n.times { |i| i * i }
end
Thread.new { Thread.current.name = 'taker'; loop { take(queue) } }
2.times { |i| Thread.new { Thread.current.name = "spinner-#{i}"; loop { spin(100_000) } } }
loop { sleep 0.3; queue.push(1) }
"""


def test_ruby_queue_and_gvl_waits_are_named(tmp_path: Path, recording_perf: str) -> None:
    program = started("-e", QUEUE_AND_GVL, threads=4)
    try:
        capture = tmp_path / "cap"
        result = run_offcpu("record", "--pid", str(program.pid), "-d", "2", "-o", str(capture))
    finally:
        program.kill()
        program.wait()
    assert result.returncode == 0, result.stderr
    lines = QUEUE_AND_GVL.splitlines()
    popping = f"take (-e:{lines.index('  queue.pop # asleep until another thread pushes') + 1}) [rb]"
    folded = run_offcpu("report", "folded", "--by-thread", str(capture)).stdout
    taker = [line for line in folded.splitlines() if line.startswith("taker-")]
    assert any(f";{popping};[asleep until another thread wakes it (" in line for line in taker), taker
    spinners = [line for line in folded.splitlines() if line.startswith("spinner-")]
    # what they wait for, and who held it then: the other spinner, by the GVL's owner
    assert any(";[waiting for Ruby's GVL];[held by spinner-" in line for line in spinners), spinners
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    assert any("Ruby GVL" in finding["title"] for finding in report["findings"]), \
        [finding["title"] for finding in report["findings"]]


DEADLOCK = """
a = Mutex.new
b = Mutex.new
def both(first, second)
  first.synchronize do
    sleep 0.2
    second.synchronize { puts 'never' } # each waits here for the other's
  end
end
Thread.new { Thread.current.name = 'left'; both(a, b) }
Thread.new { Thread.current.name = 'right'; both(b, a) }
sleep 60
"""


def test_two_ruby_threads_deadlocked_on_two_mutexes_are_a_deadlock_at_their_line(tmp_path: Path,
                                                                                recording_perf: str) -> None:
    program = started("-e", DEADLOCK, threads=3)
    try:
        time.sleep(0.5)  # each holds its first mutex (0.2 s) and waits for the other's
        capture = tmp_path / "cap"
        result = run_offcpu("record", "--pid", str(program.pid), "-d", "1", "-o", str(capture))
    finally:
        program.kill()
        program.wait()
    assert result.returncode == 0, result.stderr
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    [deadlock] = [finding for finding in report["findings"] if finding["id"] == "deadlock"]
    line = next(number for number, text in enumerate(DEADLOCK.splitlines(), 1) if "# each waits here" in text)
    summary = deadlock["summary"]
    assert f"at block in both (-e:{line}) waits for a Ruby Mutex (a Thread::Mutex) held by " in summary, summary
    assert "left (" in summary and "right (" in summary, summary
