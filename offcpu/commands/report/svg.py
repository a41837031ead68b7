"""offcpu report svg: an off-CPU flame graph."""

from __future__ import annotations

from pathlib import Path

import click

from offcpu.commands.report.common import (
    capture_argument,
    load_with_progress,
    output_options,
    output_path,
    renderer_option,
    view_options,
)
from offcpu.model.stackview import StackView
from offcpu.renderers.flame import FlameGraphSvg
from offcpu.renderers.flamegraph_tool import require_renderer


@click.command()
@capture_argument
@view_options
@click.option("--inverted", is_flag=True, help="An icicle graph: leaves on top, to see the common blocking call.")
@renderer_option
@output_options("CAPTURE.svg beside the capture")
def svg(capture: Path, view: StackView, inverted: bool,
        flamegraph_path: str | None, output: Path | None, force: bool) -> None:
    """Draw an off-CPU flame graph (SVG): the width of a frame is the time
    threads spent off CPU under it, in microseconds.

    \b
    The renderer is the first found of: --flamegraph, $FLAMEGRAPH_DIR,
    inferno-flamegraph or flamegraph.pl on PATH (as root, in the system's
    directories only), Debian's copy in libdevel-nytprof-perl, ~/FlameGraph
    (not as root), /opt/FlameGraph. --flamegraph and $FLAMEGRAPH_DIR take
    either program or a directory holding one; when they hold none, that is
    an error.
    """
    report_file = output_path(capture, output, ".svg", force)
    renderer = require_renderer(flamegraph_path)
    model = load_with_progress(capture, view.time, view.reader)
    report_file.write(FlameGraphSvg(renderer, view, inverted).render(model))
