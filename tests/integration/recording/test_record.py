"""offcpu record on the real example programs, checked with plain perf."""

from __future__ import annotations

import json
import os
import pty
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offcpu.capture import Target
from offcpu.commands.record import default_output
from tests.conftest import (
    OFFCPU,
    assert_one_line_error,
    example,
    perf_processes_writing,
    processes_with_arguments,
    run_offcpu,
)
from tests.perf_data import dumped_counts, event_counts, script_events

# perf's recording is what these tests hold (perf.data, its command line, its complaints);
# tests/integration/recording/test_bpf_recording.py holds the BPF backend's
RECORD = ("record", "--backend", "perf")


def load(capture: Path) -> dict:
    return json.loads((capture / "capture.json").read_text())


def test_record_pid_writes_a_capture_true_to_the_recording(workload, tmp_path):
    # Given a process with 16 threads contending on mmap_lock
    program = workload("mmap_contention", "-t", "16", "-s", "30", threads=17)
    capture = tmp_path / "cap"
    # When it is recorded for 2 seconds
    result = run_offcpu(*RECORD, "--pid", str(program.pid), "--duration", "2", "-o", str(capture))
    # Then the capture is complete and capture.json says what happened
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"] == {"kind": "pid", "comm": "mmap_contention", "pid": program.pid, "tid": None, "command": [],
                              "pids": [program.pid], "cgroup": "", "unit": "", "by_pid": [program.pid], "by_tree": [],
                              "by_comm": "", "by_exe": "", "command_pid": None}
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
    # a slow machine may lose events; then the summary says what to do about it
    assert isinstance(info["lost_events"], int) and info["lost_events"] >= 0
    if info["lost_events"] > 0:
        assert "--mmap-pages" in result.stderr
    assert info["command_exit_status"] is None
    # every event falls inside the recorded window
    times = [time_ns for _, time_ns, _ in script_events(perf_data)]
    assert info["window_start_ns"] <= min(times) and max(times) <= info["window_end_ns"]
    # and the summary line says where the capture is and what to run next
    assert str(capture) in result.stderr and "Next: offcpu report" in result.stderr


def test_record_pid_follows_threads_created_while_recording(workload, tmp_path):
    program = workload("thread_churn", "-t", "4", "-s", "30")
    before = program.threads()
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "1", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    events = script_events(capture / "perf.data")
    new_threads = {tid for tid, _, _ in events} - before
    assert len(new_threads) > 10
    assert event_counts(capture / "perf.data")["sched:sched_process_fork"] > 10


def test_record_command_until_it_exits(tmp_path):
    capture = tmp_path / "cap"
    binary = example("futex_contention")
    result = run_offcpu(*RECORD, "-d", "20", "-o", str(capture), "--", str(binary), "-t", "4", "-s", "1")
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"]["kind"] == "command" and info["target"]["command"] == [str(binary), "-t", "4", "-s", "1"]
    assert info["target"]["pid"] > 0
    assert info["ended_by"] == "target exited" and info["target_exited"] is True
    assert info["command_exit_status"] == 0
    assert 0.8 <= info["duration_actual_s"] < 5
    # the command's threads as the recording started: its main thread among them
    assert str(info["target"]["pid"]) in info["threads_at_start"]
    assert event_counts(capture / "perf.data")["sched:sched_process_exit"] >= 4


def test_lost_events_are_counted_as_events_not_as_records(tmp_path):
    # Given a ring buffer of one page, far too small for 8 threads switching all the time
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "--mmap-pages", "1", "-d", "5", "-o", str(capture), "--",
                        str(example("futex_contention")), "-s", "1")
    assert result.returncode == 0, result.stderr
    # Then capture.json holds the events perf's lost records carry, not how many such records
    # there are, or what its end-of-recording LOST_SAMPLES records carry when they say more (the
    # two see the same losses, and either may miss some: once the LOST_SAMPLES said 41 fewer)
    info = load(capture)
    dumped = dumped_counts(capture / "perf.data")
    assert 0 < dumped.lost_records <= dumped.lost and info["lost_events"] == max(dumped.lost, dumped.lost_samples)
    assert f"perf lost {info['lost_events']:,} events" in result.stderr and "--mmap-pages" in result.stderr


