"""Reading a capture recorded with BPF: records of `struct record` (core/src/bpf/offcpu.bpf.c)
written here by hand, byte by byte after the C layout (the format is offcpu's own, not the
kernel's), into the model every report reads, with every expected value worked out by hand in
the comments (the events the core makes of them: core/src/bpf/decode_tests.rs, the same story).

Times below are microseconds from the window's start. The records' process is this test's
own, so that the memory maps read of it (recording.process_maps) are real, and kernel frames
are named from this machine's real kallsyms.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import time
from pathlib import Path

import pytest

from offcpu._core import state_letter
from offcpu.errors import OffcpuError
from offcpu.machine.running_kernel import save_kernel_symbols
from offcpu.model import Model
from offcpu.model.loading import build, load_model
from offcpu.model.stackview import StackView
from offcpu.reading.bpf_reader import RECORD as RECORD_READ
from offcpu.recording import process_maps
from offcpu.recording.process_maps import MapsRecorder
from offcpu.renderers.text import TextReport
from offcpu.stacks import BEFORE_WINDOW, NEW_THREAD, STACK_NOT_TAKEN
from tests.helpers.bpf_records import (
    CHILD,
    COMM,
    DEAD,
    EXIT,
    EXIT_DEAD,
    FORK,
    PID,
    RECORD,
    WAIT,
    WAITER,
    WAKER,
    WINDOW_US,
    D,
    S,
    at,
    record,
    write_capture,
)


def test_the_record_layout_is_the_c_layout() -> None:
    # 4 u32 (16) + 3 u64 (24) + 4 s32 (16) + 4 u32 (16) + 2 u16 (4) + u32 (4) + 2 x 16 chars: 112 bytes,
    # each field at its natural alignment, so that no padding is added
    assert RECORD.size == 112
    assert RECORD_READ.itemsize == 112
    assert RECORD_READ.fields is not None and RECORD_READ.names is not None
    offsets = {name: RECORD_READ.fields[name][1] for name in RECORD_READ.names}
    assert offsets == {"kind": 0, "cpu": 4, "pid": 8, "tid": 12, "since_ns": 16, "woken_ns": 24, "back_ns": 32,
                       "kernel_stack": 40, "user_stack": 44, "waker_kernel_stack": 48, "waker_user_stack": 52,
                       "waker_pid": 56, "waker_tid": 60, "state": 64, "exit_state": 68, "weight_shift": 72,
                       "preempted": 74, "estimated": 76, "comm": 80, "waker_comm": 96}


@pytest.mark.parametrize(("state", "exit_state", "preempted", "letter"), [
    (0x1, 0, False, "S"),        # TASK_INTERRUPTIBLE
    (0x2, 0, False, "D"),        # TASK_UNINTERRUPTIBLE
    (0x102, 0, False, "D"),      # TASK_KILLABLE = TASK_WAKEKILL | TASK_UNINTERRUPTIBLE
    (0x402, 0, False, "I"),      # TASK_IDLE = TASK_UNINTERRUPTIBLE | TASK_NOLOAD
    (0x1000, 0, False, "D"),     # TASK_RTLOCK_WAIT, shown as a lock's wait
    (0x8001, 0, False, "D"),     # TASK_FROZEN: shown as uninterruptible
    (0x4, 0, False, "T"),        # __TASK_STOPPED
    (0x8, 0, False, "t"),        # __TASK_TRACED
    (0x40, 0, False, "P"),       # TASK_PARKED
    (0x80, 0x10, False, "X"),    # TASK_DEAD with EXIT_DEAD
    (0x80, 0x20, False, "Z"),    # TASK_DEAD with EXIT_ZOMBIE
    (0x0, 0, False, "R"),        # running, switched out without being preempted (a yield)
    (0x1, 0, True, "R"),         # preempted: runnable, whatever its state said
])
def test_states_are_the_letters_perf_prints(state: int, exit_state: int, preempted: bool, letter: str) -> None:
    assert state_letter(state, exit_state, preempted) == letter


def kernel_address(kallsyms: Path, name: str) -> int:
    """Where a kernel function begins, as the saved kallsyms says (a line 'ADDRESS T NAME')."""
    for line in kallsyms.read_text().splitlines()[1:]:
        address, kind, symbol = line.split()[:3]
        if symbol == name and kind in "Tt":
            return int(address, 16)
    raise AssertionError(f"{name} is not in {kallsyms}")


def qsort_address() -> int:
    """An address in libc's qsort, as mapped in this process."""
    return ctypes.cast(ctypes.CDLL("libc.so.6").qsort, ctypes.c_void_p).value or 0


