"""A running JVM's locks as findings, recorded as a user would (`offcpu record --pid PID`, BPF, no
flag): its thread dumps, read while recording, say what each blocked thread waits for and who
holds it, so a Java monitor's waits are its own finding, with the owner's method and line, and two
threads each holding the monitor the other waits for are a deadlock.

java_monitor_sleep -t 4 -u 200: four workers take one monitor and sleep 200 ms holding it, so each
waits ~600 ms for it at a time; a dump every 1 s falls in about 60% of those waits, which carry
the Java frames and the monitor's frames (the others keep libjvm's futex). java_deadlock -t 4: two
pairs of workers take two monitors in opposite orders and are deadlocked within milliseconds: two
hold one each and wait for the other's, two wait behind them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import example, run_offcpu
from tests.programs import named_threads, need

EXAMPLES = Path(__file__).parents[3] / "examples"


def line_of(source: str, text: str) -> int:
    return next(number for number, line in enumerate((EXAMPLES / source).read_text().splitlines(), 1)
                if text in line)


@contextmanager
def jvm(name: str, workers: int, *args: str) -> Iterator[subprocess.Popen[str]]:
    """An example JVM whose workers have started, ended when done with."""
    need("java", "default-jdk-headless")
    program = subprocess.Popen([str(example(name)), "-t", str(workers), "-s", "60", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(named_threads(program.pid, "worker-")) < workers:
            assert program.poll() is None and time.monotonic() < deadline, f"{name} did not start"
            time.sleep(0.05)
        yield program
    finally:
        program.terminate()  # a JVM ended so removes its attach socket
        try:
            program.wait(timeout=10)
        except subprocess.TimeoutExpired:
            program.kill()
            program.wait()


def recorded(capture: Path, seconds: str, name: str, workers: int, *args: str) -> dict:
    """An example JVM recorded by `offcpu record --pid` for `seconds` into `capture`, and its json report."""
    with jvm(name, workers, *args) as program:
        result = run_offcpu("record", "--pid", str(program.pid), "-d", seconds, "-o", str(capture))
    assert result.returncode == 0, result.stderr
    return json.loads(run_offcpu("report", "json", str(capture)).stdout)


def workers_offcpu_us(capture: Path) -> int:
    folded = run_offcpu("report", "folded", "--by-thread", str(capture))
    assert folded.returncode == 0, folded.stderr
    return sum(int(line.rpartition(" ")[2]) for line in folded.stdout.splitlines() if line.startswith("worker-"))


def test_a_java_monitor_is_its_own_finding_with_its_owner(tmp_path: Path) -> None:
    capture = tmp_path / "cap"
    report = recorded(capture, "6", "java_monitor_sleep", 4, "-u", "200")
    # (on a loaded machine a worker may also wait for it all the recording: a stuck finding of the monitor too)
    [monitor] = [finding for finding in report["findings"]
                 if finding["subject"] == "Java monitor" and finding["id"] == "lock_contention"]
    assert monitor["title"] == "Threads wait for a lock: Java monitor (a java.lang.Object)"
    # the owner: a worker asleep in Thread.sleep, called from pause() inside the synchronized block
    sleep = (f"java.lang.Thread.sleep at MonitorSleep.pause "
             f"(MonitorSleep.java:{line_of('MonitorSleep.java', 'Thread.sleep(')})")
    assert "the thread dumps named its owner as worker-" in monitor["summary"] and sleep in monitor["summary"], \
        monitor["summary"]
    assert "a blocking call inside the critical section" in monitor["summary"], monitor["summary"]
    assert "blocking call while holding the lock" in monitor["remedy"], monitor["remedy"]
    # its evidence waits where the workers queue, on the line of the synchronized block
    entry = (f"MonitorSleep.lambda$main$0 "
             f"(MonitorSleep.java:{line_of('MonitorSleep.java', 'pause(); // the bug')}) [java]")
    assert entry in monitor["evidence"][0]["frames"] and \
        "[waiting to lock a java.lang.Object]" in monitor["evidence"][0]["frames"], monitor["evidence"]
    # the share of the workers' off-CPU time under it: the waits a dump fell in (~60% of the ~75% they queue)
    share = monitor["offcpu_us"] / workers_offcpu_us(capture)
    assert 0.25 < share < 0.9, share


def test_a_java_deadlock_is_a_deadlock_at_its_methods(tmp_path: Path) -> None:
    capture = tmp_path / "cap"
    with jvm("java_deadlock", 4) as program:
        time.sleep(1)  # deadlocked within milliseconds: asleep all the recording
        result = run_offcpu("record", "--pid", str(program.pid), "-d", "3", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    [deadlock] = [finding for finding in report["findings"] if finding["id"] == "deadlock"]
    # where each waits: the inner synchronized block (javac gives its monitorenter the block's first line)
    take = f"at JavaDeadlock.takeBoth (JavaDeadlock.java:{line_of('JavaDeadlock.java', 'Thread.onSpinWait()')})"
    assert deadlock["severity"] == "critical" and deadlock["summary"].count(take) == 2, deadlock["summary"]
    assert deadlock["summary"].count("waits for a Java monitor (a java.lang.Object) held by worker-") == 1 and \
        deadlock["summary"].count("waits for one held by worker-") == 1, deadlock["summary"]
    # the other two wait behind them, each for the monitor one of the two holds (HotSpot parks some of the
    # four with no timeout: asleep all the recording, their stacks and owners are the snapshot's)
    assert "; 2 more threads wait behind them (worker-" in deadlock["summary"], deadlock["summary"]
    assert not [finding for finding in report["findings"] if finding["id"] in ("stuck", "idle")
                and "worker-" in finding["summary"]], report["findings"]

    # the fixed twin, which takes the two monitors in one order: no deadlock
    fixed = tmp_path / "fixed"
    report = recorded(fixed, "2", "java_deadlock_fixed", 2)
    assert not [finding for finding in report["findings"] if finding["id"] in ("deadlock", "stuck")], \
        report["findings"]


def test_a_reentrantlock_held_across_a_sleep_is_its_own_finding_at_the_programs_lines(tmp_path: Path) -> None:
    # java_lock_sleep -t 4 -u 200: four workers take one fair ReentrantLock in turns and sleep 200 ms
    # holding it; the others park in its queue (LockSupport.park: no monitor, no owner in the dump)
    capture = tmp_path / "cap"
    report = recorded(capture, "4", "java_lock_sleep", 4, "-u", "200")
    [lock] = [finding for finding in report["findings"] if finding["subject"] == "ReentrantLock"]
    assert (lock["id"], lock["title"]) == ("lock_contention", "Threads wait for a lock: ReentrantLock "
                                           "(a java.util.concurrent.locks.ReentrantLock$FairSync)"), lock
    # where they wait and where the holder sleeps are the program's lines, not the JDK's park and sleep
    waits_at = f"holds at LockSleep.lambda$main$0 (LockSleep.java:{line_of('LockSleep.java', 'LOCK.lock(); // where')})"
    sleeps_at = (f"a blocking call inside the critical section, made at LockSleep.pause "
                 f"(LockSleep.java:{line_of('LockSleep.java', 'Thread.sleep(millis)')})")
    assert waits_at in lock["summary"] and sleeps_at in lock["summary"], lock["summary"]
    assert lock["severity"] in ("warning", "critical"), lock

    # the fixed twin sleeps before taking the lock: no lock to wait for
    fixed = tmp_path / "fixed"
    report = recorded(fixed, "2", "java_lock_sleep_fixed", 4, "-u", "200")
    assert not [finding for finding in report["findings"] if finding["severity"] != "info"], report["findings"]


def test_java_workers_waiting_in_a_queue_wait_for_work_not_for_a_lock(tmp_path: Path) -> None:
    # java_queue -t 4: a producer puts an item every 50 ms, four workers poll the queue for it (a park on its
    # condition, as a ReentrantLock's waiters park)
    capture = tmp_path / "cap"
    report = recorded(capture, "3", "java_queue", 4)
    # judged by what ended the waits: the producer, itself asleep between items, or the poll's timeout
    assert [finding for finding in report["findings"] if finding["severity"] != "info"] == [], report["findings"]
    # and the waits a dump fell in are at the program's poll, parked on the queue's condition
    take = f"QueueWorkers.take (QueueWorkers.java:{line_of('QueueWorkers.java', '// where the workers wait')}) [java]"
    folded = run_offcpu("report", "folded", "--by-thread", str(capture)).stdout.splitlines()
    at_take = sum(int(line.rpartition(" ")[2]) for line in folded if line.startswith("worker-") and take in line
                  and "[parking to wait for a java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject]"
                  in line)
    # (a dump each second falls in one poll of each worker, up to 50 ms: about 5% of their time, 3.7% in one CI run)
    assert at_take > 0.02 * workers_offcpu_us(capture), (at_take, workers_offcpu_us(capture))
