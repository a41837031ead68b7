"""Which tracepoints a recording uses, and why the others are left out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.kinds import SWITCH_TRACEPOINT
from offcpu.machine.system import tracepoint_exists

WAKING_TRACEPOINTS = ("sched:sched_waking", "sched:sched_wakeup")
FORK_TRACEPOINTS = ("sched:sched_process_fork", "task:task_newtask")
EXIT_TRACEPOINT = "sched:sched_process_exit"
SCHEDSTATS_TRACEPOINTS = ("sched:sched_stat_sleep", "sched:sched_stat_blocked", "sched:sched_stat_iowait",
                          "sched:sched_stat_wait")
ALL_TRACEPOINTS = (SWITCH_TRACEPOINT, *WAKING_TRACEPOINTS, *FORK_TRACEPOINTS, EXIT_TRACEPOINT, *SCHEDSTATS_TRACEPOINTS)


@dataclass(frozen=True)
class Event:
    name: str
    call_graph: bool
    why: str

    def perf_spec(self) -> str:
        return self.name if self.call_graph else f"{self.name}/call-graph=no/"


@dataclass(frozen=True)
class Skipped:
    name: str
    why: str


@dataclass(frozen=True)
class EventPlan:
    events: tuple[Event, ...]
    skipped: tuple[Skipped, ...]

    def perf_args(self) -> list[str]:
        return [arg for event in self.events for arg in ("-e", event.perf_spec())]


def plan_events(tracefs: Path | None, schedstats: str) -> EventPlan:
    """Pick the events for this kernel; `schedstats` is 'absent', 'off' or 'on'
    as it will be while recording."""
    present = {name for name in ALL_TRACEPOINTS if tracepoint_exists(tracefs, name)}
    if SWITCH_TRACEPOINT not in present:
        raise OffcpuError(f"this kernel has no {SWITCH_TRACEPOINT} tracepoint; offcpu cannot work without it")
    events = [Event(SWITCH_TRACEPOINT, True, "off-CPU stacks and states at every switch-out")]
    skipped: list[Skipped] = []
    _first_present(present, WAKING_TRACEPOINTS, events, skipped, call_graph=True,
                   why="the waker's pid and stack; splits blocked time from run-queue delay")
    _first_present(present, FORK_TRACEPOINTS, events, skipped, call_graph=False,
                   why="threads created during the window")
    _first_present(present, (EXIT_TRACEPOINT,), events, skipped, call_graph=False,
                   why="threads that exit during the window")
    for name in SCHEDSTATS_TRACEPOINTS:
        if name not in present:
            skipped.append(Skipped(name, "the kernel has no such tracepoint (built without CONFIG_SCHEDSTATS)"))
        elif schedstats != "on":
            skipped.append(Skipped(name, "kernel.sched_schedstats=0; pass --enable-schedstats to use it"))
        else:
            events.append(Event(name, False, "the scheduler's own sleep/block/wait times, to cross-check"))
    return EventPlan(tuple(events), tuple(skipped))


def _first_present(present: set[str], choices: tuple[str, ...], events: list[Event],
                   skipped: list[Skipped], call_graph: bool, why: str) -> None:
    """Use the first of `choices` this kernel has; say why each other one is not used."""
    chosen = next((name for name in choices if name in present), None)
    if chosen is not None:
        events.append(Event(chosen, call_graph, why))
    for name in choices:
        if name != chosen:
            reason = f"{chosen} is used instead" if chosen and name in present else "the kernel has no such tracepoint"
            skipped.append(Skipped(name, reason))
