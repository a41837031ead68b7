"""offcpu report perfetto: the longest waits on a timeline, as Chrome trace-event JSON."""

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
from offcpu.renderers.perfetto import Bounds, PerfettoTrace


@click.command()
@capture_argument
@view_options
@click.option("--threads", type=click.IntRange(min=1), default=32, show_default=True,
              help="Show the waits of this many threads at most, those with most off-CPU time.")
@click.option("--waits", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Show this many waits at most, the longest.")
@output_options("CAPTURE.trace.json beside the capture")
def perfetto(capture: Path, view: StackView, threads: int, waits: int, output: Path | None, force: bool) -> None:
    """Write the longest waits as a timeline in Chrome's trace-event JSON,
    for https://ui.perfetto.dev or chrome://tracing: a track per thread with
    the run before each wait, the wait until its wakeup (named by where it
    waited), the wait for a CPU after it, and an arrow from the waker.

    A capture keeps the times of its longest waits only; what the trace
    leaves out is said on stderr and in the trace (otherData.left_out).
    """
    report_file = output_path(capture, output, ".trace.json", force)
    model = load_with_progress(capture, view.time, view.reader)
    trace = PerfettoTrace(view, Bounds(threads, waits))
    report_file.write(trace.render(model))
    if trace.left_out:
        click.echo(f"offcpu: the trace leaves out {trace.left_out}", err=True)
