"""report svg, json and text on a real recording of mmap_contention."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from offcpu.renderers.flamegraph_tool import DEBIAN_NYTPROF_COPY, TITLE_CHARS
from tests.conftest import OFFCPU, assert_one_line_error, run_offcpu

SVG = "{http://www.w3.org/2000/svg}"


def svg_frames(path) -> list[str]:
    """The frame labels (title elements) of a flame graph SVG; parsing it proves it is XML."""
    root = ElementTree.parse(path).getroot()
    return [title.text or "" for title in root.iter(f"{SVG}title")]


def test_svg_default_name_title_and_frames(mmap_capture):
    target = mmap_capture.with_name(mmap_capture.name + ".svg")
    target.unlink(missing_ok=True)
    result = run_offcpu("report", "svg", str(mmap_capture))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"Wrote {target}"
    frames = svg_frames(target)
    assert any(frame.startswith("rwsem_down_write_slowpath ") for frame in frames)
    assert any(frame.startswith("__vm_munmap ") for frame in frames)
    text = target.read_text()
    assert "Off-CPU time of mmap_contention (pid" in text and "fp stacks" in text and " us, " in text


def test_svg_refuses_to_overwrite_without_force(mmap_capture, tmp_path):
    target = tmp_path / "graph.svg"
    target.write_text("keep me")
    assert_one_line_error(run_offcpu("report", "svg", str(mmap_capture), "-o", str(target)), "exists", "--force")
    assert target.read_text() == "keep me"
    assert run_offcpu("report", "svg", str(mmap_capture), "-o", str(target), "--force").returncode == 0
    assert svg_frames(target)


def test_svg_view_options_and_icicle(mmap_capture, tmp_path):
    flame, icicle = tmp_path / "flame.svg", tmp_path / "icicle.svg"
    assert run_offcpu("report", "svg", str(mmap_capture), "--state", "D", "-o", str(flame)).returncode == 0
    inverted = run_offcpu("report", "svg", str(mmap_capture), "--state", "D", "--inverted", "-o", str(icicle))
    assert inverted.returncode == 0
    assert sorted(svg_frames(flame)) == sorted(svg_frames(icicle))  # the same frames, drawn the other way up
    assert flame.read_text() != icicle.read_text()
    assert not any(frame.startswith("irqentry_exit_to_user_mode ") for frame in svg_frames(flame))  # R only


def test_svg_without_a_renderer(mmap_capture, tmp_path):
    result = run_offcpu("report", "svg", str(mmap_capture), "--flamegraph", "/nonexistent/flamegraph.pl",
                        "-o", str(tmp_path / "x.svg"))
    assert_one_line_error(result, "/nonexistent/flamegraph.pl", "libdevel-nytprof-perl", "inferno")


def test_svg_through_flamegraph_dir(mmap_capture, tmp_path):
    (tmp_path / "fg").mkdir()
    (tmp_path / "fg" / "flamegraph.pl").symlink_to("/usr/share/perl5/Devel/NYTProf/flamegraph.pl")
    env = {**os.environ, "FLAMEGRAPH_DIR": str(tmp_path / "fg")}
    assert run_offcpu("report", "svg", str(mmap_capture), "-o", str(tmp_path / "g.svg"), env=env).returncode == 0
    assert svg_frames(tmp_path / "g.svg")


def test_a_flamegraph_dir_without_a_renderer_is_an_error(mmap_capture, tmp_path):
    (tmp_path / "empty").mkdir()
    for place in (tmp_path / "missing", tmp_path / "empty"):
        env = {**os.environ, "FLAMEGRAPH_DIR": str(place)}
        for fmt in ("svg", "html"):
            result = run_offcpu("report", fmt, str(mmap_capture), "-o", str(tmp_path / f"g.{fmt}"), env=env)
            assert_one_line_error(result, f"{place} ($FLAMEGRAPH_DIR) is not flamegraph.pl")
            assert not (tmp_path / f"g.{fmt}").exists()


def test_json_is_the_only_thing_on_stdout_and_adds_up(mmap_capture):
    result = run_offcpu("report", "json", str(mmap_capture), "--top", "5")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "offcpu/1"
    assert report["capture"]["target"]["comm"] == "mmap_contention"
    totals = report["totals"]
    assert totals["blocked_us"] + totals["runqueue_us"] == totals["offcpu_us"]
    assert sum(state["offcpu_us"] for state in report["states"]) == totals["offcpu_us"]
    assert sum(thread["offcpu_us"] for thread in report["threads"]) == totals["offcpu_us"]
    assert len(report["stacks"]) == 5
    top = report["stacks"][0]
    assert top["frames"][-1] == "rwsem_down_write_slowpath"  # the wait site, the leaf
    assert top["state"] == "D" and top["offcpu_us"] >= report["stacks"][1]["offcpu_us"]
    assert set(report["runqueue_delay_us"]) == {"p50", "p90", "p99", "max"}
    assert report["wakers"] and report["lifecycle"]["created"] == 0
    assert report["window"]["seconds"] == pytest.approx(2.0, abs=0.5)


def test_text_leads_with_the_worst_stack(mmap_capture):
    result = run_offcpu("report", "text", str(mmap_capture), "--top", "3", env={**os.environ, "COLUMNS": "120"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Off-CPU time of mmap_contention (pid")
    first_row = next(line for line in lines if line.startswith("|") and "ms" not in line)
    offcpu_ms, share, state, count, stack = (cell.strip() for cell in first_row.split("|")[1:-1])
    assert state == "D" and "rwsem_down_" in stack and float(share.rstrip("%")) > 10
    assert "\x1b[" not in result.stdout and max(len(line) for line in lines) <= 120
    assert "Who woke whom" in result.stdout and "Run-queue delay" in result.stdout


def test_a_capture_without_a_format_is_its_text_report(mmap_capture):
    # Given a capture named with no format (the format forgotten), with the text report's own options
    forgotten = run_offcpu("report", str(mmap_capture), "--top", "3")
    # Then it is the text report
    assert forgotten.returncode == 0, forgotten.stderr
    assert forgotten.stdout == run_offcpu("report", "text", str(mmap_capture), "--top", "3").stdout
    assert forgotten.stdout.startswith("Off-CPU time of mmap_contention (pid")


def test_a_misspelt_format_is_one_line_naming_the_nearest(tmp_path):
    # Given a format misspelt, and a word that is neither a format nor a capture
    misspelt = run_offcpu("report", "txt", str(tmp_path))
    neither = run_offcpu("report", "nothing-here", cwd=tmp_path)
    # Then each is a usage error (2) on one line: the nearest format when there is one, and the formats
    assert_one_line_error(misspelt, "'txt' is neither a format nor a capture (did you mean 'text'?); the formats: "
                          "text, svg, html, json")
    assert_one_line_error(neither, "'nothing-here' is neither a format nor a capture; the formats: text")
    assert "did you mean" not in neither.stderr


def test_text_and_json_to_a_file(mmap_capture, tmp_path):
    for fmt in ("text", "json"):
        target = tmp_path / f"report.{fmt}"
        result = run_offcpu("report", fmt, str(mmap_capture), "-o", str(target))
        assert result.returncode == 0 and result.stdout == "" and target.read_text()
        assert_one_line_error(run_offcpu("report", fmt, str(mmap_capture), "-o", str(target)), "--force")


def test_a_title_with_the_targets_command_line_is_xml(tmp_path):
    # Given a capture of a command whose command line holds '&&', in a directory whose name holds XML too
    capture = tmp_path / 'sh&&true <"1">'
    result = run_offcpu("record", "-d", "2", "-o", str(capture), "--", "sh", "-c", "sleep 0.2 && true")
    assert result.returncode == 0, result.stderr
    assert "&&" in json.loads((capture / "capture.json").read_text())["target"]["command"][2]
    # When it is drawn, alone and as both sides of a diff
    graph, diff = tmp_path / "graph.svg", tmp_path / "diff.svg"
    assert run_offcpu("report", "svg", str(capture), "-o", str(graph)).returncode == 0
    assert run_offcpu("report", "diff", str(capture), str(capture), "-o", str(diff)).returncode == 0
    # Then both are XML, their titles readable with look-alikes for what XML gives a meaning to
    for svg, title in ((graph, "Off-CPU time of command sh -c 'sleep 0.2 \uff06\uff06 true'"),
                       (diff, "sh\uff06\uff06true \u2039\u201d1\u201d\u203a against")):
        texts = [element.text or "" for element in ElementTree.parse(svg).getroot().iter(f"{SVG}text")]
        [shown] = [text for text in texts if title in text]
        # and fitted to the image: captures' long paths are cut in their middles, not the title at both ends
        assert len(shown) <= TITLE_CHARS, shown


def stderr_on_a_terminal(*args: str) -> str:
    """What offcpu writes to stderr when stderr is a terminal (stdout goes nowhere)."""
    environ = {name: value for name, value in os.environ.items()
               if name not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen([str(OFFCPU), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=secondary, env={**environ, "TERM": "xterm", "COLUMNS": "100"})
        os.close(secondary)
        output = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: offcpu has closed its end
                break
            if not chunk:
                break
            output += chunk
        assert process.wait(timeout=120) == 0, output
    finally:
        os.close(primary)
    return output.decode(errors="replace")


def test_progress_shows_only_while_perf_data_is_read(mmap_capture, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(mmap_capture, copy)
    (copy / "model.json").unlink(missing_ok=True)
    # Reading the recording takes a while: a terminal is told
    assert "Reading the recording" in stderr_on_a_terminal("report", "folded", str(copy))
    # The saved model takes no time worth a progress line
    assert (copy / "model.json").is_file()
    assert "Reading the recording" not in stderr_on_a_terminal("report", "folded", str(copy))
    assert "Reading the recording" not in stderr_on_a_terminal("report", "json", str(copy))
    # A part of the recording is read again, with progress
    assert "Reading the recording" in stderr_on_a_terminal("report", "folded", "--time", "0.2,1.5", str(copy))


def test_reports_lead_with_the_findings(mmap_capture, tmp_path):
    report = json.loads(run_offcpu("report", "json", str(mmap_capture)).stdout)
    top = report["findings"][0]
    assert top["id"] == "mmap_lock" and top["severity"] == "critical" and top["evidence"]
    assert "rwsem_down_write_slowpath" in top["evidence"][0]["frames"] or \
        "rwsem_down_read_slowpath" in top["evidence"][0]["frames"]
    text = run_offcpu("report", "text", str(mmap_capture), env={**os.environ, "COLUMNS": "120"}).stdout
    stacks = re.search(r"^Top 10 of [\d,]+ off-CPU stacks$", text, re.MULTILINE)
    assert stacks and text.index("Findings, worst first") < stacks.start()
    assert "[critical] Threads wait for the process's memory-map lock (mmap_lock)" in text
    page = tmp_path / "page.html"
    assert run_offcpu("report", "html", str(mmap_capture), "-o", str(page)).returncode == 0
    html = page.read_text()
    assert html.index('id="findings"') < html.index('id="capture"') and 'class="finding critical"' in html


def test_reports_of_the_current_directory_go_beside_it(mmap_capture, tmp_path):
    # Given a copy of a capture (with its saved model) and a second one beside it
    capture, other = tmp_path / "cap", tmp_path / "other"
    shutil.copytree(mmap_capture, capture)
    shutil.copytree(mmap_capture, other)
    # When reports are asked for from inside it, as '.'
    for args, written in ((("svg", "."), "cap.svg"), (("html", "."), "cap.html"),
                          (("diff", "../other", "."), "cap.diff.svg")):
        result = run_offcpu("report", *args, cwd=capture)
        # Then each goes beside the capture, named after it
        assert result.returncode == 0, result.stderr
        assert result.stderr.strip().endswith(f"Wrote {tmp_path / written}")
        assert (tmp_path / written).stat().st_size > 0
    # and the diff's table names both sides
    table = run_offcpu("report", "diff", "--text", "../other", ".", cwd=capture).stdout
    assert " ms in other, " in table and " ms in cap (" in table


@pytest.mark.parametrize("columns", ["", "abc", "0", "-5"])
def test_a_columns_that_is_not_a_width_is_ignored(mmap_capture, columns):
    result = run_offcpu("report", "text", str(mmap_capture), env={**os.environ, "COLUMNS": columns})
    assert result.returncode == 0, result.stderr
    assert result.stdout == run_offcpu("report", "text", str(mmap_capture), env={**os.environ, "COLUMNS": "100"}).stdout


def test_cpp_templates_read_as_written_in_debians_flamegraph_pl(cpp_capture, tmp_path):
    # Given C++ code waiting in methods of shop::Basket<std::pair<int, long> >, drawn by Debian's
    # flamegraph.pl, which turns < and > in names into ( and )
    graph = tmp_path / "cpp.svg"
    result = run_offcpu("report", "svg", str(cpp_capture), "--flamegraph", str(DEBIAN_NYTPROF_COPY), "-o", str(graph))
    assert result.returncode == 0, result.stderr
    # Then the names read with their template brackets, as look-alikes
    frames = svg_frames(graph)
    for method in ("fill", "wait_for_delivery"):
        assert any(frame.startswith(f"shop::Basket\u2039std::pair\u2039int, long\u203a \u203a::{method} (")
                   for frame in frames), method
    assert not any("Basket(" in frame for frame in frames)


def test_names_carrying_markup_stay_text_in_the_flame_graph(cpp_capture, tmp_path):
    # Given a copy of a capture whose thread and frame names are markup
    copy = tmp_path / "copy"
    shutil.copytree(cpp_capture, copy)
    assert run_offcpu("report", "folded", str(copy)).returncode == 0  # makes model.json
    model = json.loads((copy / "model.json").read_text())
    comm, function = '<b>x</b> & "y"', '<text>wait</text> &amp "now" <img src=x/>'
    for thread in model["threads"]:
        thread["comm"] = comm
    for frames, _ in model["stacks"]:
        frames[:] = [function if frame.endswith("::wait_for_delivery") else frame for frame in frames]
    (copy / "model.json").write_text(json.dumps(model))
    # When it is drawn
    graph = tmp_path / "markup.svg"
    result = run_offcpu("report", "svg", str(copy), "--flamegraph", str(DEBIAN_NYTPROF_COPY), "-o", str(graph))
    assert result.returncode == 0, result.stderr
    # Then the SVG is XML holding the names as text (< > & " as look-alikes: flamegraph.pl may not
    # escape them), and no element of theirs
    root = ElementTree.parse(graph).getroot()
    assert {element.tag for element in root.iter()} <= {f"{SVG}{tag}" for tag in (
        "svg", "defs", "linearGradient", "stop", "style", "script", "rect", "text", "g", "title")}
    look_alike = str.maketrans({"<": "\u2039", ">": "\u203a", "&": "\uff06", '"': "\u201d"})  # ‹ › ＆ ”
    frames = svg_frames(graph)
    assert any(frame.startswith(f"{function.translate(look_alike)} (") for frame in frames)
    assert any(frame.startswith(f"{comm.translate(look_alike)} (") for frame in frames)


def svg_title(path) -> str:
    texts = [element.text or "" for element in ElementTree.parse(path).getroot().iter(f"{SVG}text")]
    return next(text for text in texts if text.startswith("Off-CPU time of "))


@pytest.mark.parametrize("options, mode", [
    ((), None), (("--waker",), "waker stacks"), (("--by-thread",), "by thread"), (("--inverted",), "icicle"),
    (("--state", "D"), "state D"), (("--time", "0.2,0.5"), "0.2-0.5 s"), (("--user-only",), "user frames only"),
    (("--state", "S,D", "--kernel-only", "--min-us", "1000"),
     "states D,S, kernel frames only, stacks of 1,000 µs or more"),
])
def test_the_flame_graphs_title_names_the_view(mmap_capture, tmp_path, options, mode):
    graph = tmp_path / "graph.svg"
    result = run_offcpu("report", "svg", str(mmap_capture), *options, "-o", str(graph))
    assert result.returncode == 0, result.stderr
    title = svg_title(graph)
    assert len(title) <= TITLE_CHARS, title
    assert title.endswith(" stacks") if mode is None else " stacks; " in title, title
    said = title.partition(" stacks; ")[2]  # all of the view that fits in the title, cut at its end if need be
    assert mode is None or said == mode or (said.endswith("…") and mode.startswith(said[:-1])), title


def json_report(capture, *options: str) -> dict:
    result = run_offcpu("report", "json", str(capture), "--top", "100000", *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def folded_lines(capture, *options: str) -> dict[str, int]:
    result = run_offcpu("report", "folded", str(capture), *options)
    assert result.returncode == 0, result.stderr
    return {stack: int(count) for stack, _, count in (line.rpartition(" ") for line in result.stdout.splitlines())}


VIEWS = [(), ("--state", "D"), ("--by-thread",), ("--waker",), ("--user-only",), ("--kernel-only",),
         ("--min-us", "20000"), ("--time", "0.5,1.5"), ("--waker", "--by-thread", "--state", "R,S")]


@pytest.mark.parametrize("options", VIEWS)
def test_json_stacks_are_the_flame_graphs_stacks(mmap_capture: Path, options: tuple[str, ...]) -> None:
    # Given the same view options for json and folded
    report = json_report(mmap_capture, *options)
    # Then the JSON's stacks, by state, add up to the folded lines
    lines: dict[str, int] = {}
    for stack in report["stacks"]:
        line = ";".join([stack["root"], *stack["frames"], *(["--", *stack["waker"]] if stack["waker"] else [])])
        lines[line] = lines.get(line, 0) + stack["offcpu_us"]
        assert 0 <= stack["kernel_frames"] <= len(stack["frames"])
    assert lines == folded_lines(mmap_capture, *options)


def test_json_tables_and_totals_follow_the_filters(mmap_capture):
    everything = json_report(mmap_capture)
    worker = next(thread for thread in everything["threads"] if thread["tid"] != thread["pid"])
    # --state: every table is of those states, each thread's time its time in them
    d_only = json_report(mmap_capture, "--state", "D")
    assert d_only["view"]["states"] == ["D"] and [state["state"] for state in d_only["states"]] == ["D"]
    assert d_only["totals"]["offcpu_us"] == d_only["states"][0]["offcpu_us"] == sum(
        thread["offcpu_us"] for thread in d_only["threads"]) < everything["totals"]["offcpu_us"]
    assert {stack["state"] for stack in d_only["stacks"]} == {"D"}
    # --tid: one thread, what woke it, its stacks
    one = json_report(mmap_capture, "--tid", str(worker["tid"]))
    assert one["threads"] == [worker] and one["totals"]["threads"] == 1
    assert one["totals"]["offcpu_us"] == worker["offcpu_us"]
    assert one["wakers"] and {pair["wakee_tid"] for pair in one["wakers"]} == {worker["tid"]}
    assert sum(stack["offcpu_us"] for stack in one["stacks"]) == worker["offcpu_us"]
    # --comm that matches nothing: nothing to report
    assert_one_line_error(run_offcpu("report", "json", str(mmap_capture), "--comm", "nosuch"),
                          "no off-CPU time matches these options")


def test_text_follows_the_view_and_says_which(mmap_capture):
    model = json_report(mmap_capture)
    worker = next(thread for thread in model["threads"] if thread["tid"] != thread["pid"])
    result = run_offcpu("report", "text", str(mmap_capture), "--state", "D", "--tid", str(worker["tid"]), "--waker",
                        "--by-thread", env={**os.environ, "COLUMNS": "160"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == f"Only state D, tid {worker['tid']}"
    assert lines[2].startswith("1 thread was off CPU for ")
    stacks = result.stdout.split("off-CPU stacks (by thread, waker stacks)\n")[1].split("\n\n")[0].splitlines()
    assert [cell.strip() for cell in stacks[1].split("|")[1:-1]] == [
        "off-CPU ms", "share %", "state", "count", "thread", "stack", "woken by"]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in stacks[3:-1]]
    assert rows and all(row[2] == "D" and row[4] == f"mmap_contention-{worker['tid']}" and row[6] for row in rows)
    threads = result.stdout.split("Threads\n")[1].split("\n\n")[0].splitlines()
    assert [line.split("|")[1].strip() for line in threads[3:-1]] == [str(worker["tid"])]
    assert_one_line_error(run_offcpu("report", "text", str(mmap_capture), "--comm", "nosuch"),
                          "no off-CPU time matches these options")


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_text_fits_the_width_without_cutting_a_number(mmap_capture, columns):
    text = run_offcpu("report", "text", str(mmap_capture), env={**os.environ, "COLUMNS": str(columns)}).stdout
    assert text and max(len(line) for line in text.splitlines()) <= columns
    cells = set(re.split(r"[\s|]+", text))
    threads = sorted(json_report(mmap_capture)["threads"], key=lambda thread: -thread["offcpu_us"])[:10]
    assert all(str(thread["tid"]) in cells and f"{thread['offcpu_us'] / 1000:,.1f}" in cells for thread in threads)


@pytest.mark.parametrize("report, window", [
    ("text", "0,nan"), ("svg", "nan,1"), ("html", "1e400,1e401"), ("json", "0,inf"), ("json", "1e400,1e401"),
    ("folded", "-inf,1"), ("diff", "0,nan"),
])
def test_a_time_that_is_not_a_finite_number_is_refused(mmap_capture, tmp_path, report, window):
    captures = [str(mmap_capture)] * (2 if report == "diff" else 1)
    output = ["-o", str(tmp_path / "out")] if report != "folded" else []
    result = run_offcpu("report", report, *captures, "--time", window, *output)
    # the window as it was given (1e400, not inf), and what to give instead
    assert_one_line_error(result, f"--time {window}", "finite numbers of seconds")
    assert not (tmp_path / "out").exists()
