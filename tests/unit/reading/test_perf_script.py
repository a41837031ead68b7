"""The perf script reader on text perf printed for the fixtures."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest

from offcpu.reading.perf_script import (
    SAMPLES,
    SWITCH_RECORD,
    SWITCH_SAMPLE,
    EventReader,
    PerfScriptReader,
    parse_stack,
    time_ns,
)
from tests.fixtures import HOSTILE_NAMES, CallRecorder, capture_info, script_text

FIXTURES = ["futex_pid", "churn_pid", "mmap_all"]
def decoded(text: str) -> tuple[CallRecorder, int]:
    """The sink calls the reader makes of `text`, and what it skipped."""
    reader, calls = PerfScriptReader("perf", Path("unused")), CallRecorder()
    reader.decode(io.StringIO(text), calls)
    return calls, reader.skipped


@pytest.mark.parametrize("name", [*FIXTURES, "hostile_command", "exits_all"])
def test_every_event_perf_counted_is_read(name):
    # capture.json's counts came from `perf report --stats` when it was recorded, independently of the reader
    info = capture_info(name)
    reader = EventReader()
    kinds = Counter(event.lastgroup for event in reader.events(io.StringIO(script_text(name))))
    assert reader.skipped == 0
    assert kinds[SWITCH_RECORD] == info.switch_records
    assert sum(kinds[kind] for kind in SAMPLES) == info.samples
    assert kinds["comm_record"] > 0  # task records come too: threads' names, births and deaths


def test_hostile_thread_names_are_read_as_the_threads_set_them():
    # Given perf's text of threads named with newlines, tabs, a carriage return, an escape,
    # perf's own field names, and an empty name (examples/hostile_names, recorded as a command)
    calls, skipped = decoded(script_text("hostile_command"))
    switches = calls.of("sched_switch")
    # Then every event is read, and every name is what the thread set
    assert skipped == 0
    assert {call.prev_comm for call in switches} == HOSTILE_NAMES | {"hostile_names"}  # main, before it renames
    assert {call.comm for call in calls.of("comm")} == HOSTILE_NAMES | {"hostile_names", "perf-exec"}
    # and no thread is made up from a name: only the target's threads leave the CPU in this recording
    tids = {call.tid for call in calls.of("fork")} | {capture_info("hostile_command").target.pid}
    assert {call.tid for call in switches} == tids
    # and every switch-out keeps its call chain, which starts in the scheduler
    assert all(parse_stack(call.chain).frames[0] == "__schedule" for call in switches)


def test_a_name_that_ends_the_fields_early_does_not_cut_an_event_from_its_call_chain():
    # Given real sched_switch events whose next_comm (the thread coming in) is spliced to
    # "z next_pid=1 \n": what sched_switch prints then looks complete before the newline
    text = script_text("futex_pid")
    hostile = re.sub(r"next_comm=\S+ next_pid=", "next_comm=z next_pid=1 \n next_pid=", text)
    # When it is read
    calls, skipped = decoded(hostile)
    original, _ = decoded(text)
    # Then each event is read whole, with the real next thread and its call chain
    assert skipped == 0
    assert [(call.next_tid, call.chain) for call in calls.of("sched_switch")] == \
           [(call.next_tid, call.chain) for call in original.of("sched_switch")]


def test_a_switch_out_event_and_its_stack():
    events = EventReader().events(io.StringIO(script_text("futex_pid")))
    event = next(event for event in events if event.lastgroup == SWITCH_SAMPLE)
    assert event["comm"] == "futex_contentio"  # perf prints the kernel's 15-character comm
    info = capture_info("futex_pid")
    assert int(event["pid"]) == info.target.pid and int(event["tid"]) >= int(event["pid"])
    assert event["prev_comm"] == "futex_contentio" and event["prev_state"] in ("S", "D", "R", "R+")
    assert info.window_start_ns <= time_ns(event["time"]) <= info.window_end_ns
    stack = parse_stack(event["switch_chain"])
    assert stack.frames[0] == "__schedule" and 0 < stack.kernel_frames < len(stack.frames)
    assert all(not frame.startswith("\t") and frame for frame in stack.frames)


def test_an_exited_threads_last_switch_is_read_as_its_own():
    # Given perf's text of a whole machine while a program's threads exit: perf prints an
    # exited thread's last switches ":-1  20592/-1", its own tid only in prev_pid (perf
    # script of tests/fixtures/exits_all, line 8565)
    calls, skipped = decoded(script_text("exits_all"))
    switches = {(call.time_ns, call.tid): call for call in calls.of("sched_switch")}
    # Then none is skipped, and the switch is the thread's, in the process the header names
    assert skipped == 0
    last = switches[(604_482_865_821, 2453)]
    assert (last.pid, last.prev_comm, last.prev_state, last.next_tid) == (20592, "thread_per_requ", "X", 2433)
    assert not any(tid == -1 for _, tid in switches)


def test_switch_records_carry_in_and_out():
    directions = Counter(event["direction"] for event in EventReader().events(io.StringIO(script_text("futex_pid")))
                         if event.lastgroup == SWITCH_RECORD)
    assert {"IN", "OUT"} <= set(directions) <= {"IN", "OUT", "OUT preempt"} and directions["IN"] > 0


def test_partial_and_garbage_text_is_skipped_and_counted():
    # Given perf script text cut mid-line at both ends, with a foreign line inside
    text = script_text("futex_pid")
    cut = text[12345:-777]
    middle = cut.index("\n\n", len(cut) // 2) + 2
    damaged = cut[:middle] + "this is not perf output\n\n" + cut[middle:]
    # When it is read
    reader = EventReader()
    read = sum(1 for _ in reader.events(io.StringIO(damaged)))
    # Then what is damaged is counted (the garbage line, a headless partial stack at the
    # front, a cut event at the back), and every whole event around them is still read
    assert 2 <= reader.skipped <= 3
    whole = sum(1 for _ in EventReader().events(io.StringIO(text)))
    assert whole * 0.95 <= read < whole


class TrickleStream(io.StringIO):
    """perf's pipe as the reader may see it: reads cut at arbitrary places."""

    def read(self, size: int | None = -1) -> str:
        return super().read(min(size, 997) if size and size > 0 else 997)


@pytest.mark.parametrize("name", [*FIXTURES, "hostile_command"])
def test_events_cut_across_reads_are_read_whole(name):
    text = script_text(name)
    whole = [event.group() for event in EventReader().events(io.StringIO(text))]
    reader = EventReader()
    assert [event.group() for event in reader.events(TrickleStream(text))] == whole and reader.skipped == 0


def test_a_long_run_of_switch_records_is_read_as_it_comes():
    # After a --time slice's samples end, perf still prints switch records: single lines only.
    lines = [line for line in script_text("mmap_all").splitlines(keepends=True) if "PERF_RECORD_SWITCH" in line]
    reader = EventReader()
    assert sum(1 for _ in reader.events(TrickleStream("".join(lines)))) == len(lines)
    assert reader.skipped == 0
