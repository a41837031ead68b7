"""What capture.json and the reports say of a command the recording ended while it ran, and
which recordings hold a command's whole run (a check compares those a run)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offcpu.capture import CaptureInfo, Target
from tests.helpers.engine_events import info

COMMAND = Target("command", "sqlite3", pid=10, command=("sqlite3", "d.db"))
ALONGSIDE = Target("pid", "server", pid=10, pids=(10,), command=("wrk", "-d", "2s"), command_pid=11)


def test_a_command_ended_at_the_duration_says_so_with_what_it_was_sent() -> None:
    capture = replace(info(), target=COMMAND, duration_requested_s=5.0, ended_by="duration",
                      command_cut_short=["SIGTERM"])
    assert capture.cut_short_note == ("the command sqlite3 d.db was still running at its 5 s limit (--duration), and "
                                      "was sent SIGTERM: what it did after is not recorded, so this is part of its run")
    killed = replace(capture, ended_by="max size", command_cut_short=["SIGTERM", "SIGKILL"])
    assert killed.cut_short_note is not None
    assert "when the capture reached its size limit (--max-size), and was sent SIGTERM, then SIGKILL" \
        in killed.cut_short_note
    assert not capture.whole_run and not killed.whole_run


@pytest.mark.parametrize(("target", "ended_by", "whole"), [
    (COMMAND, "target exited", True),  # the command is the target: its exit ends it
    (ALONGSIDE, "command exited", True),
    (ALONGSIDE, "target exited", False),  # the server exited first: the load generator was ended
    (COMMAND, "duration", False),
    (Target("pid", "server", pid=10, pids=(10,)), "duration", False),  # no command: no run to speak of
])
def test_a_whole_run_is_a_command_that_ended_the_recording(target: Target, ended_by: str, whole: bool) -> None:
    capture = replace(info(), target=target, ended_by=ended_by)
    assert capture.whole_run is whole and capture.cut_short_note is None


def test_capture_json_keeps_what_the_command_was_sent() -> None:
    capture = replace(info(), target=COMMAND, ended_by="duration", command_cut_short=["SIGTERM", "SIGKILL"])
    again = CaptureInfo.from_json(capture.to_json())
    assert again.command_cut_short == ["SIGTERM", "SIGKILL"] and again.cut_short_note == capture.cut_short_note