def story(directory: Path) -> list[bytes]:
    """Three threads of this process, their records in the order the ring buffer gives them
    (a wait's when it ends; the waits still open at the end last):
    - WAKER (12) off CPU since before the recording, back at 500; preempted at 4600, back at 5000
      (its stack not taken, weight 2^3 dropped to 0); runs to the end.
    - WAITER (11) sleeps (S) at 1000 with kernel stack 1 and user stack 2 (taken with probability
      1/4: weight 4), woken by WAKER at 4000 (its stacks 3 and 4), back at 4500 on CPU 1; sleeps
      at 6000, woken by WAKER at 5990 on its way off (stack not taken), back at 6200; sleeps (D) at
      8000 with a kernel stack missing from the table and a user stack that found the table
      full (-E2BIG), still off CPU at the end.
    - CHILD (13) made by WAITER at 2000, renamed at 2100, first run at 2500, exits at 3000, its
      last switch-out (dead) at 3001.
    Then a record of a kind this offcpu does not know."""
    kallsyms = save_kernel_symbols(directory)
    trace_run, traceiter, schedule, futex_wait, wake_up = (kernel_address(kallsyms, name) for name in (
        "bpf_trace_run4", "__traceiter_sched_switch", "schedule", "futex_wait", "try_to_wake_up"))
    # WAITER's kernel stack begins in the tracing machinery that called the BPF program, as bpf_get_stack
    # walks it (an address of the program itself, not in kallsyms, first)
    stacks = {1: [0xffffffffc0001234, trace_run + 4, traceiter + 4, schedule + 4, futex_wait + 4],
              2: [qsort_address() + 4], 3: [wake_up + 4], 4: [qsort_address() + 4]}
    records = [
        record(WAIT, WAKER, None, back_us=500),
        record(FORK, CHILD, 2000, waker=WAITER, comm=f"t{WAITER}"),
        record(COMM, CHILD, 2100, comm="renamed"),
        record(WAIT, CHILD, None, back_us=2500, cpu=1, comm="renamed"),
        record(EXIT, CHILD, 3000, cpu=1, comm="renamed"),
        record(WAIT, WAITER, 1000, woken_us=4000, back_us=4500, cpu=1, stacks=(1, 2), waker_stacks=(3, 4),
               waker=WAKER, state=S, shift=2),
        record(WAIT, WAKER, 4600, back_us=5000, preempted=True, shift=3),
        record(WAIT, WAITER, 6000, woken_us=5990, back_us=6200, waker=WAKER, state=S, shift=1),
        record(WAIT, WAITER, 8000, stacks=(5, -7), state=D),
        record(WAIT, CHILD, 3001, state=DEAD, exit_state=EXIT_DEAD, comm="renamed"),
        record(9, WAITER, 9000),
    ]
    write_capture(directory, records, stacks)
    return records


def row(model: Model, tid: int, frames: tuple[str, ...]):  # type: ignore[no-untyped-def]
    [found] = [row for row in model.rows if row.tid == tid and model.stacks[row.stack].frames == frames]
    return found


