"""offcpu report FORMAT CAPTURE: the report formats, listed once."""

from __future__ import annotations

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


@click.group(cls=LazyGroup, commands=FORMATS)
def report() -> None:
    """Turn a capture into a report.

    Each format reads a capture directory made by 'offcpu record'. The first
    report of a capture reads perf.data (the slow part) and saves the model
    as model.json beside it; later reports start from that. CAPTURE may also
    be a perf.data that perf recorded alone (with sched:sched_switch and -g):
    each report then says what it lacks.
    """
