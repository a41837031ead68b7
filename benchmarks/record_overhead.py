"""Throughput of `perf bench sched pipe` under `offcpu record -a`, as a ratio to unrecorded.

The pipe benchmark is two processes passing a byte back and forth: nearly
nothing but context switches and wakeups, the events offcpu records with a
call stack each, so the ratio is close to the worst case a workload sees.
Runs alternate unrecorded (the anchor) and recorded, A R A R ... A, in this
one process, so drift on a shared machine reaches both kinds alike; the result
is the median recorded throughput over the median anchor.

Both pipe processes are pinned to one CPU (--cpu; --no-pin to let them
roam): on a VM, with the two on different CPUs, every wakeup is a cross-CPU
interrupt and throughput swings tenfold with placement (15k-160k ops/sec
unpinned against 174k-200k pinned, measured on a 2-CPU machine).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    MAX_SIZE,
    BenchError,
    Recording,
    become_subreaper,
    interrupts_as_keyboard_interrupt,
    offcpu_command,
    pin_cpu,
    reap_group,
)

DEFAULT_LOOPS = 600_000  # ~3.3 s unrecorded, pinned, on the 2-CPU development VM
DEFAULT_ROUNDS = 3
# A recorded run writes ~0.9 KB per loop (~7 events with stacks): about 550 MB for the
# default loops, over offcpu's 512M default, which would end the recording early.
MAX_DURATION_S = 600  # offcpu's limit without --no-limit
OPS_PER_S = re.compile(r"^\s*([\d.]+)\s+ops/sec\s*$", re.MULTILINE)


@dataclass
class Run:
    kind: str  # "anchor" or "recorded"
    ops_per_s: float
    seconds: float
    start_ns: int  # CLOCK_MONOTONIC, the clock of capture.json's window
    end_ns: int
    capture: dict | None = None  # the recording's capture.json, for recorded runs

    @property
    def covered(self) -> bool:
        """Whether the recording window held the whole run (anchors: trivially)."""
        if self.capture is None:
            return True
        return self.capture["window_start_ns"] <= self.start_ns and self.capture["window_end_ns"] >= self.end_ns


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--loops", "-l", type=int, default=DEFAULT_LOOPS,
                        help=f"perf bench sched pipe -l: round trips per run [default: {DEFAULT_LOOPS}]")
    parser.add_argument("--rounds", "-r", type=int, default=DEFAULT_ROUNDS,
                        help=f"recorded runs, each between two anchors [default: {DEFAULT_ROUNDS}]")
    parser.add_argument("--cpu", type=int, default=None,
                        help="CPU to pin the pipe benchmark to [default: the last one]")
    parser.add_argument("--no-pin", action="store_true", help="let the scheduler place the pipe processes")
    parser.add_argument("--duration", "-d", type=int, default=None,
                        help="offcpu record --duration, the bound of each recording, which is ended as soon as "
                             "its run is done [default: 10 times the first anchor, at least 30 s]")


def run(args: argparse.Namespace) -> int:
    with interrupts_as_keyboard_interrupt():
        try:
            become_subreaper()
            return _measure(args)
        except BenchError as error:
            print(f"record-overhead: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("record-overhead: interrupted (offcpu and perf stopped, captures removed)", file=sys.stderr)
            return 130


def _measure(args: argparse.Namespace) -> int:
    if args.loops <= 0 or args.rounds <= 0:
        raise BenchError("--loops and --rounds must be more than 0")
    perf = shutil.which("perf")
    if perf is None:
        raise BenchError("perf not found; run scripts/setup")
    offcpu = offcpu_command()
    cpu = pin_cpu(args.cpu, args.no_pin)
    where = "unpinned" if cpu is None else f"both processes pinned to CPU {cpu}"
    print(f"perf bench sched pipe -l {args.loops} ({where}), {args.rounds} rounds; recorded runs under "
          "offcpu record -a\n", flush=True)
    print(f"{'run':>3}  {'kind':<8}  {'ops/sec':>9}  {'seconds':>7}  capture", flush=True)

    runs: list[Run] = []
    workdir = Path(tempfile.mkdtemp(prefix="offcpu-bench-"))
    try:
        runs.append(_show(len(runs) + 1, _pipe(perf, args.loops, cpu, "anchor")))
        duration = args.duration or min(MAX_DURATION_S, max(30, math.ceil(10 * runs[0].seconds)))
        for round_number in range(1, args.rounds + 1):
            recorded = _recorded(perf, offcpu, args.loops, cpu, duration, workdir, round_number)
            runs.append(_show(len(runs) + 1, recorded))
            runs.append(_show(len(runs) + 1, _pipe(perf, args.loops, cpu, "anchor")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _summarize(runs, duration)


def _recorded(perf: str, offcpu: list[str], loops: int, cpu: int | None, duration: int, workdir: Path,
              round_number: int) -> Run:
    """One pipe run while offcpu records the whole machine; the capture is read and deleted."""
    output = workdir / f"cap-{round_number}"
    recording = Recording(offcpu, output, duration, workdir / f"offcpu-{round_number}.log")
    try:
        recording.wait_until_recording()
        result = _pipe(perf, loops, cpu, "recorded")
        result.capture = recording.finish()
        return result
    finally:
        recording.close()
        shutil.rmtree(output, ignore_errors=True)


def _pipe(perf: str, loops: int, cpu: int | None, kind: str) -> Run:
    """One `perf bench sched pipe` run, in its own session so that it can be ended whole."""
    pin: Callable[[], None] | None = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    start = time.monotonic_ns()
    process = subprocess.Popen([perf, "bench", "sched", "pipe", "-l", str(loops)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=pin)
    try:
        out, err = process.communicate()
    finally:
        if process.poll() is None:  # interrupted: the group is perf bench and its worker
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            reap_group(process.pid)
    end = time.monotonic_ns()
    match = OPS_PER_S.search(out)
    if process.returncode != 0 or match is None:
        last = (err.strip() or out.strip() or "no output").splitlines()[-1]
        raise BenchError(f"perf bench sched pipe failed (status {process.returncode}): {last}")
    return Run(kind, float(match[1]), (end - start) / 1e9, start, end)


def _show(number: int, run: Run) -> Run:
    """Print one row as soon as its run is done (a whole benchmark takes a minute or more)."""
    capture = ""
    if run.capture is not None:
        c = run.capture
        capture = (f"{c['perf_data_bytes'] / 1e6:,.0f} MB: {c['samples']:,} samples, "
                   f"{c['switch_records']:,} switch records, {c['lost_events']:,} lost; "
                   f"{c['duration_actual_s']:.1f} s window, ended by {c['ended_by']}")
        if not run.covered:
            capture += "  [window did not hold the whole run: left out]"
    print(f"{number:>3}  {run.kind:<8}  {run.ops_per_s:>9,.0f}  {run.seconds:>7.2f}  {capture}".rstrip(), flush=True)
    return run


def _summarize(runs: list[Run], duration: int) -> int:
    anchors = [run.ops_per_s for run in runs if run.kind == "anchor"]
    recorded = [run.ops_per_s for run in runs if run.kind == "recorded" and run.covered]
    print(f"\nrecordings: offcpu record -a --duration {duration} --max-size {MAX_SIZE} -o TMPDIR/cap-N, "
          "SIGINT ends each once its run is done")
    if not recorded:
        print("no recording held its whole run: no ratio")
        return 1
    # Each recorded run against the mean of the anchors either side of it: the spread says how noisy it was.
    per_round = [runs[i].ops_per_s / ((runs[i - 1].ops_per_s + runs[i + 1].ops_per_s) / 2)
                 for i in range(1, len(runs) - 1) if runs[i].kind == "recorded" and runs[i].covered]
    anchor, under = statistics.median(anchors), statistics.median(recorded)
    print(f"median anchor:   {anchor:>9,.0f} ops/sec ({len(anchors)} runs)")
    print(f"median recorded: {under:>9,.0f} ops/sec ({len(recorded)} runs)")
    print("per round (recorded / mean of the anchors either side): " + " ".join(f"{r:.2f}x" for r in per_round))
    print(f"throughput under offcpu record -a: {under / anchor:.2f}x of unrecorded")
    return 0
