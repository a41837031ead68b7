"""runtime-stacks.json's frames, named and read back, and joined to the waits that cover them in
reports (the join itself: core/src/bpf/decode_tests.rs), with the expected values worked out in the
comments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from offcpu.model import Model
from offcpu.model.loading import build
from offcpu.runtime_frames import (
    NO_OWNER,
    Frame,
    WaitFrame,
    load,
    to_json,
    wait_frames,
)
from tests.fixtures import HERE


def test_frames_are_named_by_function_file_and_line_and_the_file_round_trips(tmp_path: Path) -> None:
    work = Frame("main.<locals>.work", "/srv/app/python_lock.py", 57)
    run = Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982)
    assert work.name() == "main.<locals>.work (python_lock.py:57) [py]"
    assert Frame("<module>", "<string>", 0).name() == "<module> (<string>) [py]"
    process = {"pid": 42, "runtime": "CPython", "version": "3.11", "reader": "py-spy dump", "reads": 3, "failed": 1,
               "error": "gone"}
    (tmp_path / "runtime-stacks.json").write_text(
        to_json(200, [process], [(work, run)], [{"pid": 42, "tid": 43, "time_ns": 1_000, "stack": 0}]))
    stacks = load(tmp_path)
    assert stacks is not None
    assert stacks.interval_ms == 200 and stacks.stacks == ((work, run),)
    assert stacks.tids.tolist() == [43] and stacks.times.tolist() == [1_000] and stacks.stack_ids.tolist() == [0]
    assert stacks.processes[0].version == "3.11" and stacks.runtime_of(42) == "CPython"


def test_a_damaged_or_missing_file_is_no_runtime_stacks(tmp_path: Path) -> None:
    assert load(tmp_path) is None
    (tmp_path / "runtime-stacks.json").write_text(json.dumps({"schema": "offcpu-runtime-stacks/1", "processes": [],
                                                              "stacks": [], "samples": [
                                                                  {"pid": 1, "tid": 1, "time_ns": 5, "stack": 0}]}))
    assert load(tmp_path) is None  # a sample naming a stack the file does not hold
    (tmp_path / "runtime-stacks.json").write_text("[1, 2")
    assert load(tmp_path) is None


def fixture_model(tmp_path: Path, name: str) -> Model:
    """The model of a recorded fixture, built from a copy (a built model is saved beside its capture)."""
    shutil.copytree(HERE / name, tmp_path / "cap")
    return build(tmp_path / "cap")


def test_a_recorded_python_lock_carries_its_lines_under_its_lock_waits(tmp_path: Path) -> None:
    # tests/fixtures/python_lock_bpf: python_lock -t 4 -u 100000 (4 workers taking one lock and sleeping 100 ms
    # holding it) recorded 1 s with BPF by `offcpu record --pid`; its kallsyms is cut to what its frames need,
    # and its native user frames are named from this machine's files (elsewhere, as offsets): only the runtime's
    # and the kernel's frames are held to here
    model = fixture_model(tmp_path, "python_lock_bpf")
    pid = model.capture.target.pid
    assert f"Python frames of process {pid} (CPython 3.11) were read with py-spy dump every 200 ms: 14 of 22 " \
        "waits of 10 ms or more carry them; the others' stacks are native only" in model.binary_notes
    with_lock, sleeping = "main.<locals>.work (python_lock:57) [py]", "main.<locals>.work (python_lock:58) [py]"
    # the workers' futex waits (kernel frames: named anywhere), the lock's and the interpreter lock's short ones:
    # 99% of their time is under the line that takes the lock, after the native frames
    lock_us = framed_us = 0
    for row in model.rows:
        frames = model.stacks[row.stack].frames
        if row.tid != pid and "futex_do_wait" in frames:
            lock_us += row.offcpu_us
            framed_us += row.offcpu_us * (with_lock in frames)
            assert with_lock not in frames or frames.index(with_lock) >= model.stacks[row.stack].kernel_frames
    assert lock_us > 2_000_000 and framed_us > 0.99 * lock_us, (framed_us, lock_us)
    # the sleeps holding it, at the next line, some of them (100 ms each, half a read's interval)
    assert any(sleeping in model.stacks[row.stack].frames and "do_nanosleep" in model.stacks[row.stack].frames
               for row in model.rows)
    # the main thread, asleep in its join all the recording: its frames from the snapshot, after the native ones
    [main] = [model.stacks[row.stack].frames for row in model.rows if row.tid == pid]
    assert main[-5:] == ("Thread._wait_for_tstate_lock (threading.py:1132) [py]",
                         "Thread.join (threading.py:1112) [py]", "main (python_lock:65) [py]",
                         "<module> (python_lock:71) [py]", "[asleep all the recording]")


def test_a_recorded_ruby_mutex_carries_its_lines_what_its_threads_wait_for_and_who_held_it(tmp_path: Path) -> None:
    # tests/fixtures/ruby_mutex_bpf: ruby_mutex -t 4 -u 100000 (4 workers taking one Thread::Mutex and sleeping
    # 100 ms holding it; line 63 takes it, 64 sleeps, 78 calls work, 81 joins) recorded 1 s with BPF by
    # `offcpu record --pid`, its threads read from its memory every 200 ms
    model = fixture_model(tmp_path, "ruby_mutex_bpf")
    pid = model.capture.target.pid
    assert f"Ruby frames of process {pid} (MRI 3.1) were read with offcpu's MRI 3.1 reader (/proc/PID/mem) every " \
        "200 ms: 9 of 20 waits of 10 ms or more carry them; the others' stacks are native only" in model.binary_notes
    # the workers' futex waits: most of their time (those a read fell in) under the line that takes the mutex and
    # what they wait for, after the native frames, and who held it: worker-0 (MRI's Mutex is not fair), asleep at
    # the line after, or at that line itself (it had just taken it)
    taking = ("[waiting to lock a Thread::Mutex]", "work (ruby_mutex:63) [rb]",
              "block (2 levels) in <main> (ruby_mutex:78) [rb]")
    holders = ("[held by worker-0: block in work (ruby_mutex:64)]", "[held by worker-0: work (ruby_mutex:63)]")
    waits_us = framed_us = 0
    for row in model.rows:
        frames = model.stacks[row.stack].frames
        if row.tid != pid and "futex_do_wait" in frames:
            waits_us += row.offcpu_us
            if taking[0] in frames:
                framed_us += row.offcpu_us
                at = frames.index(taking[0])
                assert frames[at:at + 3] == taking and frames[at - 1] in holders, frames
                assert at - 1 >= model.stacks[row.stack].kernel_frames
    assert waits_us > 3_000_000 and framed_us > 0.6 * waits_us, (framed_us, waits_us)
    # the main thread, asleep in its join all the recording: its frames from the snapshot, after the native ones
    [main] = [model.stacks[row.stack].frames for row in model.rows if row.tid == pid]
    assert main[-3:] == ("[waiting for another thread to end (Thread#join)]", "<main> (ruby_mutex:81) [rb]",
                         "[asleep all the recording]")


def test_a_recorded_java_reentrantlock_carries_what_its_threads_park_for_and_their_line(tmp_path: Path) -> None:
    # tests/fixtures/java_lock_sleep_bpf: java_lock_sleep -t 4 -u 200 (4 workers taking one fair ReentrantLock and
    # sleeping 200 ms holding it; LockSleep.java:28 takes it) recorded 3 s with BPF by `offcpu record --pid` once
    # the JVM had run 3 s, its thread dumps read through HotSpot's attach socket every 1 s
    from offcpu.diagnosis.findings import findings

    model = fixture_model(tmp_path, "java_lock_sleep_bpf")
    pid = model.capture.target.pid
    assert any(note.startswith(f"Java frames of process {pid} (HotSpot 17.") and
               "were read with HotSpot attach: threaddump every 1000 ms" in note for note in model.binary_notes)
    # the waits a dump fell in: what they park for, the JDK's park and AQS frames, then the program's line,
    # after the native frames; 3 dumps of 4 workers that wait most of their time for the lock: a good part of
    # the workers' futex waits
    parked = "[parking to wait for a java.util.concurrent.locks.ReentrantLock$FairSync]"
    taking = "LockSleep.lambda$main$0 (LockSleep.java:28) [java]"
    waits_us = framed_us = 0
    for row in model.rows:
        frames = model.stacks[row.stack].frames
        if model.threads[row.tid].comm.startswith("worker-") and "futex_do_wait" in frames:
            waits_us += row.offcpu_us
            if parked in frames:
                framed_us += row.offcpu_us
                at = frames.index(parked)
                assert at >= model.stacks[row.stack].kernel_frames and taking in frames[at:], frames
    assert framed_us > 0.25 * waits_us, (framed_us, waits_us)
    # and the lock's finding is placed at the program's line, not at the JDK's park
    [lock] = [finding for finding in findings(model) if finding.subject == "ReentrantLock"]
    assert lock.id == "lock_contention" and lock.title.endswith("(a java.util.concurrent.locks.ReentrantLock$FairSync)")
    assert " holds at LockSleep.lambda$main$0 (LockSleep.java:28) (" in lock.summary, lock.summary


def test_what_a_java_thread_waits_for_and_who_held_it_become_frames(tmp_path: Path) -> None:
    # stacks as monitor_sleep.txt's: 0 a blocked worker's, 1 the holder's (asleep in the block, in pause())
    block = Frame("MonitorSleep.lambda$main$0", "MonitorSleep.java", 25)
    sleep, pause = Frame("java.lang.Thread.sleep", "Native Method", 0), Frame("MonitorSleep.pause",
                                                                             "MonitorSleep.java", 36)
    park = Frame("jdk.internal.misc.Unsafe.park", "Native Method", 0)
    stacks = [(block,), (sleep, pause, block), (park, Frame("Work.run", "Work.java", 9))]
    waiting = {"kind": "waiting to lock", "address": "0x1", "class": "java.lang.Object", "frame": 0,
               "owner": {"name": "worker-1", "tid": 51, "stack": 1}}
    # the owner's innermost frame is the JDK's (a native method, no line): where the program called it too
    assert [frame.name("HotSpot") for frame in wait_frames([waiting], stacks)] == [
        "[held by worker-1: java.lang.Thread.sleep at MonitorSleep.pause (MonitorSleep.java:36)]",
        "[waiting to lock a java.lang.Object]"]
    # an owner blocked in the program's own frame: that frame alone
    assert wait_frames([{**waiting, "owner": {"name": "worker-0", "tid": 50, "stack": 0}}], stacks)[0] == \
        WaitFrame("held by worker-0: MonitorSleep.lambda$main$0 (MonitorSleep.java:25)")
    parked = {"kind": "parking to wait for", "address": "0x2", "frame": 0,
              "class": "java.util.concurrent.locks.ReentrantLock$NonfairSync"}
    assert wait_frames([parked], stacks) == (
        WaitFrame("parking to wait for a java.util.concurrent.locks.ReentrantLock$NonfairSync"),)
    # a monitor a caller frame holds, or one the innermost frame only locked, says no wait
    assert wait_frames([{**waiting, "frame": 1}, {**waiting, "kind": "locked"}], stacks) == ()

    samples = [{"pid": 5, "tid": 50, "time_ns": 100, "stack": 0, "locks": [waiting]},
               {"pid": 5, "tid": 51, "time_ns": 100, "stack": 1,
                "locks": [{"kind": "locked", "address": "0x1", "class": "java.lang.Object", "frame": 2}]},
               {"pid": 5, "tid": 50, "time_ns": 300, "stack": 0, "locks": [waiting]},
               {"pid": 5, "tid": 52, "time_ns": 300, "stack": 2, "locks": [parked]}]
    process = {"pid": 5, "runtime": "HotSpot", "version": "17", "reader": "HotSpot attach: threaddump"}
    (tmp_path / "runtime-stacks.json").write_text(to_json(200, [process], stacks, samples))
    loaded = load(tmp_path)
    assert loaded is not None
    # the read stacks 0-2 stay; the blocked samples share a stack 3 (its two wait frames, then 0's frames), the
    # parked one a stack 4; the holder's sample, which waits for nothing named, keeps 1
    assert loaded.stack_ids.tolist() == [3, 1, 3, 4] and loaded.stacks[:3] == tuple(stacks)
    assert loaded.stacks[3] == (WaitFrame("held by worker-1: java.lang.Thread.sleep at MonitorSleep.pause "
                                          "(MonitorSleep.java:36)"),
                                WaitFrame("waiting to lock a java.lang.Object"), block)
    assert loaded.owners.tolist() == [51, NO_OWNER, 51, NO_OWNER]
    # the owners the last dump (at 300) named: 50 waits for 51's monitor, 52 parks on a lock with no owner named
    assert loaded.last_owners() == {50: 51}
    samples[2]["locks"] = []  # 50 no longer waits in the last dump: the owner of the dump before is not kept
    (tmp_path / "runtime-stacks.json").write_text(to_json(200, [process], stacks, samples))
    loaded = load(tmp_path)
    assert loaded is not None and loaded.last_owners() == {}
