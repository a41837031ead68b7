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
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from offcpu.errors import OffcpuError
from offcpu.stacks import Stack

FIELDS = "comm,pid,tid,time,event,trace,ip,sym"
KERNEL_ADDRESS_DIGITS = 16  # x86-64 kernel text is at 0xffff...: 16 hex digits
CHUNK = 1 << 20

# One event: "comm  pid/tid  seconds.nanoseconds:  event: payload", then its call
# chain, one "\t<address> <symbol>" line a frame, and a blank line after a chain
# (comm may hold spaces). Matching
# whole events in big chunks keeps the per-event work in the regex engine.
EVENT = re.compile(r"^ *(.*?) +(-?\d+)/(-?\d+) +(\d+\.\d{9}): +([^\s(]+) *(.*)\n((?:\t.*\n)*)\n?", re.MULTILINE)

# As printed, for the reader of millions of events to convert only what it uses:
# comm, pid, tid, time ("seconds.nanoseconds", see time_ns), event as perf names it
# ("sched:sched_switch:" with a colon for tracepoints, "PERF_RECORD_SWITCH",
# "PERF_RECORD_FORK"), payload (the tracepoint's fields; "IN" / "OUT preempt ..."
# for switch records; "(pid:tid):(ppid:ptid)" for fork and exit records), raw call
# chain text ("" when the event has none)
Event = tuple[str, str, str, str, str, str, str]


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


def read_stacks(perf: str, perf_data: Path, event: str, limit: int) -> Iterable[Stack]:
    """The first `limit` call chains of one event."""
    found = 0
    with script_output(perf, perf_data) as stream:
        for _, _, _, _, name, _, chain in EventReader().events(stream):
            if chain and name.rstrip(":") == event:
                yield parse_stack(chain)
                found += 1
                if found >= limit:
                    return