def test_the_model_of_a_bpf_capture(tmp_path: Path) -> None:
    story(tmp_path)
    model = build(tmp_path)
    assert (model.reader, model.reader_note) == ("bpf", "recorded with BPF")
    # WAITER's first wait, named from the saved kallsyms and this process's maps, from the tracepoint's caller
    # on as perf shows it: 1000 -> 4500, blocked until 4000, then 500 waiting for a CPU. Its stack was taken
    # with probability 1/4; its stratum (WAITER's waits in S woken by WAKER) also holds the wait from 6000 to
    # 6200 (woken as it left: all run queue) whose stack was not taken, and this row is its only one: it
    # holds both, 3500 + 200 µs, blocked 3000, run queue 500 + 200, 2 waits; its variance as estimated is 0
    # (all the stratum's waits with a stack were in it)
    first = row(model, WAITER, ("schedule", "futex_wait", "qsort"))
    assert (first.offcpu_us, first.blocked_us, first.runqueue_us, first.count, first.state, first.variance) == \
        (3700, 3000, 700, 2, "S", 0)
    waker = model.wakers[first.waker]
    assert (waker.tid, waker.comm, waker.kind, model.stacks[waker.stack].frames) == \
        (WAKER, "t12", "thread", ("try_to_wake_up", "qsort"))
    assert model.stacks[first.stack].kernel_frames == 2
    # 6000 -> 6200, its stack not taken: in no row of its own (its stratum's sampled one holds it)
    assert not [row for row in model.rows if row.tid == WAITER and model.stacks[row.stack].frames == (STACK_NOT_TAKEN,)]
    # 8000 -> the end at 10000, never woken: blocked 2000
    last = row(model, WAITER, ("[kernel stack could not be read]", "[user stack could not be read]"))
    assert (last.offcpu_us, last.blocked_us, last.state, last.waker) == (2000, 2000, "D", None)
    # on CPU 0 -> 1000, 4500 -> 6000, 6200 -> 8000: 4300; off 3500 + 200 + 2000: 5700; exact, no observer
    waiter = model.threads[WAITER]
    assert (waiter.oncpu_us, waiter.offcpu_us, waiter.observer_us) == (4300, 5700, 0)
    # WAKER: off CPU from the start to 500, preempted 4600 -> 5000 (R: run queue all of it)
    assert row(model, WAKER, (BEFORE_WINDOW,)).offcpu_us == 500
    assert (model.threads[WAKER].oncpu_us, model.threads[WAKER].offcpu_us) == (9100, 900)
    # (the preemption's stack was not taken, nor that of any other preemption of WAKER's: its own row)
    assert (row(model, WAKER, (STACK_NOT_TAKEN,)).runqueue_us, row(model, WAKER, (STACK_NOT_TAKEN,)).state) == \
        (400, "R")
    # CHILD: runnable from its birth at 2000 to its first run at 2500, on CPU to its exit at 3000
    assert row(model, CHILD, (NEW_THREAD,)).runqueue_us == 500
    child = model.threads[CHILD]
    assert (child.comm, child.oncpu_us, child.offcpu_us, child.created_ns, child.exited_ns) == \
        ("renamed", 500, 500, at(2000), at(3000))
    assert (model.estimated_switch_ins, model.unreadable_events) == (0, 1)
    # of the stacks taken (WAITER's 1000 and 8000, their wakers' 3 and 4), the last two could not be read
    assert model.binary_notes == [
        "2 of the 6 stacks taken could not be read (1 found the stack table full: record fewer processes, or for "
        "less time; the walk of 1 failed): they are shown as [kernel stack could not be read] or [user stack could "
        "not be read]"]
    # the model is saved beside the records, and read back from there
    assert load_model(tmp_path).to_json() == model.to_json()


def test_a_record_cut_short_is_counted_and_left_out(tmp_path: Path) -> None:
    records = story(tmp_path)
    (tmp_path / "bpf-records.bin").write_bytes(b"".join(records) + records[0][:50])
    model = build(tmp_path)
    assert model.unreadable_events == 2  # the unknown kind and the last record, written in part
    assert row(model, WAITER, ("schedule", "futex_wait", "qsort")).offcpu_us == 3500 + 200


