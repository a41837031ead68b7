"""Finding a flame graph renderer: Brendan Gregg's flamegraph.pl or its Rust
port inferno-flamegraph. offcpu runs them; it never carries their code."""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.escaping import MARKUP_LOOKALIKES, for_flame_graph, printable
from offcpu.workers import child_environment, find_program

DEBIAN_NYTPROF_COPY = Path("/usr/share/perl5/Devel/NYTProf/flamegraph.pl")
# As root, not one in $HOME: sudo may keep the user's, and the user's checkout would run as root
# (--flamegraph and $FLAMEGRAPH_DIR still name any).
CHECKOUTS = (*(() if os.geteuid() == 0 else (Path.home() / "FlameGraph",)), Path("/opt/FlameGraph"))
HOW_TO_GET_ONE = (
    "install one: 'apt-get install libdevel-nytprof-perl' (Debian's copy of flamegraph.pl), "
    "'cargo install --root /usr/local inferno', or 'git clone' Brendan Gregg's FlameGraph into /opt/FlameGraph; "
    "or point --flamegraph (or $FLAMEGRAPH_DIR) at one"
)
RENDERERS = ("inferno-flamegraph", "flamegraph.pl")  # the names a renderer goes by, the faster first
ELF_MAGIC = b"\x7fELF"
# What a title holds: both renderers centre it in 17 px Verdana on a 1200 px image, and cut
# a longer one at both ends.
TITLE_CHARS = 110
SUBJECT_CHARS = 24  # the fewest characters of what a title names, when it is cut to fit


@dataclass(frozen=True)
class Renderer:
    command: tuple[str, ...]  # argv that takes folded stacks on stdin
    found_by: str  # which rule of the search found it
    escapes_markup: bool = False  # escapes what XML and JavaScript give a meaning to in names (see escaping)

    @classmethod
    def of(cls, command: tuple[str, ...], found_by: str) -> Renderer:
        return cls(command, found_by, _compiled(Path(command[-1])))


def _compiled(program: Path) -> bool:
    """Whether a renderer is a compiled program (inferno-flamegraph, whatever its name), not a
    script (flamegraph.pl, some version of it, which may not escape names)."""
    try:
        with program.open("rb") as file:
            return file.read(len(ELF_MAGIC)) == ELF_MAGIC
    except OSError:
        return False


def _runnable(path: Path) -> tuple[str, ...] | None:
    """How to run a renderer file: directly, or through perl when not executable."""
    if not path.is_file():
        return None
    if os.access(path, os.X_OK):
        return (str(path),)
    return ("perl", str(path)) if path.suffix == ".pl" else None


def _at(path: Path) -> tuple[str, ...] | None:
    """The renderer a path names: the program itself, or a directory holding one."""
    if not path.is_dir():
        return _runnable(path)
    return next(filter(None, (_runnable(path / name) for name in RENDERERS)), None)


def find_renderer(explicit: str | None = None) -> Renderer | None:
    """The first renderer in the documented order of places. A --flamegraph or
    $FLAMEGRAPH_DIR that holds none is an error: never a reason to draw with another."""
    for found_by, given in (("--flamegraph", explicit), ("$FLAMEGRAPH_DIR", os.environ.get("FLAMEGRAPH_DIR"))):
        if given:
            command = _at(Path(given))
            if command is None:
                raise OffcpuError(f"{given} ({found_by}) is not flamegraph.pl, inferno-flamegraph or a directory "
                                  f"holding one; {HOW_TO_GET_ONE}")
            return Renderer.of(command, found_by)
    for name in RENDERERS:
        found = find_program(name)
        if found:
            return Renderer.of((found,), f"{name} on PATH")
    for path, found_by in ((DEBIAN_NYTPROF_COPY, "Debian's libdevel-nytprof-perl"),
                           *((checkout / "flamegraph.pl", f"checkout in {checkout}") for checkout in CHECKOUTS)):
        command = _runnable(path)
        if command:
            return Renderer.of(command, found_by)
    return None


def require_renderer(explicit: str | None = None) -> Renderer:
    renderer = find_renderer(explicit)
    if renderer is None:
        raise OffcpuError(f"no flame graph renderer was found; {HOW_TO_GET_ONE}")
    return renderer


def safe_title(title: str) -> str:
    """`title` as either renderer can draw it: flamegraph.pl writes --title into the SVG as it
    is (as text, never into its script) and inferno-flamegraph escapes it, so escaping here
    would show "&amp;" in inferno's graphs. Instead, what XML gives a meaning to becomes a
    look-alike that neither renderer changes, and what does not print is written out."""
    return printable(title).translate(MARKUP_LOOKALIKES)


def fitted_title(title: str, subjects: Sequence[str]) -> str:
    """`title` in TITLE_CHARS characters at most: what it names (`subjects`: a command line, the
    paths of two captures) cut first, each by as much, keeping a third of what is left from its
    start (the program) and the rest from its end (the capture's name, the pid); then what still
    does not fit cut at its end; '…' where cut."""
    over = len(title) - TITLE_CHARS
    for subject in subjects:
        keep = max(len(subject) - math.ceil(over / len(subjects)) - 1, SUBJECT_CHARS)
        if over > 0 and keep < len(subject) and subject in title:
            title = title.replace(subject, f"{subject[:keep // 3]}…{subject[len(subject) - (keep - keep // 3):]}", 1)
    return title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 1] + "…"


def render_svg(renderer: Renderer, lines: Iterable[str], title: str, inverted: bool = False,
               subjects: Sequence[str] = ()) -> str:
    """An off-CPU flame graph of folded lines ("frames count" or, for a differential
    graph, "frames before after"), with only the options both renderers share.
    Any title and names will do: the title is fitted to the image (see fitted_title: `subjects`
    are the parts of it to cut first), and it and the names are made safe for the SVG, and for
    the script in it, here (see safe_title, escaping.for_flame_graph)."""
    shown = fitted_title(safe_title(title), [safe_title(subject) for subject in subjects])
    argv = [*renderer.command, "--title", shown, "--countname", "us", "--colors", "io"]
    if inverted:
        argv.append("--inverted")
    # a folded file's names too (report diff); a line's counts are digits, which no escaping changes
    text = "".join(f"{for_flame_graph(line, renderer.escapes_markup)}\n" for line in lines)
    # flamegraph.pl cuts labels to fit their frames: with PERL_UNICODE it reads its input and
    # arguments as UTF-8 and cuts between characters, not inside one (inferno ignores it).
    done = subprocess.run(argv, input=text, capture_output=True, encoding="utf-8", errors="replace",
                          env={**child_environment(), "PERL_UNICODE": "SA"})
    if done.returncode != 0 or "<svg" not in done.stdout:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OffcpuError(f"{' '.join(renderer.command)} failed: {reason}")
    return done.stdout