def test_record_command_starts_it_once_the_events_are_on(tmp_path):
    # Given a command that starts its 16 threads in its first millisecond
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "-d", "5", "-o", str(capture), "--", str(example("mmap_contention")),
                        "-t", "16", "-s", "0.5")
    assert result.returncode == 0, result.stderr
    # Then every thread of it was recorded from its creation: perf saw 16 forks by the program
    info = load(capture)
    events = script_events(capture / "perf.data")
    forks = [time_ns for _, time_ns, event in events if event == "sched:sched_process_fork"]
    assert len(forks) >= 16 and min(forks) >= info["window_start_ns"]
    assert len({tid for tid, _, _ in events}) >= 17


def test_record_command_reads_offcpus_stdin(tmp_path):
    capture = tmp_path / "cap"
    done = subprocess.run([str(OFFCPU), *RECORD, "-d", "5", "-o", str(capture), "--", "cat"], input="through\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "through\n"
    assert load(capture)["command_exit_status"] == 0


def test_max_size_ends_a_command_recording_as_max_size(tmp_path):
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "-d", "20", "--max-size", "1M", "-o", str(capture), "--",
                        str(example("futex_contention")), "-t", "4", "-s", "10")
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "max size" and info["target_exited"] is False
    assert info["command_exit_status"] is None and "exited with status" not in result.stderr
    # and the command, cut short, was sent SIGTERM by perf, as the summary and capture.json say
    assert info["command_cut_short"] == ["SIGTERM"] and not info["command_killed"]
    assert "ended by max size while the command still ran" in result.stderr
    assert "was still running when the capture reached its size limit (--max-size), and was sent SIGTERM" \
        in result.stderr and "raise --max-size" in result.stderr


def test_a_thread_that_exits_ends_a_tid_recording(tmp_path):
    # Given a process whose second thread ends after a few seconds while the process lives on
    program = subprocess.Popen([sys.executable, "-c", THREAD_THAT_ENDS], stdout=subprocess.PIPE, text=True)
    try:
        thread = int(program.stdout.readline())
        capture = tmp_path / "cap"
        result = run_offcpu(*RECORD, "--tid", str(thread), "-d", "20", "-o", str(capture))
        assert result.returncode == 0, result.stderr
        info = load(capture)
        assert info["ended_by"] == "target exited" and info["target_exited"] is True
        assert info["duration_actual_s"] < 10 and program.poll() is None
    finally:
        program.kill()
        program.wait()


THREAD_THAT_ENDS = """
import threading, time
thread = threading.Thread(target=time.sleep, args=(4,))  # (perf may take 2 s to start on a loaded machine)
thread.start()
print(thread.native_id, flush=True)
time.sleep(60)
"""


def test_record_command_ends_at_the_duration(tmp_path):
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "-d", "1", "-o", str(capture), "--", str(example("idle_pool")), "-s", "30")
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "duration" and not info["target_exited"]
    assert info["command_exit_status"] is None  # perf ended it: it did not exit by itself
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


@pytest.mark.parametrize("sig, name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"),
                                       (signal.SIGHUP, "SIGHUP")])
def test_interrupted_recording_leaves_a_complete_capture_and_no_perf(workload, tmp_path, sig, name):
    """Ending a recording early is what Ctrl-C is for: a complete capture, exit 0, and the summary says so."""
    program = workload("futex_contention", "-t", "4", "-s", "60", threads=5)
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "60", "-o", str(capture)],
                                 stderr=subprocess.PIPE, text=True)
    wait_for_perf(capture)
    recording.send_signal(sig)
    stderr = recording.communicate(timeout=60)[1]
    assert recording.returncode == 0 and f", ended by {name}:" in stderr, stderr
    info = load(capture)
    assert info["ended_by"] == name and info["duration_actual_s"] < 30
    assert sum(event_counts(capture / "perf.data").values()) == info["samples"] > 0
    assert perf_processes_writing(capture) == []
    assert program.alive()


