"""offcpu report pprof: the capture as a gzipped pprof profile."""

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
from offcpu.renderers.pprof import PprofProfile


@click.command()
@capture_argument
@view_options
@output_options("CAPTURE.pb.gz beside the capture")
def pprof(capture: Path, view: StackView, output: Path | None, force: bool) -> None:
    """Write a pprof profile (profile.proto, gzipped) for 'go tool pprof',
    Pyroscope or Grafana: the sample types off_cpu (the default), blocked
    and runqueue, in nanoseconds; each sample labelled with its thread,
    process, switch-out state and waker.

    \b
      go tool pprof -top CAPTURE.pb.gz
      go tool pprof -sample_index=blocked -tagfocus state=D -http=: CAPTURE.pb.gz
    """
    report_file = output_path(capture, output, ".pb.gz", force)
    model = load_with_progress(capture, view.time, view.reader)
    report_file.write(PprofProfile(view).render(model))
