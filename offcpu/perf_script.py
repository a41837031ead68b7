"""Reading perf.data through `perf script`, as a stream of events.

perf script is the slow step, so it is asked only for the fields offcpu uses
(call chains need `ip`), without inline resolution, and its text is parsed
as it arrives instead of being written anywhere. A call chain is kept as the
raw text perf printed: equal stacks are equal strings, so they are counted
by a dictionary lookup and split into frames only once each.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from offcpu import perf_data
from offcpu.errors import OffcpuError
from offcpu.sched_events import (SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, SWITCH_OUT, THREAD_COMM, THREAD_EXIT, THREAD_FORK,
                                  UNKNOWN_CPU, Chain, Events, EventSink)
from offcpu.sched_events import Event as SinkEvent
from offcpu.stacks import Stack

FIELDS = "comm,pid,tid,cpu,time,event,trace,ip,sym"
KERNEL_ADDRESS_DIGITS = 16  # x86-64 kernel text is at 0xffff...: 16 hex digits
CHUNK = 1 << 20
BATCH = 256  # events handed to the sink at once: few enough to stay in the CPU's caches (4096 cost 8%)

# One event: "comm  pid/tid  seconds.nanoseconds:  event: payload", then its call
# chain, one "\t<address> <symbol>" line a frame, and a blank line after a chain
# (comm may hold spaces). Matching
# whole events in big chunks keeps the per-event work in the regex engine.
EVENT = re.compile(r"^ *(.*?) +(-?\d+)/(-?\d+) +(?:\[(-?\d+)\] +)?(\d+\.\d{9}): +([^\s(]+) *(.*)\n((?:\t.*\n)*)\n?",
                   re.MULTILINE)

# Event names as perf script prints them: tracepoints with a trailing colon.
SWITCH = "sched:sched_switch:"
WAKING_EVENTS = ("sched:sched_waking:", "sched:sched_wakeup:")
SWITCH_RECORDS = ("PERF_RECORD_SWITCH", "PERF_RECORD_SWITCH_CPU_WIDE")
# Threads' births and deaths come from perf's task records: the lifecycle
# tracepoints miss some threads that live a few microseconds (seen on 6.18).
FORK = "PERF_RECORD_FORK"
EXIT = "PERF_RECORD_EXIT"
COMM = "PERF_RECORD_COMM"
# perf's own task records, "(pid:tid):(ppid:ptid)": the thread created or exiting, and its parent.
TASK_FIELDS = re.compile(r"\((-?\d+):(-?\d+)\):\((-?\d+):(-?\d+)\)")

# As printed, for the reader of millions of events to convert only what it uses:
# comm, pid, tid, cpu (None in text printed without it), time ("seconds.nanoseconds", see time_ns), event as perf names it
# ("sched:sched_switch:" with a colon for tracepoints, "PERF_RECORD_SWITCH",
# "PERF_RECORD_FORK"), payload (the tracepoint's fields; "IN" / "OUT preempt ..."
# for switch records; "(pid:tid):(ppid:ptid)" for fork and exit records), raw call
# chain text ("" when the event has none)
Event = tuple[str, str, str, str | None, str, str, str, str]


def time_ns(printed: str) -> int:
    """'1086.132579648' (perf script --ns) as integer nanoseconds."""
    return int(printed.replace(".", "", 1))


def script_argv(perf: str, perf_data: Path, time_slice: tuple[int, int] | None = None) -> list[str]:
    argv = [perf, "script", "-i", str(perf_data), "-F", FIELDS, "--ns", "--no-inline", "--show-switch-events",
            "--show-task-events"]
    if time_slice:
        argv += ["--time", f"{_seconds(time_slice[0])},{_seconds(time_slice[1])}"]
    return argv


def _seconds(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


@contextmanager
def script_output(perf: str, perf_data: Path, time_slice: tuple[int, int] | None = None) -> Iterator[IO[str]]:
    """perf script's stdout, streamed. perf is ended when the caller stops early;
    when the caller read everything, a failing perf script is an error."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            script_argv(perf, perf_data, time_slice), stdout=subprocess.PIPE, stderr=errors,
            stdin=subprocess.DEVNULL, text=True, errors="replace",
        )
        assert process.stdout is not None
        read_to_the_end = False
        try:
            yield process.stdout
            read_to_the_end = process.stdout.read(1) == ""
        finally:
            if not read_to_the_end:
                process.kill()
            process.wait()
            process.stdout.close()
        if read_to_the_end and process.returncode != 0:
            errors.seek(0)
            last = next((line.strip() for line in reversed(errors.readlines()) if line.strip()), "no message")
            raise OffcpuError(f"perf script failed on {perf_data} ({last}); record it again with 'offcpu record'")