def test_target_exiting_ends_the_recording(workload, tmp_path):
    # (4 s: on a loaded machine perf may take 2 s to start)
    program = workload("futex_contention", "-t", "2", "-s", "4")
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "30", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target_exited"] is True and info["duration_actual_s"] < 8
    assert perf_processes_writing(capture) == []


def test_existing_capture_is_kept_without_force(workload, tmp_path):
    program = workload("idle_pool", "-s", "30", threads=17)
    capture = tmp_path / "cap"
    assert run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture)).returncode == 0
    first = load(capture)
    refused = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture))
    assert_one_line_error(refused, "already holds a capture", "--force")
    assert load(capture) == first
    replaced = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture), "--force")
    assert replaced.returncode == 0 and load(capture)["window_start_ns"] > first["window_start_ns"]


def test_a_forced_recording_that_fails_keeps_the_capture_it_was_to_replace(example_capture, tmp_path):
    # Given a capture, with its saved model and the user's own file
    capture = tmp_path / "cap"
    subprocess.run(["cp", "-a", str(example_capture("idle_pool")), str(capture)], check=True)
    assert run_offcpu("report", "json", str(capture)).returncode == 0
    (capture / "notes.txt").write_text("mine")
    before = {path.name: path.read_bytes() for path in capture.iterdir()}
    # When a recording with --force into it fails once started (perf cannot run the command's interpreter)
    script = tmp_path / "script"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    result = run_offcpu(*RECORD, "--force", "-o", str(capture), "-d", "1", "--", str(script))
    # Then the capture is as it was, with nothing of the failed recording beside it
    assert_one_line_error(result, "perf record failed", "No such file")
    assert {path.name: path.read_bytes() for path in capture.iterdir()} == before


def test_a_forced_recording_killed_midway_leaves_the_last_capture_for_the_next(tmp_path):
    # Given a capture, and a recording with --force into it killed outright
    capture = tmp_path / "cap"
    assert run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(capture)).returncode == 0
    first = load(capture)
    recording = subprocess.Popen([str(OFFCPU), *RECORD, "--force", "-a", "-d", "60", "-o", str(capture)],
                                 stderr=subprocess.DEVNULL)
    perf_pids = wait_for_perf(capture)
    recording.kill()
    recording.wait()
    for _ in range(300):  # perf finishes its file alone
        if not any(Path(f"/proc/{pid}").exists() for pid in perf_pids):
            break
        time.sleep(0.1)
    # Then it is an unfinished recording, which a failed --force leaves as it is ...
    assert_one_line_error(run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(capture)), "unfinished recording")
    # ... and which a --force that succeeds replaces, with what was kept aside
    replaced = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(capture), "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert load(capture)["window_start_ns"] > first["window_start_ns"]
    assert {path.name for path in capture.iterdir()} == {"capture.json", "kallsyms", "perf.data", "vdso"}


def test_a_capture_is_its_owner_s_alone(example_capture, tmp_path):
    # capture.json holds the command line, whose arguments may be secrets; perf.data, the stacks
    capture = example_capture("idle_pool")
    assert run_offcpu("report", "json", str(capture)).returncode == 0  # which saves model.json
    assert stat.S_IMODE(capture.stat().st_mode) == 0o700
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in capture.iterdir()} == {
        "perf.data": 0o600, "capture.json": 0o600, "model.json": 0o600, "kallsyms": 0o600, "vdso": 0o600}
    # and so is a directory that was there before
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    assert run_offcpu(*RECORD, "-d", "0.5", "-o", str(existing), "--", "true").returncode == 0
    assert stat.S_IMODE(existing.stat().st_mode) == 0o700


