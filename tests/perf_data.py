"""Reading a capture's perf.data with plain perf, independently of offcpu."""

from __future__ import annotations

import re
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


def _raw_dump(perf_data: Path) -> str:
    done = subprocess.run(["perf", "report", "-D", "-i", str(perf_data)], capture_output=True, text=True, check=True)
    return done.stdout


def lost_records(perf_data: Path) -> tuple[int, int, int]:
    """From perf's raw dump of perf.data: how many PERF_RECORD_LOST records it holds, the
    events they say were lost, and the samples its PERF_RECORD_LOST_SAMPLES records say were."""
    dump = _raw_dump(perf_data)
    lost = [int(found) for found in re.findall(r"PERF_RECORD_LOST: .*lost:(\d+)", dump)]
    samples = sum(int(found) for found in re.findall(r"PERF_RECORD_LOST_SAMPLES: .*lost samples :(\d+)", dump))
    return len(lost), sum(lost), samples


def switch_records(perf_data: Path) -> int:
    """From perf's raw dump of perf.data: how many switch records (PERF_RECORD_SWITCH, or
    _CPU_WIDE) it holds."""
    return len(re.findall(r"PERF_RECORD_SWITCH(?:_CPU_WIDE)? (?:IN|OUT)", _raw_dump(perf_data)))
