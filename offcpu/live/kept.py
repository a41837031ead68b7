"""The records of a live recording kept in memory: the last `keep_ns` of them, and no more
than `max_bytes` whatever their rate (the oldest go first)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from offcpu.reading.bpf_reader import RECORD, WAIT


@dataclass(frozen=True)
class Chunk:
    """The records of one take, and when the last of them happened."""

    records: np.ndarray
    last_ns: int


def ends(records: np.ndarray) -> np.ndarray:
    """When each record happened: a wait's switch-in (0: still open), another's event time."""
    return np.where(records["kind"] == WAIT, records["back_ns"], records["since_ns"])


@dataclass
class KeptRecords:
    keep_ns: int
    max_bytes: int
    chunks: deque[Chunk] = field(default_factory=deque)
    size: int = 0  # bytes
    dropped: int = 0  # records let go by max_bytes before keep_ns was up
    first_ns: int = 0  # the kept records hold every record since then

    def add(self, data: bytes, now_ns: int) -> None:
        """The records taken at `now_ns` (whole records: the core drains them so)."""
        if data:
            records = np.frombuffer(data, RECORD, len(data) // RECORD.itemsize)
            self.chunks.append(Chunk(records, int(ends(records).max())))
            self.size += records.nbytes
        self.first_ns = max(self.first_ns, now_ns - self.keep_ns)
        while self.chunks and (self.chunks[0].last_ns < now_ns - self.keep_ns or self.size > self.max_bytes):
            gone = self.chunks.popleft()
            self.size -= gone.records.nbytes
            if gone.last_ns >= now_ns - self.keep_ns:
                self.dropped += len(gone.records)
                self.first_ns = max(self.first_ns, gone.last_ns)

    def since(self, start_ns: int) -> np.ndarray:
        """The records kept that happened from `start_ns` on (waits that ended then, and those
        that began before it too: the model cuts them at its window)."""
        parts = [chunk.records for chunk in self.chunks if chunk.last_ns >= start_ns]
        if not parts:
            return np.zeros(0, RECORD)
        records = np.concatenate(parts)
        return records[ends(records) >= start_ns]