def test_user_frames_of_a_process_whose_maps_were_not_read_are_unknown_and_said(tmp_path: Path) -> None:
    # Given a process that exec'd a new program at 500 (its maps were read after that, as the test's
    # own now), and a wait with a user stack before the exec (of the old program)
    kallsyms = save_kernel_symbols(tmp_path)
    schedule = kernel_address(kallsyms, "schedule")
    write_capture(tmp_path, [
        record(COMM, WAITER, 500, state=1),
        record(WAIT, WAITER, 100, back_us=200, stacks=(1, 2), state=S),
        record(WAIT, WAITER, 1000, back_us=1200, stacks=(1, 2), state=S),
    ], {1: [schedule + 4], 2: [qsort_address() + 4]})
    model = build(tmp_path)
    # Then the wait before the exec is not named from the new program's maps
    assert row(model, WAITER, ("schedule", "[unknown]")).offcpu_us == 100
    assert row(model, WAITER, ("schedule", "qsort")).offcpu_us == 200
    # and the note names the process, and says what it changes for the reader and why
    assert model.binary_notes == [f"the functions of process {PID} (t{WAITER}) in its own code and libraries are "
                                  "shown as [unknown] in some of its waits: it ended, or ran another program, before "
                                  "offcpu read its memory maps"]


def test_switches_the_programs_placed_by_run_time_are_said(tmp_path: Path) -> None:
    # Given a wait whose switch-in the tracepoint did not report (placed by the thread's run time),
    # and one whose switch-out it did not report
    write_capture(tmp_path, [record(WAIT, WAITER, 100, back_us=200, state=S, estimated=2),
                             record(WAIT, WAITER, 300, back_us=400, estimated=1)], {})
    model = build(tmp_path)
    # Then their times count as recorded, and the report says how many switches were placed, the time of the
    # waits they placed (100 µs each), and what that changes: nothing of the threads' totals
    assert (model.threads[WAITER].offcpu_us, model.threads[WAITER].oncpu_us) == (200, WINDOW_US - 200)
    assert model.binary_notes[0] == ("the kernel did not report 2 of the threads' switches to offcpu: the 2 waits "
                                     "they began or ended (0.2 ms off CPU in all) were timed from the threads' time "
                                     "on CPU as the kernel counts it instead, so every thread's total stays whole")


def test_a_capture_without_its_maps_says_so(tmp_path: Path) -> None:
    kallsyms = save_kernel_symbols(tmp_path)
    write_capture(tmp_path, [record(WAIT, WAITER, 100, back_us=200, stacks=(1, 2), state=S)],
                  {1: [kernel_address(kallsyms, "schedule") + 4], 2: [qsort_address() + 4]}, maps=False)
    model = build(tmp_path)
    assert row(model, WAITER, ("schedule", "[unknown]")).count == 1
    assert model.binary_notes == ["the capture holds no readable bpf-maps.json (the memory maps of its processes): "
                                  "user frames are shown as [unknown]"]


def test_a_missing_records_file_is_one_line_with_the_fix(tmp_path: Path) -> None:
    story(tmp_path)
    (tmp_path / "bpf-records.bin").unlink()
    with pytest.raises(OffcpuError, match=r"bpf-records.bin is missing; record it again with 'offcpu record'$"):
        build(tmp_path)


def test_a_perf_reader_is_refused_for_a_bpf_capture(tmp_path: Path) -> None:
    story(tmp_path)
    with pytest.raises(OffcpuError, match="recorded with BPF .*: leave out --reader"):
        build(tmp_path, reader="native")


