"""Folded lines as flame graph renderers read them, on the fixtures' models: a
line's last frame must never end in " <digits>", or flamegraph.pl and inferno
read the line as a differential one with two counts."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from itertools import groupby
from xml.etree import ElementTree

import pytest

from offcpu.diagnosis.findings import findings
from offcpu.model.stackview import SEPARATOR, StackView, drawn, folded
from offcpu.renderers.flamegraph_tool import find_renderer
from offcpu.stacks import Stack
from tests.fixtures import model_of

FIXTURES = ["futex_pid", "churn_pid", "mmap_all"]
# flamegraph.pl's own pattern for "stack count", applied twice to find a second count.
FLAMEGRAPH_LINE = re.compile(r"^(.*)\s+?(\d+(?:\.\d*)?)$")
VIEWS = [StackView(), StackView(by_thread=True), StackView(user_only=True), StackView(kernel_only=True),
         StackView(waker=True), StackView(waker=True, by_thread=True), StackView(waker=True, user_only=True),
         StackView(waker=True, kernel_only=True)]


def read_as_differential(stack: str, microseconds: int) -> bool:
    """Whether flamegraph.pl would take the line "stack microseconds" for "stack before after"."""
    line = FLAMEGRAPH_LINE.match(f"{stack} {microseconds}")
    assert line is not None and line[1] == stack
    return FLAMEGRAPH_LINE.match(stack) is not None


def with_worker_3(model):
    """The model with every thread that woke another renamed "worker 3"."""
    model.wakers = [replace(waker, comm="worker 3") if waker.kind == "thread" else waker for waker in model.wakers]
    return model


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("view", VIEWS)
def test_no_line_of_the_fixtures_reads_as_two_counts(name, view):
    lines = folded(with_worker_3(model_of(name)), view)
    assert lines
    assert not [stack for stack, us in lines if read_as_differential(stack, us)]


def test_a_waker_named_with_a_blank_and_digits_is_one_frame():
    # Given a model whose wakers are threads named "worker 3"
    model = with_worker_3(model_of("futex_pid"))
    # When its stacks are drawn with their wakers
    lines = folded(model, StackView(waker=True))
    by_thread = folded(model, StackView(waker=True, by_thread=True))
    # Then the waker's name is the last frame, with '_' for the blank
    woken = [stack for stack, _ in lines if stack.endswith(";worker_3")]
    assert woken and all(f";{SEPARATOR};" in stack for stack in woken)
    assert not any("worker 3" in stack for stack, _ in lines)
    assert any(stack.rsplit(";", 1)[1].startswith("worker_3-") for stack, _ in by_thread)
    # and the time is what it was with any other name
    assert sum(us for _, us in lines) == sum(us for _, us in folded(model_of("futex_pid"), StackView(waker=True)))


def test_the_root_of_an_empty_stack_is_made_safe_too():
    # A stack perf recorded no frames of (never seen in practice): the thread's name is the last frame
    model = model_of("futex_pid")
    row = next(row for row in model.rows if row.offcpu_us)
    model.stacks[row.stack] = Stack((), 0)
    model.threads[row.tid] = replace(model.threads[row.tid], comm="worker 3")
    lines = dict(folded(model, StackView(tids=frozenset({row.tid}))))
    assert "worker_3" in lines and not any(read_as_differential(stack, us) for stack, us in lines.items())


def test_flamegraph_pl_draws_the_waker_lines_as_one_count():
    renderer = find_renderer()
    if renderer is None:
        pytest.skip("no flame graph renderer (scripts/setup installs Debian's flamegraph.pl)")
    lines = folded(with_worker_3(model_of("futex_pid")), StackView(waker=True))
    svg = subprocess.run([*renderer.command, "--countname", "us"], input="".join(f"{s} {us}\n" for s, us in lines),
                         capture_output=True, text=True, check=True).stdout
    titles = [title.text or "" for title in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}title")]
    total = sum(us for _, us in lines)
    assert f"all ({total:,} us, 100%)" in titles
    assert any(title.startswith("worker_3 (") for title in titles)
    assert not any("%;" in title for title in titles)  # a differential graph shows "(N us, P%; +D%)"


RUN = re.compile(r"\[unknown ×(\d+)(?:–(\d+))?\]")


def longest_unknown_run(frames: tuple[str, ...]) -> int:
    return max((len(list(run)) for frame, run in groupby(frames) if frame == "[unknown]"), default=0)


@pytest.mark.parametrize("view", VIEWS, ids=str)
def test_runs_of_unnamed_frames_are_drawn_as_one_frame_that_says_how_many(view):
    # Given thread_churn's model, where frame-pointer walks through libc give runs of
    # over a hundred frames perf could not name
    model = model_of("churn_pid")
    longest = max(longest_unknown_run(stack.frames) for stack in model.stacks)
    assert longest > 100
    # Then no drawn stack holds two of them in a row, and a frame says it stands for the longest run
    stacks = drawn(model, view)
    assert not any(longest_unknown_run((*stack.frames, *stack.waker)) > 1 for stack in stacks)
    said = [RUN.fullmatch(frame) for stack in stacks for frame in (*stack.frames, *stack.waker)]
    assert view.kernel_only or max(int(run[2] or run[1]) for run in said if run) == longest


def test_stacks_that_differ_in_the_length_of_a_run_are_one_line_with_both_times():
    # Given a model with one more stack: one of the others with one more unnamed frame in a run
    model = model_of("churn_pid")
    longest = max(model.stacks, key=lambda stack: longest_unknown_run(stack.frames))
    at = longest.frames.index("[unknown]")
    model.stacks.append(Stack(longest.frames[:at] + ("[unknown]",) + longest.frames[at:], longest.kernel_frames))
    copied = next(row for row in model.rows if model.stacks[row.stack] == longest)
    model.rows.append(replace(copied, stack=len(model.stacks) - 1, offcpu_us=1234))
    model.threads[copied.tid].offcpu_us += 1234
    # Then both are one line, whose time is both of theirs, and which says the runs' lengths
    before = dict(folded(model_of("churn_pid"), StackView()))
    after = dict(folded(model, StackView()))
    [gone] = before.keys() - after.keys()
    [grown] = after.keys() - before.keys()
    assert RUN.sub("run", gone) == RUN.sub("run", grown) and after[grown] == before[gone] + 1234
    assert sum(after.values()) == sum(thread.offcpu_us for thread in model.threads.values())


def test_a_finding_s_evidence_draws_runs_of_unnamed_frames_as_one_frame():
    model = model_of("churn_pid")
    evidence = [item for finding in findings(model) for item in finding.evidence]
    assert any(RUN.fullmatch(frame) for item in evidence for frame in item.frames)
    assert not any(longest_unknown_run(item.frames) > 1 for item in evidence)
