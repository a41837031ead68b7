"""offcpu report json: the analysis as JSON, for scripts and CI."""

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
from offcpu.renderers.json import JsonReport


@click.command("json")
@capture_argument
@view_options
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many stacks and waker pairs to list.")
@output_options("stdout")
def json_report(capture: Path, view: StackView, top: int,
                output: Path | None, force: bool) -> None:
    """Print the analysis as JSON (schema "offcpu/1", each key described in
    docs/reports.md in offcpu's repository): capture metadata, window,
    totals, states, run-queue delay, threads, top stacks, wakers, thread
    lifecycle and findings. Only JSON goes to stdout; -o FILE writes it to a
    file instead.

    \b
      offcpu report json CAPTURE | jq '.totals'
    """
    report_file = checked_output(output, force, (capture,)) if output is not None else None
    print_or_write(JsonReport(view, top).render(load_with_progress(capture, view.time, view.reader)), report_file)
