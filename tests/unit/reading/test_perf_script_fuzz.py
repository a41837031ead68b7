"""Fuzzing the perf script reader: random bytes, random cuts and splices of the fixtures'
real text, and hostile names spliced into real events. The reader must never fail, must
count what it cannot read, and must never make an event up.

The texts are made here from the committed fixtures (recorded by perf): names are spliced
into them with plain line edits, which works because the fixtures' own names are plain.
Every case is seeded, so a failure names the seed that reproduces it; the number of cases
keeps the whole file to a few seconds."""

from __future__ import annotations

import functools
import io
import random
import re
from pathlib import Path

import pytest

from offcpu.reading.perf_script import PerfScriptReader, text_of, time_ns
from tests.fixtures import CallRecorder, script_text

FIXTURES = ["futex_pid", "churn_pid", "mmap_all", "churn_dwarf_pid", "dsync_command"]
CASES = 60
# The calls whose pid and tid are the event's own (its header's), not those of a thread it names.
IN_CONTEXT = ("sched_switch", "sched_waking", "switch_in", "switch_out")
# An event's first line, in a text whose names hold no newline (the fixtures'): the name, the
# anchor and the event name; and the fields that hold a thread's name, with the tid they name.
HEADER = re.compile(r"^(.*?) +(-?\d+)/(-?\d+) +(?:\[\d+\] +)?(\d+\.\d{9}): +(\S+)")
NAMED_FIELDS = re.compile(r"(prev_comm|next_comm|comm|child_comm)=(.*?) (prev_pid|next_pid|pid|child_pid)=(\d+)")
COMM_RECORD = re.compile(r"(PERF_RECORD_COMM(?: exec)?: )(.*):(-?\d+)/(-?\d+)$")
# What a hostile name is made of: what perf prints around names, and what breaks lines.
PIECES = ["\n", "\t", "\r", " ", "=", "/", ":", ";", "\x1b[31m", "\ufffd", "ą", "<", "'", '"', "0", "7", "ff",
          "pid=", " prev_pid=", " next_pid=", " prio=", " prev_state=R+", " ==> ", "target_cpu=", "sched:",
          "PERF_RECORD_SWITCH", "\tffffffff81000130 x"]


def random_name(rng: random.Random) -> str:
    """Up to 15 characters, as a thread's name holds."""
    name = ""
    while len(name) < rng.randint(0, 15):
        name += rng.choice(PIECES)
    return name[:15]


def read(text: str, chunk: int) -> tuple[CallRecorder, int]:
    """The reader's calls for `text` arriving `chunk` characters at a time, and its skipped count."""
    stream = io.StringIO(text)
    trickle = type("Trickle", (), {"read": lambda self, size=-1: stream.read(chunk)})()
    reader, calls = PerfScriptReader("perf", Path("unused")), CallRecorder()
    reader.decode(trickle, calls)
    return calls, reader.skipped


@functools.cache
def lines_of(fixture: str) -> tuple[list[str], list[int]]:
    """A fixture's lines, and which of them start an event (its names are plain: no newline)."""
    lines = script_text(fixture).split("\n")
    return lines, [index for index, line in enumerate(lines) if HEADER.match(line)]


@functools.cache
def anchors(fixture: str) -> set[tuple[int, int, int]]:
    """(time, pid, tid) of every event of a fixture."""
    lines, starts = lines_of(fixture)
    headers = [HEADER.match(lines[index]) for index in starts]
    return {(time_ns(found[4]), int(found[2]), int(found[3])) for found in headers if found}


def assert_well_formed(calls: CallRecorder) -> None:
    """What a sink is given parses: numbers are numbers, and every call chain is perf's frame lines."""
    for method, arguments in calls.calls:
        numbers = [value for name, value in vars(arguments).items() if name in ("time_ns", "pid", "tid", "next_tid",
                                                                               "woken_tid", "ppid", "ptid")]
        assert all(type(value) is int for value in numbers), (method, arguments)
        if method in ("sched_switch", "sched_waking"):
            lines = arguments.chain.split("\n")
            assert lines[-1] == "" and lines[:-1], arguments.chain
            assert all(re.fullmatch(r"\t *[0-9a-f]{1,16} .*", line) for line in lines[:-1]), arguments.chain


@pytest.mark.parametrize("seed", range(CASES))
def test_random_bytes_are_skipped_and_counted(seed):
    rng = random.Random(seed)
    raw = bytes(rng.choice(b"\n\t :/.0123456789abcdef" if rng.random() < 0.5 else range(256))
                for _ in range(rng.randint(1, 20_000)))
    text = text_of(io.BytesIO(raw)).read()
    calls, skipped = read(text, rng.randint(1, 5000))
    assert calls.calls == []
    assert (skipped > 0) == bool(text.strip())