class EventReader:
    """Splits perf script output into events; text that is not an event is skipped and counted."""

    def __init__(self) -> None:
        self.skipped_lines = 0

    def events(self, stream: IO[str]) -> Iterator[Event]:
        rest = ""
        while chunk := stream.read(CHUNK):
            text = rest + chunk
            cut = _complete_events(text)
            rest = text[cut:]
            yield from self._parse(text, cut)
        if rest:
            text = rest if rest.endswith("\n") else rest + "\n"
            yield from self._parse(text, len(text))

    def _parse(self, text: str, end: int) -> Iterator[Event]:
        position = 0
        for match in EVENT.finditer(text, 0, end):
            if match.start() != position:
                self._skip(text[position:match.start()])
            position = match.end()
            yield match.groups()  # type: ignore[misc]
        if position != end:
            self._skip(text[position:end])

    def _skip(self, text: str) -> None:
        self.skipped_lines += sum(1 for line in text.split("\n") if line.strip())


def _complete_events(text: str) -> int:
    """Where the whole events at the start of `text` end. An event with a call
    chain ends with a blank line. Without one (a run of switch records), cut
    before the first call chain, or else before the last whole line, which may
    be the header of a call chain still to come."""
    cut = text.rfind("\n\n") + 2
    if cut >= 2:
        return cut
    chain = text.find("\n\t")
    end = chain if chain >= 0 else text.rfind("\n")
    return text.rfind("\n", 0, end) + 1 if end > 0 else 0


def parse_stack(chain: str) -> Stack:
    """Frames from perf's call chain text ("\\t<address> <symbol>" lines)."""
    frames = []
    kernel = 0
    for line in chain.split("\n"):
        address, _, symbol = line.strip().partition(" ")
        if not address:
            continue
        frames.append(symbol or "[unknown]")
        if len(address) == KERNEL_ADDRESS_DIGITS and address.startswith("ffff"):
            kernel += 1
    return Stack(tuple(frames), kernel)


