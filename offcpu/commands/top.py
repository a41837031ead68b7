"""offcpu top: where threads wait, live, with the last minute kept for when it goes wrong."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from offcpu.commands.keeping import FLIGHT_OUTPUT, KEEP_SIZE, MAX_KEEP_S, TRIGGER, seconds
from offcpu.commands.record import DEFAULT_STACK_BUDGET, resolve_target, target_options
from offcpu.recording.targets import Choice

if TYPE_CHECKING:
    from offcpu.capture import Target
    from offcpu.diagnosis.locktable import LockTable
    from offcpu.live.follow import Follow, Frame, LiveOptions

MAX_INTERVAL_S = 60.0


@click.command()
@target_options
@click.option("--interval", "interval_s", type=float, default=1.0, show_default=True, callback=seconds,
              help=f"Seconds between refreshes (at most {MAX_INTERVAL_S:.0f}).")
@click.option("--window", "window_s", type=float, default=10.0, show_default=True, callback=seconds,
              help="Seconds of the sliding window that the findings and rates are of.")
@click.option("--keep", "keep_s", type=float, default=60.0, show_default=True, callback=seconds,
              help="Seconds of records the flight recorder keeps (at least --window).")
@KEEP_SIZE
@TRIGGER
@FLIGHT_OUTPUT
@click.option("--json", "as_json", is_flag=True, help="One JSON object per interval (offcpu-top/1), for scripts.")
@click.option("--stack-budget", type=click.IntRange(min=1), default=DEFAULT_STACK_BUDGET, show_default=True,
              metavar="STACKS", help="Stacks to take per second on each CPU at most (as record's).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS]...]")
def top(interval_s: float, window_s: float, keep_s: float, keep_bytes: int, triggers: tuple[Any, ...],
        flight_output: Path, as_json: bool, stack_budget: int, command: tuple[str, ...], **chosen: Any) -> None:
    """Show where threads wait, live: the findings (as report's) over a sliding
    window, the wait sites, the threads and who wakes whom, every --interval.

    It keeps the last --keep seconds of records, and writes them as a capture
    (a flight record, that every report reads) on SIGUSR1 or when a --trigger
    holds. Takes the targets record takes. Not on a terminal it prints a plain
    block per interval, or with --json one JSON object per line.

    \b
      offcpu top --pid 1234
      offcpu top --comm memcached --trigger 'p99_wait_ms>200'
      offcpu top -a --json | jq .findings
    """
    from offcpu.diagnosis.locktable import default_table
    from offcpu.live.follow import LiveOptions  # noqa: F811 (at run time)
    from offcpu.live.plain import block, json_line
    from offcpu.live.session import run_live
    from offcpu.stdout import write_stdout

    if interval_s > MAX_INTERVAL_S:
        raise click.BadParameter(f"at most {MAX_INTERVAL_S:.0f} s", param_hint="--interval")
    if window_s < interval_s:
        raise click.BadParameter(f"{window_s:g} s is shorter than --interval ({interval_s:g} s); give at least that",
                                 param_hint="--window")
    if not window_s <= keep_s <= MAX_KEEP_S:
        raise click.BadParameter(f"give from --window ({window_s:g} s) to {MAX_KEEP_S:.0f} s, not {keep_s:g}",
                                 param_hint="--keep")
    target = resolve_target(Choice(command=command, **chosen))
    options = LiveOptions(interval_s, window_s, keep_s, keep_bytes, triggers, flight_output, "top")
    table = default_table()
    name = target.describe()
    if as_json or not (sys.stdout.isatty() and sys.stdin.isatty()):
        render = json_line if as_json else block
        run_live(target, options, stack_budget, lambda frame: write_stdout(render(frame, name, table) + "\n"))
        return
    _on_screen(target, options, stack_budget, name, table)


def _on_screen(target: Target, options: LiveOptions, stack_budget: int, name: str, table: LockTable) -> None:
    from rich.console import Console

    from offcpu.live.screen import Screen, keys_and_screen, read_keys, whole_drawing
    from offcpu.live.session import run_live

    screen = Screen(name, table, Console())
    with keys_and_screen(screen) as live:
        def on_frame(frame: Frame) -> None:
            screen.take(frame)
            with whole_drawing():
                live.update(screen.render(), refresh=True)

        def on_tick(follow: Follow) -> None:
            keys = read_keys(sys.stdin.fileno())
            for key in keys:
                screen.key(key, follow)
            if keys:
                with whole_drawing():
                    live.update(screen.render(), refresh=True)

        run_live(target, options, stack_budget, on_frame, on_tick)
