"""offcpu report diff: a differential off-CPU flame graph and the stacks that grew most."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from offcpu.commands.report.common import (
    load_with_progress,
    output_options,
    output_path,
    renderer_option,
    view_options,
)
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.files import read_given
from offcpu.kinds import PlainPerfData
from offcpu.model.diffing import (
    Diff,
    Side,
    compare,
    from_folded,
    from_model,
    parse_folded,
    split_stack,
    title,
)
from offcpu.model.stackview import StackView
from offcpu.renderers.console import Column, fitted_table, printed, short_names, stdout_layout
from offcpu.renderers.flamegraph_tool import render_svg, require_renderer
from offcpu.renderers.text import ms
from offcpu.stacks import shorten_apart
from offcpu.stdout import write_stdout

FOLDED_MAX = 256 << 20  # the most of a folded file read: hundreds of thousands of stacks


@click.command()
@click.argument("base", type=click.Path(path_type=Path, readable=False))
@click.argument("new", type=click.Path(path_type=Path, readable=False))
@view_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows in the table of stacks that grew most.")
@click.option("--text", "text_only", is_flag=True, help="Print only the table; write no SVG.")
@renderer_option
@output_options("NEW.diff.svg beside NEW")
def diff(base: Path, new: Path, view: StackView, top: int, text_only: bool,
         flamegraph_path: str | None, output: Path | None, force: bool) -> None:
    """Compare two recordings: where did off-CPU time grow from BASE to NEW?

    Draws a differential flame graph (SVG, NEW.diff.svg beside NEW unless
    -o): frames are as wide as NEW's time, red where it grew from BASE, blue
    where it shrank. Stacks gone from NEW have no width there: swap BASE and
    NEW to see them. Then prints the stacks that grew most.

    \b
    BASE and NEW are each a capture directory ('offcpu record -o DIR'), a
    perf.data perf recorded, or a folded file ('offcpu report folded CAPTURE
    > FILE'). View options apply
    to both captures alike (a folded file was filtered when it was written:
    only --min-us still applies). When both are captures, NEW's time is
    scaled to the length of BASE's recording; a folded file has no length,
    so a diff with one is not normalised. Either way the output says which.

    \b
    Typical use, a fix against the problem:
      offcpu report diff before/ after/
      offcpu report diff --state D --text before/ after/

    On a terminal the table is coloured and fits the window; otherwise it is
    plain text, COLUMNS wide or 100.
    """
    if text_only and output is not None:
        raise click.UsageError("--text writes no SVG; leave out -o")
    for name, path in (("BASE", base), ("NEW", new)):
        if not path.exists():
            raise OffcpuError(f"{name} {path} does not exist; give a capture directory ('offcpu record -o DIR') "
                              "or a folded file ('offcpu report folded CAPTURE > FILE')")
    svg_file, renderer = None, None
    if not text_only:
        svg_file = output_path(new, output, ".diff.svg", force, reading=(base,))
        renderer = require_renderer(flamegraph_path)
    base_label, new_label = _labels(base, new)
    result = compare(_side(base, base_label, view), _side(new, new_label, view))
    if svg_file is not None and renderer is not None:
        if not result.new_us:
            raise OffcpuError(f"NEW ({new_label}) has no off-CPU time to draw: a differential graph is as wide as "
                              "NEW's time; swap BASE and NEW to see what went away, or use --text")
        svg_file.write(render_svg(renderer, result.lines(), title(result),
                                  subjects=[result.new.label, result.base.label]))
    write_stdout(_grown_table(result, top))


def _labels(base: Path, new: Path) -> tuple[str, str]:
    """The names BASE and NEW go by, printable: their own names (of the resolved paths, so that
    '.' has one), or their whole paths when the names are the same."""
    base, new = base.resolve(), new.resolve()
    base_label, new_label = (base.name, new.name) if base.name != new.name else (str(base), str(new))
    return printable(base_label), printable(new_label)


def _side(path: Path, label: str, view: StackView) -> Side:
    """A capture directory or a perf.data through its model; anything else as a folded file."""
    if path.is_dir() or PlainPerfData.at(path):
        return from_model(load_with_progress(path, view.time, view.reader), view, label)
    try:
        text = read_given(path, FOLDED_MAX).decode()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not text"
        raise OffcpuError(f"cannot read {path} ({reason}); give a capture directory, a perf.data or a folded "
                          "file") from None
    return from_folded(parse_folded(text, str(path)), label, view)


def _grown_table(result: Diff, top: int) -> str:
    """The stacks that grew most as a table as wide as the terminal or COLUMNS: coloured on a
    terminal, plain and stable otherwise."""
    width, color = stdout_layout()
    grown = [(split_stack(change.stack), change) for change in result.grown(top)]
    columns = []
    if len({root for (root, *_), _ in grown}) > 1:  # several programs: say whose
        columns.append(Column("thread", short_names([root for (root, *_), _ in grown]), least=10))
    frames = [(frames, kernel_frames) for (_, frames, kernel_frames, _), _ in grown]
    columns.append(Column("stack", lambda cell_width: shorten_apart(frames, cell_width), least=30, ample=40))
    if any(woken_by for (*_, woken_by), _ in grown):
        columns.append(Column("woken by", short_names([woken_by for (*_, woken_by), _ in grown]), least=10))
    columns += [Column("base ms", [ms(change.base_us) for _, change in grown], drop=2),
                Column("new ms", [ms(change.new_us) for _, change in grown], drop=1),
                Column("change ms", [f"{change.change_us / 1000:+,.1f}" for _, change in grown])]
    title = f"Stacks that grew most from {result.base.label} to {result.new.label}"
    parts = [fitted_table(title, columns, width, color) if grown
              else Text(f"No stack grew from {result.base.label} to {result.new.label}."),
              Text(f"Off CPU in all stacks: {ms(result.base_us)} ms in {result.base.label}, {ms(result.new_us)} ms "
                   f"in {result.new.label} ({(result.new_us - result.base_us) / 1000:+,.1f} ms)."),
              Text(f"{result.normalisation[0].upper()}{result.normalisation[1:]}."),
              *(Text(f"{note}.") for note in result.notes)]
    return printed(parts, width, color)
