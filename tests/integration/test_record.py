"""offcpu record on the real example programs, checked with plain perf."""

from __future__ import annotations

import json
import os
import pty
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, assert_one_line_error, example, run_offcpu
from tests.perf_data import event_counts, script_events

pytestmark = pytest.mark.usefixtures("perf")


def load(capture: Path) -> dict:
    return json.loads((capture / "capture.json").read_text())


def perf_processes_writing(capture: Path) -> list[int]:
    """pids of perf processes whose command line names this capture."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = entry.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"perf") and str(capture).encode() in b" ".join(argv):
            found.append(int(entry.parent.name))
    return found


def test_record_pid_writes_a_capture_true_to_the_recording(workload, tmp_path):
    # Given a process with 16 threads contending on mmap_lock
    program = workload("mmap_contention", "-t", "16", "-s", "30")
    capture = tmp_path / "cap"
    # When it is recorded for 2 seconds
    result = run_offcpu("record", "--pid", str(program.pid), "--duration", "2", "-o", str(capture))
    # Then the capture is complete and capture.json says what happened
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"] == {"kind": "pid", "comm": "mmap_contention", "pid": program.pid, "tid": None, "command": []}
    assert info["ended_by"] == "duration" and info["target_exited"] is False
    assert 1.9 <= info["duration_actual_s"] <= 2.5
    assert info["duration_requested_s"] == 2.0
    assert info["perf_command"][:2] == [info["perf_command"][0], "record"] and "--pid" in info["perf_command"]
    assert info["cpus"] == os.cpu_count()
    assert info["kernel_release"] == os.uname().release
    assert [event["name"] for event in info["events"]][0] == "sched:sched_switch"
    assert info["limits"]["pid"] == program.pid and info["limits"]["threads"] == 17
    assert program.alive(), "offcpu must never signal the target"
    # perf.data is private and plain perf reads it; offcpu's counts match perf's
    perf_data = capture / "perf.data"
    assert stat.S_IMODE(perf_data.stat().st_mode) == 0o600
    counts = event_counts(perf_data)
    assert sum(counts.values()) == info["samples"] > 1000
    assert counts["sched:sched_switch"] > 0 and counts["sched:sched_waking"] > 0
    assert info["lost_events"] == 0
    # every event falls inside the recorded window
    times = [time_ns for _, time_ns, _ in script_events(perf_data)]
    assert info["window_start_ns"] <= min(times) and max(times) <= info["window_end_ns"]
    # and the summary line says where the capture is and what to run next
    assert str(capture) in result.stderr and "Next: offcpu report" in result.stderr


def test_record_pid_follows_threads_created_while_recording(workload, tmp_path):
    program = workload("thread_churn", "-t", "4", "-s", "30")
    before = program.threads()
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(program.pid), "-d", "1", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    events = script_events(capture / "perf.data")
    new_threads = {tid for tid, _, _ in events} - before
    assert len(new_threads) > 10
    assert event_counts(capture / "perf.data")["sched:sched_process_fork"] > 10


def test_record_command_until_it_exits(tmp_path):
    capture = tmp_path / "cap"
    binary = example("futex_contention")
    result = run_offcpu("record", "-d", "20", "-o", str(capture), "--", str(binary), "-t", "4", "-s", "1")
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"]["kind"] == "command" and info["target"]["command"] == [str(binary), "-t", "4", "-s", "1"]
    assert info["target"]["pid"] > 0
    assert info["ended_by"] == "target exited" and info["target_exited"] is True
    assert 0.8 <= info["duration_actual_s"] < 5
    assert event_counts(capture / "perf.data")["sched:sched_process_exit"] >= 4


def test_record_command_ends_at_the_duration(tmp_path):
    capture = tmp_path / "cap"
    result = run_offcpu("record", "-d", "1", "-o", str(capture), "--", str(example("idle_pool")), "-s", "30")
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "duration" and not info["target_exited"]
    assert perf_processes_writing(capture) == []


def wait_for_perf(capture: Path, settle_s: float = 1.0) -> list[int]:
    """perf's pids once it records into `capture` (the machine may be slow to start it)."""
    for _ in range(2000):
        found = perf_processes_writing(capture)
        if found:
            time.sleep(settle_s)  # let it open its events and start recording
            return found
        time.sleep(0.01)
    raise AssertionError("perf never started")


@pytest.mark.parametrize("sig, name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_interrupted_recording_leaves_a_complete_capture_and_no_perf(workload, tmp_path, sig, name):
    program = workload("futex_contention", "-t", "4", "-s", "60")
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), "record", "--pid", str(program.pid), "-d", "60", "-o", str(capture)],
                                 stderr=subprocess.PIPE, text=True)
    wait_for_perf(capture)
    recording.send_signal(sig)
    stderr = recording.communicate(timeout=60)[1]
    assert recording.returncode == 0, stderr
    info = load(capture)
    assert info["ended_by"] == name and info["duration_actual_s"] < 30
    assert sum(event_counts(capture / "perf.data").values()) == info["samples"] > 0
    assert perf_processes_writing(capture) == []
    assert program.alive()


