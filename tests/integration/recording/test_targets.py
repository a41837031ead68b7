"""What offcpu records, named every way it can be: a real multi-process server (Debian's nginx,
a master and its worker processes, under wrk) by its master's tree, by a cgroup it was moved
into, by several pids, and with its load generator as the command; the whole machine while a
command runs; processes by name or executable, and those of the name that perf cannot add.
What was recorded is read from perf.data by perf itself, and the processes from /proc."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests import programs
from tests.conftest import OFFCPU, assert_one_line_error, perf_processes_writing, run_offcpu
from tests.programs import started

# perf's recording is what these tests hold (perf.data, its command line, its complaints);
# tests/integration/recording/test_bpf_recording.py holds the BPF backend's
RECORD = ("record", "--backend", "perf")

RECORD_S = "1"


def load(capture: Path) -> dict:
    return json.loads((capture / "capture.json").read_text())


def switches_by_process(capture: Path) -> Counter[int]:
    """pid -> how many times perf recorded a thread of it switching out (a wait beginning)."""
    done = subprocess.run(["perf", "script", "-i", str(capture / "perf.data"), "-F", "pid,event"],
                          capture_output=True, text=True, check=True)
    return Counter(int(line.split()[0]) for line in done.stdout.splitlines() if "sched:sched_switch" in line)


def threads_of(pids: tuple[int, ...]) -> set[str]:
    """The tids of these processes now, as capture.json keys them."""
    return {str(tid) for pid in pids for tid in programs.thread_names(pid)}


def test_a_server_is_recorded_by_its_master_s_tree(tmp_path):
    # Given nginx, a master and 3 worker processes, serving wrk's requests
    with started("nginx") as running:
        master, workers = running.pid, running.service_pids[1:]
        threads = threads_of(running.service_pids)
        titles = {str(pid): Path(f"/proc/{pid}/cmdline").read_bytes().strip(b"\0").decode()
                  for pid in running.service_pids}
        # When its master's tree is recorded
        result = run_offcpu(*RECORD, "--tree", str(master), "-d", RECORD_S, "-o", str(tmp_path / "cap"))
        assert result.returncode == 0, result.stderr
    # Then the master and every worker were recorded from the start, and every worker's waits are in it
    info = load(tmp_path / "cap")
    assert info["target"]["pids"][0] == master and set(info["target"]["pids"]) == set(running.service_pids)
    assert set(info["threads_at_start"]) == threads
    waits = switches_by_process(tmp_path / "cap")
    assert all(waits[worker] > 0 for worker in workers), waits
    # and nothing else: not the load generator
    assert set(waits) <= set(running.service_pids)
    # and the reports read them as one service of several processes: one pool in the wait-for graph,
    # whatever the process, and threads tables that say which process each thread is of
    page = tmp_path / "page.html"
    assert run_offcpu("report", "html", str(tmp_path / "cap"), "-o", str(page)).returncode == 0
    html = page.read_text()
    assert "nginx: nginx" in html and not re.search(r"nginx \(\d+\)", html)
    text = run_offcpu("report", "text", str(tmp_path / "cap"), env={**os.environ, "COLUMNS": "120"}).stdout
    assert re.search(r"\|\s+tid \|\s+pid \| comm", text), text
    # where all of them are 'nginx', by their process titles ('nginx: worker process'), kept in capture.json
    assert info["process_titles"] == titles and "nginx: worker process" in titles.values(), titles
    rows = text.split("\nThreads\n")[1].split("\n\n")[0].splitlines()
    cells = [row.split("|") for row in rows]
    names = {row[3].strip() for row in cells if row[1:2] and row[1].strip().isdigit()}  # | tid | pid | comm |
    assert "nginx: worker process" in names and "nginx" not in names, rows
    assert "nginx: worker process" in html


def test_a_server_moved_into_a_cgroup_is_recorded_by_it(tmp_path):
    # Given nginx under load, its master and workers moved into a cgroup of their own
    with programs.cgroup() as group, started("nginx") as running:
        for pid in running.service_pids:
            (group / "cgroup.procs").write_text(str(pid))
        threads = threads_of(running.service_pids)
        # When that cgroup is recorded, named as /proc/PID/cgroup names it
        assert f"0::/{group.name}" in Path(f"/proc/{running.pid}/cgroup").read_text().splitlines()
        result = run_offcpu(*RECORD, "--cgroup", f"/{group.name}", "-d", RECORD_S, "-o", str(tmp_path / "cap"))
        assert result.returncode == 0, result.stderr
    # Then perf filtered by it, and every worker's waits are in the capture, and nothing outside it
    info = load(tmp_path / "cap")
    assert info["target"]["kind"] == "cgroup" and info["perf_command"][-3:] == ["--all-cpus", "--cgroup", group.name]
    assert set(info["threads_at_start"]) == threads
    waits = switches_by_process(tmp_path / "cap")
    assert all(waits[worker] > 0 for worker in running.service_pids[1:]), waits
    assert set(waits) <= set(running.service_pids)


def test_several_pids(tmp_path):
    # Given nginx under load
    with started("nginx") as running:
        chosen = running.service_pids[1:3]
        # When two of its workers are recorded
        result = run_offcpu(*RECORD, "--pid", ",".join(map(str, chosen)), "-d", RECORD_S, "-o", str(tmp_path / "cap"))
        assert result.returncode == 0, result.stderr
    # Then both were, and nothing else
    assert load(tmp_path / "cap")["target"]["pids"] == list(chosen)
    assert set(switches_by_process(tmp_path / "cap")) == set(chosen)


def test_perf_spinning_after_one_of_several_processes_exits_is_said(workload, tmp_path):
    # Given two processes recorded by pid, one of which exits after a few seconds (perf may take 2 s
    # to start on a loaded machine: it must be there when it does)
    staying = workload("idle_pool", "-s", "60", threads=17)
    leaving = workload("idle_pool", "-s", "4", threads=17)
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "--pid", f"{staying.pid},{leaving.pid}", "-d", "30", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    # Then perf 6.1 spun from then on (it woke ten thousand times a second or more here, reading
    # next to nothing each time, against a few hundred on a busy recording, reading kilobytes),
    # so offcpu ended the recording rather than let perf take a CPU for the 29 s left; and the
    # summary and capture.json say so
    info = load(capture)
    assert info["ended_by"] == "perf spinning" and info["duration_actual_s"] < 30, info["duration_actual_s"]
    assert "so offcpu ended the recording after" in result.stderr
    assert info["perf_wakeups"] > 1000 * info["duration_actual_s"] and info["perf_cpu_s"] > 0
    assert info["perf_data_bytes"] < 512 * info["perf_wakeups"]
    assert "perf spun instead of waiting for events" in result.stderr and "--cgroup" in result.stderr
    # and so do the reports; a check does not take the cut recording for the run asked for
    assert "perf spun instead of waiting for events" in run_offcpu("report", "text", str(capture)).stdout
    assert_one_line_error(run_offcpu("check", str(capture)), "could not check", "perf spun", "--cgroup")


def test_processes_a_cgroup_holds_alone_are_recorded_through_it(workload, tmp_path):
    # Given two processes in a cgroup of their own, one of which exits after a few seconds (once
    # perf has begun, even on a loaded machine)
    with programs.cgroup() as group:
        staying = workload("idle_pool", "-s", "60", threads=17)
        leaving = workload("idle_pool", "-s", "4", threads=17)
        for pid in (staying.pid, leaving.pid):
            (group / "cgroup.procs").write_text(str(pid))
        capture = tmp_path / "cap"
        result = run_offcpu(*RECORD, "--pid", f"{staying.pid},{leaving.pid}", "-d", "6", "-o", str(capture))
        staying.stop()
    # Then perf recorded them through the cgroup, and did not spin once one had exited
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"]["kind"] == "pid" and info["target"]["cgroup"] == group.name
    assert info["perf_command"][-3:] == ["--all-cpus", "--cgroup", group.name]
    assert info["ended_by"] == "duration" and "spun" not in result.stderr, result.stderr
    assert info["perf_wakeups"] < 1000 * info["duration_actual_s"]
    # and both processes were recorded, and nothing else
    assert set(switches_by_process(capture)) == {staying.pid, leaving.pid}


def test_processes_that_share_their_cgroup_are_recorded_by_pid(workload, tmp_path):
    # Given two processes in the cgroup offcpu runs in (with the test run and more)
    first = workload("idle_pool", "-s", "60", threads=17)
    second = workload("idle_pool", "-s", "60", threads=17)
    capture = tmp_path / "cap"
    assert run_offcpu(*RECORD, "--pid", f"{first.pid},{second.pid}", "-d", "0.5", "-o", str(capture)).returncode == 0
    # Then perf recorded them by pid
    info = load(capture)
    assert info["target"]["cgroup"] == "" and info["perf_command"][-2:] == ["--pid", f"{first.pid},{second.pid}"]


def test_perf_that_did_not_spin_is_not_said_to(workload, tmp_path):
    staying = workload("idle_pool", "-s", "60", threads=17)
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "--pid", str(staying.pid), "-d", "1", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    assert 0 < load(capture)["perf_wakeups"] < 100 and "spun" not in result.stderr


def test_check_records_a_server_while_its_load_generator_runs(tmp_path):
    # Given nginx waiting for requests
    with started("nginx", loaded=False) as running:
        assert running.requests is not None and running.load_command is not None
        served = running.requests()
        # When it is checked: its master's tree recorded while wrk, the command, loads it for 2 s
        capture = tmp_path / "cap"
        result = run_offcpu("check", "--backend", "perf", "--tree", str(running.pid), "-d", "60", "-o", str(capture),
                            "--", *running.load_command(2), timeout=180)
        served = running.requests() - served
    # Then the check gave a verdict on the run (0 pass, 1 fail), after wrk ran and reported
    assert result.returncode in (0, 1), result.stderr
    assert "Requests/sec" in result.stdout and served > 1000
    # and the recording ended with the command, whose status is kept
    info = load(capture)
    assert info["ended_by"] == "command exited" and info["command_exit_status"] == 0
    assert 1 < info["duration_actual_s"] < 30
    # and holds the server's workers' waits, not the load generator's
    waits = switches_by_process(capture)
    assert all(waits[worker] > 0 for worker in running.service_pids[1:]), waits
    assert set(waits) <= set(running.service_pids) and info["target"]["command_pid"] not in waits


def test_the_whole_machine_while_a_command_runs(tmp_path):
    # Given nginx waiting for requests
    with started("nginx", loaded=False) as running:
        assert running.load_command is not None
        # When every CPU is recorded while wrk loads it for a second
        capture = tmp_path / "cap"
        result = run_offcpu(*RECORD, "-a", "-d", "60", "-o", str(capture), "--", *running.load_command(1),
                            timeout=180)
        assert result.returncode == 0, result.stderr
    # Then the recording ended with the command, and holds both the server's and the command's waits
    info = load(capture)
    assert info["target"]["kind"] == "all" and info["ended_by"] == "command exited"
    assert info["command_exit_status"] == 0 and 0.5 < info["duration_actual_s"] < 30
    waits = switches_by_process(capture)
    assert waits[info["target"]["command_pid"]] > 0
    # (the server's: its workers' together, as one of them may have taken every connection of
    # the second's load)
    assert sum(waits[worker] for worker in running.service_pids[1:]) > 0, waits


def wait_for_events(capture: Path) -> None:
    """Until the perf recording into `capture` has opened its events (and a moment more to
    open them all): a process started from then on by a recorded one is recorded."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in perf_processes_writing(capture):
            try:
                links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
            except OSError:
                continue
            if "anon_inode:[perf_event]" in links:
                time.sleep(0.5)
                return
        time.sleep(0.01)
    raise AssertionError("perf never opened its events")


