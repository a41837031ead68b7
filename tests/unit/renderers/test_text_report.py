"""The text report, plain at a fixed width, against golden files made from the fixtures.

When the report changes on purpose: UPDATE_GOLDEN=1 scripts/test tests/unit/renderers/test_text_report.py,
then read the diff of tests/unit/renderers/golden/ before committing it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from offcpu.model import Model
from offcpu.model.loading import build
from offcpu.model.stackview import StackView, drawn, listed
from offcpu.model.summaries import by_state, waker_pairs
from offcpu.renderers.console import MAX_WIDTH, MIN_WIDTH, stdout_layout
from offcpu.renderers.text import TextReport
from tests.fixtures import model_of
from tests.helpers.bpf_records import lost_and_unseen

GOLDEN = Path(__file__).parent / "golden"
ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid"])
def test_plain_text_matches_the_golden_file(name):
    text = TextReport(StackView(), top=5, width=100, color=False).render(model_of(name))
    golden = GOLDEN / f"text_{name}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def whole_numbers(model: Model, top: int) -> list[str]:
    """What the tables show in columns that are never left out, as the report writes them:
    every stack's and thread's off-CPU time, every tid, every state's off-CPU time and
    every waker pair's blocked time."""
    def ms(microseconds: int) -> str:
        return f"{microseconds / 1000:,.1f}"

    threads = sorted(model.threads.values(), key=lambda t: -t.offcpu_us)[:top]
    return ([ms(stack.offcpu_us) for stack in listed(drawn(model, StackView()))[:top]]
            + [str(t.tid) for t in threads] + [ms(t.offcpu_us) for t in threads]
            + [ms(state.offcpu_us) for state in by_state(model)]
            + [ms(pair.blocked_us) for pair in waker_pairs(model)[:top]])


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all"])
@pytest.mark.parametrize("width", [40, 60, 80, 100, 220])
@pytest.mark.parametrize("color", [False, True])
def test_the_tables_fit_the_width_and_cut_no_number(name, width, color):
    # Given a report at this width
    model = model_of(name)
    text = TextReport(StackView(), top=10, width=width, color=color).render(model)
    plain = ESCAPE.sub("", text)
    assert ("\x1b[" in text) == color
    # Then no line is wider, and every number of the tables is there whole
    assert max(len(line) for line in plain.splitlines()) <= width
    cells = set(re.split(r"[\s|]+", plain))
    assert not [number for number in whole_numbers(model, 10) if number not in cells]


@pytest.mark.parametrize("width", [60, 100])
def test_who_was_woken_is_told_at_any_width(width):
    # Given the wakers of a futex storm
    model = model_of("futex_pid")
    pairs = waker_pairs(model)[:10]
    text = TextReport(StackView(), top=10, width=width, color=False).render(model)
    # Then each row names the thread woken, with its tid whole
    table = text.split("Who woke whom\n")[1].split("\n\n")[0].splitlines()
    body = table[[i for i, line in enumerate(table) if line.startswith("+")][1] + 1:]  # below the header's rule
    rows = [line.split("|")[1:-1] for line in body if line.startswith("|")]
    assert [row[1].strip().rpartition("-")[2] for row in rows] == [str(pair.wakee_tid) for pair in pairs]
    assert [row[0].strip().rpartition("-")[2] for row in rows] == [str(pair.waker_tid) for pair in pairs]


def test_columns_are_left_out_only_for_want_of_width_and_said_so():
    model = model_of("futex_pid")
    wide = TextReport(StackView(), top=10, width=100, color=False).render(model)
    assert "Left out" not in wide and "then run-queue ms" in wide
    narrow = TextReport(StackView(), top=10, width=60, color=False).render(model)
    assert "Left out, for want of width: then run-queue ms" in narrow


def test_colour_on_a_terminal():
    assert "\x1b[" in TextReport(StackView(), top=3, width=120, color=True).render(model_of("futex_pid"))


def test_top_limits_every_table():
    text = TextReport(StackView(), top=2, width=120, color=False).render(model_of("churn_pid"))
    assert f"Top 2 of {len(listed(drawn(model_of('churn_pid'), StackView())))} off-CPU stacks" in text
    threads = text.split("Threads\n")[1].split("\n\n")[0]
    assert sum(1 for line in threads.splitlines() if line.startswith("|")) == 1 + 2  # header and two rows


def threads_table(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("Threads")
    return lines[start:lines.index("", start)]


@pytest.mark.parametrize("name, several", [("futex_pid", False), ("mmap_all", True)])
def test_threads_say_their_process_when_there_are_several(name, several):
    # Given a capture of one process, or of the whole machine
    model = model_of(name)
    assert (len({thread.pid for thread in model.threads.values()}) > 1) == several
    # Then the threads table has a pid column only when its threads are of several processes
    table = threads_table(TextReport(StackView(), top=10, width=120, color=False).render(model))
    headers = [cell.strip() for cell in table[2].split("|")[1:3]]
    assert headers == (["tid", "pid"] if several else ["tid", "comm"])
    if several:  # each row's pid is its thread's
        for row in table[4:-1]:
            tid, pid = (int(cell) for cell in row.split("|")[1:3])
            assert model.threads[tid].pid == pid


@pytest.mark.parametrize("columns, width", [("100000000", MAX_WIDTH), ("1", MIN_WIDTH), ("132", 132), ("", 100)])
def test_the_width_is_bounded(monkeypatch, columns, width):
    # Given COLUMNS of any size (100000000 took 20 s and 5 GB to print 10 KB), for a pipe
    monkeypatch.setenv("COLUMNS", columns)
    assert stdout_layout(to_file=True) == (width, False)


def test_only_what_changes_a_number_is_said_in_red(tmp_path):
    # Given a BPF capture that lost 3 waits, and 2 of whose switches the kernel did not report
    lost_and_unseen(tmp_path)
    text = TextReport(StackView(), top=5, width=400, color=True).render(build(tmp_path))
    lines = {ESCAPE.sub("", line): line for line in text.splitlines()}
    # Then the lost waits, which change the numbers, are a warning, in red
    lost = [line for plain, line in lines.items() if plain.startswith("Warning: the BPF recording lost 3 waits")]
    assert len(lost) == 1 and "\x1b[31m" in lost[0], lines
    # and the switches placed by run time, which leave every total whole, a note in the text's own colour
    unseen = [line for plain, line in lines.items() if plain.startswith("Note: the kernel did not report 2 of")]
    assert len(unseen) == 1 and "\x1b[" not in unseen[0], lines
