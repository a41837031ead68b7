"""offcpu report FORMAT CAPTURE: the report formats, listed once."""

from __future__ import annotations

import click

from offcpu.commands.report.diff import diff
from offcpu.commands.report.folded import folded
from offcpu.commands.report.html import html_report
from offcpu.commands.report.json import json_report
from offcpu.commands.report.perfetto import perfetto
from offcpu.commands.report.pprof import pprof
from offcpu.commands.report.speedscope import speedscope
from offcpu.commands.report.svg import svg
from offcpu.commands.report.text import text

FORMATS = [text, svg, html_report, json_report, folded, speedscope, pprof, perfetto, diff]


@click.group()
def report() -> None:
    """Turn a capture into a report.

    Each format reads a capture directory made by 'offcpu record'. The first
    report of a capture reads perf.data (the slow part) and saves the model
    as model.json beside it; later reports start from that. CAPTURE may also
    be a perf.data that perf recorded alone (with sched:sched_switch and -g):
    each report then says what it lacks.
    """


for command in FORMATS:
    report.add_command(command)
