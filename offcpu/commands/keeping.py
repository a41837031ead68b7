"""The flight recorder's options, as `offcpu top` and `offcpu record --keep` take them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from offcpu.recording.end_watch import SIZE, size_in_bytes

MAX_KEEP_S = 3600.0


def seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise click.BadParameter(f"give a number of seconds above 0, not {value}")
    return value


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    if not SIZE.match(value) or size_in_bytes(value) < 1 << 20:
        raise click.BadParameter(f"give a size of at least 1M, a number and one of B, K, M or G, such as 256M, "
                                 f"not {value!r}")
    return size_in_bytes(value)


def _triggers(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[Any, ...]:
    from offcpu.live.triggers import parse

    return tuple(parse(text) for text in value)


# The flight recorder's options, as top and record --keep take them
KEEP_SIZE = click.option("--keep-size", "keep_bytes", default="256M", show_default=True, callback=_size,
                         help="Keep no more records than this in memory (the oldest go first, and offcpu says so).")
TRIGGER = click.option("--trigger", "triggers", multiple=True, callback=_triggers, metavar="CONDITION",
                       help="Write the flight record when CONDITION comes to hold: a finding at a severity "
                            "('lock_contention>=warning') or the window's 99th percentile wait "
                            "('p99_wait_ms>200'). May be given several times.")
FLIGHT_OUTPUT = click.option("--flight-output", type=click.Path(path_type=Path, file_okay=False), default=Path("."),
                             show_default=True,
                             help="Where flight records go, each a capture directory offcpu-flight-TIME-N.")
