"""offcpu report diff on real recordings: mmap_contention against its fixed twin."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import assert_one_line_error, example, run_offcpu

TOTALS = re.compile(r"Off CPU in all stacks: ([\d,.]+) ms in (\S+), ([\d,.]+) ms in (\S+) \(")
SVG = "{http://www.w3.org/2000/svg}"
RGB = re.compile(r"rgb\((\d+),(\d+),(\d+)\)")


@pytest.fixture(scope="module")
def captures(tmp_path_factory, perf) -> tuple[Path, Path]:
    """1 s each of mmap_contention_fixed (BASE) and mmap_contention (NEW), 8 threads."""
    directory = tmp_path_factory.mktemp("diff")
    recorded = []
    for name, program in (("fixed", "mmap_contention_fixed"), ("patho", "mmap_contention")):
        capture = directory / name
        result = run_offcpu("record", "-d", "1", "-o", str(capture), "--", str(example(program)), "-t", "8",
                            "-s", "30")
        assert result.returncode == 0, result.stderr
        recorded.append(capture)
    return recorded[0], recorded[1]


def report_diff(*args: str, columns: int = 100) -> subprocess.CompletedProcess[str]:
    """offcpu report diff with the plain table at a known width (COLUMNS may be set around the tests)."""
    return run_offcpu("report", "diff", *args, env={**os.environ, "COLUMNS": str(columns)})


def table_cells(stdout: str) -> list[list[str]]:
    """The plain table's rows below its header, as cells."""
    lines = stdout.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("+-")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[rules[1] + 1:rules[2]]] \
        if len(rules) == 3 else []


def milliseconds(cell: str) -> float:
    """A time as the tables print it: milliseconds, to a tenth, with thousands separated."""
    assert re.fullmatch(r"[+-]?[\d,]+\.\d", cell), cell
    return float(cell.replace(",", ""))


def grown_rows(stdout: str) -> list[tuple[str, float, float, float]]:
    """The plain table's rows: (stack, base ms, new ms, change ms)."""
    return [(stack, milliseconds(base), milliseconds(new), milliseconds(change))
            for stack, base, new, change in table_cells(stdout)]


def frames(svg: Path) -> list[tuple[str, float, tuple[int, int, int]]]:
    """The frames of a flame graph SVG: (label as its tooltip gives it, width, fill as r, g, b)."""
    found = []
    for group in ElementTree.parse(svg).getroot().iter(f"{SVG}g"):
        title, rect = group.find(f"{SVG}title"), group.find(f"{SVG}rect")
        if title is not None and rect is not None:
            fill = RGB.fullmatch(rect.get("fill", ""))
            assert fill, rect.get("fill")
            red, green, blue = (int(c) for c in fill.groups())
            found.append((title.text or "", float(rect.get("width", 0)), (red, green, blue)))
    return found


def window_us(capture: Path) -> int:
    model = json.loads((capture / "model.json").read_text())
    return round((model["window_end_ns"] - model["window_start_ns"]) / 1000)


