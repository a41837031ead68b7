"""The perf script reader on text perf printed for the fixtures."""

from __future__ import annotations

import io
from collections import Counter

import pytest

from offcpu.perf_script import EventReader, parse_stack
from tests.fixtures import capture_info, script_stream, script_text

FIXTURES = ["futex_pid", "churn_pid", "mmap_all"]


@pytest.mark.parametrize("name", FIXTURES)
def test_every_event_perf_counted_is_read(name):
    # capture.json's counts come from `perf report --stats`, independently of the reader
    info = capture_info(name)
    reader = EventReader()
    events = Counter()
    for line, _ in reader.events(script_stream(name)):
        header = reader.header(line)
        assert header is not None, line
        events[header.event] += 1
    assert reader.skipped_lines == 0
    switch_records = events["PERF_RECORD_SWITCH"] + events["PERF_RECORD_SWITCH_CPU_WIDE"]
    assert switch_records == info.switch_records
    assert sum(events.values()) - switch_records == info.samples


def test_a_switch_out_header_and_its_stack():
    reader = EventReader()
    line, chain = next((line, chain) for line, chain in reader.events(script_stream("futex_pid"))
                       if "sched:sched_switch:" in line and chain)
    header = reader.header(line)
    assert header.comm == "futex_contentio"  # perf prints the kernel's 15-character comm
    assert header.pid == capture_info("futex_pid").target.pid
    assert header.event == "sched:sched_switch" and header.payload.startswith("prev_comm=futex_contentio prev_pid=")
    stack = parse_stack(chain)
    assert stack.frames[0] == "__schedule" and 0 < stack.kernel_frames < len(stack.frames)
    assert all(not frame.startswith("\t") for frame in stack.frames)


def test_switch_records_carry_in_and_out():
    reader = EventReader()
    payloads = Counter(reader.header(line).payload for line, _ in reader.events(script_stream("futex_pid"))
                       if "PERF_RECORD_SWITCH" in line)
    assert set(payloads) <= {"IN", "OUT", "OUT preempt"} and payloads["IN"] > 0


def test_partial_and_garbage_text_is_skipped_and_counted():
    # Given perf script text cut mid-line at both ends, with a foreign line inside
    text = script_text("futex_pid")
    cut = text[12345:-777]
    middle = cut.index("\n\n", len(cut) // 2) + 2
    damaged = cut[:middle] + "this is not perf output\n\n" + cut[middle:]
    # When it is read
    reader = EventReader()
    headers = [reader.header(line) for line, _ in reader.events(io.StringIO(damaged))]
    # Then the damaged lines are counted (the garbage line, a headless partial stack at
    # the front, a cut header at the back), and every whole event around them is still read
    assert 2 <= reader.skipped_lines <= 2 + 64
    whole = sum(1 for header in headers if header is not None)
    assert whole >= sum(1 for _ in EventReader().events(io.StringIO(text))) * 0.9