@pytest.mark.parametrize("seed", range(CASES))
def test_cuts_and_splices_of_real_text_read_only_real_events(seed):
    # Given pieces of real perf script text, cut anywhere and joined, with bytes of garbage between some
    rng = random.Random(seed)
    sources = [rng.choice(FIXTURES) for _ in range(rng.randint(1, 3))]
    pieces = []
    for source in map(script_text, sources):
        start = rng.randrange(len(source))
        pieces.append(source[start:start + rng.randint(1, 30_000)])
        if rng.random() < 0.5:
            pieces.append("".join(rng.choice("\n\t ab:/0123456789") for _ in range(rng.randint(1, 200))))
    # When it is read, arriving in chunks of any size
    calls, skipped = read("".join(pieces), rng.randint(1, 70_000))
    # Then every event read is an event of the sources, its fields as perf printed them, and
    # what could not be read is counted
    assert_well_formed(calls)
    real = set().union(*map(anchors, sources))
    assert {(arguments.time_ns, arguments.pid, arguments.tid) for method, arguments in calls.calls
            if method in IN_CONTEXT} <= real
    assert {arguments.time_ns for _, arguments in calls.calls} <= {time for time, _, _ in real}
    assert skipped > 0 or len(pieces) == 1


def whole_events(fixture: str, rng: random.Random, count: int = 2000) -> str:
    """About `count` lines of a fixture from a random place, whole events only."""
    lines, starts = lines_of(fixture)
    first = 0 if rng.random() < 0.25 else rng.randrange(len(starts))  # the start has perf's synthesized names
    last = next((index for index in starts[first:] if index >= starts[first] + count), len(lines))
    return "\n".join(lines[starts[first]:last]).rstrip("\n") + "\n\n"


class HostileNames(dict):
    """A random hostile name for each tid, made when first asked for."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def __missing__(self, tid: int) -> str:
        name = self[tid] = random_name(self.rng)
        return name


def from_proc(name: str) -> str:
    """A name as perf synthesizes it for the threads there when it began (header 0/0, time 0),
    from /proc/PID/status, where the kernel shows a newline as \\n and a backslash as \\\\, and
    which perf cuts to 15 bytes."""
    shown = name.replace("\\", "\\\\").replace("\n", "\\n")
    return shown.encode()[:15].decode(errors="replace")


def hostile(text: str, names: HostileNames) -> tuple[str, list[str]]:
    """`text` as perf prints it for threads named `names[tid]`: every name in every event's
    header, in the tracepoints' fields, and in perf's COMM records; and the names its COMM
    records give, in order."""
    lines: list[str] = []
    given: list[str] = []

    def comm_record(record: re.Match[str]) -> str:
        tid = int(record[4])
        given.append(from_proc(names[tid]) if synthesized else names[tid])
        return f"{record[1]}{given[-1]}:{record[3]}/{record[4]}"

    for line in text.split("\n"):
        header = HEADER.match(line)
        if header:
            synthesized = header[3] == "0" and "PERF_RECORD_COMM" in line
            line = names[int(header[3])] + line[len(header[1]):]
            line = NAMED_FIELDS.sub(lambda field: f"{field[1]}={names[int(field[4])]} {field[3]}={field[4]}", line)
            line = COMM_RECORD.sub(comm_record, line)
        lines.append(line)
    return "\n".join(lines), given


@pytest.mark.parametrize("seed", range(CASES))
def test_hostile_names_spliced_into_real_events_are_read_as_they_are(seed):
    # Given a fixture's events with every thread renamed to a random hostile name
    rng = random.Random(seed)
    text = whole_events(FIXTURES[seed % len(FIXTURES)], rng)
    names = HostileNames(rng)
    spliced, given = hostile(text, names)
    # When it is read
    calls, skipped = read(spliced, rng.randint(500, 70_000))
    plain, _ = read(text, 1 << 20)
    # Then it is read as the plain text is, but for the names, which are the hostile ones (a
    # name's trailing blanks are lost in an event's header, where perf pads it with blanks)
    assert skipped == 0, seed
    assert [method for method, _ in calls.calls] == [method for method, _ in plain.calls]
    renames = iter(given)
    for (method, arguments), (_, original) in zip(calls.calls, plain.calls, strict=True):
        if method == "comm":
            named = {"comm": next(renames)}
        elif method == "sched_switch":
            named = {"prev_comm": names.get(original.tid)}
        elif method in ("switch_in", "sched_waking"):
            named = {"comm": names.get(original.tid, "").rstrip(" ")}
        else:
            named = {}
        assert vars(arguments) == vars(original) | named, (method, seed)
