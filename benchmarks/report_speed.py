"""Wall time and memory of `offcpu report folded` against plain `perf script`, on one capture.

The capture (of at least 500,000 scheduler events) is `perf bench sched pipe`
recorded by `offcpu record -a`, or an existing one given with --capture. Runs
alternate plain `perf script -i perf.data > /dev/null` with its default fields
(the anchor) and a cold `offcpu report folded` (its saved model removed first),
in this one process. Peak RSS is sampled over the whole process tree; offcpu's
own processes are reported apart from the perf script processes they start, of
which only their own (anonymous) memory counts: the perf.data they map is page
cache, shared by every reader.
Memory against events: the same report on the first quarter of the window
(--time) and on the whole of it, which has the same stacks and ~4x the events.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (BenchError, Recording, become_subreaper, comm, descendants,
                               interrupts_as_keyboard_interrupt, offcpu_command, pin_cpu, reap_group)

MIN_EVENTS = 500_000
SAMPLE_EVERY_S = 0.02
PERF_COMMS = {"perf", "perf_6.1", "perf-exec"}


@dataclass
class Measured:
    seconds: float
    offcpu_peak_mb: float  # offcpu's Python processes together
    tree_peak_mb: float  # with the perf processes they start (their anonymous memory)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--capture", type=Path, help="measure this capture instead of recording one")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the recording [default: 3]")
    parser.add_argument("--rounds", type=int, default=2, help="anchor/offcpu pairs [default: 2]")


def run(args: argparse.Namespace) -> int:
    with interrupts_as_keyboard_interrupt():
        workdir = Path(tempfile.mkdtemp(prefix="offcpu-bench-"))
        try:
            become_subreaper()
            capture = args.capture or _record(workdir / "cap", args.seconds)
            return _measure(capture, args.rounds, workdir)
        except BenchError as error:
            print(f"report-speed: {error}")
            return 2
        except KeyboardInterrupt:
            print("report-speed: interrupted")
            return 130
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _record(output: Path, seconds: float) -> Path:
    """`offcpu record -a` while a pinned `perf bench sched pipe` switches as fast as it can."""
    cpu = pin_cpu(None, False)
    pipe = subprocess.Popen(["perf", "bench", "sched", "pipe", "-l", "100000000"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    recording = Recording(offcpu_command(), output, round(seconds), output.parent / "record.log")
    try:
        recording.wait_until_recording()
        time.sleep(max(0.0, seconds - 0.5))  # let it run to its duration: no early end
        recording.finish()
    finally:
        os.killpg(pipe.pid, signal.SIGKILL)  # first: the recording's clean-up ends any child it finds
        pipe.wait()
        reap_group(pipe.pid)
        recording.close()
    return output


def _measure(capture: Path, rounds: int, workdir: Path) -> int:
    info = json.loads((capture / "capture.json").read_text())
    events = info["samples"] + info["switch_records"]
    window_s = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    print(f"capture: {events:,} events ({info['samples']:,} samples, {info['switch_records']:,} switch records), "
          f"{info['perf_data_bytes'] / 1e6:.0f} MB, {window_s:.1f} s window, {info['lost_events']:,} lost")
    if events < MIN_EVENTS:
        print(f"warning: fewer than {MIN_EVENTS:,} events; record longer with --seconds")
    perf_data = str(capture / "perf.data")
    anchors, reports = [], []
    print(f"\n{'run':>3}  {'what':<32}  {'seconds':>7}  {'peak RSS: offcpu / with perf':>28}")
    for number in range(1, rounds + 1):
        anchors.append(_show(2 * number - 1, "perf script (default fields)", _timed(["perf", "script", "-i", perf_data])))
        (capture / "model.json").unlink(missing_ok=True)
        reports.append(_show(2 * number, "offcpu report folded (cold)",
                             _timed([*offcpu_command(), "report", "folded", str(capture)])))
    quarter = _timed([*offcpu_command(), "report", "folded", str(capture), "--time", f"0,{window_s / 4:.3f}"])
    anchor = statistics.median(m.seconds for m in anchors)
    report = statistics.median(m.seconds for m in reports)
    peak = max(m.offcpu_peak_mb for m in reports)
    print(f"\noffcpu report folded / perf script: {report / anchor:.2f}x ({report:.1f} s / {anchor:.1f} s; "
          "target at most 0.5)")
    print(f"peak RSS of offcpu report folded: {peak:.0f} MB in its own processes, "
          f"{max(m.tree_peak_mb for m in reports):.0f} MB with perf script's own memory (target at most 250 MB)")
    print(f"memory against events: first quarter of the window {quarter.offcpu_peak_mb:.0f} MB, whole window "
          f"{peak:.0f} MB: {peak / quarter.offcpu_peak_mb:.2f}x the memory for ~4x the events")
    return 0


def _timed(argv: list[str]) -> Measured:
    """Run a command to its end with stdout discarded; its wall time and peak RSS."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    offcpu_peak = tree_peak = 0
    try:
        while process.poll() is None:
            offcpu_kb, perf_kb = _tree_rss_kb(process.pid)
            offcpu_peak, tree_peak = max(offcpu_peak, offcpu_kb), max(tree_peak, offcpu_kb + perf_kb)
            time.sleep(SAMPLE_EVERY_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    seconds = time.monotonic() - start
    if process.returncode != 0:
        raise BenchError(f"{' '.join(argv[:3])} failed: {process.stderr.read().decode().strip()[-300:]}")
    return Measured(seconds, offcpu_peak / 1024, tree_peak / 1024)


def _tree_rss_kb(root: int) -> tuple[int, int]:
    """Resident memory of a process tree, in KiB: offcpu's processes (all of it), and
    perf's own (anonymous) memory: perf maps perf.data, and those pages are the
    page cache, shared by every reader, not memory perf allocated."""
    own = perf = 0
    for pid in [root, *descendants(root)]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if comm(pid) in PERF_COMMS:
            perf += int(fields.get("RssAnon", "0 kB").split()[0])
        else:
            own += int(fields.get("VmRSS", "0 kB").split()[0])
    return own, perf


def _show(number: int, what: str, measured: Measured) -> Measured:
    print(f"{number:>3}  {what:<32}  {measured.seconds:>7.2f}  "
          f"{measured.offcpu_peak_mb:>12.0f} MB / {measured.tree_peak_mb:>6.0f} MB", flush=True)
    return measured
