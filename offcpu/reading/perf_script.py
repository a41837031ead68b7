"""Reading perf.data through `perf script`, as a stream of events.

perf script is the slow step, so it is asked only for the fields offcpu uses
(call chains need `ip`), without inline resolution, and its text is parsed
as it arrives instead of being written anywhere. A call chain is kept as the
raw text perf printed: equal stacks are equal strings, so they are counted
by a dictionary lookup and split into frames only once each.

A thread names itself: up to 15 bytes of anything but NUL (newlines, tabs and
terminal escapes included), and perf prints the name as it is, in each event's
header and in the tracepoints' comm fields. So a name is never read up to a
delimiter: each event is matched whole, by the shape of what perf prints
around the names (the `pid/tid seconds:` anchor, the field names and numbers
of each tracepoint, call chain lines of a tab and an address), and a name is
whatever lies between them, at most 16 characters. Text of any other shape
is skipped and counted.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from offcpu.errors import OffcpuError
from offcpu.reading.native_reader import open_perf_data, reading
from offcpu.reading.pairing import Paired, ThreadAtStart, pair_decoded
from offcpu.reading.sched_events import (
    SCHED_SWITCH,
    SCHED_WAKING,
    SWITCH_IN,
    SWITCH_OUT,
    THREAD_COMM,
    THREAD_EXIT,
    THREAD_FORK,
    UNKNOWN_CPU,
    Chain,
    Event as SinkEvent,
    Events,
    EventSink,
)
from offcpu.stacks import Stack, without_tracing
from offcpu.workers import child_environment, end_with_parent

FIELDS = "comm,pid,tid,cpu,time,event,trace,ip,sym"
KERNEL_ADDRESS_DIGITS = 16  # x86-64 kernel text is at 0xffff...: 16 hex digits
CHUNK = 1 << 20
BATCH = 256  # events handed to the sink at once: few enough to stay in the CPU's caches (4096 cost 8%)

# A thread's name as perf prints it: 15 bytes, each undecodable one a U+FFFD, padded
# to 16 in the header of an event without a call chain. Anything may be in it.
NAME = r"(?s:.{0,16}?)"
NUMBER = r"-?\d{1,10}"  # bounded: int() refuses thousands of digits
TIME = r"\d{1,12}\.\d{9}"
# "comm  pid/tid  [cpu]  seconds.nanoseconds:  event: ...", the cpu in text printed with it.
# An event starts at a line start, but its name may hold newlines: the anchor after it is
# what is trusted.
# A thread that has exited has no tid any more: its last events are printed with tid -1
# (`gone`), and its name as ":-1".
HEADER = (rf"^(?P<comm>{NAME}) +(?P<pid>{NUMBER})/(?P<tid>(?P<gone>-1)|{NUMBER}) +(?:\[(?P<cpu>{NUMBER})\] +)?"
          rf"(?P<time>{TIME}): +")
ANCHOR = rf" +{NUMBER}/{NUMBER} +(?:\[{NUMBER}\] +)?{TIME}: "
NEXT_HEADER = NAME + ANCHOR
# A call chain's frames: a line each, a tab, the address (right-aligned) and the symbol. A
# blank line ends the chain.
FRAMES = r"(?:\t *[0-9a-f]{1,16} [^\n]*\n)*"
# Each kind of event perf prints for offcpu's recordings (see script_argv), matched whole;
# the group named after the kind (the match's lastgroup) tells which one it is.
EVENT = re.compile(HEADER + "(?:" + "|".join([
    # perf's switch records, in the switching thread: "IN", "OUT" or "OUT preempt", and for
    # the CPU-wide kind the other thread's pid/tid
    r"(?P<switch_record>PERF_RECORD_SWITCH(?:_CPU_WIDE)? (?P<direction>IN|OUT(?: preempt)?)[^\n]*\n)",
    # sched_switch, in the leaving thread (prev_pid is the header's tid, or the thread's own when
    # it has exited and the header says -1), with its call chain
    rf"(?P<switch_sample>sched:sched_switch: prev_comm=(?P<prev_comm>{NAME}) "
    rf"prev_pid=(?(gone)(?P<gone_tid>{NUMBER})|(?P=tid)) "
    rf"prev_prio={NUMBER} prev_state=(?P<prev_state>\S+) ==> next_comm={NAME} next_pid=(?P<next_tid>{NUMBER}) "
    rf"next_prio={NUMBER}\n(?P<switch_chain>{FRAMES})\n)",
    # sched_waking (or sched_wakeup), in the waker, with its call chain; comm is the woken thread's
    rf"(?P<waking>sched:sched_wak(?:ing|eup): comm={NAME} pid=(?P<woken_tid>{NUMBER}) prio={NUMBER} "
    rf"target_cpu=\d{{1,10}}\n(?P<waking_chain>{FRAMES})\n)",
    # perf's task records: "(pid:tid):(ppid:ptid)", the thread created or exiting and its parent
    rf"(?P<task>PERF_RECORD_(?P<task_kind>FORK|EXIT)\((?P<task_pid>{NUMBER}):(?P<task_tid>{NUMBER})\):"
    rf"\((?P<parent_pid>{NUMBER}):(?P<parent_tid>{NUMBER})\)\n)",
    # a thread's new name, "exec" when exec gave it: "name:pid/tid", in the thread named, or
    # synthesized by perf (header 0/0) for the threads there when it began, from /proc, which
    # shows a newline in a name as "\\n"
    rf"(?P<comm_record>PERF_RECORD_COMM(?P<exec> exec)?: (?:(?P<own_comm>{NAME}):(?P=pid)/(?P=tid)|"
    rf"(?P<synthesized_comm>[^\n]{{0,16}}?):{NUMBER}/{NUMBER})\n)",
    # the other tracepoints offcpu records, without call chains: their fields, which may hold
    # names (and so newlines, never a whole header), then the address they fired at and its symbol
    rf"(?P<other>(?!sched:sched_(?:switch|waking|wakeup):)[\w-]+:[\w-]+: (?:[^\n]*\n(?!{NEXT_HEADER})){{0,32}}?"
    r"[^\n]* [0-9a-f]{16} [^\n]*\n)",
]) + ")", re.MULTILINE)

UNREAD_ANCHOR = re.compile(ANCHOR)

# The kinds of event, as EVENT's groups name them.
SWITCH_RECORD = "switch_record"
SWITCH_SAMPLE = "switch_sample"
WAKING = "waking"
TASK = "task"
COMM_RECORD = "comm_record"
OTHER = "other"
SAMPLES = (SWITCH_SAMPLE, WAKING, OTHER)  # tracepoints, not perf's own records
# The fields each kind is decoded from, as group numbers: a call of Match.group with
# numbers is the cheapest way out of the regex engine, on the hot path of every report.
_GROUPS = EVENT.groupindex
RECORD_GROUPS = tuple(_GROUPS[name] for name in ("comm", "pid", "tid", "cpu", "time", "direction"))
SWITCH_GROUPS = tuple(_GROUPS[name] for name in ("pid", "tid", "gone_tid", "cpu", "time", "prev_comm", "prev_state",
                                                 "next_tid", "switch_chain"))
WAKING_GROUPS = tuple(_GROUPS[name] for name in ("comm", "pid", "tid", "cpu", "time", "woken_tid", "waking_chain"))
TASK_GROUPS = tuple(_GROUPS[name] for name in ("cpu", "time", "task_kind", "task_pid", "task_tid", "parent_pid",
                                                "parent_tid"))
COMM_GROUPS = tuple(_GROUPS[name] for name in ("pid", "tid", "cpu", "time", "own_comm", "synthesized_comm", "exec"))


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


def text_of(output: IO[bytes]) -> IO[str]:
    """perf script's output as text: UTF-8, an undecodable byte (a name cut mid-character)
    as U+FFFD, and a carriage return kept as it is: a name may hold one, and it ends no line."""
    return io.TextIOWrapper(output, encoding="utf-8", errors="replace", newline="\n")


@contextmanager
def script_output(perf: str, perf_data: Path, time_slice: tuple[int, int] | None = None) -> Iterator[IO[str]]:
    """perf script's stdout, streamed. perf is ended when the caller stops early, or when
    the process that started it ends, however it ends (perf script sorts its events before it
    writes any, so a broken pipe alone would end it only later); when the caller read
    everything, a failing perf script is an error."""
    parent = os.getpid()
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            script_argv(perf, perf_data, time_slice), stdout=subprocess.PIPE, stderr=errors,
            stdin=subprocess.DEVNULL, env=child_environment(),
            preexec_fn=lambda: end_with_parent(parent, signal.SIGKILL),
        )
        assert process.stdout is not None
        stream = text_of(process.stdout)
        read_to_the_end = False
        try:
            yield stream
            read_to_the_end = stream.read(1) == ""
        finally:
            if not read_to_the_end:
                process.kill()
            process.wait()
            stream.close()
        if read_to_the_end and process.returncode != 0:
            errors.seek(0)
            last = next((line.strip() for line in reversed(errors.readlines()) if line.strip()), "no message")
            raise OffcpuError(f"perf script failed on {perf_data} ({last}); record it again with 'offcpu record'")


class EventReader:
    """Splits perf script output into events (EVENT's matches, whole: a match ends with its
    line, and an event with a call chain with the blank line after it); text that is not
    an event is skipped, and counted in events: each anchor in it, or one when it has none."""

    def __init__(self) -> None:
        self.skipped = 0

    def events(self, stream: IO[str]) -> Iterator[re.Match[str]]:
        rest = ""
        while chunk := stream.read(CHUNK):
            text = rest + chunk
            position = 0
            for match in EVENT.finditer(text):
                if match.start() != position:
                    self._skip(text[position:match.start()])
                position = match.end()
                yield match
            rest = text[position:]  # an event still arriving, or text that is none
            if len(rest) > CHUNK:  # no event is that long: the lines before the last chunk are none
                cut = rest.rfind("\n", 0, len(rest) - CHUNK) + 1
                self._skip(rest[:cut])
                rest = rest[cut:]
        self._skip(rest)

    def _skip(self, text: str) -> None:
        if text.strip():
            self.skipped += max(1, len(UNREAD_ANCHOR.findall(text)))


def parse_stack(chain: str) -> Stack:
    """Frames from perf's call chain text ("\\t<address> <symbol>" lines)."""
    frames = []
    kernel = 0
    for line in chain.split("\n"):
        address, _, symbol = line.strip().partition(" ")
        if not address:
            continue
        frames.append(symbol or "[unknown]")
        # the kernel's frames come first; a kernel-like address among the user's is junk of the walk
        if kernel == len(frames) - 1 and len(address) == KERNEL_ADDRESS_DIGITS and address.startswith("ffff"):
            kernel += 1
    return without_tracing(Stack(tuple(frames), kernel))


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
        for event in events.events(stream):
            kind = event.lastgroup
            if kind == SWITCH_RECORD:
                comm, pid, tid, cpu, time, direction = event.group(*RECORD_GROUPS)
                if direction == "IN":
                    add((SWITCH_IN, time_ns(time), _cpu(cpu), int(pid), int(tid), 0, comm, "", None))
                else:
                    add((SWITCH_OUT, time_ns(time), _cpu(cpu), int(pid), int(tid), int(direction == "OUT preempt"),
                         "", "", None))
            elif kind == SWITCH_SAMPLE:
                pid, tid, gone_tid, cpu, time, prev_comm, state, next_tid, chain = event.group(*SWITCH_GROUPS)
                add((SCHED_SWITCH, time_ns(time), _cpu(cpu), int(pid), int(gone_tid or tid), int(next_tid), prev_comm,
                     state.rstrip("+"), chain))
            elif kind == WAKING:
                comm, pid, tid, cpu, time, woken, chain = event.group(*WAKING_GROUPS)
                add((SCHED_WAKING, time_ns(time), _cpu(cpu), int(pid), int(tid), int(woken), comm, "", chain))
            elif kind == TASK:
                cpu, time, task, pid, tid, _, parent_tid = event.group(*TASK_GROUPS)
                add((THREAD_FORK if task == "FORK" else THREAD_EXIT, time_ns(time), _cpu(cpu), int(pid), int(tid),
                     int(parent_tid) if task == "FORK" else 0, "", "", None))
            elif kind == COMM_RECORD:
                pid, tid, cpu, time, own, synthesized, exec = event.group(*COMM_GROUPS)
                add((THREAD_COMM, time_ns(time), _cpu(cpu), int(pid), int(tid), int(exec is not None),
                     synthesized if own is None else own, "", None))
            if len(batch) >= BATCH:
                sink.take(Events.of(batch))
                batch.clear()
        if batch:
            sink.take(Events.of(batch))
        self.skipped += events.skipped

    def pair(self, slices: list[tuple[int, int]], window: tuple[int, int], at_start: list[ThreadAtStart],
             counted: tuple[int, int], switch_cost_ns: int, on_done: Callable[[int], None] | None = None) -> Paired:
        return pair_decoded(self, slices, window, at_start, counted, switch_cost_ns, on_done)

    def time_slices(self, start_ns: int, end_ns: int, count: int) -> list[tuple[int, int]]:
        """Slices of about as many records each, cut where the native reader cuts them (so that
        both readers make the same model); of equal length when perf.data cannot be indexed.
        perf script's --time bounds are inclusive, so none share a nanosecond."""
        try:
            with reading(self.perf_data):
                return open_perf_data(self.perf_data).time_slices(start_ns, end_ns, count)
        except OffcpuError:
            bounds = [start_ns + (end_ns - start_ns) * index // count for index in range(count + 1)]
            return [(bounds[index], bounds[index + 1] - (index + 1 < count)) for index in range(count)]

    def stacks(self, chains: Iterable[Chain]) -> dict[Chain, Stack]:
        return {chain: parse_stack(chain) for chain in chains if isinstance(chain, str)}


def _cpu(printed: str | None) -> int:
    """The CPU an event was recorded on, UNKNOWN_CPU in text printed without it."""
    return int(printed) if printed is not None else UNKNOWN_CPU
