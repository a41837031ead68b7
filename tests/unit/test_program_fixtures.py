"""The fixtures of the real programs (tests/programs.py) hold what tests of
them need: the capture and its perf.data, small; the chain example's also
hold its own clock, over the window that was recorded."""

from __future__ import annotations

import json

import pytest

from tests import programs
from tests.fixtures import HERE, perf_data, program_summary

MAX_BYTES = 1_500_000


@pytest.mark.parametrize("name", list(programs.WORKLOADS))
def test_a_real_program_has_a_small_complete_fixture(name):
    files = {path.name: path.stat().st_size for path in (HERE / name).iterdir()}
    assert {"capture.json", "perf.data"} <= files.keys()
    assert sum(files.values()) < MAX_BYTES, files
    assert perf_data(name).read_bytes()[:8] == b"PERFILE2"
    info = json.loads((HERE / name / "capture.json").read_text())
    assert info["samples"] > 0 and info["lost_events"] == 0


@pytest.mark.parametrize("name", ["lock_chain", "lock_chain_sleep", "lock_chain_fixed"])
def test_the_chain_fixtures_carry_the_programs_clock_for_the_recorded_window(name):
    summary = program_summary(name)
    info = json.loads((HERE / name / "capture.json").read_text())
    assert info["target"]["kind"] == "command" and info["command_exit_status"] == 0
    window_s = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    assert abs(float(summary["wall_s"]) - window_s) < 0.25, (summary, window_s)
    assert int(summary["ops"]) > 0 and float(summary["lock_wait_s"]) >= 0
    if name == "lock_chain_fixed":
        assert int(summary["held_calls"]) == 0 and int(summary["free_calls"]) == int(summary["ops"])
    else:
        assert int(summary["held_calls"]) == int(summary["ops"]) and int(summary["lock_waits"]) > 0