def test_the_fix_against_the_problem_draws_a_differential_graph(captures, tmp_path):
    fixed, patho = captures
    svg = tmp_path / "diff.svg"
    # When the fixed twin is BASE and the pathological program NEW
    result = report_diff(str(fixed), str(patho), "-o", str(svg))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"Wrote {svg}"
    # Then the SVG is a flame graph titled with both captures, its mmap_lock waits grown (red)
    root = ElementTree.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = svg.read_text()
    assert "Off-CPU time of patho against fixed: red grew, blue shrank" in text
    assert "rwsem_down_write_slowpath" in text
    # coloured where the threads waited: flamegraph.pl colours a frame by the change in its own time, which
    # would all be the scheduler's leaf frames' if they were drawn; growth is rgb(255,x,x), x < 255
    drawn = frames(svg)
    assert not any(label.startswith(("__schedule ", "schedule ")) for label, *_ in drawn)
    label, _, (red, green, blue) = max((frame for frame in drawn if frame[0].startswith("rwsem_down_write_slowpath ")),
                                       key=lambda frame: frame[1])
    assert red == 255 and green == blue < 255, (label, red, green, blue)
    # And the table's stacks that grew most are the mmap_lock waits (with preemption: 8 threads, few CPUs)
    rows = grown_rows(result.stdout)
    assert rows and len(rows) <= 10
    assert any("rwsem_down_write_slowpath" in stack for stack, *_ in rows[:3]), result.stdout
    assert [change for *_, change in rows] == sorted((change for *_, change in rows), reverse=True)
    # each of the three is rounded to 0.1 ms on its own, so they agree to 0.15 ms
    assert all(change > 0 and abs(new - base - change) <= 0.15 + 1e-9 for _, base, new, change in rows)
    # Among the waits (state D), the writers' and the page faults' waits for mmap_lock lead
    waits = grown_rows(report_diff("--text", "--state", "D", str(fixed), str(patho)).stdout)
    assert "rwsem_down_write_slowpath" in waits[0][0] or "rwsem_down_read_slowpath" in waits[0][0]
    assert any("rwsem_down_read_slowpath" in stack for stack, *_ in waits), waits


@pytest.mark.parametrize("columns", [60, 80, 100])
@pytest.mark.parametrize("waker", [(), ("--waker",)])
def test_the_table_fits_the_width_and_cuts_no_number(captures, columns, waker):
    fixed, patho = captures
    wide = table_cells(report_diff("--text", *waker, str(fixed), str(patho), columns=300).stdout)
    table = report_diff("--text", *waker, str(fixed), str(patho), columns=columns).stdout
    assert max(len(line) for line in table.splitlines()) <= columns
    # the change, the table's last column, is never left out nor cut
    assert [row[-1] for row in table_cells(table)] == [row[-1] for row in wide] != []
    if "Left out" not in table:
        assert [row[-3:] for row in table_cells(table)] == [row[-3:] for row in wide]


def test_new_is_normalised_to_the_window_of_base_and_says_so(captures):
    fixed, patho = captures
    result = report_diff("--text", str(fixed), str(patho))
    assert result.returncode == 0, result.stderr
    base_us, new_us = window_us(fixed), window_us(patho)
    if base_us == new_us:
        assert "Not scaled: both windows are" in result.stdout
    else:
        assert f"NEW scaled by {base_us / new_us:.4g} from its {new_us / 1e6:.3f} s window to BASE's " \
               f"{base_us / 1e6:.3f} s" in result.stdout


def test_text_prints_only_the_table_and_writes_nothing(captures):
    fixed, patho = captures
    before = set(patho.parent.iterdir())
    result = report_diff("--text", "--top", "3", str(fixed), str(patho))
    assert result.returncode == 0 and result.stderr == ""
    assert set(patho.parent.iterdir()) == before
    lines = result.stdout.splitlines()
    assert lines[0] == "Stacks that grew most from fixed to patho"
    assert len(grown_rows(result.stdout)) == 3
    assert "\x1b[" not in result.stdout and max(len(line) for line in lines) <= 100
    assert TOTALS.search(result.stdout)


def test_view_options_apply_to_both_captures(captures):
    fixed, patho = captures
    result = report_diff("--text", "--state", "D", str(fixed), str(patho))
    assert result.returncode == 0, result.stderr
    base, _, new, _ = TOTALS.search(result.stdout).groups()

    def d_time(capture: Path) -> int:
        return sum(row[4] for row in json.loads((capture / "model.json").read_text())["rows"] if row[2] == "D")

    assert abs(milliseconds(base) - d_time(fixed) / 1000) <= 0.05
    scale = window_us(fixed) / window_us(patho)
    assert abs(milliseconds(new) - d_time(patho) * scale / 1000) <= 0.1  # rounded per stack