def test_an_unfinished_recording_is_marked_privately(workload, tmp_path):
    # Given a recording under way, of threads that switch all the time (an idle pool need not
    # switch at all in the window, and then records nothing)
    program = workload("futex_contention", "-t", "4", "-s", "60", threads=5)
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "60", "-o", str(capture)],
                                 stderr=subprocess.PIPE, text=True)
    wait_for_perf(capture)
    # Then its marker is as private as the capture it marks
    assert stat.S_IMODE((capture / "recording.partial").stat().st_mode) == 0o600
    recording.send_signal(signal.SIGINT)
    assert recording.wait(timeout=60) == 0, recording.communicate()[1]
    assert not (capture / "recording.partial").exists()


def test_default_output_name_is_one_plain_word():
    named = default_output(Target("pid", "kworker/R-rcu gp", pid=4))
    assert named.parent == Path(".") and named.name.startswith("offcpu-kworker_R-rcu_gp-4-")


def test_default_output_name(workload, tmp_path):
    program = workload("idle_pool", "-s", "30", threads=17)
    result = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [capture] = tmp_path.iterdir()
    assert capture.name.startswith(f"offcpu-idle_pool-{program.pid}-")
    assert (capture / "perf.data").exists() and (capture / "capture.json").exists()


def test_user_stacks_through_frameless_libc_are_called_truncated(tmp_path):
    fp, dwarf = tmp_path / "fp", tmp_path / "dwarf"
    command = ["--", str(example("futex_contention")), "-t", "4", "-s", "1"]
    assert run_offcpu(*RECORD, "-o", str(fp), *command).returncode == 0
    result = run_offcpu(*RECORD, "-o", str(dwarf), "--call-graph", "dwarf", *command)
    assert result.returncode == 0, result.stderr
    assert load(fp)["user_stacks_truncated"] is True
    assert load(dwarf)["user_stacks_truncated"] is False and load(dwarf)["call_graph"] == "dwarf"
    assert "--call-graph dwarf" not in result.stderr


def test_system_wide_recording(tmp_path):
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["target"]["kind"] == "all" and "--all-cpus" in info["perf_command"]
    assert "--switch-events" in info["perf_command"] and info["limits"] is None
    assert info["threads_at_start"] == {} and info["command_exit_status"] is None


def test_perf_ends_when_offcpu_is_killed(tmp_path):
    # Given offcpu killed outright while recording the whole machine
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), *RECORD, "-a", "-d", "60", "-o", str(capture)],
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
    # and what is left is called an unfinished recording, which --force (and only --force) replaces
    (capture / "notes.txt").write_text("mine")
    refused = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(capture))
    assert_one_line_error(refused, str(capture), "unfinished recording", "--force")
    replaced = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(capture), "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert {path.name for path in capture.iterdir()} - {"kallsyms", "vdso"} == {"capture.json", "notes.txt",
                                                                                 "perf.data"}


def test_a_second_recording_into_the_same_directory_fails(workload, tmp_path):
    # Given a recording under way, of threads that switch all the time (an idle pool need not
    # switch at all in the window, and then records nothing)
    program = workload("futex_contention", "-t", "4", "-s", "60", threads=5)
    capture = tmp_path / "cap"
    first = subprocess.Popen([str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "60", "-o", str(capture)],
                             stderr=subprocess.PIPE, text=True)
    wait_for_perf(capture, settle_s=0)
    # When another one is started into the same directory, with --force or not
    for force in ([], ["--force"]):
        second = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture), *force)
        # Then it fails, and the first one goes on to a whole capture
        assert_one_line_error(second, "another offcpu is recording into", str(capture))
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=60) == 0, first.communicate()[1]
    assert sum(event_counts(capture / "perf.data").values()) == load(capture)["samples"] > 0


def test_two_recordings_started_together_make_one_capture(tmp_path):
    capture = tmp_path / "cap"
    command = [str(OFFCPU), *RECORD, "-d", "5", "-o", str(capture), "--", str(example("futex_contention")), "-t", "2",
               "-s", "1"]
    started = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    results = sorted((process.wait(timeout=120), process.communicate()[1]) for process in started)
    # One records; the other finds the directory taken (or, if it came late, holding a capture)
    assert [status for status, _ in results] == [0, 2], results
    assert "another offcpu is recording" in results[1][1] or "already holds a capture" in results[1][1]
    assert sum(event_counts(capture / "perf.data").values()) == load(capture)["samples"] > 0


