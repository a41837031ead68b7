"""offcpu report folded: off-CPU stacks in FlameGraph's folded format."""

from __future__ import annotations

from pathlib import Path

import click

from offcpu.commands.report.common import capture_argument, load_with_progress, view_options
from offcpu.errors import OffcpuError
from offcpu.stackview import StackView, folded as folded_lines


@click.command()
@capture_argument
@view_options
def folded(capture: Path, view: StackView, time: tuple[float, float] | None) -> None:
    """Print off-CPU stacks as folded lines: frames root first, joined by ';',
    then the microseconds spent off CPU in that stack.

    The output goes to flamegraph.pl (or inferno-flamegraph) as it is:

    \b
      offcpu report folded CAPTURE | flamegraph.pl --colors io --countname us > offcpu.svg

    The lines sum to the off-CPU time of the threads they cover.
    """
    model = load_with_progress(capture, time)
    lines = folded_lines(model, view)
    if not lines:
        raise OffcpuError("no off-CPU time matches these options; loosen --state, --pid, --tid, --comm or --min-us"
                          if model.rows else "no off-CPU intervals in this capture: its threads never left the "
                                             "CPU while recording (record a longer --duration)")
    stdout = click.get_text_stream("stdout")
    for stack, microseconds in lines:
        stdout.write(f"{stack} {microseconds}\n")
