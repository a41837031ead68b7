"""The perfetto export (Chrome trace-event JSON) of the fixtures' models, against the
Trace Event Format's rules: complete events ('X') with a name, category, ts, dur, pid and
tid, nesting on each track; flow events ('s', 'f') in pairs of one id, each bound to a
slice of its track; metadata ('M') naming each process and thread."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from offcpu.model import PREEMPTED
from offcpu.model.stackview import StackView
from offcpu.renderers.perfetto import BLOCKED, RUNNING, RUNQUEUE, WAKEUP, Bounds, PerfettoTrace
from tests.fixtures import model_of

COMPLETE_FIELDS = {"name", "cat", "ph", "ts", "dur", "pid", "tid"}


def trace_of(name: str, bounds: Bounds, view: StackView | None = None) -> tuple[dict, PerfettoTrace]:
    trace = PerfettoTrace(view or StackView(), bounds)
    return json.loads(trace.render(model_of(name))), trace


def check_format(document: dict) -> dict[tuple[int, int], list[dict]]:
    """The slices of each track, after checking the events against the format."""
    events = document["traceEvents"]
    assert document["displayTimeUnit"] in ("ms", "ns")
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    named: set[tuple[int, int]] = set()
    flows: dict[int, dict[str, dict]] = defaultdict(dict)
    for event in events:
        if event["ph"] == "X":
            assert COMPLETE_FIELDS <= event.keys() and event["ts"] >= 0 and event["dur"] >= 0
            tracks[(event["pid"], event["tid"])].append(event)
        elif event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name") and event["args"]["name"]
            if event["name"] == "thread_name":
                named.add((event["pid"], event["tid"]))
        else:
            assert event["ph"] in ("s", "f") and event["ph"] not in flows[event["id"]]
            flows[event["id"]][event["ph"]] = event
    assert named == set(tracks)
    for slices in tracks.values():  # on a track, slices follow one another or nest, never cross
        ordered = sorted(slices, key=lambda event: (event["ts"], -event["dur"]))
        for first, second in zip(ordered, ordered[1:], strict=False):
            assert second["ts"] >= first["ts"] + first["dur"] - 1e-3 or \
                second["ts"] + second["dur"] <= first["ts"] + first["dur"] + 1e-3
    for pair in flows.values():  # a start inside a slice of the waker's, an end where a slice of the woken begins
        start, end = pair["s"], pair["f"]
        assert any(s["ts"] <= start["ts"] <= s["ts"] + s["dur"] for s in tracks[(start["pid"], start["tid"])])
        assert any(s["ts"] == end["ts"] and s["cat"] == RUNQUEUE for s in tracks[(end["pid"], end["tid"])])
    return tracks


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all"])
def test_every_wait_of_a_small_capture_is_on_the_timeline(name):
    # Given a capture whose waits all fit in the bounds
    model = model_of(name)
    document, trace = trace_of(name, Bounds(threads=10_000, waits=100_000))
    tracks = check_format(document)
    # then each is there: a wait for a CPU for every wait, and blocked time as long as the model's
    slices = [event for events in tracks.values() for event in events]
    assert len([event for event in slices if event["cat"] == RUNQUEUE]) == sum(row.count for row in model.rows)
    blocked_us = sum(event["dur"] for event in slices if event["cat"] == BLOCKED)
    assert blocked_us == pytest.approx(sum(row.blocked_us for row in model.rows), abs=len(slices))
    offcpu_us = sum(event["dur"] for event in slices if event["cat"] in (BLOCKED, RUNQUEUE))
    assert offcpu_us == pytest.approx(sum(row.offcpu_us for row in model.rows), abs=len(slices))
    assert trace.left_out == document["otherData"]["left_out"] == ""
    # and every wakeup by a thread of the recording is an arrow
    woken = sum(row.count for row in model.rows if row.waker is not None and row.state != PREEMPTED
                and model.wakers[row.waker].kind == "thread")
    assert len([event for event in document["traceEvents"] if event["ph"] == "s"]) == woken
    assert any(event["cat"] == RUNNING for event in slices)


def test_the_bounds_keep_the_longest_waits_of_the_busiest_threads_and_say_what_is_left_out():
    model = model_of("futex_pid")
    document, trace = trace_of("futex_pid", Bounds(threads=2, waits=50))
    tracks = check_format(document)
    busiest = sorted(model.threads.values(), key=lambda thread: (-thread.offcpu_us, thread.tid))[:2]
    waiting = {(event["pid"], event["tid"]) for events in tracks.values() for event in events
               if event["cat"] == RUNQUEUE}
    assert waiting <= {(thread.pid, thread.tid) for thread in busiest}
    shown = sorted((event for events in tracks.values() for event in events if event["cat"] == RUNQUEUE),
                   key=lambda event: event["ts"])
    assert len(shown) == 50
    lengths = sorted((wait.back_ns - wait.since_ns for wait in model.timeline
                      if wait.tid in {thread.tid for thread in busiest}), reverse=True)
    waits = sum(row.count for row in model.rows)
    assert trace.left_out.startswith(f"{waits - 50:,} of {waits:,} waits; those of the ")
    assert f"{len(lengths) - 50:,} shorter than the 50 shown (--waits)" in trace.left_out
    assert document["otherData"]["left_out"] == trace.left_out
    assert [event for event in document["traceEvents"] if event.get("cat") == WAKEUP]


def test_a_filter_keeps_its_threads_waits_and_names_their_wakers_tracks():
    # Given one thread chosen by --tid, whose waits other threads ended
    model = model_of("futex_pid")
    woken = [row for row in model.rows if row.waker is not None and model.wakers[row.waker].kind == "thread"
             and model.wakers[row.waker].tid != row.tid]
    tid = max(woken, key=lambda row: row.count).tid
    document, _ = trace_of("futex_pid", Bounds(threads=10, waits=100_000), StackView(tids=frozenset({tid})))
    tracks = check_format(document)
    # then only its waits are shown, and its wakers' tracks (left out by the filter) are named
    assert {event["tid"] for events in tracks.values() for event in events if event["cat"] == RUNQUEUE} == {tid}
    wakers = {event["tid"] for event in document["traceEvents"] if event["ph"] == "s"}
    assert wakers - {tid}
    names = {event["tid"]: event["args"]["name"] for event in document["traceEvents"] if event["name"] == "thread_name"}
    assert all(names[waker] == f"{model.threads[waker].comm}-{waker}" for waker in wakers)
