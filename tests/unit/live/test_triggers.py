"""--trigger: what it takes, and the one line that says what is wrong."""

from __future__ import annotations

import click
import pytest

from offcpu.live.triggers import parse


def test_a_finding_at_a_severity() -> None:
    trigger = parse("lock_contention>=warning")
    assert (trigger.subject, trigger.compare, trigger.value) == ("lock_contention", ">=", 1)
    assert not trigger.holds([], None)


def test_the_slowest_waits() -> None:
    trigger = parse(" p99_wait_ms > 200 ")
    assert trigger.holds([], 200.5) and not trigger.holds([], 200.0) and not trigger.holds([], None)


@pytest.mark.parametrize(("text", "words"), [
    ("lock_contention", "is not a trigger"),
    ("lock_contentoin>=warning", "no finding is called 'lock_contentoin'"),
    ("lock_contention>=bad", "compared with a severity"),
    ("p99_wait_ms>fast", "compared with milliseconds"),
])
def test_what_is_not_a_trigger(text: str, words: str) -> None:
    with pytest.raises(click.BadParameter, match=words):
        parse(text)