def test_maps_are_read_again_only_when_they_changed(tmp_path: Path) -> None:
    recorder = MapsRecorder(tmp_path)
    recorder.update([PID])
    recorder.update([PID])  # the same maps: nothing new
    snapshots = json.loads((tmp_path / "bpf-maps.json").read_text())["snapshots"]
    assert [snapshot["pid"] for snapshot in snapshots] == [PID]
    libc = [item for item in snapshots[0]["maps"] if "libc.so" in item["path"]]
    assert libc and all(len(item["build_id"]) == 40 for item in libc)  # a 20-byte GNU build id, in hex


def test_the_text_report_says_it_was_recorded_with_bpf(tmp_path: Path) -> None:
    story(tmp_path)
    text = TextReport(StackView(), top=5, width=400, color=False).render(build(tmp_path))
    header = text.splitlines()[:6]
    # the record of an unknown kind is 1 of the 11 records: more than a thousandth, numbers not to be trusted
    assert header[0] == ("WARNING: 1 of the 11 records BPF recorded (9.1%) could not be read and are left out, so "
                         "these numbers cannot be trusted: these BPF records hold what offcpu cannot read; report it "
                         "to offcpu with the capture")
    assert header[2].endswith("0.01 s recorded (fp stacks; recorded with BPF)")
    assert header[3] == "3 threads were off CPU for 7.1 ms: blocked 5.5 ms, waiting for a CPU 1.6 ms"
    # (no perf's cost of the switches:) two of the six waits had no stack taken, and two stacks failed
    assert header[4].startswith("Note: stacks were taken for 4 of the 6 waits, a sample that keeps the recording's")
    assert header[5].startswith("Note: 2 of the 6 stacks taken could not be read")


def read_until(recorder: MapsRecorder, pid: int, programs: tuple[str, ...]) -> None:
    """Read the process's maps until one of `programs` is mapped (5 s at most)."""
    for _ in range(500):
        recorder.update([pid])
        if any(Path(mapping.path).name in programs for mapping in recorder.latest.get(pid, ())):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never mapped {programs}")


def test_an_exec_adds_a_snapshot_of_the_new_program_and_a_gone_process_none(tmp_path: Path) -> None:
    # Given a real shell that execs sleep once told to (a line on its standard input)
    shell = subprocess.Popen(["sh", "-c", "read line; exec sleep 30"], stdin=subprocess.PIPE)
    try:
        recorder = MapsRecorder(tmp_path)
        read_until(recorder, shell.pid, ("dash", "sh"))  # the shell's program (at first, it may be python's fork)
        assert shell.stdin is not None
        shell.stdin.write(b"go\n")
        shell.stdin.flush()
        read_until(recorder, shell.pid, ("sleep",))
    finally:
        shell.kill()
        shell.wait()
    recorder.update([shell.pid])  # gone: nothing read, nothing added
    snapshots = process_maps.load(tmp_path)
    assert snapshots is not None
    # Then the last two snapshots are the shell's program and sleep's, read in that order
    programs = [{Path(mapping.path).name for mapping in snapshot.mappings} for snapshot in snapshots]
    assert {"dash", "sh"} & programs[-2] and "sleep" not in programs[-2]
    assert "sleep" in programs[-1] and not {"dash", "sh"} & programs[-1]
    assert snapshots[-2].read_ns < snapshots[-1].read_ns


