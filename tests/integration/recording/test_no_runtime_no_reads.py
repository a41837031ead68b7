"""A process that runs no runtime costs nothing to the runtime stacks' sampler: recorded, a C
program is never read, neither by a py-spy (a process forked to read it) nor through HotSpot's
attach socket (a SIGQUIT sent to it, a connection to its socket).

The kernel counts what the sampler's thread does (perf stat on its tracepoints, that thread
alone): its forks, kill() calls and connect() calls, while it is offered a real C program for
six of its rounds (offered once perf counts: the sampler reads only what it was offered). The
same count for a real Python program and a real JVM shows that the count sees their reads."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from offcpu.recording.runtime_stacks import INTERVAL_S, RuntimeSampler, py_spy
from tests.conftest import example, missing, wait_for_threads
from tests.programs import MissingProgram, children, java_monitor, thread_names

FORKS, KILLS, CONNECTS = "sched:sched_process_fork", "syscalls:sys_enter_kill", "syscalls:sys_enter_connect"
ROUNDS = 6
PYTHON = "/usr/bin/python3"
START_TIMEOUT_S = 10.0


def reads_by_the_sampler(recording_perf: str, pid: int, directory: Path) -> dict[str, int]:
    """What the kernel counted of the sampler's thread while it was offered process `pid`."""
    sampler = RuntimeSampler(directory)
    sampler.start()
    try:
        assert sampler._thread.native_id is not None
        counting = subprocess.Popen([recording_perf, "stat", "-x,", "-e", f"{FORKS},{KILLS},{CONNECTS}",
                                     "-t", str(sampler._thread.native_id), "--", "sleep", str(ROUNDS * INTERVAL_S)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # perf execs its command once its counters are on
        deadline = time.monotonic() + START_TIMEOUT_S
        while not any(name == "sleep" for child in children(counting.pid) for name in thread_names(child).values()):
            assert counting.poll() is None and time.monotonic() < deadline, "perf stat did not start counting"
            time.sleep(0.01)
        sampler.offer([pid])
        _, said = counting.communicate()
    finally:
        sampler.stop(write=False)
    assert counting.returncode == 0, said
    counts = {fields[2]: int(fields[0]) for fields in (line.split(",") for line in said.splitlines())
              if len(fields) > 2 and fields[2] in (FORKS, KILLS, CONNECTS)}
    assert len(counts) == 3, said
    return counts


def test_a_c_program_is_never_read(recording_perf: str, tmp_path: Path) -> None:
    program = subprocess.Popen([str(example("idle_pool")), "-t", "4", "-s", "60"], stdout=subprocess.DEVNULL)
    try:
        wait_for_threads(program.pid, 5)
        counts = reads_by_the_sampler(recording_perf, program.pid, tmp_path)
        assert counts == {FORKS: 0, KILLS: 0, CONNECTS: 0}
        assert program.poll() is None  # no SIGQUIT reached it
        assert not list(Path(f"/proc/{program.pid}/cwd").glob(".attach_pid*"))
    finally:
        program.kill()
        program.wait()
    assert not (tmp_path / "runtime-stacks.json").exists()


def test_a_python_program_is_read_by_a_py_spy_each_round(recording_perf: str, tmp_path: Path) -> None:
    if not os.access(PYTHON, os.X_OK) or py_spy() is None:
        missing(f"{PYTHON} or py-spy is not installed: scripts/setup installs them")
    program = subprocess.Popen([PYTHON, str(example("python_lock")), "-t", "4", "-s", "60"],
                               stdout=subprocess.DEVNULL)
    try:
        wait_for_threads(program.pid, 5)
        counts = reads_by_the_sampler(recording_perf, program.pid, tmp_path)
    finally:
        program.kill()
        program.wait()
    assert counts[FORKS] >= ROUNDS // 2  # one a round; fewer when a loaded machine slows the dumps


def test_a_jvm_is_attached_to(recording_perf: str, tmp_path: Path) -> None:
    try:
        with java_monitor(2) as jvm:
            counts = reads_by_the_sampler(recording_perf, jvm.pid, tmp_path)
    except MissingProgram as error:
        missing(str(error))
    # the first read signals the JVM to start its attach listener and connects; each next one connects
    assert counts[FORKS] == 0 and counts[KILLS] == 1 and counts[CONNECTS] >= 1
