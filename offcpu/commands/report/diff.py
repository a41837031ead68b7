"""offcpu report diff: a differential off-CPU flame graph and the stacks that grew most."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table
from rich.text import Text

from offcpu.commands.report.common import (load_with_progress, output_options, output_path, renderer_option,
                                           view_options, write_report)
from offcpu.diffing import Diff, Side, compare, from_folded, from_model, parse_folded, short_stack, title
from offcpu.errors import OffcpuError
from offcpu.flamegraph import render_svg, require_renderer
from offcpu.renderers.console import printed, stdout_layout
from offcpu.stackview import StackView

NUMBER_COLUMNS = 45  # what the three number columns and the borders take of the width


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@view_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows in the table of stacks that grew most.")
@click.option("--text", "text_only", is_flag=True, help="Print only the table; write no SVG.")
@renderer_option
@output_options
def diff(base: Path, new: Path, view: StackView, time: tuple[float, float] | None, top: int, text_only: bool,
         flamegraph_path: str | None, output: Path | None, force: bool) -> None:
    """Compare two recordings: where did off-CPU time grow from BASE to NEW?

    Draws a differential flame graph (SVG, NEW.diff.svg beside NEW unless
    -o): frames are as wide as NEW's time, red where it grew from BASE, blue
    where it shrank. Stacks gone from NEW have no width there: swap BASE and
    NEW to see them. Then prints the stacks that grew most.

    \b
    BASE and NEW are each a capture directory ('offcpu record -o DIR') or a
    folded file ('offcpu report folded CAPTURE > FILE'). View options apply
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
    svg_path, renderer = None, None
    if not text_only:
        svg_path = output_path(new, output, ".diff.svg", force)
        if svg_path.resolve() in (base.resolve(), new.resolve()):
            raise OffcpuError(f"{svg_path} is one of the inputs; choose another output with -o")
        renderer = require_renderer(flamegraph_path)
    base_label, new_label = _labels(base, new)
    result = compare(_side(base, base_label, view, time), _side(new, new_label, view, time))
    if svg_path is not None and renderer is not None:
        if not result.new_us:
            raise OffcpuError(f"NEW ({new_label}) has no off-CPU time to draw: a differential graph is as wide as "
                              "NEW's time; swap BASE and NEW to see what went away, or use --text")
        write_report(svg_path, render_svg(renderer, result.lines(), title(result)))
    click.get_text_stream("stdout").write(_grown_table(result, top))


def _labels(base: Path, new: Path) -> tuple[str, str]:
    """The names BASE and NEW go by: their own names (of the resolved paths, so that '.' has
    one), or their whole paths when the names are the same."""
    base, new = base.resolve(), new.resolve()
    return (base.name, new.name) if base.name != new.name else (str(base), str(new))


def _side(path: Path, label: str, view: StackView, time: tuple[float, float] | None) -> Side:
    """A capture directory through its model; anything else as a folded file."""
    if path.is_dir():
        return from_model(load_with_progress(path, time), view, label)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not text"
        raise OffcpuError(f"cannot read {path} ({reason}); give a capture directory or a folded file") from None
    return from_folded(parse_folded(text, str(path)), label, view, time is not None)


def _grown_table(result: Diff, top: int) -> str:
    """The stacks that grew most as a rich table: coloured on a terminal, plain and stable otherwise."""
    width, color = stdout_layout()
    grown = result.grown(top)
    stack_width = max(30, width - NUMBER_COLUMNS)
    table = Table(title=f"Stacks that grew most from {result.base.label} to {result.new.label}",
                  title_justify="left", title_style="bold" if color else "",
                  box=box.SIMPLE_HEAD if color else box.ASCII2)
    table.add_column("stack", no_wrap=True, overflow="ellipsis", max_width=stack_width)
    for column in ("base µs", "new µs", "change µs"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    with_root = len({change.stack.split(";")[0] for change in grown}) > 1  # several programs: say whose
    for change in grown:
        table.add_row(Text(short_stack(change.stack, stack_width, with_root)), f"{change.base_us:,}",
                      f"{change.new_us:,}", Text(f"{change.change_us:+,}", style="red" if color else ""))
    parts = [table if grown else Text(f"No stack grew from {result.base.label} to {result.new.label}."),
             Text(f"Off CPU in all stacks: {result.base_us:,} µs in {result.base.label}, {result.new_us:,} µs "
                  f"in {result.new.label} ({result.new_us - result.base_us:+,} µs)."),
             Text(f"{result.normalisation[0].upper()}{result.normalisation[1:]}."),
             *(Text(f"{note}.") for note in result.notes)]
    return printed(parts, width, color)
