"""offcpu doctor: can recording work here, and how close is a process to its limits?"""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.console import Console
from rich.table import Table

from offcpu.commands.record import DEFAULT_STACK_BUDGET
from offcpu.errors import OffcpuError
from offcpu.machine import limits, system
from offcpu.machine.readiness import (
    FAIL,
    INFO,
    OK,
    WARN,
    Check,
    can_record,
    frame_pointer_checks,
    limit_checks,
    machine_checks,
)
from offcpu.machine.selftest import RecordingCosts, recording_costs
from offcpu.recording import backends
from offcpu.stdout import write_stdout

STYLES = {OK: "green", WARN: "yellow", FAIL: "bold red"}


@click.command()
@click.option("--pid", "-p", type=int, help="Also check this process: frame pointers and its thread/map limits.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON instead of a table.")
def doctor(pid: int | None, as_json: bool) -> None:
    """Check what recording needs: BPF (or perf), permissions, tracefs,
    tracepoints, schedstats, kernel symbols, a flame graph renderer and frame
    pointers.

    With --pid, also compare the process's threads and memory maps with the
    limits that make thread creation fail (RLIMIT_NPROC, kernel.threads-max,
    kernel.pid_max, vm.max_map_count), warning from 80%.

    Exit status: 0 when recording can work, 1 when it cannot.
    """
    if pid is not None and not limits.process_exists(pid):
        raise OffcpuError(f"no such process: {pid} (check it with 'ps -p {pid}')")
    checks = machine_checks() + frame_pointer_checks(pid)
    snapshot = limits.snapshot(pid) if pid is not None else None
    limit_rows = limit_checks(snapshot) if snapshot else []
    ready = can_record(checks)
    if ready:
        checks += _cost_checks(as_json)
    if as_json:
        write_stdout(json.dumps({
            "can_record": ready,
            "checks": [asdict(check) for check in checks],
            "limits": snapshot.to_json() if snapshot else None,
        }, indent=2) + "\n")
    else:
        console = Console(highlight=False)
        with console.capture() as printed:  # coloured as for stdout, printed in one piece
            console.print(_table("Recording", checks))
            if limit_rows:
                console.print(_table(f"Limits of pid {pid}", limit_rows))
            verdict = "offcpu can record here." if ready else "offcpu cannot record here: fix the failed checks above."
            console.print(verdict, style="green" if ready else "bold red")
        write_stdout(printed.get())
    click.get_current_context().exit(0 if ready else 1)


def _cost_checks(quiet: bool) -> list[Check]:
    """Whether BPF records here, and what one recorded switch and its wakeup cost with each
    backend, measured by short recordings (about six seconds)."""
    console = Console(stderr=True)
    try:
        if console.is_terminal and not quiet:
            with console.status("Measuring what recording costs here..."):
                costs = recording_costs(system.require_perf(), DEFAULT_STACK_BUDGET)
        else:
            costs = recording_costs(system.require_perf(), DEFAULT_STACK_BUDGET)
        words = costs.words()
    except OffcpuError as error:
        return [Check("cost of recording", WARN, f"could not be measured: {error.format_message()}")]
    return [_bpf_check(costs), Check("cost of recording", INFO, words)]


def _bpf_check(costs: RecordingCosts) -> Check:
    """Whether BPF recorded the self-test (perf did, when BPF did not: the costs were put in words)."""
    if costs.bpf.ns is None:
        return Check("BPF recording", WARN,
                     f"cannot record here: {costs.bpf.problem}; perf records here instead (offcpu record picks it)")
    return Check("BPF recording", OK, f"offcpu record uses it by default: {backends.choose('auto', []).why}")


def _table(title: str, checks: list) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("found", overflow="fold")
    for check in checks:
        table.add_row(check.name, check.status, check.detail, style=STYLES.get(check.status))
    return table
