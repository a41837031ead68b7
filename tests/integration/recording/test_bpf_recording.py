"""Recording with offcpu's BPF programs (--backend bpf): what is recorded, and that the
programs leave with offcpu however it ends.

The records are read here by the layout that core/src/bpf/offcpu.bpf.c documents
(`struct record`, docs/capture.md), not by offcpu's reader, so that a mistake in one
does not hide a mistake in the other."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import programs
from tests.conftest import OFFCPU, assert_one_line_error, example, missing, run_offcpu

RECORD = np.dtype([
    ("kind", "<u4"), ("cpu", "<u4"), ("pid", "<u4"), ("tid", "<u4"),
    ("since_ns", "<u8"), ("woken_ns", "<u8"), ("back_ns", "<u8"),
    ("kernel_stack", "<i4"), ("user_stack", "<i4"), ("waker_kernel_stack", "<i4"), ("waker_user_stack", "<i4"),
    ("waker_pid", "<u4"), ("waker_tid", "<u4"), ("state", "<u4"), ("exit_state", "<u4"),
    ("weight_shift", "<u2"), ("preempted", "<u2"), ("estimated", "<u4"), ("comm", "S16"), ("waker_comm", "S16"),
])
WAIT = 1
NOT_TAKEN = -10000
OUR_PROGRAMS = ("on_switch", "on_waking", "on_fork", "on_exec", "on_rename", "dump_open_waits")
START_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def bpftool(recording_perf: str) -> str:
    found = shutil.which("bpftool") or next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if Path(p).exists()),
                                            None)
    if found is None:
        missing("bpftool is not installed (scripts/setup installs it)")
    return found


def attached_programs(bpftool: str) -> list[str]:
    """The names of offcpu's programs that the kernel holds now (loaded, attached or not)."""
    listed = json.loads(subprocess.run([bpftool, "--json", "prog", "list"], capture_output=True, text=True,
                                       check=True).stdout)
    return [program.get("name", "") for program in listed if program.get("name", "") in OUR_PROGRAMS]


def records(capture: Path) -> np.ndarray:
    data = (capture / "bpf-records.bin").read_bytes()
    assert len(data) % RECORD.itemsize == 0
    return np.frombuffer(data, dtype=RECORD)


def metadata(capture: Path) -> dict:
    return json.loads((capture / "capture.json").read_text())


def start_recording(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(OFFCPU), "record", "--backend", "bpf", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def wait_until_attached(bpftool: str, recording: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(attached_programs(bpftool)) < len(OUR_PROGRAMS):
        assert recording.poll() is None, recording.communicate()
        assert time.monotonic() < deadline, "offcpu's BPF programs never attached"
        time.sleep(0.05)


def test_a_command_and_the_processes_it_starts_are_recorded_and_nothing_else(tmp_path: Path) -> None:
    capture = tmp_path / "cap"
    program = example("futex_contention")
    # the shell forks the program (a second command keeps it from exec'ing it): both are the target's
    result = run_offcpu("record", "--backend", "bpf", "-o", str(capture), "--",
                        "sh", "-c", f"{program} -s 1 -t 4; exit 3")
    assert result.returncode == 0, result.stderr
    info = metadata(capture)
    assert info["backend"] == "bpf" and info["ended_by"] == "target exited"
    assert info["command_exit_status"] == 3
    waits = records(capture)
    names = {comm.decode() for comm in waits["comm"]}
    assert "futex_contentio" in names  # the kernel's 15 characters
    # and offcpu's fork, held before its exec until the programs record it
    assert names <= {"sh", "futex_contentio", "offcpu"}, names
    futex_waits = waits[(waits["kind"] == WAIT) & (waits["comm"] == b"futex_contentio")]
    # 4 threads on one lock for a second: thousands of waits, most of them woken by another of them
    assert len(futex_waits) > 1000
    woken = futex_waits[futex_waits["woken_ns"] > 0]
    assert np.isin(woken["waker_pid"], futex_waits["pid"]).mean() > 0.5
    assert info["samples"] == info["bpf"]["waits"] and info["lost_events"] == 0
    for name in ("bpf-records.bin", "bpf-stacks.bin", "capture.json"):
        assert (capture / name).stat().st_mode & 0o777 == 0o600, name


def test_every_wait_is_timed_whole_with_its_state_and_stacks_when_the_budget_allows(tmp_path: Path) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "bpf", "-o", str(capture), "--",
                        str(example("mmap_contention")), "-s", "1")
    assert result.returncode == 0, result.stderr
    info = metadata(capture)
    waits = records(capture)
    waits = waits[waits["kind"] == WAIT]
    whole = waits[(waits["since_ns"] > 0) & (waits["back_ns"] > 0)]
    assert (whole["back_ns"] > whole["since_ns"]).all()
    assert ((whole["woken_ns"] == 0) | (whole["woken_ns"] <= whole["back_ns"])).all()
    assert (whole["since_ns"] >= info["window_start_ns"] - 10**9).all()
    # mmap_lock waits are uninterruptible sleeps (D: 0x2) at switch-out, 16 threads' worth of
    # them: seconds in a second
    asleep = whole[(whole["state"] & 0x2) != 0]
    assert (asleep["back_ns"] - asleep["since_ns"]).sum() > 1e9
    taken = whole[whole["kernel_stack"] != NOT_TAKEN]
    assert len(taken) == info["bpf"]["sampled"] > 0
    assert (taken["kernel_stack"] >= 0).mean() > 0.95


def stack_table(capture: Path) -> dict[int, tuple[int, ...]]:
    """bpf-stacks.bin: for each stack, its id and depth (u32 each), then its addresses (u64)."""
    data, table, at = (capture / "bpf-stacks.bin").read_bytes(), {}, 0
    while at < len(data):
        stack_id, depth = struct.unpack_from("<II", data, at)
        table[stack_id] = struct.unpack_from(f"<{depth}Q", data, at + 8)
        at += 8 + 8 * depth
    return table


def test_every_distinct_stack_is_kept(tmp_path: Path) -> None:
    # Given 4,096 call paths that each end in a sleep: a stack table of 16,384 hash buckets with
    # one stack each would refuse about 4,096² / (2 × 16,384), 512, of them
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "bpf", "--stack-budget", "100000000", "-o", str(capture), "--",
                        str(example("many_stacks")), "-s", "2")
    assert result.returncode == 0, result.stderr
    waits = records(capture)
    waits = waits[(waits["kind"] == WAIT) & (waits["comm"] == b"many_stacks")]
    taken = waits[waits["user_stack"] != NOT_TAKEN]
    assert (taken["kernel_stack"] >= 0).all() and (taken["user_stack"] >= 0).all()
    table = stack_table(capture)
    ids = set(taken["user_stack"].tolist())
    assert ids <= set(table) and len({table[stack_id] for stack_id in ids}) >= 4096



