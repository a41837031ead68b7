"""The flight recorder's memory: the last --keep seconds, bounded in bytes, and a window of it;
and the 99th percentile wait of --trigger, on hand-worked records."""

from __future__ import annotations

import numpy as np

from offcpu.live.follow import p99_wait_ms
from offcpu.live.kept import KeptRecords
from offcpu.reading.bpf_reader import FORK, RECORD, WAIT

S = 1_000_000_000


def waits(*times: tuple[int, int]) -> bytes:
    """Wait records of one thread, each (since_ns, back_ns)."""
    records = np.zeros(len(times), RECORD)
    records["kind"], records["pid"], records["tid"] = WAIT, 10, 11
    records["since_ns"] = [since for since, _ in times]
    records["back_ns"] = [back for _, back in times]
    return records.tobytes()


def test_keeps_the_last_seconds() -> None:
    kept = KeptRecords(keep_ns=2 * S, max_bytes=1 << 20)
    kept.add(waits((0, 1 * S)), now_ns=1 * S)
    kept.add(waits((1 * S, 2 * S), (2 * S, 3 * S)), now_ns=3 * S)
    assert kept.size == 3 * RECORD.itemsize
    # at 4 s the first take (which ended at 1 s) is over 2 s old; the second's last record is not
    kept.add(b"", now_ns=4 * S)
    assert kept.size == 2 * RECORD.itemsize and kept.dropped == 0
    assert kept.first_ns == 2 * S


def test_bounded_in_bytes_whatever_the_rate() -> None:
    kept = KeptRecords(keep_ns=60 * S, max_bytes=3 * RECORD.itemsize)
    kept.add(waits((0, 1), (1, 2)), now_ns=2)
    kept.add(waits((2, 3), (3, 4)), now_ns=4)
    # four records would be over the bound: the oldest take goes, and is counted as let go early
    assert kept.size == 2 * RECORD.itemsize
    assert kept.dropped == 2
    assert kept.first_ns == 2  # what is kept is whole from the end of what went


def test_a_window_holds_the_waits_that_ended_in_it() -> None:
    kept = KeptRecords(keep_ns=60 * S, max_bytes=1 << 20)
    fork = np.zeros(1, RECORD)
    fork["kind"], fork["since_ns"] = FORK, 5 * S
    kept.add(waits((1 * S, 2 * S), (3 * S, 9 * S)) + fork.tobytes(), now_ns=10 * S)
    window = kept.since(4 * S)
    # the wait of 1-2 s ended before; the one of 3-9 s began before but ended inside; the fork is inside
    assert window["since_ns"].tolist() == [3 * S, 5 * S]


def test_p99_is_the_nearest_rank() -> None:
    # 200 waits of 2..201 ms: rank ceil(0.99 * 200) = 198 is the wait of 199 ms
    assert p99_wait_ms(np.arange(201, 1, -1) * 1_000_000) == 199.0
    assert p99_wait_ms(np.zeros(0, np.int64)) is None  # no wait ended: no time yet
