"""Reading a capture's perf.data with plain perf, independently of offcpu."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DumpedCounts:
    """What perf's raw dump of a perf.data (perf report -D) shows of some of its records."""

    lost_records: int  # PERF_RECORD_LOST records
    lost: int  # the events they say were lost
    lost_samples: int  # the samples its PERF_RECORD_LOST_SAMPLES records say were lost
    switch_records: int  # PERF_RECORD_SWITCH and _CPU_WIDE records


def dumped_counts(perf_data: Path) -> DumpedCounts:
    done = subprocess.run(["perf", "report", "-D", "-i", str(perf_data)], capture_output=True, text=True,
                          errors="replace", check=True)  # (threads' names need not be UTF-8)
    lost = [int(found) for found in re.findall(r"PERF_RECORD_LOST: .*lost:(\d+)", done.stdout)]
    samples = re.findall(r"PERF_RECORD_LOST_SAMPLES: .*lost samples :(\d+)", done.stdout)
    switches = re.findall(r"PERF_RECORD_SWITCH(?:_CPU_WIDE)? (?:IN|OUT)", done.stdout)
    return DumpedCounts(len(lost), sum(lost), sum(int(found) for found in samples), len(switches))
