"""Where offcpu finds its flame graph renderer, with the renderer this machine has (Debian's
flamegraph.pl, which scripts/setup installs, or any other offcpu finds) standing in for any
renderer file; what only Debian's copy does is tested where it is installed."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree

import pytest

from offcpu.errors import OffcpuError
from offcpu.escaping import SCRIPT_RENDERER_LOOKALIKES as LOOKALIKES
from offcpu.model.stackview import StackView, folded
from offcpu.renderers.flamegraph_tool import (
    DEBIAN_NYTPROF_COPY,
    TITLE_CHARS,
    find_renderer,
    fitted_title,
    render_svg,
    require_renderer,
)
from tests.fixtures import model_of

SVG = "{http://www.w3.org/2000/svg}"


def _installed() -> Path | None:
    """The renderer file offcpu finds here without being told where (None: there is none)."""
    saved = os.environ.pop("FLAMEGRAPH_DIR", None)
    try:
        renderer = find_renderer()
    finally:
        if saved is not None:
            os.environ["FLAMEGRAPH_DIR"] = saved
    return Path(renderer.command[-1]).resolve() if renderer else None


INSTALLED = _installed()
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="no flame graph renderer here (scripts/setup installs one)")
debian_copy = pytest.mark.skipif(not DEBIAN_NYTPROF_COPY.is_file(),
                                 reason="Debian's flamegraph.pl (libdevel-nytprof-perl) is not installed here")


@pytest.mark.parametrize("name", ["flamegraph.pl", "inferno-flamegraph"])
def test_a_directory_holding_either_renderer(tmp_path, monkeypatch, name):
    (tmp_path / name).symlink_to(INSTALLED)
    monkeypatch.setenv("FLAMEGRAPH_DIR", str(tmp_path))
    assert find_renderer().command == (str(tmp_path / name),)
    assert find_renderer().found_by == "$FLAMEGRAPH_DIR"
    assert find_renderer(str(tmp_path)).command == (str(tmp_path / name),)
    assert find_renderer(str(tmp_path)).found_by == "--flamegraph"


def test_the_path_of_the_program_itself(tmp_path, monkeypatch):
    program = tmp_path / "inferno-flamegraph"
    program.symlink_to(INSTALLED)
    monkeypatch.setenv("FLAMEGRAPH_DIR", str(program))
    assert find_renderer().command[-1] == str(program)
    assert find_renderer(str(INSTALLED)).command[-1] == str(INSTALLED)


@pytest.mark.parametrize("given", ["missing", "empty", "other-file"])
def test_a_place_that_holds_no_renderer_is_an_error_not_a_fallback(tmp_path, monkeypatch, given):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other-file").write_text("not a program\n")
    path = str(tmp_path / given)
    monkeypatch.setenv("FLAMEGRAPH_DIR", path)
    with pytest.raises(OffcpuError, match=f"{path} \\(\\$FLAMEGRAPH_DIR\\) is not flamegraph.pl"):
        find_renderer()
    monkeypatch.delenv("FLAMEGRAPH_DIR")
    with pytest.raises(OffcpuError, match=f"{path} \\(--flamegraph\\) is not flamegraph.pl"):
        require_renderer(path)


def test_flamegraph_wins_over_flamegraph_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FLAMEGRAPH_DIR", str(tmp_path / "missing"))
    assert find_renderer(str(INSTALLED)).found_by == "--flamegraph"


@debian_copy
def test_a_script_is_given_look_alikes_and_a_compiled_renderer_names_as_they_are(tmp_path):
    # Debian's copy found anywhere, under either name: in its place, through a link, or copied
    copy = tmp_path / "inferno-flamegraph"
    copy.write_bytes(DEBIAN_NYTPROF_COPY.read_bytes())
    copy.chmod(0o755)
    for given in (str(DEBIAN_NYTPROF_COPY), str(copy), str(tmp_path)):
        assert not find_renderer(given).escapes_markup, given
    # a compiled program (what inferno-flamegraph is; here any ELF executable stands in for it) escapes itself
    (tmp_path / "elsewhere").mkdir()
    compiled = tmp_path / "elsewhere" / "inferno-flamegraph"
    compiled.write_bytes(Path("/bin/true").read_bytes())
    compiled.chmod(0o755)
    assert find_renderer(str(compiled)).escapes_markup


@debian_copy
@pytest.mark.parametrize("name", ["\\'),alert(1)//", "\\", "a\\", "\" onload=\"alert(1)",
                                  "</title><script>x()</script>", "a&b", "it's", "\x1b[2J\x07"])
def test_debians_copy_draws_any_name_as_text(name):
    # Given a name that Debian's flamegraph.pl would put into onmouseover="s('NAME ...')" as script,
    # or into the SVG as markup
    lines = [f"main;{name};leaf 1000", "main;other 10"]  # (';' separates frames: the folded lines escape it)
    # When it draws it
    svg = render_svg(find_renderer(str(DEBIAN_NYTPROF_COPY)), lines, name)
    root = ElementTree.fromstring(svg)  # XML
    # Then every handler is its own script with the frame's name in one string literal, which holds no
    # backslash and no quote that would end it; the name is the frame's title, as look-alikes
    handlers = [g.get("onmouseover") or "" for g in root.iter(f"{SVG}g") if g.get("onmouseover", "").startswith("s(")]
    assert len(handlers) == 5  # all, main, the name, leaf, other
    for handler in handlers:
        literal = handler.removeprefix("s('").removesuffix("')")
        assert handler == f"s('{literal}')" and "\\" not in literal and "'" not in literal.replace("\\'", ""), handler
    titles = {title.text or "" for title in root.iter(f"{SVG}title")}
    shown = name.replace("\x1b", "\\x1b").replace("\x07", "\\x07").translate(LOOKALIKES)
    assert any(title.startswith(f"{shown} (") for title in titles), titles


@debian_copy
@pytest.mark.parametrize("prefix", ["", "x"])
def test_names_cut_to_fit_their_frames_are_cut_between_characters(prefix):
    # Given the fixture's stacks with start_thread, which almost all of them share (a wide frame),
    # renamed to a name of < only (look-alikes, three bytes each in UTF-8, once drawn by Debian's copy):
    # cut by bytes, one of the two names would end inside a character
    name = prefix + "<" * 300
    lines = [f"{stack.replace(';start_thread;', f';{name};')} {us}"
             for stack, us in folded(model_of("futex_pid"), StackView())]
    assert sum(f";{name};" in line for line in lines) > 1
    # When Debian's flamegraph.pl draws them, cutting labels to fit their frames
    svg = render_svg(find_renderer(str(DEBIAN_NYTPROF_COPY)), lines, "t")
    # Then the label is cut between characters: the SVG is XML and the label the start of the name
    shown = name.replace("<", "\u2039")
    labels = [text.text or "" for text in ElementTree.fromstring(svg).iter(f"{SVG}text")
              if (text.text or "").startswith(shown[:2])]
    assert labels and all(label.endswith("..") and shown.startswith(label[:-2]) for label in labels), labels
    assert "\ufffd" not in svg


def test_a_long_title_is_fitted_to_the_image_by_its_subject_first():
    # Given a graph of a command with a long command line (the renderers cut a title at both ends past the image)
    command = ("command ./pgbench -c 16 -j 4 -T 60 -M prepared --progress 5 --log --aggregate-interval 1 bench "
               "(pid 4242)")
    title = f"Off-CPU time of {command}: 12.34 s off CPU in 2.0 s, fp stacks; state D"
    fitted = fitted_title(title, [command])
    # Then it fits, the command cut in its middle (its program and its end kept), and what the graph shows stays whole
    assert len(fitted) == TITLE_CHARS and len(title) > TITLE_CHARS
    assert fitted.startswith("Off-CPU time of command ./pgben…") and fitted.count("…") == 1
    assert fitted.endswith("bench (pid 4242): 12.34 s off CPU in 2.0 s, fp stacks; state D")
    # while a title that fits is left alone
    assert fitted_title("Off-CPU time of a (pid 1): 1.00 s off CPU in 1.0 s, fp stacks", ["a (pid 1)"]) == \
        "Off-CPU time of a (pid 1): 1.00 s off CPU in 1.0 s, fp stacks"


def test_both_sides_of_a_diff_are_cut_alike_and_the_rest_at_its_end():
    new, base = "/srv/captures/2024-06-01/run-after-the-fix", "/srv/captures/2024-05-31/run-before-the-fix"
    title = f"Off-CPU time of {new} against {base}: red grew, blue shrank; NEW scaled by 0.9987 from its window"
    fitted = fitted_title(title, [new, base])
    assert len(fitted) <= TITLE_CHARS and " against " in fitted
    assert fitted.count("…") >= 2 and "fix against /srv/" in fitted and fitted.startswith("Off-CPU time of /srv/")


def test_a_runtimes_frames_are_drawn_in_greens_and_native_ones_as_the_renderer_drew_them():
    from offcpu.renderers.flame import runtime_frames_coloured

    # Given a stack whose frames nearer the root are a Python program's own (as the reader names them)
    lines = ["python3;Thread.run (threading.py:975) [py];work (app.py:57) [py];__futex_abstimed_wait_common;"
             "futex_wait 1000", "python3;clock_nanosleep 500"]
    svg = render_svg(require_renderer(None), lines, "t")

    def fills_of(drawn: str) -> dict:
        found = {}
        for g in ElementTree.fromstring(drawn).iter(f"{SVG}g"):
            title, rect = g.find(f"{SVG}title"), g.find(f"{SVG}rect")
            if title is not None and rect is not None:
                found[title.text] = rect.get("fill")
        return found

    fills = fills_of(svg)
    # When its runtime's frames are coloured
    coloured = fills_of(runtime_frames_coloured(svg))
    # Then those are green (more green than red and blue), each name in a shade of its own, and the rest as they were
    for name, fill in coloured.items():
        assert name is not None and fill is not None
        if " [py] (" in name:
            red, green, blue = map(int, fill.removeprefix("rgb(").removesuffix(")").split(","))
            assert green > red + 60 and green > blue + 60, (name, fill)
        else:
            assert fill == fills[name], name
    assert sum(" [py] (" in name for name in coloured if name) == 2
