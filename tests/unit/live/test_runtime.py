"""The runtimes' frames in offcpu top's window: each interval given the samples read within it
(hand-worked samples; a recorded capture's, tests/unit/live/test_window.py)."""

from __future__ import annotations

from pathlib import Path

from offcpu.live.runtime import LiveRuntime
from offcpu.recording.runtime_stacks import RuntimeSampler
from offcpu.runtime_frames import Frame, WaitFrame

WORK = (Frame("work", "/srv/app.py", 57), Frame("main", "/srv/app.py", 80))
PAUSE = (Frame("Worker.pause", "Worker.java", 36),)
RUN = (Frame("Worker.run", "Worker.java", 20),)


def test_an_interval_takes_the_samples_read_within_it(tmp_path: Path) -> None:
    # Given a Python process (10) read at 100, 200 and 400 ns, and a JVM (20) read at 300 ns, where
    # thread 21 waits to lock a monitor that worker-2 holds (its stack: PAUSE)
    sampler = RuntimeSampler(tmp_path)
    sampler.found = {10: {"runtime": "CPython"}, 20: {"runtime": "HotSpot"}}
    sampler.stacks = {WORK: 0, PAUSE: 1, RUN: 2}
    waits = {"kind": "waiting to lock", "address": "0x1", "class": "java.lang.Object", "frame": 0,
             "owner": {"name": "worker-2", "tid": 22, "stack": 1}}
    sampler.samples = [{"pid": 10, "tid": 11, "time_ns": 100, "stack": 0},
                       {"pid": 10, "tid": 12, "time_ns": 200, "stack": 0},
                       {"pid": 20, "tid": 21, "time_ns": 300, "stack": 2, "locks": [waits]},
                       {"pid": 10, "tid": 11, "time_ns": 400, "stack": 0}]
    live = LiveRuntime(sampler)
    # Then an interval with no read has none
    assert live.samples(0, 99) is None
    # and one from 150 to 300 ns (both included) those at 200 and 300, numbered by their frames: the Java
    # thread's with what it waits for and who held it before its stack
    assert live.samples(150, 300) == ([12, 21], [200, 300], [0, 1])
    assert live.stacks == [WORK, (WaitFrame("held by worker-2: Worker.pause (Worker.java:36)"),
                                  WaitFrame("waiting to lock a java.lang.Object"), *RUN)]
    # a stack met again keeps its number
    assert live.samples(400, 500) == ([11], [400], [0])
    # and one read after the last copy of the sampler's stacks is found
    sampler.stacks[PAUSE + RUN] = 3
    sampler.samples = [*sampler.samples, {"pid": 20, "tid": 22, "time_ns": 600, "stack": 3}]
    assert live.samples(501, 600) == ([22], [600], [2])
    assert live.stacks[2] == PAUSE + RUN
    assert (live.runtime_of(20), live.runtime_of(10), live.runtime_of(99)) == ("HotSpot", "CPython", "CPython")
