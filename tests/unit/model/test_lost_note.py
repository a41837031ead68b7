"""What the reports say when perf lost events: a ring buffer bigger than the one used."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offcpu.kinds import lost_note
from tests.helpers.engine_events import info

PERF = ["/usr/bin/perf", "record", "-o", "perf.data"]


@pytest.mark.parametrize(("options", "suggested"), [
    ([], "--mmap-pages 1024"),  # perf chose its own
    (["--mmap-pages", "1024"], "--mmap-pages 4096"),
    (["--mmap-pages", "64"], "--mmap-pages 256"),
])
def test_the_note_suggests_a_bigger_ring_buffer_than_the_one_used(options: list[str], suggested: str) -> None:
    # the command's own "--mmap-pages" (after "--") is not perf's
    capture = replace(info(), perf_command=[*PERF, *options, "--", "prog", "--mmap-pages", "8"],
                      samples=900, switch_records=0, lost_events=100)
    note = lost_note(capture)
    assert note is not None and "perf lost 100 events (10.0%)" in note and f"for example {suggested}," in note


def test_no_note_when_nothing_was_lost() -> None:
    assert lost_note(info()) is None
