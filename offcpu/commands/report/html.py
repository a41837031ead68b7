"""offcpu report html: one page with the flame graph and the analysis."""

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
from offcpu.renderers.flamegraph_tool import require_renderer
from offcpu.renderers.html import HtmlReport


@click.command("html")
@capture_argument
@view_options
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="Rows in the stacks, threads and wakers tables.")
@renderer_option
@output_options("CAPTURE.html beside the capture")
def html_report(capture: Path, view: StackView, top: int,
                flamegraph_path: str | None, output: Path | None, force: bool) -> None:
    """Write one self-contained HTML page: the interactive off-CPU flame graph
    (click a frame to zoom), the capture's metadata, totals, switch-out states,
    run-queue delay, the top stacks and threads, who woke whom and thread
    lifecycle. It loads nothing from the network: mail it, open it offline.

    The flame graph is drawn as by 'offcpu report svg' (same renderer search).
    """
    report_file = output_path(capture, output, ".html", force)
    renderer = require_renderer(flamegraph_path)
    model = load_with_progress(capture, view.time, view.reader)
    report_file.write(HtmlReport(renderer, view, top).render(model))
