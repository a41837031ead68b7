"""Off-CPU flame graphs, drawn by flamegraph.pl or inferno-flamegraph."""

from __future__ import annotations

import re
import zlib

from offcpu.model import Model
from offcpu.model.stackview import StackView, chosen, lines_of
from offcpu.model.summaries import totals
from offcpu.renderers.flamegraph_tool import Renderer, render_svg
from offcpu.stacks import RUNTIME_MARK, RUNTIME_MARKS

# A frame's rectangle in either renderer's SVG: its <title> (the frame's name, then its time in
# parentheses), then its <rect> with its fill
_RUNTIME_RECT = re.compile(r"(<title>[^<]*? (?:%s) \([^<]*</title>\s*<rect\b[^>]*?\bfill=\")rgb\([0-9, ]*\)"
                           % "|".join(re.escape(mark) for mark in (*RUNTIME_MARKS.values(), RUNTIME_MARK)))


def stack_lines(model: Model, view: StackView) -> list[str]:
    """The folded lines of a view; an empty view is an error that says why."""
    return [f"{stack} {microseconds}" for stack, microseconds in lines_of(chosen(model, view))]


def title(model: Model, view: StackView, inverted: bool = False) -> str:
    """What the graph shows: the target, the time its stacks hold, the window, and the view:
    its filters, how the stacks are drawn, and which way up."""
    capture = model.capture
    shown = sum(int(line.rpartition(" ")[2]) for line in stack_lines(model, view))
    whole = totals(model)
    share = f" of {whole.offcpu_us / 1e6:.2f} s" if shown != whole.offcpu_us else ""
    mode = ", ".join(part for part in (view.filters, view.drawing, "icicle" if inverted else "") if part)
    sampled = (f"; stacks of {model.stacked_waits:,} of {model.waits:,} waits, times estimated"
               if model.sampled else "")
    return (f"Off-CPU time of {capture.target.describe()}: {shown / 1e6:.2f} s{share} off CPU "
            f"in {model.wall_us / 1e6:.1f} s, {capture.call_graph} stacks" + (f"; {mode}" if mode else "") + sampled)


class FlameGraphSvg:
    def __init__(self, renderer: Renderer, view: StackView, inverted: bool = False) -> None:
        self.renderer = renderer
        self.view = view
        self.inverted = inverted

    def render(self, model: Model) -> str:
        return runtime_frames_coloured(render_svg(self.renderer, stack_lines(model, self.view),
                                                  title(model, self.view, self.inverted), self.inverted,
                                                  subjects=[model.capture.target.describe()]))


def runtime_frames_coloured(svg: str) -> str:
    """The graph with the frames of a runtime's own (a Python function's) in greens, the native
    ones left in the renderer's blues: where the program's code waits stands out."""

    def green(match: re.Match[str]) -> str:
        shade = zlib.crc32(match.group(1).encode()) % 60  # the same frame, the same shade
        return f"{match.group(1)}rgb({60 + shade},{170 + shade // 2},{70 + shade // 3})"

    return _RUNTIME_RECT.sub(green, svg)