def test_interrupt_before_recording_leaves_nothing(tmp_path):
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), *RECORD, "-a", "-d", "60", "-o", str(capture)],
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
    program = workload("idle_pool", "-s", "30", threads=17)
    # Given a terminal (pty.spawn runs offcpu on one, with this process's environment)
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    shown = bytearray()

    def read(fd: int) -> bytes:
        data = os.read(fd, 4096)
        shown.extend(data)
        return data

    status = pty.spawn([str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "1.5", "-o", str(tmp_path / "tty")],
                       read)
    # Then the countdown is shown while recording
    assert os.waitstatus_to_exitcode(status) == 0
    text = shown.decode(errors="replace")
    assert "s left" in text and "Recording idle_pool" in text
    # and without one, only the summary line
    piped = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(tmp_path / "pipe"))
    assert "s left" not in piped.stderr and piped.stderr.startswith("Recorded idle_pool")


def test_force_replaces_only_offcpus_files(workload, tmp_path):
    # Given a capture directory that also holds the user's own files
    program = workload("idle_pool", "-s", "30", threads=17)
    capture = tmp_path / "cap"
    assert run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture)).returncode == 0
    first = load(capture)
    (capture / "notes.txt").write_text("mine")
    (capture / "plots").mkdir()
    (capture / "plots" / "a.svg").write_text("<svg/>")
    (capture / "model.json").write_text("{}")
    (capture / "capture.json.partial").write_text("half")
    # When it is recorded again with --force
    result = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture), "--force")
    # Then offcpu's files are replaced and nothing else is touched
    assert result.returncode == 0, result.stderr
    assert load(capture)["window_start_ns"] > first["window_start_ns"]
    assert sorted(path.name for path in capture.iterdir()) == ["capture.json", "kallsyms", "notes.txt", "perf.data",
                                                               "plots", "snapshot.json", "vdso"]
    assert (capture / "notes.txt").read_text() == "mine" and (capture / "plots" / "a.svg").exists()


@pytest.mark.parametrize("force", [False, True])
def test_plain_perf_data_is_never_replaced(tmp_path, force):
    # Given a directory holding perf's own recording, without offcpu's capture.json
    directory = tmp_path / "mine"
    directory.mkdir()
    done = subprocess.run(["perf", "record", "-o", str(directory / "perf.data"), "-e", "sched:sched_switch",
                           "--", "true"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    before = (directory / "perf.data").read_bytes()
    result = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(directory), *(["--force"] if force else []))
    assert_one_line_error(result, str(directory), "perf.data", "-o")
    assert (directory / "perf.data").read_bytes() == before and sorted(directory.iterdir()) == [directory / "perf.data"]


@pytest.mark.parametrize("content", ['{"schema": "someone-else/1"}', "[]", "not json"])
def test_a_foreign_capture_json_is_not_a_capture(tmp_path, content):
    directory = tmp_path / "other"
    directory.mkdir()
    (directory / "capture.json").write_text(content)
    (directory / "perf.data").write_text("theirs")
    result = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(directory), "--force")
    assert_one_line_error(result, str(directory), "did not record")
    assert (directory / "capture.json").read_text() == content and (directory / "perf.data").read_text() == "theirs"


def test_output_naming_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_text("keep")
    for force in ([], ["--force"]):
        result = run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", str(path), *force)
        assert_one_line_error(result, str(path), "not a directory", "-o")
    assert path.read_text() == "keep"


def runs_perf_record(recording: subprocess.Popen) -> bool:
    """Whether offcpu's perf record runs now."""
    try:
        children = Path(f"/proc/{recording.pid}/task/{recording.pid}/children").read_text().split()
    except OSError:
        return False
    for child in children:
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"perf") and argv[1] == b"record":
            return True
    return False
    for child in children:
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"perf") and argv[1] in (b"report", b"script"):
            return True
    return False


