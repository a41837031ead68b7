"""What recording costs on this machine, with each backend, measured: two threads of one
process handing a token back and forth through a pipe (perf bench sched pipe -T, pinned
to one CPU), run unrecorded and as `offcpu record -- COMMAND` records it with perf and
with BPF, in alternated rounds. Each round trip is two switches, each with the wakeup that
ended its wait, so what a recording adds to a round trip, halved, is what it costs one
switch and its wakeup (perf's stack walk at the wakeup included: most of its cost on a
server)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from offcpu.capture import Target
from offcpu.errors import OffcpuError
from offcpu.kinds import BPF, PERF, CaptureKind
from offcpu.reading.describe import describe
from offcpu.recording import backends
from offcpu.recording.recorder import record
from offcpu.recording.request import RecordRequest
from offcpu.workers import child_environment

ROUND_TRIPS = 50_000  # about 0.15 s of switching unrecorded, 0.35 s under perf
# Runs of each kind, alternated; medians compared. One run of 5,000 round trips on a shared
# machine gave perf 0.0, 1.9 and 3.6 µs a switch in three tries: a round trip unrecorded
# took from 4 to 29 µs.
ROUNDS = 3
SWITCHES_PER_ROUND_TRIP = 2  # on one CPU: each thread's, woken by the other
# A program switching this often a second, for the cost in words.
BUSY_SWITCHES_PER_S = 50_000
USECS_PER_OP = re.compile(r"^\s*([\d.]+) usecs/op\s*$", re.MULTILINE)
RUN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BackendCost:
    """What a backend's recording adds to one switch and its wakeup, or why it could not record."""

    kind: CaptureKind  # what recorded it
    ns: float | None = None
    problem: str = ""

    def share_at(self, switches_per_s: int) -> float:
        """The share of a CPU a program switching this often a second loses to recording."""
        return (self.ns or 0) * switches_per_s / 1e9


@dataclass(frozen=True)
class RecordingCosts:
    perf: BackendCost
    bpf: BackendCost

    def words(self) -> str:
        """Both costs in a sentence; OffcpuError when neither backend could be measured."""
        measured = [cost for cost in (self.perf, self.bpf) if cost.ns is not None]
        if not measured:
            raise OffcpuError(f"perf: {self.perf.problem}; BPF: {self.bpf.problem}")
        costs = ", ".join(f"{cost.kind.said} {(cost.ns or 0) / 1000:.1f} µs" for cost in measured)
        aside = "".join(f" ({cost.kind.said} could not record: {cost.problem})"
                        for cost in (self.perf, self.bpf) if cost.ns is None)
        first, *rest = measured
        loss = f"{first.share_at(BUSY_SWITCHES_PER_S):.0%} of a CPU to {first.kind.said}'s recording" + "".join(
            f", {cost.share_at(BUSY_SWITCHES_PER_S):.0%} to {cost.kind.said}'s" for cost in rest)
        return (f"one switch and its wakeup cost {costs} here{aside}: a program switching {BUSY_SWITCHES_PER_S:,} "
                f"times a second would lose about {loss}")


def recording_costs(perf: str, stack_budget: int) -> RecordingCosts:
    """Time the ping-pong in ROUNDS rounds of: unrecorded, recorded with perf, recorded with
    BPF (taking at most `stack_budget` stacks a second on each CPU); each backend's cost is
    its median run against the median unrecorded one. A backend that cannot record is tried
    once. OffcpuError when the ping-pong itself does not run."""
    directory = Path(tempfile.mkdtemp(prefix="offcpu-selftest-"))
    report = directory / "round-trips"
    command = ping_pong(perf, max(os.sched_getaffinity(0)), report)
    unrecorded: list[float] = []
    recorded: dict[CaptureKind, list[float]] = {PERF: [], BPF: []}
    problems: dict[CaptureKind, str] = {}
    try:
        for _ in range(ROUNDS):
            unrecorded.append(_round_trip_ns(command, report))
            for backend, runs in recorded.items():
                if backend not in problems:
                    result = _recorded_round_trip_ns(command, report, backend, stack_budget)
                    if isinstance(result, str):
                        problems[backend] = result
                    else:
                        runs.append(result)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    baseline = statistics.median(unrecorded)
    # (noise on a busy machine can make a cheap recording look faster than none: no cost, then)
    costs = {backend: BackendCost(backend, problem=problems[backend]) if backend in problems else
             BackendCost(backend, max(0.0, statistics.median(runs) - baseline) / SWITCHES_PER_ROUND_TRIP)
             for backend, runs in recorded.items()}
    return RecordingCosts(costs[PERF], costs[BPF])


def ping_pong(perf: str, cpu: int, report: Path) -> tuple[str, ...]:
    """The ping-pong on `cpu` as a command, its report written to `report`."""
    pipe = shlex.join(["taskset", "-c", str(cpu), perf, "bench", "sched", "pipe", "-T", "-l", str(ROUND_TRIPS)])
    return ("sh", "-c", f"exec {pipe} >{shlex.quote(str(report))}")


def _round_trip_ns(command: tuple[str, ...], report: Path) -> float:
    report.unlink(missing_ok=True)
    try:
        ran = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=RUN_TIMEOUT_S, env=child_environment())
    except subprocess.TimeoutExpired:
        raise OffcpuError(f"the self-test's ping-pong did not end within {RUN_TIMEOUT_S:.0f} s") from None
    if ran.returncode != 0:
        last = (ran.stderr.strip() or "no message").splitlines()[-1]
        raise OffcpuError(f"the self-test's ping-pong failed (status {ran.returncode}): {last}")
    return _reported_ns(report)


def _recorded_round_trip_ns(command: tuple[str, ...], report: Path, kind: CaptureKind,
                            stack_budget: int) -> float | str:
    """The round trip while `kind` records the ping-pong, or why it could not be recorded."""
    if problem := backends.problem(kind):
        return problem
    report.unlink(missing_ok=True)
    capture = report.parent / f"capture-{kind.name}"
    capture.mkdir()
    request = RecordRequest(Target("command", "sched-pipe", command=command), capture, RUN_TIMEOUT_S, "64M", "fp",
                            None, False, snapshot=False, backend=kind.name, stack_budget=stack_budget)
    try:
        record(request, on_tick=lambda elapsed: None, describe_perf_data=describe)
        return _reported_ns(report)
    except backends.BpfRefused as refused:
        return f"the kernel refused offcpu's BPF programs ({refused.reason})"
    except OffcpuError as error:
        return error.format_message()
    finally:
        shutil.rmtree(capture, ignore_errors=True)


def _reported_ns(report: Path) -> float:
    """The round trip perf bench reported, in ns."""
    try:
        text = report.read_text()
    except OSError as error:
        raise OffcpuError(f"the self-test's ping-pong wrote no report ({error.strerror})") from None
    match = USECS_PER_OP.search(text)
    if match is None:
        raise OffcpuError("the self-test's ping-pong reported no usecs/op")
    return float(match[1]) * 1000