def test_a_folded_file_as_base(captures, tmp_path):
    fixed, patho = captures
    folded = tmp_path / "fixed.folded"
    folded.write_text(run_offcpu("report", "folded", str(fixed)).stdout)
    result = report_diff("--text", str(folded), str(patho))
    assert result.returncode == 0, result.stderr
    assert "Not normalised: BASE is a folded file, which has no window length." in result.stdout
    rows = grown_rows(result.stdout)
    assert any("rwsem_down_write_slowpath" in stack for stack, *_ in rows[:3]), result.stdout
    # BASE's numbers are the capture's, as they were written
    from_capture = {stack: base for stack, base, *_ in grown_rows(
        report_diff("--text", str(fixed), str(patho)).stdout)}
    assert all(from_capture[stack] == base for stack, base, *_ in rows if stack in from_capture)
    # and it draws
    svg = tmp_path / "folded.svg"
    assert report_diff(str(folded), str(patho), "-o", str(svg)).returncode == 0
    ElementTree.parse(svg)


def test_a_capture_against_itself_grew_nowhere(captures):
    _, patho = captures
    result = report_diff("--text", str(patho), str(patho))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("No stack grew from") and "Not scaled" in result.stdout


def test_output_beside_new_and_force(captures, tmp_path):
    fixed, patho = captures
    default = patho.with_name("patho.diff.svg")
    try:
        # Given no -o, the graph goes beside NEW
        assert report_diff(str(fixed), str(patho)).returncode == 0
        assert default.is_file()
        # and is not replaced without --force
        assert_one_line_error(report_diff(str(fixed), str(patho)), "exists", "--force")
        default.write_text("old")
        assert report_diff(str(fixed), str(patho), "--force").returncode == 0
        ElementTree.parse(default)
    finally:
        default.unlink(missing_ok=True)
    existing = tmp_path / "mine.svg"
    existing.write_text("keep me")
    assert_one_line_error(report_diff(str(fixed), str(patho), "-o", str(existing)), "exists")
    assert existing.read_text() == "keep me"
    assert_one_line_error(report_diff(str(fixed), str(patho), "-o", str(tmp_path)), "directory")
    assert_one_line_error(report_diff("--text", str(fixed), str(patho), "-o", str(tmp_path / "x")),
                          "--text writes no SVG")


class TestBadInput:
    def test_missing_base_or_new(self, captures, tmp_path):
        fixed, _ = captures
        assert_one_line_error(report_diff(str(tmp_path / "gone"), str(fixed)), "BASE", "does not exist")
        assert_one_line_error(report_diff(str(fixed), str(tmp_path / "gone")), "NEW", "does not exist")

    def test_malformed_folded_file_names_the_line(self, captures, tmp_path):
        _, patho = captures
        bad = tmp_path / "bad.folded"
        bad.write_text("a;b 10\n\na;c ten\n")
        assert_one_line_error(report_diff("--text", str(bad), str(patho)), "bad.folded, line 3",
                              "a;c ten")

    def test_both_empty(self, captures, tmp_path):
        fixed, patho = captures
        empty = tmp_path / "empty.folded"
        empty.write_text("")
        assert_one_line_error(report_diff("--text", str(empty), str(empty)), "neither BASE nor NEW")
        assert_one_line_error(report_diff("--text", "--comm", "nginx", str(fixed), str(patho)),
                              "neither BASE nor NEW")
        # NEW empty: the table works, a graph as wide as NEW's time cannot be drawn
        assert report_diff("--text", str(patho), str(empty)).returncode == 0
        assert_one_line_error(report_diff(str(patho), str(empty), "-o", str(tmp_path / "d.svg")),
                              "no off-CPU time to draw")

    def test_no_renderer(self, captures, tmp_path):
        fixed, patho = captures
        assert_one_line_error(report_diff(str(fixed), str(patho), "-o", str(tmp_path / "d.svg"),
                                         "--flamegraph", str(tmp_path / "nothing")), "apt-get install")
        assert not (tmp_path / "d.svg").exists()

    def test_not_a_folded_file(self, captures, tmp_path):
        _, patho = captures
        binary = tmp_path / "perf.data"
        binary.write_bytes(b"\xff\xfe\x00garbage")
        assert_one_line_error(report_diff("--text", str(binary), str(patho)), "cannot read",
                              "folded file")
