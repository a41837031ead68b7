"""The perf script reader on text perf printed for the fixtures."""

from __future__ import annotations

import io
from collections import Counter

import pytest

from offcpu.perf_script import EventReader, parse_stack, time_ns
from tests.fixtures import capture_info, script_stream, script_text

FIXTURES = ["futex_pid", "churn_pid", "mmap_all"]


@pytest.mark.parametrize("name", FIXTURES)
def test_every_event_perf_counted_is_read(name):
    # capture.json's counts come from `perf report --stats`, independently of the reader
    info = capture_info(name)
    reader = EventReader()
    events = Counter(event.rstrip(":") for _, _, _, _, _, event, _, _ in reader.events(script_stream(name)))
    assert reader.skipped_lines == 0
    switch_records = events["PERF_RECORD_SWITCH"] + events["PERF_RECORD_SWITCH_CPU_WIDE"]
    assert switch_records == info.switch_records
    assert sum(n for event, n in events.items() if not event.startswith("PERF_RECORD")) == info.samples
    assert events["PERF_RECORD_COMM"] > 0  # task records come too: threads' names, births and deaths


def test_a_switch_out_event_and_its_stack():
    comm, pid, tid, _, time, event, payload, chain = next(
        event for event in EventReader().events(script_stream("futex_pid"))
        if event[5] == "sched:sched_switch:" and event[7])
    assert comm == "futex_contentio"  # perf prints the kernel's 15-character comm
    assert int(pid) == capture_info("futex_pid").target.pid and int(tid) >= int(pid)
    assert payload.startswith(f"prev_comm=futex_contentio prev_pid={tid} ")
    info = capture_info("futex_pid")
    assert info.window_start_ns <= time_ns(time) <= info.window_end_ns
    stack = parse_stack(chain)
    assert stack.frames[0] == "__schedule" and 0 < stack.kernel_frames < len(stack.frames)
    assert all(not frame.startswith("\t") and frame for frame in stack.frames)


def test_switch_records_carry_in_and_out():
    payloads = Counter(payload.split()[0] for _, _, _, _, _, event, payload, _ in
                       EventReader().events(script_stream("futex_pid")) if event == "PERF_RECORD_SWITCH")
    assert set(payloads) == {"IN", "OUT"} and payloads["IN"] > 0


def test_partial_and_garbage_text_is_skipped_and_counted():
    # Given perf script text cut mid-line at both ends, with a foreign line inside
    text = script_text("futex_pid")
    cut = text[12345:-777]
    middle = cut.index("\n\n", len(cut) // 2) + 2
    damaged = cut[:middle] + "this is not perf output\n\n" + cut[middle:]
    # When it is read
    reader = EventReader()
    read = sum(1 for _ in reader.events(io.StringIO(damaged)))
    # Then the damaged lines are counted (the garbage line, a headless partial stack at
    # the front, a cut event at the back), and every whole event around them is still read
    assert 2 <= reader.skipped_lines <= 2 + 64
    whole = sum(1 for _ in EventReader().events(io.StringIO(text)))
    assert whole * 0.95 <= read < whole


class TrickleStream(io.StringIO):
    """perf's pipe as the reader may see it: reads cut at arbitrary places."""

    def read(self, size: int = -1) -> str:
        return super().read(min(size, 997) if size and size > 0 else 997)


@pytest.mark.parametrize("name", FIXTURES)
def test_events_cut_across_reads_are_read_whole(name):
    text = script_text(name)
    whole = list(EventReader().events(io.StringIO(text)))
    reader = EventReader()
    assert list(reader.events(TrickleStream(text))) == whole and reader.skipped_lines == 0


def test_a_long_run_of_switch_records_is_read_as_it_comes():
    # After a --time slice's samples end, perf still prints switch records: single lines only.
    lines = [line for line in script_text("mmap_all").splitlines(keepends=True) if "PERF_RECORD_SWITCH" in line]
    reader = EventReader()
    assert sum(1 for _ in reader.events(TrickleStream("".join(lines)))) == len(lines)
    assert reader.skipped_lines == 0
