"""offcpu report speedscope: the capture as a speedscope profile."""

from __future__ import annotations

from pathlib import Path

import click

from offcpu.commands.report.common import (
    capture_argument,
    load_with_progress,
    output_options,
    output_path,
    view_options,
)
from offcpu.model.stackview import StackView
from offcpu.renderers.speedscope import SpeedscopeProfile


@click.command()
@capture_argument
@view_options
@click.option("--by", "by", type=click.Choice(["thread", "process"]), default="thread", show_default=True,
              help="A profile of off-CPU time per thread, or per process.")
@output_options("CAPTURE.speedscope.json beside the capture")
def speedscope(capture: Path, view: StackView, by: str, output: Path | None, force: bool) -> None:
    """Write a speedscope profile (https://www.speedscope.app, or 'npx
    speedscope FILE'): off-CPU time per thread (or per process), then
    blocked time and time waiting for a CPU, each of all threads, rooted at
    the thread's name. Weights are microseconds; a profile's weights sum to
    the time the text report gives it.
    """
    report_file = output_path(capture, output, ".speedscope.json", force)
    model = load_with_progress(capture, view.time, view.reader)
    report_file.write(SpeedscopeProfile(view, by_process=by == "process").render(model))
