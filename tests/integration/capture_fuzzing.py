"""Mutations of real captures and perf.data files, and a child process that reports each one
(tests/integration/test_fuzz_captures.py).

Each mutation is made from the file's own format: a BPF record's fields at their offsets in
offcpu.reading.bpf_reader.RECORD, a stack table's entries walked by its STACK_ENTRY, perf.data's
header (offcpu.kinds.PERF_HEADER) and its records' headers walked from its data section.
The child runs `offcpu report text` in its own process (imported once), under a bound on its
memory, and says when each report starts and how it ended, so that a crash or a hang in the
compiled core is pinned to its mutation and the next child goes on from there.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import struct
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offcpu.kinds import PERF_HEADER
from offcpu.reading.bpf_reader import RECORD, STACK_ENTRY

EXTREMES = (0, -1, 1 << 31, (1 << 32) - 1, 1 << 63)
WRONG_TYPES: tuple[Any, ...] = ("x", [], {}, None, True, 1e308, -1, 1 << 63, 1 << 64, 0.5)
DEEP = 100_000  # brackets: far past Python's recursion limit
PERF_EVENT_HEADER = struct.Struct("<IHH")  # perf_event_header: type, misc, size
MEMORY_BYTES = 4 << 30  # RLIMIT_AS of the child
Mutation = Callable[[Path, random.Random], str]  # mutates a capture in place, says what it did


def extreme(rng: random.Random, size: int) -> bytes:
    """One of EXTREMES in `size` bytes, little-endian (cut to fit)."""
    return (rng.choice(EXTREMES) & ((1 << 8 * size) - 1)).to_bytes(size, "little")


def _write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def flip_bytes(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    offsets = [rng.randrange(len(data)) for _ in range(rng.randint(1, 16))]
    for offset in offsets:
        data[offset] ^= rng.randint(1, 255)
    path.write_bytes(bytes(data))
    return f"{path.name}: bytes flipped at {offsets}"


def truncate(path: Path, rng: random.Random) -> str:
    size = rng.randrange(path.stat().st_size)
    os.truncate(path, size)
    return f"{path.name}: cut to {size} bytes"


def record_field(path: Path, rng: random.Random) -> str:
    """A field of one bpf-records.bin record set to an extreme, at its offset in RECORD."""
    index = rng.randrange(path.stat().st_size // RECORD.itemsize)
    fields = RECORD.fields
    assert fields is not None
    name = rng.choice([name for name, (kind, *_) in fields.items() if kind.kind != "S"])
    kind, offset = fields[name][:2]
    value = extreme(rng, kind.itemsize)
    _write_at(path, index * RECORD.itemsize + offset, value)
    return f"{path.name}: record {index}'s {name} set to {value.hex()}"


def stack_field(path: Path, rng: random.Random) -> str:
    """A stack table entry's id, depth or an address set to an extreme, walked by STACK_ENTRY."""
    raw = path.read_bytes()
    entries, at = [], 0
    while at + STACK_ENTRY.size <= len(raw):
        depth = STACK_ENTRY.unpack_from(raw, at)[1]
        entries.append((at, depth))
        at += STACK_ENTRY.size + 8 * depth
    at, depth = rng.choice(entries)
    choice = rng.randrange(2 + depth)
    offset, size = (at + 4 * choice, 4) if choice < 2 else (at + STACK_ENTRY.size + 8 * (choice - 2), 8)
    value = extreme(rng, size)
    _write_at(path, offset, value)
    return f"{path.name}: stack entry at {at}, its word at {offset} set to {value.hex()}"


def perf_header_field(path: Path, rng: random.Random) -> str:
    """One of perf_file_header's sizes and offsets set to an extreme (PERF_HEADER, after the magic)."""
    field = rng.randrange(1, len(PERF_HEADER.unpack(bytes(PERF_HEADER.size))))  # after the magic
    offset = 8 + 8 * (field - 1)
    value = extreme(rng, 8)
    _write_at(path, offset, value)
    return f"{path.name}: header word {field} (at {offset}) set to {value.hex()}"


