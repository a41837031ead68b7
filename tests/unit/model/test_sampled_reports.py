"""Reports of a capture whose stacks were sampled (sched_events.Events.weights), made by the
engine from a few events written by hand: every format says how many waits carry a stack,
and the tables their times' standard errors. Times are microseconds from the window's start.

Thread 11 waits 1,000, 2,000 and 3,000 µs, with weights 0, 2 and 4, the last two in futex_wait
and pipe_read; thread 12 (weight 1 throughout) ends each wait 5 µs before 11 runs again, and
waits in poll meanwhile. 11's waits are one stratum (S, woken by 12) of 6,000 µs, 5,985 blocked
(995 + 1,995 + 2,995) and 15 in the run queue, 3 waits.
- The estimates: futex_wait 2*2,000 = 4,000 µs (3,990 blocked, 10 run queue, 2 waits, variance
  2*1*2,000² = 8,000,000 µs²), pipe_read 4*3,000 = 12,000 (11,980, 20, 4 waits, 4*3*3,000² =
  108,000,000).
- Scaled to the stratum: blocked 5,985 in proportion 3,990 : 11,980 is 1,495.3 and 4,489.7,
  rounded down to 1,495 and 4,489, the µs left to the larger remainder: 1,495 and 4,490; run
  queue 15 as 10 : 20 is 5 and 10; so futex_wait 1,500 µs and pipe_read 4,500, 1 and 2 waits.
- Their variance, with f = 6,000 / 16,000 = 0.375 and shares p = 1/4 and 3/4 of the estimate:
  f²(V(1 - 2p) + p²V_all) = 0.140625 * (4,000,000 + 7,250,000) and 0.140625 * (-54,000,000 +
  65,250,000), both 1,582,031 µs²: one standard error of 1,257.8 µs, "1.5 ± 1.3" and
  "4.5 ± 1.3" ms.
- 7 waits: 11's three and 12's four (since before the recording to 1,000, 2,000 -> 2,100,
  4,100 -> 4,200, and 7,200 to the end: poll 3,000 µs); 6 carry a stack (11's first does not).
"""

from __future__ import annotations

import gzip
import json
from html import escape

from offcpu.model import Model
from offcpu.model.stackview import StackView, drawn, selected
from offcpu.model.summaries import sampling_note
from offcpu.renderers.flame import title
from offcpu.renderers.flamegraph_tool import require_renderer
from offcpu.renderers.html import HtmlReport
from offcpu.renderers.json import JsonReport
from offcpu.renderers.perfetto import Bounds, PerfettoTrace
from offcpu.renderers.pprof import PprofProfile
from offcpu.renderers.speedscope import SpeedscopeProfile
from offcpu.renderers.text import TextReport
from tests.helpers.engine_events import US, builder, model, switch

NOTE = ("stacks were taken for 6 of the 7 waits, a sample that keeps the recording's cost down (--stack-budget): "
        "the time shown per stack is an estimate, ± one standard error; each thread's time is exact")


def sampled() -> Model:
    events = builder()
    for start_us, length_us, weight, stack in ((1000, 1000, 0, ""), (2100, 2000, 2, "futex_wait"),
                                               (4200, 3000, 4, "pipe_read")):
        switch(events, start_us, 11, "S", 12, stack, weight=weight)
        events.sched_waking((start_us + length_us - 5) * US, 10, 12, "t12", 11, "futex_wake")
        switch(events, start_us + length_us, 12, "S", 11, "poll")
    return model(events)


def test_the_note_says_how_many_waits_carry_a_stack() -> None:
    assert sampling_note(sampled()) == NOTE


def test_the_text_report_says_it_and_gives_the_stacks_times_with_their_standard_error() -> None:
    text = TextReport(StackView(), top=5, width=200, color=False).render(sampled())
    assert f"Note: {NOTE}" in text
    rows = {stack: [line for line in text.splitlines() if stack in line and "|" in line][0]
            for stack in ("futex_wait", "pipe_read", "| poll")}
    assert (rows["futex_wait"].split("|")[1].strip(), rows["pipe_read"].split("|")[1].strip()) == \
        ("1.5 ± 1.3", "4.5 ± 1.3")
    # 11's thread total is exact: 1,000 + 2,000 + 3,000 µs
    [thread] = [line for line in text.splitlines() if line.startswith("|  11 |")]
    assert thread.split("|")[3].strip() == "6.0"
    # a finding's evidence quotes the stack's time with it too
    assert "  4.5 ± 1.3 ms in 2 waits (S): pipe_read" in text.splitlines()
    # 12's stacks weigh 1 each: no ±
    assert rows["| poll"].split("|")[1].strip() == "3.0"


def test_the_json_report_gives_the_counts_and_each_stacks_standard_error() -> None:
    report = json.loads(JsonReport(StackView(), top=5).render(sampled()))
    assert report["sampling"] == {"waits": 7, "stacked_waits": 6}
    assert NOTE in report["caveats"]
    stacks = {stack["frames"][0]: stack for stack in report["stacks"]}
    assert (stacks["futex_wait"]["offcpu_us"], stacks["futex_wait"]["offcpu_us_stderr"]) == (1500, 1257.8)
    assert (stacks["pipe_read"]["offcpu_us"], stacks["pipe_read"]["offcpu_us_stderr"]) == (4500, 1257.8)
    assert stacks["poll"]["offcpu_us_stderr"] == 0.0
    evidence = [item for finding in report["findings"] for item in finding["evidence"]
                if item["frames"] == ["pipe_read"]]
    assert [(item["offcpu_us"], item["offcpu_us_stderr"]) for item in evidence] == [(4500, 1257.8)]
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
    assert f'<p class="caveat">{escape(NOTE)}</p>' in page  # a note, not a warning: the ± says it
    assert ">4.5 ± 1.3</td>" in page
    assert "<li>4.5 ± 1.3 ms in 2 waits (S): " in page


def test_stacks_drawn_as_one_add_their_variances() -> None:
    # When 11's two stacks are drawn with user frames only (they have none: one stack)
    [stack] = [stack for stack in drawn(sampled(), StackView(user_only=True)) if stack.root == "t11"]
    # Then its time is 1,500 + 4,500 µs and its variance 1,582,031 twice (rows of one stratum: an upper bound)
    assert (stack.offcpu_us, stack.variance) == (6000, 3_164_062)


def test_filters_keep_threads_exact_totals_and_states_their_rows_scaled_to_them() -> None:
    result = sampled()
    assert selected(result, StackView(comms=frozenset({"t11"}))).threads[11].offcpu_us == 6000
    # its rows in S, scaled to their stratum, hold all of it: 1,500 + 4,500 µs
    assert selected(result, StackView(states=frozenset({"S"}))).threads[11].offcpu_us == 6000
