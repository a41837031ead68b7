"""Reports of a capture whose stacks were sampled (sched_events.Events.weights), made by the
engine from a few events written by hand: every format says how many waits carry a stack,
and the tables their times' standard errors. Times are microseconds from the window's start.

Thread 11 waits 100, 200 and 300 µs in futex_wait, with weights 0, 2 and 4; thread 12 (weight
1 throughout) ends each wait 5 µs before 11 runs again, and waits in poll meanwhile.
- futex_wait's row: 2*200 + 4*300 = 1,600 µs, 2 + 4 = 6 waits; its variance
  2*1*200² + 4*3*300² = 80,000 + 1,080,000 = 1,160,000 µs², so one standard error is
  sqrt(1,160,000) = 1,077.03 µs: "1.6 ± 1.1" ms.
- 7 waits: 11's three and 12's four (since before the recording to 1,000, two between
  11's waits, and from 3,300 to the end); 6 carry a stack (11's first does not).
"""

from __future__ import annotations

import gzip
import json
from html import escape

from offcpu.flamegraph import require_renderer
from offcpu.model import Model
from offcpu.renderers.flame import title
from offcpu.renderers.html import HtmlReport
from offcpu.renderers.json import JsonReport
from offcpu.renderers.perfetto import Bounds, PerfettoTrace
from offcpu.renderers.pprof import PprofProfile
from offcpu.renderers.speedscope import SpeedscopeProfile
from offcpu.renderers.text import TextReport
from offcpu.stackview import StackView, drawn, selected
from offcpu.summaries import sampling_note
from tests.unit.test_engine_events import US, builder, model, switch

NOTE = ("stacks of 6 of 7 waits (sampled under the cost budget); times per stack are estimates, ± one standard "
        "error; threads' times are exact")


def sampled() -> Model:
    events = builder()
    for start_us, length_us, weight in ((1000, 100, 0), (2000, 200, 2), (3000, 300, 4)):
        switch(events, start_us, 11, "S", 12, "futex_wait", weight=weight)
        events.sched_waking((start_us + length_us - 5) * US, 10, 12, "t12", 11, "futex_wake")
        switch(events, start_us + length_us, 12, "S", 11, "poll")
    return model(events)


def test_the_note_says_how_many_waits_carry_a_stack() -> None:
    assert sampling_note(sampled()) == NOTE


def test_the_text_report_says_it_and_gives_the_stacks_times_with_their_standard_error() -> None:
    text = TextReport(StackView(), top=5, width=200, color=False).render(sampled())
    assert f"Note: {NOTE}" in text
    [row] = [line for line in text.splitlines() if "futex_wait" in line and "|" in line]
    assert row.split("|")[1].strip() == "1.6 ± 1.1"
    # 11's thread total is exact: 100 + 200 + 300 µs
    [thread] = [line for line in text.splitlines() if line.startswith("|  11 |")]
    assert thread.split("|")[3].strip() == "0.6"
    # a finding's evidence quotes the stack's time with it too
    assert "  1.6 ± 1.1 ms in 6 waits (S): futex_wait" in text.splitlines()
    # 12's stacks weigh 1 each: no ±
    [poll] = [line for line in text.splitlines() if "| poll" in line]
    assert poll.split("|")[1].strip() == "8.4"


def test_the_json_report_gives_the_counts_and_each_stacks_standard_error() -> None:
    report = json.loads(JsonReport(StackView(), top=5).render(sampled()))
    assert report["sampling"] == {"waits": 7, "stacked_waits": 6}
    assert NOTE in report["caveats"]
    stacks = {stack["frames"][0]: stack for stack in report["stacks"]}
    assert (stacks["futex_wait"]["offcpu_us"], stacks["futex_wait"]["offcpu_us_stderr"]) == (1600, 1077.0)
    assert stacks["poll"]["offcpu_us_stderr"] == 0.0
    evidence = [item for finding in report["findings"] for item in finding["evidence"]
                if item["frames"] == ["futex_wait"]]
    assert [(item["offcpu_us"], item["offcpu_us_stderr"]) for item in evidence] == [(1600, 1077.0)]
    assert all("variance" not in site for finding in report["findings"] for site in finding["release_sites"])


def test_the_flame_graph_and_the_exports_say_it() -> None:
    result = sampled()
    assert title(result, StackView()).endswith("; stacks of 6 of 7 waits, times estimated")
    speedscope = json.loads(SpeedscopeProfile(StackView(), by_process=False).render(result))
    assert speedscope["name"] == f"Off-CPU time of test (pid 10) ({NOTE})"
    assert NOTE.encode() in gzip.decompress(PprofProfile(StackView()).render(result))  # a comment string
    trace = json.loads(PerfettoTrace(StackView(), Bounds(10, 100)).render(result))
    assert trace["otherData"]["sampling"] == f"{NOTE}; only waits that carry a stack are on the timeline"


def test_the_html_report_says_it_and_gives_the_stacks_times_with_their_standard_error() -> None:
    page = HtmlReport(require_renderer(), StackView(), top=5).render(sampled())  # scripts/setup installs one
    assert f'<p class="warn">{escape(NOTE)}</p>' in page
    assert ">1.6 ± 1.1</td>" in page
    assert "<li>1.6 ± 1.1 ms in 6 waits (S): " in page


def test_stacks_drawn_as_one_add_their_variances() -> None:
    # Given 11's waits in two stacks: 200 µs of weight 2 and 100 µs of weight 3
    events = builder()
    switch(events, 1000, 11, "S", 12, "futex_wait", weight=2)
    switch(events, 1200, 12, "S", 11, "poll")
    switch(events, 2000, 11, "S", 12, "pipe_read", weight=3)
    switch(events, 2100, 12, "S", 11, "poll")
    # When drawn with user frames only (the stacks here have none: one stack)
    [stack] = [stack for stack in drawn(model(events), StackView(user_only=True)) if stack.root == "t11"]
    # Then its time is 2*200 + 3*100 µs and its variance 2*1*200² + 3*2*100² = 80,000 + 60,000
    assert (stack.offcpu_us, stack.variance) == (700, 140_000)


def test_filters_keep_threads_exact_totals_and_states_give_their_rows_estimates() -> None:
    result = sampled()
    assert selected(result, StackView(comms=frozenset({"t11"}))).threads[11].offcpu_us == 600  # 100 + 200 + 300
    assert selected(result, StackView(states=frozenset({"S"}))).threads[11].offcpu_us == 1600  # futex_wait's row
