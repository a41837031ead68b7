"""Mutated captures, as a capture from anywhere may be: `offcpu report text` of each ends with
a report (exit 0) or one line saying what is wrong (exit 2), within a time and a memory bound,
never a traceback, a hang or a crash (tests/integration/capture_fuzzing.py makes the mutations).

With a fixed seed, MUTATIONS of each kind: a BPF capture, a perf capture recorded by offcpu
(with model.json saved), and a perf.data recorded by perf alone. A failure names the seed, the
mutation's index and what it did, so that it can be made again."""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pytest

from tests.conftest import ROOT, example, run_offcpu

SEED = 34
MUTATIONS = 100  # of each kind (a fixed seed: the same ones each run, each kind of damage many times)
REPORT_TIMEOUT_S = 20.0
CHILDREN = 2  # reporting at once
BATCH = 50  # reports of one child


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory, recording_perf: str) -> dict[str, Path]:
    """Small real captures of lock_chain (four threads handing a lock on, one thread asleep), each
    reported once (model.json saved beside the offcpu captures)."""
    root = tmp_path_factory.mktemp("bases")
    program = [str(example("lock_chain")), "-t", "4", "-u", "1000", "-s", "0.2"]
    made = {"bpf": root / "bpf", "perf": root / "perf", "plain": root / "plain.data"}
    for backend in ("bpf", "perf"):
        recorded = run_offcpu("record", "--backend", backend, "-o", str(made[backend]), "-d", "0.3", "--", *program)
        assert recorded.returncode == 0, recorded.stderr
    recorded = subprocess.run([recording_perf, "record", "-q", "-g", "-e", "sched:sched_switch", "-e",
                               "sched:sched_waking", "-o", str(made["plain"]), "--", *program],
                              capture_output=True, text=True)
    assert recorded.returncode == 0, recorded.stderr
    for capture in made.values():
        assert run_offcpu("report", "text", str(capture)).returncode == 0
    return made


Job = tuple[int, str, str]  # a mutation's index, its capture, the directory for its output


@dataclass
class Child:
    """A child process reporting a batch of mutations (capture_fuzzing.main)."""

    process: subprocess.Popen
    said: TextIO  # what it says of each report
    batch: list[int]
    current: tuple[int, float] | None = None  # the report it is on, since when


class Children:
    """Children reporting the mutations, CHILDREN at a time, BATCH each; a child that crashes
    or hangs is replaced, the report it was on is a failure, and the rest of its batch goes on."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = {job[0]: job for job in jobs}
        self.pending = [job[0] for job in jobs]
        self.results: dict[int, object] = {}  # index -> exit code, or "hung" or "crashed (status N)"
        self.selector = selectors.DefaultSelector()
        self.running: list[Child] = []

    def run(self) -> dict[int, object]:
        while self.pending or self.running:
            while self.pending and len(self.running) < CHILDREN:
                self._start()
            for key, _ in self.selector.select(timeout=1.0):
                self._heard(key.data)
            self._reap()
        return self.results

    def _start(self) -> None:
        batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
        read, write = os.pipe()
        process = subprocess.Popen([sys.executable, "-m", "tests.integration.capture_fuzzing", str(write)],
                                   cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, text=True, pass_fds=(write,))
        os.close(write)
        assert process.stdin is not None
        process.stdin.write("".join(json.dumps(self.jobs[index]) + "\n" for index in batch))
        process.stdin.close()
        child = Child(process, os.fdopen(read), batch)
        self.running.append(child)
        self.selector.register(child.said, selectors.EVENT_READ, child)

    def _heard(self, child: Child) -> None:
        line = child.said.readline()
        if line:
            self._take(child, line)
        else:
            self.selector.unregister(child.said)

    def _take(self, child: Child, line: str) -> None:
        said = json.loads(line)
        if "started" in said:
            child.current = (said["started"], time.monotonic())
        else:
            self.results[said["ended"]] = said["code"]
            child.current = None

    def _reap(self) -> None:
        for child in list(self.running):
            hung = child.current is not None and time.monotonic() - child.current[1] > REPORT_TIMEOUT_S
            if hung:
                child.process.kill()
            if child.process.poll() is None:
                continue
            self.running.remove(child)
            with contextlib.suppress(KeyError):
                self.selector.unregister(child.said)
            for line in child.said:  # what it said before it ended
                self._take(child, line)
            child.said.close()
            if child.current is not None:
                self.results[child.current[0]] = "hung" if hung else f"crashed (status {child.process.returncode})"
            self.pending += [index for index in child.batch if index not in self.results]


def test_mutated_captures_are_reported_or_refused_in_one_line(bases: dict[str, Path], tmp_path: Path) -> None:
    from tests.integration.capture_fuzzing import mutate

    rng = random.Random(SEED)
    said: dict[int, str] = {}
    jobs: list[Job] = []
    for kind, base in bases.items():
        for number in range(MUTATIONS):
            index = len(jobs)
            work = tmp_path / str(index)
            work.mkdir()
            target = work / base.name
            said[index] = f"{kind} #{number}: {mutate(base, target, rng)}"
            jobs.append((index, str(target), str(work)))
    started = time.monotonic()
    results = Children(jobs).run()
    failures = []
    for index, _, output in jobs:
        said_on = Path(output) / "stderr"
        code = results.get(index, "not run")
        stderr = said_on.read_text(errors="replace") if said_on.exists() else ""
        lines = stderr.strip().splitlines()
        if code not in (0, 2) or (code == 2 and len(lines) != 1) or "Traceback" in stderr:
            failures.append(f"seed {SEED}, mutation {index} ({said[index]}): {code}; {stderr.strip()[-300:]}")
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures)
    assert time.monotonic() - started < 3 * 60