def test_more_stacks_than_the_kernels_table_holds_are_all_kept(tmp_path: Path) -> None:
    # Given 32,768 call paths that each end in a sleep, every stack taken: four times the 8,192
    # stacks the kernel's table holds before user space empties it (its epoch)
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "bpf", "--stack-budget", "100000000", "-o", str(capture), "--",
                        str(example("many_stacks")), "-l", "15", "-s", "5")
    assert result.returncode == 0, result.stderr
    said = re.search(r"ops=(\d+)", result.stdout + result.stderr)
    assert said, result.stderr
    walked = int(said.group(1))  # the paths the program walked, by its own count
    waits = records(capture)
    waits = waits[(waits["kind"] == WAIT) & (waits["comm"] == b"many_stacks")]
    taken = waits[waits["user_stack"] != NOT_TAKEN]
    # Then no stack found the table full, and each path walked has its stack, whole, in the capture
    assert (taken["kernel_stack"] >= 0).all() and (taken["user_stack"] >= 0).all()
    table = stack_table(capture)
    walks = [table[stack_id] for stack_id in taken["user_stack"].tolist()]
    walks = [stack for stack in walks if len(stack) > 15]  # (a worker's 15 levels of left and right, and more)
    # but the sleeps that left no wait with their stack (about 1 in 10,000 here, some of them
    # switches the kernel did not report), which the waits in time order show as a path skipped
    unseen = json.loads((capture / "capture.json").read_text())["bpf"]["unseen_switches"]
    not_seen = walked - len(walks) + unseen
    assert len(set(walks)) >= min(walked, 32768) - not_seen > 16384, (len(set(walks)), walked, len(walks), unseen)

# Writes a line into the pipe every 5 ms for about 0.8 s, from outside the recorded command
PIPE_WRITER = """
import sys, time
with open(sys.argv[1], "w") as pipe:
    for _ in range(150):
        pipe.write("x\\n"); pipe.flush(); time.sleep(0.005)
"""


def test_a_wakers_frames_are_named_when_it_is_outside_the_target(tmp_path: Path) -> None:
    # Given `cat` recorded as a command, reading a pipe that a Python process outside it writes to
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = subprocess.Popen([sys.executable, "-c", PIPE_WRITER, str(pipe)])
    try:
        capture = tmp_path / "cap"
        result = run_offcpu("record", "--backend", "bpf", "-o", str(capture), "--", "cat", str(pipe))
        assert result.returncode == 0, result.stderr
    finally:
        writer.kill()
        writer.wait()
    result = run_offcpu("report", "json", "--waker", str(capture))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # Then the wait cat spends most in was ended by the writer, whose innermost user frame (the
    # first below the kernel's) is named from its memory maps, read while recording as for the
    # target's own processes
    read = max(report["stacks"], key=lambda stack: stack["offcpu_us"])
    waker = read["waker"]
    assert waker[-1] == Path(sys.executable).name[:15], waker
    kernel = kernel_symbols()
    user = [frame for frame in waker[:-1] if frame not in kernel]
    assert user and user[0] != "[unknown]", waker
    assert not [note for note in report["caveats"] if "memory maps" in note], report["caveats"]