class PerfScriptReader:
    """A capture read through `perf script`: its text decoded into EventSink calls.
    Call chains are the text perf printed, parsed into frames once each by stacks()."""

    name = "perf-script"

    def __init__(self, perf: str, perf_data: Path) -> None:
        self.perf = perf
        self.perf_data = perf_data
        self.skipped = 0

    def read(self, sink: EventSink, time_slice: tuple[int, int] | None = None) -> None:
        with script_output(self.perf, self.perf_data, time_slice) as stream:
            self.decode(stream, sink)

    def decode(self, stream: IO[str], sink: EventSink) -> None:
        """perf script's text (of `script_argv`'s fields) into `sink`, BATCH events at a time."""
        events = EventReader()
        batch: list[SinkEvent] = []
        add = batch.append
        for comm, pid_text, tid_text, cpu_text, time_text, event, payload, chain in events.events(stream):
            pid, tid, time = int(pid_text), int(tid_text), time_ns(time_text)
            cpu = int(cpu_text) if cpu_text else UNKNOWN_CPU
            if event in SWITCH_RECORDS:
                if payload.startswith("IN"):
                    add((SWITCH_IN, time, cpu, pid, tid, 0, comm, "", None))
                else:
                    add((SWITCH_OUT, time, cpu, pid, tid, int(payload.startswith("OUT preempt")), "", "", None))
            elif event == SWITCH:
                decoded = _switch_fields(payload)
                if decoded is None:
                    events.skipped_lines += 1
                else:
                    add((SCHED_SWITCH, time, cpu, pid, decoded.prev_tid, decoded.next_tid, decoded.prev_comm,
                         decoded.prev_state, chain))
            elif event in WAKING_EVENTS:
                woken = _woken_tid(payload)
                if woken is None:
                    events.skipped_lines += 1
                else:
                    add((SCHED_WAKING, time, cpu, pid, tid, woken, comm, "", chain))
            elif event in (FORK, EXIT):
                task = TASK_FIELDS.match(payload)
                if task is None:
                    events.skipped_lines += 1
                elif event == FORK:
                    add((THREAD_FORK, time, cpu, int(task[1]), int(task[2]), int(task[4]), "", "", None))
                else:
                    add((THREAD_EXIT, time, cpu, int(task[1]), int(task[2]), 0, "", "", None))
            elif event.rstrip(":") == COMM:  # "PERF_RECORD_COMM exec:", or "PERF_RECORD_COMM:" for a rename
                add((THREAD_COMM, time, cpu, pid, tid, int(payload.startswith("exec")), comm, "", None))
            if len(batch) >= BATCH:
                sink.take(Events.of(batch))
                batch.clear()
        if batch:
            sink.take(Events.of(batch))
        self.skipped += events.skipped_lines

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        """Slices of about as many records each, cut where the native reader cuts them (so that
        both readers make the same model); of equal length when perf.data cannot be indexed.
        perf script's --time bounds are inclusive, so none share a nanosecond."""
        try:
            data = perf_data.open_perf_data(self.perf_data)
            try:
                return perf_data.balanced_slices(data, perf_data.index_records(data).round_starts, start_ns, end_ns,
                                                 count)
            finally:
                data.map.close()
        except OffcpuError:
            bounds = [start_ns + (end_ns - start_ns) * index // count for index in range(count + 1)]
            return [(bounds[index], bounds[index + 1] - (index + 1 < count)) for index in range(count)]

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        return {chain: parse_stack(chain) for chain in chains if isinstance(chain, str)}


@dataclass(frozen=True, slots=True)
class SwitchFields:
    prev_comm: str
    prev_tid: int
    prev_state: str  # as perf prints it, a trailing '+' (preempted) dropped
    next_tid: int


def _switch_fields(payload: str) -> SwitchFields | None:
    """sched_switch's "prev_comm=C prev_pid=P prev_prio=N prev_state=S ==> next_comm=C
    next_pid=P next_prio=N"; C may hold spaces."""
    prev_pid = payload.find(" prev_pid=")
    state = payload.find(" prev_state=", prev_pid)
    next_pid = payload.find(" next_pid=", state)
    if prev_pid < 0 or state < 0 or next_pid < 0:
        return None
    try:
        return SwitchFields(payload[10:prev_pid], int(payload[prev_pid + 10:payload.index(" ", prev_pid + 10)]),
                            payload[state + 12:payload.index(" ", state + 12)].rstrip("+"),
                            int(payload[next_pid + 10:payload.index(" ", next_pid + 10)]))
    except ValueError:
        return None


def _woken_tid(payload: str) -> int | None:
    """sched_waking's "comm=C pid=P prio=N target_cpu=N"; C may hold spaces."""
    woken_at = payload.rfind(" pid=", 0, payload.rfind(" prio="))
    try:
        return int(payload[woken_at + 5:payload.index(" ", woken_at + 5)]) if woken_at >= 0 else None
    except ValueError:
        return None


def read_stacks(perf: str, perf_data: Path, event: str, limit: int) -> Iterable[Stack]:
    """The first `limit` call chains of one event."""
    found = 0
    with script_output(perf, perf_data) as stream:
        for _, _, _, _, _, name, _, chain in EventReader().events(stream):
            if chain and name.rstrip(":") == event:
                yield parse_stack(chain)
                found += 1
                if found >= limit:
                    return
