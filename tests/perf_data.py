"""Reading a capture's perf.data with plain perf, independently of offcpu."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path


def script_events(perf_data: Path) -> list[tuple[int, int, str]]:
    """(tid, time_ns, event) of every sample, from perf script's own output."""
    done = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "tid,time,event", "--ns"],
                          capture_output=True, text=True, check=True)
    events = []
    for line in done.stdout.splitlines():
        tid, time, event = line.split()[:3]
        seconds, ns = time.rstrip(":").split(".")
        events.append((int(tid), int(seconds) * 1_000_000_000 + int(ns), event.rstrip(":")))
    return events


def event_counts(perf_data: Path) -> Counter[str]:
    return Counter(event for _, _, event in script_events(perf_data))


def lost_events(perf_data: Path) -> int:
    """What perf's PERF_RECORD_LOST records say it lost, summed."""
    done = subprocess.run(["perf", "script", "-i", str(perf_data), "--show-lost-events", "-F", "tid,event"],
                          capture_output=True, text=True, check=True)
    return sum(int(line.split()[-1]) for line in done.stdout.splitlines() if "PERF_RECORD_LOST " in line)