def test_runtime_frames_join_the_waits_that_cover_their_samples(tmp_path: Path) -> None:
    from offcpu.runtime_frames import Frame, to_json

    story(tmp_path)
    work, run = Frame("work", "/srv/app.py", 57), Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982)
    process = {"pid": PID, "runtime": "CPython", "version": "3.11", "reader": "py-spy dump", "reads": 3, "failed": 0,
               "error": None}
    # WAITER's stack read at 2000 (in its wait 1000 -> 4500), at 7000 (on CPU 6200 -> 8000: joins nothing) and
    # at 9000 (in its wait from 8000 to the end); WAKER's at 4800 (in its preemption, whose stack was not taken)
    samples = [{"pid": PID, "tid": tid, "time_ns": at(us), "stack": stack}
               for tid, us, stack in ((WAITER, 2000, 0), (WAITER, 7000, 1), (WAITER, 9000, 1), (WAKER, 4800, 0))]
    (tmp_path / "runtime-stacks.json").write_text(to_json(200, [process], [(work, run), (run,)], samples))
    model = build(tmp_path)
    py_work, py_run = "work (app.py:57) [py]", "Thread.run (threading.py:982) [py]"
    # the native frames first, then the runtime's, nearer the root; the times are those without them
    first = row(model, WAITER, ("schedule", "futex_wait", "qsort", py_work, py_run))
    assert (first.offcpu_us, first.blocked_us, first.runqueue_us, first.count) == (3700, 3000, 700, 2)
    assert model.stacks[first.stack].kernel_frames == 2
    last = row(model, WAITER, ("[kernel stack could not be read]", "[user stack could not be read]", py_run))
    assert (last.offcpu_us, last.blocked_us) == (2000, 2000)
    # a wait whose stack was not taken stays as it was: the weights are unchanged
    assert row(model, WAKER, (STACK_NOT_TAKEN,)).runqueue_us == 400
    # the notes say which runtime was found where and how it was read: of the waits of 10 ms or more whose stacks
    # were taken, only the one still open at the end (from 8000, counted as long), which carries them
    assert f"Python frames of process {PID} (CPython 3.11) were read with py-spy dump every 200 ms: 1 of 1 waits " \
        "of 10 ms or more carry them; the others' stacks are native only" in model.binary_notes


def test_a_runtime_found_but_not_read_is_said_with_why(tmp_path: Path) -> None:
    from offcpu.runtime_frames import to_json

    story(tmp_path)
    process = {"pid": PID, "runtime": "CPython", "version": None, "reader": "py-spy dump", "reads": 0, "failed": 0,
               "error": "py-spy is not installed beside offcpu's Python\x1b[2J"}
    (tmp_path / "runtime-stacks.json").write_text(to_json(200, [process], [], []))
    model = build(tmp_path)
    # the stacks are as without it; the note says what was found, and why it was not read (made printable)
    row(model, WAITER, ("schedule", "futex_wait", "qsort"))
    assert model.binary_notes[-1] == (f"CPython was found in process {PID}, but its frames could not be read with "
                                      "py-spy dump: py-spy is not installed beside offcpu's Python\\x1b[2J; its stacks "
                                      "are native only")


def test_a_jvms_frames_are_named_as_java_and_its_note_says_its_own_interval(tmp_path: Path) -> None:
    from offcpu.runtime_frames import Frame, to_json

    story(tmp_path)
    blocked = Frame("MonitorSleep.lambda$main$0", "MonitorSleep.java", 25)
    process = {"pid": PID, "runtime": "HotSpot", "version": "17.0.15+6-Debian-1deb12u1",
               "reader": "HotSpot attach: threaddump", "interval_ms": 1000, "reads": 2, "failed": 0, "error": None,
               "read_ms": 3.5}
    samples = [{"pid": PID, "tid": WAITER, "time_ns": at(2000), "stack": 0, "state": "BLOCKED (on object monitor)",
                "locks": [{"kind": "waiting to lock", "address": "0x69ec197c0", "class": "java.lang.Object",
                           "frame": 0}]}]
    (tmp_path / "runtime-stacks.json").write_text(to_json(200, [process], [(blocked,)], samples))
    model = build(tmp_path)
    # what the sample says it waits for comes innermost of its Java frames (no owner named: no holder frame)
    first = row(model, WAITER, ("schedule", "futex_wait", "qsort", "[waiting to lock a java.lang.Object]",
                                "MonitorSleep.lambda$main$0 (MonitorSleep.java:25) [java]"))
    assert first.count == 2
    assert any(note.startswith(f"Java frames of process {PID} (HotSpot 17.0.15+6-Debian-1deb12u1) were read with "
                               "HotSpot attach: threaddump every 1000 ms: ") for note in model.binary_notes), \
        model.binary_notes
