"""offcpu report folded: off-CPU stacks in FlameGraph's folded format."""

from __future__ import annotations

from pathlib import Path

import click

from offcpu.commands.report.common import capture_argument, load_with_progress, view_options
from offcpu.model.stackview import StackView
from offcpu.model.summaries import sampling_note
from offcpu.renderers.flame import stack_lines
from offcpu.stdout import write_stdout


@click.command()
@capture_argument
@view_options
def folded(capture: Path, view: StackView) -> None:
    """Print off-CPU stacks as folded lines: frames root first, joined by ';',
    then the microseconds spent off CPU in that stack.

    The output goes to flamegraph.pl (or inferno-flamegraph) as it is:

    \b
      offcpu report folded CAPTURE | flamegraph.pl --colors io --countname us > offcpu.svg

    The lines sum to the off-CPU time of the threads they cover; when the
    capture's stacks were sampled, to an estimate of it, and a note on stderr
    says how many waits carry a stack.
    """
    model = load_with_progress(capture, view.time, view.reader)
    lines = stack_lines(model, view)
    note = sampling_note(model)
    if note:
        click.echo(f"offcpu: note: {note}", err=True)  # the lines' format has no room for it
    write_stdout("".join(f"{line}\n" for line in lines))