def forks(capture: Path) -> list[tuple[int, int]]:
    """(parent pid, child pid) of every process or thread creation perf recorded."""
    done = subprocess.run(["perf", "script", "-i", str(capture / "perf.data"), "-F", "event,trace"],
                          capture_output=True, text=True, check=True)
    return [(int(parent), int(child)) for parent, child in
            re.findall(r"sched:sched_process_fork: comm=.* pid=(\d+) child_comm=.* child_pid=(\d+)", done.stdout)]


@pytest.mark.parametrize("how", ["--comm", "--exe"])
def test_a_name_s_processes_and_what_they_start_are_recorded_and_others_said_unrecorded(tmp_path, how):
    # Given a process of a name and executable of this test's own, which starts a process every 0.2 s
    shell = tmp_path / f"oc-{os.getpid()}"
    shutil.copy(os.path.realpath("/bin/sh"), shell)
    starter = subprocess.Popen([str(shell), "-c", "while :; do sleep 0.2; done"])
    stray = None
    try:
        # When its name (or executable) is recorded for 4 s, and a process of it starts meanwhile outside it
        capture = tmp_path / "cap"
        recording = subprocess.Popen([str(OFFCPU), *RECORD, how, shell.name if how == "--comm" else str(shell),
                                      "-d", "4", "-o", str(capture)], stderr=subprocess.PIPE, text=True)
        wait_for_events(capture)
        stray = subprocess.Popen([str(shell), "-c", "read line"], stdin=subprocess.PIPE)  # waits, starting nothing
        stderr = recording.communicate(timeout=120)[1]
    finally:
        for process in (starter, stray):
            if process is not None:
                process.kill()
                process.wait()
    assert recording.returncode == 0, stderr
    info = load(capture)
    # Then the process was recorded, with the processes it started while recorded
    assert info["target"]["pids"] == [starter.pid]
    waits = switches_by_process(capture)
    started_by_it = [child for parent, child in forks(capture) if parent == starter.pid]
    assert len(started_by_it) >= 5 and all(waits[child] > 0 for child in started_by_it[:-1])
    # and the one of its name that something else started is not, and is said not to be
    assert info["unrecorded_processes"] == {str(stray.pid): shell.name}
    assert stray.pid not in waits
    assert f"{stray.pid} ({shell.name})" in stderr and "--cgroup" in stderr
