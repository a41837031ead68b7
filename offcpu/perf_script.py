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
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from offcpu.errors import OffcpuError

FIELDS = "comm,pid,tid,time,event,trace,ip,sym"
KERNEL_ADDRESS_DIGITS = 16  # x86-64 kernel text is at 0xffff...: 16 hex digits
CHUNK = 1 << 20

# "comm  pid/tid  seconds.nanoseconds:  event: payload"; comm may hold spaces.
HEADER = re.compile(r"\s*(.*?)\s+(-?\d+)/(-?\d+)\s+(\d+)\.(\d{9}):\s+(\S+)\s*(.*)")


@dataclass(frozen=True, slots=True)
class Header:
    comm: str
    pid: int
    tid: int
    time_ns: int
    event: str  # "sched:sched_switch", ..., or "PERF_RECORD_SWITCH"
    payload: str  # the tracepoint's fields, or "IN" / "OUT" / "OUT preempt" for switch records


@dataclass(frozen=True, slots=True)
class Stack:
    """A call chain, leaf first; the first `kernel_frames` are kernel frames."""

    frames: tuple[str, ...]
    kernel_frames: int

    @property
    def user_frames(self) -> tuple[str, ...]:
        return self.frames[self.kernel_frames:]


def script_argv(perf: str, perf_data: Path, time_slice: tuple[int, int] | None = None) -> list[str]:
    argv = [perf, "script", "-i", str(perf_data), "-F", FIELDS, "--ns", "--no-inline", "--show-switch-events"]
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
    """Splits perf script output into (header line, raw call chain text) pairs.

    Events with a call chain end with a blank line; events without one (switch
    records, lifecycle tracepoints) are single lines. Lines that fit neither
    are skipped and counted.
    """

    def __init__(self) -> None:
        self.skipped_lines = 0

    def events(self, stream: IO[str]) -> Iterator[tuple[str, str]]:
        for block in self._blocks(stream):
            headers, tab, chain = block.partition("\n\t")
            lines = headers.split("\n")
            for line in lines[:-1]:
                yield line, ""
            last = lines[-1]
            if last.startswith("\t"):  # a chain with no header: garbage
                self.skipped_lines += block.count("\n") + 1
                continue
            yield last, "\t" + chain if tab else ""

    @staticmethod
    def _blocks(stream: IO[str]) -> Iterator[str]:
        rest = ""
        while chunk := stream.read(CHUNK):
            parts = (rest + chunk).split("\n\n")
            rest = parts.pop()
            for part in parts:
                if part.strip("\n"):
                    yield part.strip("\n")
        if rest.strip("\n"):
            yield rest.strip("\n")

    def header(self, line: str) -> Header | None:
        match = HEADER.fullmatch(line)
        if match is None:
            self.skipped_lines += 1
            return None
        comm, pid, tid, seconds, ns, event, payload = match.groups()
        return Header(comm, int(pid), int(tid), int(seconds) * 1_000_000_000 + int(ns), event.rstrip(":"),
                      payload.rstrip())


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
    reader = EventReader()
    found = 0
    with script_output(perf, perf_data) as stream:
        for line, chain in reader.events(stream):
            if chain and f" {event}:" in line:
                yield parse_stack(chain)
                found += 1
                if found >= limit:
                    return
