"""What perf printed and offcpu could not read: counted in events, and, over a small share
of the events perf recorded, said first by every report. The texts are the fixtures' real
text with some events made unreadable by hand (a field name changed, as another perf
might print it)."""

from __future__ import annotations

import json
import re

from offcpu.model.stackview import StackView
from offcpu.model.summaries import untrusted
from offcpu.renderers.json import JsonReport
from offcpu.renderers.text import TextReport
from tests.fixtures import model_of, script_text

PREV_STATE_FIELD = re.compile(r"(sched:sched_switch: .*?) prev_state=")


def with_unreadable_switches(name: str, count: int) -> str:
    """The fixture's text with its first `count` sched_switch events changed to a shape offcpu does not read."""
    return PREV_STATE_FIELD.sub(r"\1 prev_status=", script_text(name), count=count)


def test_unreadable_events_are_counted_one_each():
    model = model_of("futex_pid", text=with_unreadable_switches("futex_pid", 7))
    assert model.unreadable_events == 7
    recorded = model.capture.samples + model.capture.switch_records
    assert model.unreadable_share == 7 / recorded


def test_a_few_unreadable_events_are_a_note():
    # Given one event of 5,000 or more that could not be read
    model = model_of("futex_pid", text=with_unreadable_switches("futex_pid", 1))
    assert model.capture.samples + model.capture.switch_records > 5000
    text = TextReport(StackView(), top=5, width=100, color=False).render(model)
    # Then the numbers stand, and the report says what is missing
    assert not untrusted(model)
    assert not text.startswith("WARNING") and "\nWarning: 1 of the " in text and "could not be read" in text


def test_many_unreadable_events_make_every_report_say_first_that_its_numbers_cannot_be_trusted():
    # Given a recording of which 1% of the events could not be read
    whole = model_of("futex_pid")
    count = (whole.capture.samples + whole.capture.switch_records) // 100
    model = model_of("futex_pid", text=with_unreadable_switches("futex_pid", count))
    assert untrusted(model)
    # Then the text report's first paragraph says so, and the JSON report's first caveat
    text = TextReport(StackView(), top=5, width=100, color=False).render(model)
    first = text.split("\n\n")[0].replace("\n", " ")
    assert first.startswith(f"WARNING: {count:,} of the ") and "cannot be trusted" in first
    report = json.loads(JsonReport(StackView(), top=5).render(model))
    assert report["caveats"][0].startswith(f"{count:,} of the ") and "cannot be trusted" in report["caveats"][0]
    assert report["counts"]["unreadable_events"] == count
