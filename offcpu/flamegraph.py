"""Finding a flame graph renderer: Brendan Gregg's flamegraph.pl or its Rust
port inferno-flamegraph. offcpu runs them; it never carries their code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from offcpu.errors import OffcpuError

DEBIAN_NYTPROF_COPY = Path("/usr/share/perl5/Devel/NYTProf/flamegraph.pl")
CHECKOUTS = (Path.home() / "FlameGraph", Path("/opt/FlameGraph"))
HOW_TO_GET_ONE = (
    "install one: 'apt-get install libdevel-nytprof-perl' (Debian's copy of flamegraph.pl), "
    "'cargo install inferno', or 'git clone' Brendan Gregg's FlameGraph into ~/FlameGraph; "
    "or point --flamegraph (or $FLAMEGRAPH_DIR) at one"
)
# flamegraph.pl writes --title into the SVG as it is and inferno-flamegraph escapes
# it, so escaping here would show "&amp;" in inferno's graphs. Instead, what XML
# gives a meaning to becomes a look-alike that neither renderer changes.
TITLE_LOOKALIKES = str.maketrans({"&": "\uff06", "<": "\u2039", ">": "\u203a", '"': "''"})  # ＆ ‹ › ''
NOT_XML_TEXT = re.compile("[\x00-\x1f\ud800-\udfff\ufffe\uffff]")  # controls, lone surrogates, non-characters


@dataclass(frozen=True)
class Renderer:
    command: tuple[str, ...]  # argv that takes folded stacks on stdin
    found_by: str  # which rule of the search found it


def _runnable(path: Path) -> tuple[str, ...] | None:
    """How to run a renderer file: directly, or through perl when not executable."""
    if not path.is_file():
        return None
    if os.access(path, os.X_OK):
        return (str(path),)
    return ("perl", str(path)) if path.suffix == ".pl" else None


def _in_directory(directory: Path) -> tuple[str, ...] | None:
    return _runnable(directory / "flamegraph.pl")


def find_renderer(explicit: str | None = None) -> Renderer | None:
    """The first renderer in the documented order of places."""
    if explicit:
        path = Path(explicit)
        command = _in_directory(path) if path.is_dir() else _runnable(path)
        return Renderer(command, "--flamegraph") if command else None
    if os.environ.get("FLAMEGRAPH_DIR"):
        command = _in_directory(Path(os.environ["FLAMEGRAPH_DIR"]))
        if command:
            return Renderer(command, "$FLAMEGRAPH_DIR")
    for name in ("inferno-flamegraph", "flamegraph.pl"):
        found = shutil.which(name)
        if found:
            return Renderer((found,), f"{name} on PATH")
    command = _runnable(DEBIAN_NYTPROF_COPY)
    if command:
        return Renderer(command, "Debian's libdevel-nytprof-perl")
    for checkout in CHECKOUTS:
        command = _in_directory(checkout)
        if command:
            return Renderer(command, f"checkout in {checkout}")
    return None


def require_renderer(explicit: str | None = None) -> Renderer:
    renderer = find_renderer(explicit)
    if renderer is None:
        where = f"{explicit} is not flamegraph.pl, inferno-flamegraph or a FlameGraph checkout" if explicit \
            else "no flame graph renderer was found"
        raise OffcpuError(f"{where}; {HOW_TO_GET_ONE}")
    return renderer


def safe_title(title: str) -> str:
    """`title` as either renderer can put it into an SVG unescaped and still be XML:
    & < > and " as look-alikes (＆ ‹ › ''), control characters as spaces, and what
    is not text at all (lone surrogates of undecodable bytes, non-characters) as U+FFFD."""
    return NOT_XML_TEXT.sub(lambda found: " " if found[0] < " " else "\ufffd", title.translate(TITLE_LOOKALIKES))


def render_svg(renderer: Renderer, lines: Iterable[str], title: str, inverted: bool = False) -> str:
    """An off-CPU flame graph of folded lines ("frames count" or, for a differential
    graph, "frames before after"), with only the options both renderers share.
    Any title will do: it is made safe for the SVG here (see safe_title)."""
    argv = [*renderer.command, "--title", safe_title(title), "--countname", "us", "--colors", "io"]
    if inverted:
        argv.append("--inverted")
    done = subprocess.run(argv, input="".join(f"{line}\n" for line in lines), capture_output=True, text=True)
    if done.returncode != 0 or "<svg" not in done.stdout:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OffcpuError(f"{' '.join(renderer.command)} failed: {reason}")
    return done.stdout
