"""offcpu report FORMAT CAPTURE: the report formats, listed once."""

from __future__ import annotations

import difflib
from pathlib import Path

import click

from offcpu.commands import LazyGroup

FORMATS = {
    "text": "offcpu.commands.report.text:text",
    "svg": "offcpu.commands.report.svg:svg",
    "html": "offcpu.commands.report.html:html_report",
    "json": "offcpu.commands.report.json:json_report",
    "folded": "offcpu.commands.report.folded:folded",
    "speedscope": "offcpu.commands.report.speedscope:speedscope",
    "pprof": "offcpu.commands.report.pprof:pprof",
    "perfetto": "offcpu.commands.report.perfetto:perfetto",
    "diff": "offcpu.commands.report.diff:diff",
}
DEFAULT_FORMAT = "text"


class _Formats(LazyGroup):
    """The formats, and what a first word that is none of them was meant to be: a capture
    given without a format (its text report), or a format misspelt (the nearest named)."""

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        given = args[0]
        if given in self.lazy or given.startswith("-"):
            return super().resolve_command(ctx, args)
        if Path(given).exists():
            return super().resolve_command(ctx, [DEFAULT_FORMAT, *args])
        near = difflib.get_close_matches(given, self.lazy, n=1)
        meant = f" (did you mean '{near[0]}'?)" if near else ""
        raise click.UsageError(f"'{given}' is neither a format nor a capture{meant}; the formats: "
                               f"{', '.join(self.lazy)}", ctx)


@click.group(cls=_Formats, commands=FORMATS)
def report() -> None:
    """Turn a capture into a report.

    Each format reads a capture directory made by 'offcpu record'; without a
    format ('offcpu report CAPTURE'), the text report. The first report of a
    capture reads its recording (the slow part) and saves the model as
    model.json beside it; later reports start from that. CAPTURE may also be
    a perf.data that perf recorded alone (with sched:sched_switch and -g):
    each report then says what it lacks.
    """
