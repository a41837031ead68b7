"""A live recording's maps (bpf-maps.json) let go of the snapshots no record it keeps can be
named by (MapsRecorder.let_go): its memory and the file stay bounded however long it runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from offcpu.recording.process_maps import MapsRecorder, Snapshot, read_maps

PID = os.getpid()
GONE = 4_194_305  # a pid no process has: above the kernel's greatest pid_max (PID_MAX_LIMIT, 4M)


def test_snapshots_of_processes_gone_and_those_a_later_one_stands_for_go(tmp_path: Path) -> None:
    mappings = read_maps(PID, {})
    assert mappings
    # Given snapshots (ns) of GONE at 10, and of this process at 20, 30 and 50
    maps = MapsRecorder(tmp_path, [Snapshot(GONE, 10, mappings), Snapshot(PID, 20, mappings),
                                   Snapshot(PID, 30, mappings), Snapshot(PID, 50, mappings)],
                        {GONE: mappings, PID: mappings})
    # When the records kept are those from 40 on
    assert maps.let_go(40)
    # Then the snapshot at 30 stands for this process's at 20 (read before 40: the records from 40
    # on are named from 30 or 50); GONE's stays, found gone only now (after 40: a record from 40
    # on may be of it)
    assert [(snapshot.pid, snapshot.read_ns) for snapshot in maps.snapshots] == [(GONE, 10), (PID, 30), (PID, 50)]
    assert list(maps.gone) == [GONE]
    # When the records kept are those from after GONE was found gone
    assert maps.let_go(time.monotonic_ns())
    # Then GONE's snapshot goes, and the one at 50 stands for this process's at 30
    assert [(snapshot.pid, snapshot.read_ns) for snapshot in maps.snapshots] == [(PID, 50)]
    assert list(maps.latest) == [PID] and not maps.gone
    # and nothing more goes after
    assert not maps.let_go(time.monotonic_ns())