@pytest.mark.parametrize("how", ["Ctrl-C at the terminal", "SIGTERM"])
def test_signal_after_perf_finished_keeps_the_capture(workload, tmp_path, how):
    # Given a recording whose perf has finished and whose perf.data offcpu is reading
    program = workload("futex_contention", "-t", "4", "-s", "60", threads=5)
    capture = tmp_path / "cap"
    recording = subprocess.Popen([str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "1", "-o", str(capture)],
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    perf_seen = False
    while not perf_seen or runs_perf_record(recording):  # (offcpu then describes perf.data, in its own process)
        perf_seen = perf_seen or runs_perf_record(recording)
        assert recording.poll() is None, "offcpu ended before it was seen after its perf had finished"
        assert time.monotonic() < deadline, "offcpu's perf never finished"
        time.sleep(0.001)
    # When it is interrupted then (a terminal's Ctrl-C reaches the whole foreground process group)
    if how == "SIGTERM":
        recording.send_signal(signal.SIGTERM)
    else:
        os.killpg(recording.pid, signal.SIGINT)
    stderr = recording.communicate(timeout=60)[1]
    # Then the capture is finished all the same, with what offcpu read of its perf.data
    assert recording.returncode == 0, stderr
    info = load(capture)
    assert info["ended_by"] == "duration"
    assert sum(event_counts(capture / "perf.data").values()) == info["samples"] > 0
    assert info["user_stacks_truncated"] is True  # futex_contention's stacks go through glibc, built without fp


@pytest.mark.parametrize("script, status", [("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM)])
def test_command_failing_keeps_its_capture_and_status(tmp_path, script, status):
    # Given a command that prints, runs a while and then fails
    capture = tmp_path / "cap"
    command = f"echo hello from the command; {example('futex_contention')} -t 2 -s 1 >/dev/null; {script}"
    result = run_offcpu(*RECORD, "-d", "20", "-o", str(capture), "--", "sh", "-c", command)
    # Then the capture is kept, and says how the command ended
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "target exited" and info["command_exit_status"] == status
    assert event_counts(capture / "perf.data")["sched:sched_switch"] > 0
    assert f"exited with status {status}" in result.stderr
    # and its output went to offcpu's stdout
    assert "hello from the command" in result.stdout


@pytest.mark.parametrize("target", [(), ("-a",)], ids=["the command alone", "the whole machine while it runs"])
def test_the_command_s_stderr_is_offcpu_s(tmp_path, target):
    # Given a command that writes to its stdout and its stderr, and fails
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, *target, "-d", "20", "-o", str(capture), "--", "sh", "-c",
                        "echo out; echo 'err: no such database' >&2; sleep 1; exit 1")
    # Then each goes where offcpu's goes, as it would without offcpu; perf's own messages do not
    assert result.returncode == 0, result.stderr
    assert result.stdout == "out\n"
    assert result.stderr.startswith("err: no such database\nRecorded "), result.stderr
    assert "perf record:" not in result.stderr and "Events" not in result.stderr
    assert load(capture)["command_exit_status"] == 1


@pytest.mark.parametrize("command, status", [("true", 0), ("false", 1)])
def test_a_command_that_ends_at_once(tmp_path, command, status):
    # Given a command that is over before offcpu can look at it
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "-d", "20", "-o", str(capture), "--", command)
    # Then the capture holds it, from its exec to its exit
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "target exited" and info["command_exit_status"] == status
    assert info["target"]["pid"] > 0 and info["duration_actual_s"] < 0.5
    assert sum(event_counts(capture / "perf.data").values()) == info["samples"] > 0


def test_threads_at_start_include_the_ones_that_never_run(workload, tmp_path):
    # Given a pool of 16 idle workers (they wait for work nearly all the time)
    program = workload("idle_pool", "-t", "16", "-s", "30", threads=17)
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "0.5", "-o", str(capture))
    assert result.returncode == 0, result.stderr
    # Then every thread is listed as it was when the recording started
    threads = load(capture)["threads_at_start"]
    assert set(threads) == {str(tid) for tid in program.threads()} and len(threads) == 17
    assert all(comm == "idle_pool" for comm, _ in threads.values())
    assert sum(state == "S" for _, state in threads.values()) >= 15
    # with the process each is of, which reports give even to those perf has no event of
    assert load(capture)["processes_at_start"] == {tid: program.pid for tid in threads}
    for _ in ("built", "from the saved model"):
        report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
        assert {thread["pid"] for thread in report["threads"]} == {program.pid}
    saved = json.loads((capture / "model.json").read_text())
    assert {thread["pid"] for thread in saved["threads"]} == {program.pid}
    # with --tid, only that thread
    worker = max(program.threads())
    one = tmp_path / "one"
    assert run_offcpu(*RECORD, "--tid", str(worker), "-d", "0.5", "-o", str(one)).returncode == 0
    assert list(load(one)["threads_at_start"]) == [str(worker)]


# A loop count no other perf bench on the machine uses: its processes are this test's alone.
PIPE_LOOPS = "2999999"
PIPE_BENCH = ["perf", "bench", "sched", "pipe", "-l", PIPE_LOOPS]  # ~20 s under recording, 2 processes


@pytest.mark.parametrize("target, wrapper", [
    ((), ()), ((), ("env",)), ((), ("sh", "-c", " ".join(PIPE_BENCH) + "; true")), (("-a",), ()),
], ids=["perf itself", "env perf", "sh -c 'perf ...; true'", "the whole machine while perf runs"])
def test_a_busy_command_that_is_perf_ends_at_the_duration(tmp_path, target, wrapper):
    # Given a command that is perf itself (or perf run through a wrapper), switching
    # threads as fast as it can: a recording of it grows by tens of MB a second
    capture = tmp_path / "cap"
    command = wrapper if wrapper[:1] == ("sh",) else (*wrapper, *PIPE_BENCH)
    # When it is recorded (or the whole machine is, while it runs) for 2 s
    result = run_offcpu(*RECORD, *target, "-d", "2", "-o", str(capture), "--", *command)
    # Then the recording is over 2 s after it started (perf then finishes its file)
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "duration" and info["command_exit_status"] is None
    assert 1.9 < info["duration_actual_s"] < 3, info["duration_actual_s"]
    # and nothing of the command is left running: neither perf bench nor the process it forked
    assert processes_with_arguments(*PIPE_BENCH) == []
    assert perf_processes_writing(capture) == []


def test_max_size_ends_a_busy_command_s_recording(tmp_path):
    capture = tmp_path / "cap"
    result = run_offcpu(*RECORD, "-d", "60", "--max-size", "16M", "-o", str(capture), "--", *PIPE_BENCH)
    assert result.returncode == 0, result.stderr
    info = load(capture)
    assert info["ended_by"] == "max size"
    assert (capture / "perf.data").stat().st_size < 17 << 20
    assert processes_with_arguments(*PIPE_BENCH) == []


# A command that ignores the signals that end it, and starts a child that inherits that.
IGNORES_SIGNALS = "#!/bin/sh\ntrap '' TERM INT HUP\nsleep 59.25\n"


@pytest.mark.parametrize("target, how", [((), "duration"), (("-a",), "duration"), ((), "Ctrl-C")],
                         ids=["the command alone", "the whole machine while it runs", "Ctrl-C"])
def test_a_command_that_ignores_sigterm_is_killed_after_a_grace(tmp_path, target, how):
    # Given a script that ignores SIGTERM, SIGINT and SIGHUP, and starts a child that does too
    script = tmp_path / "stubborn"
    script.write_text(IGNORES_SIGNALS)
    script.chmod(0o755)
    capture = tmp_path / "cap"
    # When its recording ends, at the duration or at a Ctrl-C (which reaches offcpu alone: perf has a session)
    argv = [str(OFFCPU), *RECORD, *target, "-d", "2" if how == "duration" else "60", "-o", str(capture), "--",
            str(script)]
    recording = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        if how == "Ctrl-C":
            wait_for_perf(capture, settle_s=2)
            recording.send_signal(signal.SIGINT)
        stderr = recording.communicate(timeout=30)[1]  # perf waited for its command for ever: 38 s, then no capture
        # Then the command and its child are killed, and the capture is complete
        assert recording.returncode == 0, stderr
        info = load(capture)
        assert info["ended_by"] == ("duration" if how == "duration" else "SIGINT") and info["command_killed"] is True
        assert sum(event_counts(capture / "perf.data").values()) == info["samples"] > 0
        assert "was killed (SIGKILL)" in stderr
        assert processes_with_arguments("sleep", "59.25") == [] and processes_with_arguments(str(script)) == []
        assert perf_processes_writing(capture) == []
    finally:  # when it fails, leave nothing running
        for pid in processes_with_arguments("sleep", "59.25") + processes_with_arguments(str(script)):
            os.kill(pid, signal.SIGKILL)
        recording.wait(timeout=60)


BACKGROUND = '"$@" & echo $!; wait'  # a script that starts a command as a background job


def test_sigint_ends_a_recording_started_in_the_background(workload, tmp_path):
    # Given a shell starts a background job with SIGINT ignored
    shown = subprocess.run(["sh", "-c", BACKGROUND, "sh", "grep", "SigIgn", "/proc/self/status"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert int(shown[-1], 16) & (1 << (signal.SIGINT - 1))
    # and offcpu started by a script as such a job
    program = workload("idle_pool", "-s", "60", threads=17)
    capture = tmp_path / "cap"
    shell = subprocess.Popen(["sh", "-c", BACKGROUND, "sh", str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d",
                              "60", "-o", str(capture)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    recording = int(shell.stdout.readline())
    wait_for_perf(capture)
    # When the script sends it SIGINT
    os.kill(recording, signal.SIGINT)
    stderr = shell.communicate(timeout=60)[1]
    # Then the recording ends there, as perf would, with a complete capture
    assert shell.returncode == 0, stderr
    info = load(capture)
    assert info["ended_by"] == "SIGINT" and info["duration_actual_s"] < 30
    assert perf_processes_writing(capture) == []


def test_sighup_under_nohup_stays_ignored(workload, tmp_path):
    # Given offcpu started under nohup
    program = workload("idle_pool", "-s", "60", threads=17)
    capture = tmp_path / "cap"
    recording = subprocess.Popen(["nohup", str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "4", "-o",
                                  str(capture)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_perf(capture, settle_s=0.2)
    # When it gets SIGHUP while recording
    recording.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    assert perf_processes_writing(capture), "the recording ended at the SIGHUP"
    # Then the recording runs its whole duration
    stderr = recording.communicate(timeout=60)[1]
    assert recording.returncode == 0, stderr
    assert load(capture)["ended_by"] == "duration"


def test_a_capture_without_the_kernels_symbols_says_so(tmp_path):
    # Given kernel.kptr_restrict=2, which hides kernel addresses from root too
    restrict = Path("/proc/sys/kernel/kptr_restrict")
    before = restrict.read_text()
    restrict.write_text("2")
    try:
        result = run_offcpu(*RECORD, "-d", "1", "-o", str(tmp_path / "cap"), "--", "sleep", "0.2")
    finally:
        restrict.write_text(before)
    # Then the capture is made without them, and record says what that means
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "cap" / "kallsyms").exists()
    assert "the kernel's symbols could not be saved" in result.stdout + result.stderr


def test_the_help_speaks_of_both_backends():
    # Given the help of offcpu, of record and of doctor
    said = {args: run_offcpu(*args, "--help") for args in [(), ("record",), ("doctor",)]}
    assert all(result.returncode == 0 for result in said.values()), said
    # Then none says that offcpu records with perf alone, and record says what each backend leaves
    assert all("BPF" in result.stdout for result in said.values()), said
    record = " ".join(said[("record",)].stdout.split())
    assert "perf.data and capture.json" not in record
    assert "bpf-records.bin" in record and "perf.data" in record
