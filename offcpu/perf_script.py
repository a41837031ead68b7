"""Reading perf.data through `perf script`, as a stream of parsed records.

perf script is the slow step, so it is asked only for the fields offcpu uses
(call chains need `ip`), without inline resolution, and its text is parsed
as it arrives instead of being written anywhere.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FIELDS = "comm,pid,tid,time,event,trace,ip,sym"
KERNEL_ADDRESS_DIGITS = 16  # x86-64 kernel text is at 0xffff...: 16 hex digits

HEADER = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+(?P<sec>\d+)\.(?P<ns>\d{9}):\s+(?P<rest>.*)$")


@dataclass(slots=True)
class Record:
    """One event as perf script printed it. `frames` are leaf first; the first
    `kernel_frames` of them are kernel frames, the rest user frames."""

    comm: str
    pid: int
    tid: int
    time_ns: int
    event: str  # "sched:sched_switch", ..., or "SWITCH IN" / "SWITCH OUT" / "SWITCH OUT preempt"
    payload: str
    frames: list[str]
    kernel_frames: int


def script_argv(perf: str, perf_data: Path, time_slice: str | None = None) -> list[str]:
    argv = [perf, "script", "-i", str(perf_data), "-F", FIELDS, "--ns", "--no-inline", "--show-switch-events"]
    if time_slice:
        argv += ["--time", time_slice]
    return argv


@contextmanager
def script_lines(perf: str, perf_data: Path, time_slice: str | None = None) -> Iterator[Iterable[str]]:
    """perf script's output lines, streamed; perf is ended when the caller is done."""
    process = subprocess.Popen(
        script_argv(perf, perf_data, time_slice), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1 << 20,
    )
    assert process.stdout is not None
    try:
        yield process.stdout
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


class Parser:
    """Turns perf script lines into Records; counts what it could not read."""

    def __init__(self) -> None:
        self.skipped_lines = 0

    def records(self, lines: Iterable[str]) -> Iterator[Record]:
        current: Record | None = None
        for line in lines:
            if line.startswith("\t"):
                if current is not None:
                    self._add_frame(current, line)
                else:
                    self.skipped_lines += 1
                continue
            if current is not None:
                yield current
                current = None
            if line.strip():
                current = self._header(line)
        if current is not None:
            yield current

    def _header(self, line: str) -> Record | None:
        match = HEADER.match(line)
        if match is None:
            self.skipped_lines += 1
            return None
        rest = match["rest"].rstrip()
        if rest.startswith("PERF_RECORD_SWITCH"):
            event, payload = rest.removeprefix("PERF_RECORD_").replace("_CPU_WIDE", ""), ""
        else:
            event, _, payload = rest.partition(": ")
            event = event.rstrip(":")
        return Record(match["comm"], int(match["pid"]), int(match["tid"]),
                      int(match["sec"]) * 1_000_000_000 + int(match["ns"]), " ".join(event.split()), payload, [], 0)

    def _add_frame(self, record: Record, line: str) -> None:
        address, _, symbol = line.strip().partition(" ")
        if not address:
            self.skipped_lines += 1
            return
        record.frames.append(symbol)
        if len(address) == KERNEL_ADDRESS_DIGITS and address.startswith("ffff"):
            record.kernel_frames += 1
