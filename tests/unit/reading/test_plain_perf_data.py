"""What a perf.data recorded by perf alone says of its target, from the command line in its header."""

from __future__ import annotations

from offcpu.reading.plain_perf_data import _target


def test_the_target_is_read_from_any_command_line() -> None:
    # A damaged header, or perf record with no option at all, is a recording of every CPU
    assert _target(["perf", "record"]).kind == "all"
    assert _target(["perf", "record", "-p", ","]).kind == "all"
    assert _target(["perf", "record", "-p", "12,13"]).pids == (12, 13)
    assert _target(["perf", "record", "--", "sleep", "1"]).command == ("sleep", "1")
