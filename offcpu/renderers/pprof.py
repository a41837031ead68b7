"""The model as a pprof profile (google/pprof proto/profile.proto, gzipped), which
`go tool pprof`, Pyroscope and Grafana read: sample types off_cpu, blocked and
runqueue in nanoseconds; a sample per thread, stack, state and waker, labelled
with them.

The model keeps frames by name, not by address, so a location is a frame name in
the user or the kernel mapping. The few protobuf fields a profile needs are
written here (varints and length-delimited fields): a protobuf library would
bring a code generator or descriptors for them.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from datetime import datetime

from offcpu.escaping import printable
from offcpu.model import Model, Row
from offcpu.model.stackview import SEPARATOR, StackView, row_frames, selected, woken_by
from offcpu.model.summaries import sampling_note
from offcpu.stacks import runtime_parts

SAMPLE_TYPES = ("off_cpu", "blocked", "runqueue")
UNIT = "nanoseconds"
KERNEL_MAPPING = "[kernel.kallsyms]"
USER_MAPPING_ID, KERNEL_MAPPING_ID = 1, 2


def varint(value: int) -> bytes:
    """A protobuf varint; a negative int64 as its 64-bit two's complement."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def number(field_number: int, value: int) -> bytes:
    """A varint field (wire type 0); a zero is left out, as proto3 does."""
    return varint(field_number << 3) + varint(value) if value else b""


def nested(field_number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a message, a string or packed numbers."""
    return varint(field_number << 3 | 2) + varint(len(payload)) + payload


def packed(field_number: int, values: list[int]) -> bytes:
    return nested(field_number, b"".join(varint(value) for value in values)) if values else b""


@dataclass
class Strings:
    """The profile's string table: "" first, each string once, as it prints (escaping.printable):
    `go tool pprof` prints the names, labels and comments in it to a terminal as they are."""

    numbers: dict[str, int] = field(default_factory=lambda: {"": 0})

    def __call__(self, text: str) -> int:
        return self.numbers.setdefault(printable(text), len(self.numbers))

    def encoded(self) -> bytes:
        return b"".join(nested(6, text.encode()) for text in self.numbers)


class PprofProfile:
    def __init__(self, view: StackView) -> None:
        self.view = view

    def render(self, model: Model) -> bytes:
        shown = selected(model, self.view)
        strings = Strings()
        locations: dict[tuple[str, int], int] = {}  # (frame, mapping) -> location id (= its function's id)
        samples: dict[tuple[tuple[int, ...], tuple[tuple[str, str], ...]], list[int]] = {}
        for row in shown.rows:
            if not row.offcpu_us:
                continue
            frames, kernel = row_frames(shown, self.view, row)
            ids = tuple(locations.setdefault((frame, _mapping(index, kernel, frames)), len(locations) + 1)
                        for index, frame in reversed(list(enumerate(frames))))  # the leaf first
            values = samples.setdefault((ids, self.labels(shown, row)), [0, 0, 0])
            for index, us in enumerate((row.offcpu_us, row.blocked_us, row.runqueue_us)):
                values[index] += us * 1000
        profile = b"".join(nested(1, number(1, strings(kind)) + number(2, strings(UNIT))) for kind in SAMPLE_TYPES)
        for (ids, labels), values in samples.items():
            label_fields = b"".join(nested(3, number(1, strings(key)) + number(2, strings(text)))
                                    for key, text in labels)
            profile += nested(2, packed(1, list(ids)) + packed(2, values) + label_fields)
        target = model.capture.target
        for mapping_id, name in ((USER_MAPPING_ID, target.comm or "[user]"), (KERNEL_MAPPING_ID, KERNEL_MAPPING)):
            profile += nested(3, number(1, mapping_id) + number(5, strings(name)) + number(7, 1))
        # A runtime's frame (a Python function's) is its function, in its file, at its line
        for (frame, mapping_id), location_id in locations.items():
            name, file, line = runtime_parts(frame) or (frame, "", 0)
            profile += nested(4, number(1, location_id) + number(2, mapping_id) +
                              nested(4, number(1, location_id) + number(2, line)))
            profile += nested(5, number(1, location_id) + number(2, strings(name)) + number(3, strings(name)) +
                              number(4, strings(file)))
        duration_ns = model.window_end_ns - model.window_start_ns
        note = sampling_note(model)
        comments = [strings(f"Off-CPU time of {target.describe()}"), *([strings(note)] if note else [])]
        profile += strings.encoded()
        profile += number(9, _started_ns(model)) + number(10, duration_ns) + packed(13, comments)
        profile += number(14, strings.numbers[SAMPLE_TYPES[0]])
        return gzip.compress(profile, mtime=0)

    @staticmethod
    def labels(model: Model, row: Row) -> tuple[tuple[str, str], ...]:
        thread = model.threads[row.tid]
        return (("thread", f"{thread.comm}-{row.tid}"), ("process", str(thread.pid)), ("state", row.state),
                ("waker", woken_by(model, row)))


def _mapping(index: int, kernel: range, frames: tuple[str, ...]) -> int:
    """The kernel's frames of the row's own stack are in the kernel mapping, the rest (its user
    frames, and with --waker the separator and the waker's frames) in the user one."""
    return KERNEL_MAPPING_ID if index in kernel and frames[index] != SEPARATOR else USER_MAPPING_ID


def _started_ns(model: Model) -> int:
    """When the recording's window began, as nanoseconds since the epoch (capture.json's wall
    clock); 0 when it does not say."""
    try:
        return round(datetime.fromisoformat(model.capture.started_at).timestamp() * 1e9)
    except ValueError:
        return 0
