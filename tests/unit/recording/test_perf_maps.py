"""Perf maps: parsed and looked up as perf does (a hand-written map, hand-worked answers), named
as V8's frames, and read from a process only when it is a regular file of the process's user."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from offcpu.reading.symbols import Symbolizer, TaskHistory
from offcpu.recording.perf_maps import PerfMap, frame_name, read_process
from offcpu.stacks import UNKNOWN, runtime_frame, runtime_parts

MAP = """\
1000 100 JS:~first /srv/a.js:3:10
1200 80 Builtin:CallFunction
not a line
zz 10 JS:~bad /srv/a.js:1:1
1100 10 JS:*old /srv/a.js:5:1
1100 20 JS:*new /srv/a.js:5:1
"""


def test_a_perf_map_names_the_range_an_address_is_in_the_last_line_for_a_start_winning() -> None:
    perf_map = PerfMap.parse(MAP)
    assert perf_map.find(0xFFF) is None
    assert perf_map.find(0x1000) == perf_map.find(0x10FF) == "JS:~first /srv/a.js:3:10"
    assert perf_map.find(0x1100) == perf_map.find(0x111F) == "JS:*new /srv/a.js:5:1"
    assert perf_map.find(0x1120) is None  # between two ranges
    assert perf_map.find(0x127F) == "Builtin:CallFunction"
    assert perf_map.find(0x1280) is None


def test_v8_names_are_kept_and_marked_as_javascript_frames() -> None:
    assert frame_name("JS:*work /srv/app.js:12:20") == "JS:*work (app.js:12) [js]"
    assert frame_name("LazyCompile:~work file:///srv/app.mjs:3:7") == "LazyCompile:~work (app.mjs:3) [js]"
    assert frame_name("JS:~ /srv/app.js:1:1") == "JS:~ (app.js:1) [js]"
    assert frame_name("Builtin:CallFunction") == "Builtin:CallFunction (V8) [js]"
    assert runtime_frame("JS:*work (app.js:12) [js]")
    assert runtime_parts("JS:*work (app.js:12) [js]") == ("JS:*work", "app.js", 12)


def test_only_addresses_in_no_file_of_a_process_with_a_perf_map_are_named_from_it() -> None:
    symbolizer = Symbolizer(TaskHistory(), None, False, perf_maps={7: PerfMap.parse(MAP)})
    assert symbolizer.user_name(7, 0, 0x1105) == "JS:*new (a.js:5) [js]"
    assert symbolizer.user_name(7, 0, 0x1150) == UNKNOWN
    assert symbolizer.user_name(8, 0, 0x1105) == UNKNOWN
    assert symbolizer.perf_map_named == {7: 1}


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A process of ours (root's, as offcpu's tests run), whose /tmp is this one's."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()
        Path(f"/tmp/perf-{process.pid}.map").unlink(missing_ok=True)


def test_a_processs_own_regular_perf_map_is_read(sleeper: int) -> None:
    Path(f"/tmp/perf-{sleeper}.map").write_text(MAP)
    process = read_process(sleeper)
    assert process is not None and (process.text, process.error) == (MAP, None)


def test_no_perf_map_and_no_node_is_nothing(sleeper: int) -> None:
    assert read_process(sleeper) is None


def _link(path: Path, tmp_path: Path) -> None:
    target = tmp_path / "map"
    target.write_text(MAP)
    path.symlink_to(target)


def _another_users(path: Path, tmp_path: Path) -> None:
    path.write_text(MAP)
    os.chown(path, 65534, 65534)


@pytest.mark.parametrize("plant", [_link, lambda path, _: os.mkfifo(path), _another_users],
                         ids=["link", "fifo", "another user's"])
def test_a_perf_map_planted_is_not_read(sleeper: int, tmp_path: Path, plant) -> None:  # noqa: ANN001
    plant(Path(f"/tmp/perf-{sleeper}.map"), tmp_path)
    signal.alarm(10)  # a blocking open of the FIFO would wait for ever
    try:
        process = read_process(sleeper)
    finally:
        signal.alarm(0)
    assert process is not None and process.text is None and process.error, process