def test_target_exiting_ends_the_recording(workload, tmp_path):
    program = workload("futex_contention", "-t", "2", "-s", "2")
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--pid", str(program.pid), "-d", "30", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target_exited"] is True and info["duration_actual_s"] < 5
    assert perf_processes_writing(capture) == []


def test_existing_capture_is_kept_without_force(workload, tmp_path):
    program = workload("idle_pool", "-s", "30")
    capture = tmp_path / "cap"
    assert run_offcpu("record", "--pid", str(program.pid), "-d", "0.5", "-o", str(capture)).returncode == 0
    first = load(capture)
    refused = run_offcpu("record", "--pid", str(program.pid), "-d", "0.5", "-o", str(capture))
    assert_one_line_error(refused, "already holds a capture", "--force")
    assert load(capture) == first
    replaced = run_offcpu("record", "--pid", str(program.pid), "-d", "0.5", "-o", str(capture), "--force")
    assert replaced.returncode == 0 and load(capture)["window_start_ns"] > first["window_start_ns"]


def test_default_output_name(workload, tmp_path):
    program = workload("idle_pool", "-s", "30")
    result = run_offcpu("record", "--pid", str(program.pid), "-d", "0.5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [capture] = tmp_path.iterdir()
    assert capture.name.startswith(f"offcpu-idle_pool-{program.pid}-")
    assert (capture / "perf.data").exists() and (capture / "capture.json").exists()


def test_user_stacks_through_frameless_libc_are_called_truncated(tmp_path):
    fp, dwarf = tmp_path / "fp", tmp_path / "dwarf"
    command = ["--", str(example("futex_contention")), "-t", "4", "-s", "1"]
    assert run_offcpu("record", "-o", str(fp), *command).returncode == 0
    result = run_offcpu("record", "-o", str(dwarf), "--call-graph", "dwarf", *command)
    assert result.returncode == 0, result.stderr
    assert load(fp)["user_stacks_truncated"] is True
    assert load(dwarf)["user_stacks_truncated"] is False and load(dwarf)["call_graph"] == "dwarf"
    assert "--call-graph dwarf" not in result.stderr


def test_system_wide_recording(tmp_path):
    capture = tmp_path / "cap"
    result = run_offcpu("record", "-a", "-d", "0.5", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"]["kind"] == "all" and "--all-cpus" in info["perf_command"]
    assert "--switch-events" in info["perf_command"] and info["limits"] is None


def test_perf_ends_when_offcpu_is_killed(tmp_path):
    # Given offcpu killed outright while recording the whole machine
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), "record", "-a", "-d", "60", "-o", str(capture)],
                                 stderr=subprocess.DEVNULL)
    perf_pids = wait_for_perf(capture)
    recording.kill()
    recording.wait()
    # Then perf does not record on alone: it finishes its file and exits
    for _ in range(300):
        if not any(Path(f"/proc/{pid}").exists() for pid in perf_pids):
            break
        time.sleep(0.1)
    assert perf_processes_writing(capture) == []
    assert sum(event_counts(capture / "perf.data").values()) > 0


def test_interrupt_before_recording_leaves_nothing(tmp_path):
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), "record", "-a", "-d", "60", "-o", str(capture)],
                                 stderr=subprocess.PIPE, text=True)
    wait_for_perf(capture, settle_s=0)  # perf is starting; it has most likely not opened its events yet
    recording.send_signal(signal.SIGTERM)
    stderr = recording.communicate(timeout=60)[1]
    assert "Traceback" not in stderr
    if recording.returncode == 130:  # stopped before a capture existed
        assert not capture.exists() and "interrupted" in stderr
    else:  # the machine was fast: the recording had begun, and it ends as a whole capture
        assert recording.returncode == 0 and (capture / "capture.json").exists()
    assert perf_processes_writing(capture) == []


def test_countdown_on_a_terminal_only(workload, tmp_path, monkeypatch):
    program = workload("idle_pool", "-s", "30")
    # Given a terminal (pty.spawn runs offcpu on one, with this process's environment)
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    shown = bytearray()

    def read(fd: int) -> bytes:
        data = os.read(fd, 4096)
        shown.extend(data)
        return data

    status = pty.spawn([str(OFFCPU), "record", "--pid", str(program.pid), "-d", "1.5", "-o", str(tmp_path / "tty")],
                       read)
    # Then the countdown is shown while recording
    assert os.waitstatus_to_exitcode(status) == 0
    text = shown.decode(errors="replace")
    assert "s left" in text and "Recording idle_pool" in text
    # and without one, only the summary line
    piped = run_offcpu("record", "--pid", str(program.pid), "-d", "0.5", "-o", str(tmp_path / "pipe"))
    assert "s left" not in piped.stderr and piped.stderr.startswith("Recorded idle_pool")
