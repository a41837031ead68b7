"""Python's locks as findings, on running CPython programs recorded as a user would (`offcpu
record --pid PID`, BPF, no flag): the Python frames read while recording name the lock and the
function and line where the threads wait, and each example's twin raises none of it.

- python_lock: 4 workers take one threading.Lock and sleep 100 ms holding it;
- python_gil: 4 workers count in pure Python, taking turns at the interpreter lock (-p: processes);
- python_deadlock: two threads take two locks in opposite orders and wait for each other for good
  (-o: in one order);
- python_queue: 4 workers wait in queue.Queue.get() for an item put every 50 ms: waits for work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import example, missing, run_offcpu, wait_for_threads
from tests.programs import children

PYTHON = "/usr/bin/python3"  # the examples' own (Debian's CPython)
WORKERS = 4


def line_of(path: Path, text: str, after: str = "") -> int:
    """The number of the first line of `path` that holds `text` (after the first that holds `after`)."""
    lines = path.read_text().splitlines()
    start = next(number for number, line in enumerate(lines) if after in line)
    return next(number for number, line in enumerate(lines, 1) if number > start and text in line)


@contextmanager
def running(name: str, *args: str, threads: int) -> Iterator[subprocess.Popen[str]]:
    if not os.access(PYTHON, os.X_OK):
        missing(f"{PYTHON} is not installed: scripts/setup installs it")
    # a session of its own: python_gil -p's pool workers outlive a killed parent and would spin
    # through the tests after this one
    program = subprocess.Popen([PYTHON, str(example(name)), *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        wait_for_threads(program.pid, threads)
        yield program
    finally:
        os.killpg(program.pid, signal.SIGKILL)
        program.wait()


def findings(tmp_path: Path, *pids: int, seconds: str = "3") -> list[dict]:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", ",".join(map(str, pids)), "-d", seconds, "-o", str(capture))
    assert result.returncode == 0, result.stderr
    report = run_offcpu("report", "json", str(capture))
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout)["findings"]


def named(found: list[dict], subject: str) -> list[dict]:
    return [finding for finding in found if finding["subject"] == subject]


def test_threads_queueing_on_a_threading_lock_wait_for_a_python_lock_at_their_line(recording_perf: str,
                                                                                  tmp_path: Path) -> None:
    source = example("python_lock")
    with running("python_lock", "-t", str(WORKERS), "-s", "60", "-u", "100000", threads=WORKERS + 1) as program:
        found = findings(tmp_path, program.pid)
    [lock] = named(found, "Python threading lock")
    assert (lock["id"], lock["severity"]) == ("lock_contention", "critical"), lock
    # one holds it sleeping 100 ms while 3 wait: each worker waits ~3/4 of its time for it
    assert lock["share_of_wall"] > 0.5, lock
    # where they wait: the `with lock:` of the sleep made holding it (the line before the bug), under
    # which most of that time is (the waits no read of the stacks fell in count in the whole)
    where = f"at main.<locals>.work ({source.name}:{line_of(source, '# the bug') - 1}) ("
    assert where in lock["summary"], lock["summary"]
    share = int(lock["summary"].split(where)[1].split("%")[0])
    assert share >= 60, lock["summary"]
    # and the blocking call, from the holders' own waits meanwhile that a read fell in: the sleep
    made_at = f"a blocking call inside the critical section, made at main.<locals>.work " \
              f"({source.name}:{line_of(source, '# the bug')}) ("
    assert made_at in lock["summary"], lock["summary"]
    assert not named(found, "semaphore")


def test_the_twin_that_sleeps_outside_the_lock_waits_for_no_python_lock(recording_perf: str,
                                                                        tmp_path: Path) -> None:
    with running("python_lock", "-t", str(WORKERS), "-s", "60", "-u", "100000", "-o",
                 threads=WORKERS + 1) as program:
        found = findings(tmp_path, program.pid)
    assert [finding for finding in found if finding["severity"] != "info"] == [], found


def test_cpu_bound_python_threads_wait_for_the_gil(recording_perf: str, tmp_path: Path) -> None:
    with running("python_gil", "-t", str(WORKERS), "-s", "60", threads=WORKERS + 1) as program:
        found = findings(tmp_path, program.pid)
    [gil] = named(found, "CPython GIL")
    assert (gil["id"], gil["severity"]) == ("lock_contention", "critical"), gil
    # 4 threads on one interpreter lock run one at a time: each waits for it most of the time it
    # does not wait for a CPU (on 2 CPUs, measured 54% of their time blocked on it)
    assert gil["share_of_wall"] > 0.35, gil
    # with frame pointers take_gil is not seen: told by what its threads do, and said so
    assert gil["confidence"] == "low" and "take_gil is not in the stacks" in gil["confidence_reason"]


def test_python_processes_counting_apart_wait_for_no_gil(recording_perf: str, tmp_path: Path) -> None:
    with running("python_gil", "-t", str(WORKERS), "-s", "60", "-p", threads=1) as program:
        deadline = time.monotonic() + 10
        while len(children(program.pid)) < WORKERS and time.monotonic() < deadline:
            time.sleep(0.05)
        found = findings(tmp_path, program.pid, *children(program.pid))
    assert not named(found, "CPython GIL") and not [f for f in found if f["id"] == "lock_contention"], found


def test_two_python_threads_deadlocked_are_stuck_at_their_lines(recording_perf: str, tmp_path: Path) -> None:
    source = example("python_deadlock")
    with running("python_deadlock", threads=3) as program:
        time.sleep(0.5)  # both have slept 100 ms holding their first lock and wait for their second
        found = findings(tmp_path, program.pid, seconds="2")
    [stuck] = named(found, "Python threading lock")
    assert stuck["id"] == "stuck" and stuck["severity"] in ("warning", "critical"), stuck
    # each thread waits all the recording in its second acquire (the `with` of the bug), half the time each
    for function in ("left", "right"):
        where = f"{function} ({source.name}:{line_of(source, '# the bug', after=f'def {function}(')}) (50%)"
        assert where in stuck["summary"], stuck["summary"]
    assert stuck["summary"].startswith("2 threads waited all") and "made no progress" in stuck["summary"]
    # their two waits are all the time the finding holds: the whole recording each
    assert stuck["offcpu_us"] >= 2 * 0.95 * 2_000_000, stuck


def test_two_python_threads_taking_the_locks_in_one_order_are_not_stuck(recording_perf: str,
                                                                         tmp_path: Path) -> None:
    with running("python_deadlock", "-o", "-r", "1000", threads=3) as program:
        found = findings(tmp_path, program.pid, seconds="2")
    assert not [finding for finding in found if finding["id"] in ("stuck", "deadlock")], found


def test_python_workers_waiting_in_a_queue_wait_for_work_not_for_a_lock(recording_perf: str, tmp_path: Path) -> None:
    with running("python_queue", "-t", str(WORKERS), "-s", "60", threads=WORKERS + 1) as program:
        found = findings(tmp_path, program.pid)
    # a Queue's get waits in a Condition (a semaphore under Condition.wait): judged by what ended it,
    # the producer, itself asleep between items
    assert [finding for finding in found if finding["severity"] != "info"] == [], found
    [idle] = [finding for finding in found if finding["id"] == "idle"]
    assert any("Condition.wait (threading.py:" in frame for evidence in idle["evidence"]
               for frame in evidence["frames"]), idle["evidence"]
