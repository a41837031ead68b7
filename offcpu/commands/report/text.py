"""offcpu report text: the analysis as tables for the terminal."""

from __future__ import annotations

from pathlib import Path

import click

from offcpu.commands.report.common import (
    capture_argument,
    checked_output,
    load_with_progress,
    output_options,
    print_or_write,
    view_options,
)
from offcpu.model.stackview import StackView
from offcpu.renderers.console import stdout_layout
from offcpu.renderers.text import TextReport


@click.command()
@capture_argument
@view_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows per table.")
@output_options("stdout")
def text(capture: Path, view: StackView, top: int,
         output: Path | None, force: bool) -> None:
    """Print the analysis as tables: the top off-CPU stacks, threads,
    switch-out states, run-queue delay, who woke whom and thread lifecycle.

    On a terminal it is coloured and fits the window; otherwise (a pipe, a
    file, -o) it is plain text, COLUMNS wide or 100. NO_COLOR is respected.
    """
    report_file = checked_output(output, force, (capture,)) if output is not None else None
    width, color = stdout_layout(to_file=output is not None)
    model = load_with_progress(capture, view.time, view.reader)
    print_or_write(TextReport(view, top, width, color).render(model), report_file)
