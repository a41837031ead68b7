"""The text report, plain at a fixed width, against golden files made from the fixtures.

When the report changes on purpose: UPDATE_GOLDEN=1 scripts/test tests/unit/test_text_report.py,
then read the diff of tests/unit/golden/ before committing it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from offcpu.renderers.text import TextReport
from offcpu.stackview import StackView
from tests.unit.test_engine import model_of

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid"])
def test_plain_text_matches_the_golden_file(name):
    text = TextReport(StackView(), top=5, width=100, color=False).render(model_of(name))
    golden = GOLDEN / f"text_{name}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_plain_text_has_no_escape_codes_and_fits_the_width():
    text = TextReport(StackView(), top=10, width=80, color=False).render(model_of("mmap_all"))
    assert "\x1b[" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_colour_on_a_terminal():
    assert "\x1b[" in TextReport(StackView(), top=3, width=120, color=True).render(model_of("futex_pid"))


def test_top_limits_every_table():
    text = TextReport(StackView(), top=2, width=120, color=False).render(model_of("churn_pid"))
    assert "Top 2 off-CPU stacks" in text
    threads = text.split("Threads\n")[1].split("\n\n")[0]
    assert sum(1 for line in threads.splitlines() if line.startswith("|")) == 1 + 2  # header and two rows