def perf_record_field(path: Path, rng: random.Random) -> str:
    """A record of perf.data's data section: its type, misc or size, or a word of its body,
    set to an extreme (its records walked by their headers)."""
    raw = path.read_bytes()
    data_offset, data_size = PERF_HEADER.unpack_from(raw)[-2:]
    records, at = [], data_offset
    while at + PERF_EVENT_HEADER.size <= min(data_offset + data_size, len(raw)):
        size = PERF_EVENT_HEADER.unpack_from(raw, at)[2]
        if size < PERF_EVENT_HEADER.size:
            break
        records.append((at, size))
        at += size
    at, size = rng.choice(records)
    words = [(at, 4), (at + 4, 2), (at + 6, 2)] + [(offset, 8) for offset in range(at + 8, at + size - 7, 8)]
    offset, width = rng.choice(words)
    value = extreme(rng, width)
    _write_at(path, offset, value)
    return f"{path.name}: record at {at} ({size} bytes), its {width} bytes at {offset} set to {value.hex()}"


def _places(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON value."""
    found: list[tuple[Any, Any]] = []
    keys = value.keys() if isinstance(value, dict) else range(len(value)) if isinstance(value, list) else ()
    for key in keys:
        found.append((value, key))
        found += _places(value[key])
    return found


def json_value(path: Path, rng: random.Random) -> str:
    """A value somewhere in a JSON file replaced by one of another type, nested past any
    limit, or its key removed."""
    data = json.loads(path.read_bytes())
    places = _places(data)
    if not places:
        return flip_bytes(path, rng)
    container, key = rng.choice(places)
    how = rng.randrange(len(WRONG_TYPES) + 2)
    if how < len(WRONG_TYPES):
        container[key] = WRONG_TYPES[how]
        said = f"set to {json.dumps(WRONG_TYPES[how])}"
    elif how == len(WRONG_TYPES) and isinstance(container, dict):
        del container[key]
        said = "removed"
    else:
        container[key] = "\0deep\0"
        said = f"nested {DEEP} deep"
    path.write_text(json.dumps(data).replace('"\\u0000deep\\u0000"', "[" * DEEP + "]" * DEEP))
    return f"{path.name}: the value at {key!r} {said}"


def replace_file(path: Path, rng: random.Random) -> str:
    path.unlink()
    if rng.random() < 0.5:
        os.mkfifo(path)
        return f"{path.name}: replaced by a FIFO"
    path.symlink_to("/dev/zero")
    return f"{path.name}: replaced by a link to /dev/zero"


def mutations_of(path: Path) -> list[tuple[Mutation, int]]:
    """The mutations that fit a file, each with its weight."""
    by_name: dict[str, list[tuple[Mutation, int]]] = {
        "bpf-records.bin": [(record_field, 6)], "bpf-stacks.bin": [(stack_field, 4)],
        "perf.data": [(perf_header_field, 2), (perf_record_field, 6)]}
    common = [(flip_bytes, 2), (truncate, 1), (replace_file, 1)]
    return by_name.get(path.name, [(json_value, 5)] if path.suffix == ".json" else []) + common


def mutate(base: Path, target: Path, rng: random.Random) -> str:
    """A copy of the capture (a directory, or a perf.data) at `target`, one of its files mutated:
    the others are linked, not copied."""
    if base.is_file():
        shutil.copyfile(base, target)
        chosen = target
    else:
        target.mkdir()
        names = sorted(path.name for path in base.iterdir())
        name = rng.choice(names)
        for each in names:
            (shutil.copyfile if each == name else os.link)(base / each, target / each)
        chosen = target / name
    options = mutations_of(chosen)
    mutation = rng.choices([option for option, _ in options], [weight for _, weight in options])[0]
    return mutation(chosen, rng)


def main() -> None:
    """The child: for each line on stdin (an index, a capture and a directory for its output),
    `offcpu report text CAPTURE`, with stdout and stderr in that directory; on the descriptor
    its argument names, a line when each report starts and one with its exit code when it ends."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    from offcpu.app import run

    said = os.fdopen(int(sys.argv[1]), "w")
    saved = os.dup(1), os.dup(2)
    for line in sys.stdin:
        index, capture, output = json.loads(line)
        print(json.dumps({"started": index}), file=said, flush=True)
        with open(Path(output) / "stdout", "wb") as out, open(Path(output) / "stderr", "wb") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                code = run(["report", "text", capture])
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else 1
            except BaseException:  # what the console script would print, exit 1
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
        print(json.dumps({"ended": index, "code": code}), file=said, flush=True)


if __name__ == "__main__":
    main()