def kernel_symbols() -> set[str]:
    """The names of the running kernel's functions."""
    return {line.split()[2] for line in Path("/proc/kallsyms").read_text().splitlines()}


def test_a_small_budget_samples_stacks_and_says_how(tmp_path: Path) -> None:
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "bpf", "--stack-budget", "100", "-o", str(capture), "--",
                        str(example("futex_contention")), "-s", "1", "-t", "4")
    assert result.returncode == 0, result.stderr
    info = metadata(capture)
    assert info["bpf"]["stacks_per_second"] == 100
    waits = records(capture)
    waits = waits[(waits["kind"] == WAIT) & (waits["since_ns"] > 0)]
    # 100 stacks a second on each CPU: the waits of threads that switch often are drawn with
    # probability 2^-shift (those of threads that switch seldom, every millisecond or less, all
    # keep theirs), and about as many of them carry stacks as those chances add up to
    drawn = waits[waits["weight_shift"] > 0]
    assert len(drawn) > 0
    chances = 0.5 ** drawn["weight_shift"].astype(float)
    expected, spread = chances.sum(), (chances * (1 - chances)).sum() ** 0.5
    taken = np.count_nonzero(drawn["kernel_stack"] != NOT_TAKEN)
    assert abs(taken - expected) <= 4 * spread + 1, (taken, expected, spread)
    assert "(" in result.stderr and "with stacks" in result.stderr


def test_nothing_stays_attached_when_offcpu_is_killed(tmp_path: Path, bpftool: str) -> None:
    assert attached_programs(bpftool) == [], "another offcpu records: this test cannot tell its programs apart"
    recording = start_recording("-a", "-d", "60", "-o", str(tmp_path / "cap"))
    try:
        wait_until_attached(bpftool, recording)
        recording.send_signal(signal.SIGKILL)
        recording.wait(timeout=10)
    finally:
        if recording.poll() is None:
            recording.kill()
            recording.wait()
    deadline = time.monotonic() + 5  # the kernel frees them as the last file descriptor closes
    while attached_programs(bpftool) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert attached_programs(bpftool) == []


def test_ctrl_c_ends_the_recording_keeps_the_capture_and_detaches(tmp_path: Path, bpftool: str) -> None:
    capture = tmp_path / "cap"
    recording = start_recording("-a", "-d", "60", "-o", str(capture))
    try:
        wait_until_attached(bpftool, recording)
        time.sleep(0.5)
        recording.send_signal(signal.SIGINT)
        _, stderr = recording.communicate(timeout=30)
    finally:
        if recording.poll() is None:
            recording.kill()
            recording.wait()
    assert recording.returncode == 0, stderr
    assert metadata(capture)["ended_by"] == "SIGINT"
    assert len(records(capture)) > 0
    assert attached_programs(bpftool) == []


def test_one_thread(tmp_path: Path, workload) -> None:  # type: ignore[no-untyped-def]
    running = workload("futex_contention", "-s", "30", "-t", "4", threads=5)
    tid = max(running.threads())
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "bpf", "--tid", str(tid), "-d", "1", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    waits = records(capture)
    assert len(waits) > 10 and set(waits["tid"]) == {tid}


def test_a_cgroup_and_the_cgroups_below_it(tmp_path: Path, workload) -> None:  # type: ignore[no-untyped-def]
    with programs.cgroup() as top:
        below = top / "below"
        below.mkdir()
        inside = workload("futex_contention", "-s", "30", "-t", "2", threads=3)
        outside = workload("futex_contention", "-s", "30", "-t", "2", threads=3)
        try:
            (below / "cgroup.procs").write_text(str(inside.pid))
            capture = tmp_path / "cap"
            result = run_offcpu("record", "--backend", "bpf", "--cgroup", f"/{top.name}", "-d", "1",
                                "-o", str(capture))
        finally:
            inside.stop()
            below.rmdir()
    assert result.returncode == 0, result.stderr
    pids = set(records(capture)["pid"])
    assert inside.pid in pids and outside.pid not in pids


def test_options_that_only_perf_has_need_perf(tmp_path: Path) -> None:
    result = run_offcpu("record", "--backend", "bpf", "--call-graph", "dwarf", "-a", "-d", "1",
                        "-o", str(tmp_path / "cap"))
    assert_one_line_error(result, "--call-graph dwarf", "perf")


def test_a_kernel_that_refuses_the_programs_is_one_line_that_names_perf(tmp_path: Path) -> None:
    # In a user namespace root has every capability, in that namespace only: the kernel refuses bpf().
    unshare = shutil.which("unshare")
    if unshare is None:
        missing("unshare (util-linux) is not installed")
    result = subprocess.run([unshare, "--user", "--map-root-user", str(OFFCPU), "record", "--backend", "bpf", "-a",
                             "-d", "1", "-o", str(tmp_path / "cap")], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert_one_line_error(result, "refused offcpu's BPF programs", "--backend perf")
    assert not (tmp_path / "cap" / "bpf-records.bin").exists()
