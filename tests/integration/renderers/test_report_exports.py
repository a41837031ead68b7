"""The exports (speedscope, pprof, perfetto) of a real recording of mmap_contention, read
by the tools they are for where one runs here (go tool pprof), and checked against the
JSON report's totals."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from offcpu.stacks import SCHEDULER
from tests.conftest import example, run_offcpu
from tests.fixtures import HERE

SAMPLE_TYPES = ("off_cpu", "blocked", "runqueue")


def report_json(capture: Path, *options: str) -> dict:
    result = run_offcpu("report", "json", str(capture), *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def exported(capture: Path, kind: str, path: Path, *options: str) -> Path:
    result = run_offcpu("report", kind, str(capture), "-o", str(path), *options)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith(f"Wrote {path}")
    return path


def pprof_sums(go: str, profile: Path, *options: str) -> list[int]:
    """Each sample type's sum, in nanoseconds, as go tool pprof reads the profile's samples."""
    done = subprocess.run([go, "tool", "pprof", "-raw", *options, str(profile)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    header = re.search(r"^Samples:\n(.*)$", done.stdout, re.MULTILINE)
    assert header is not None and header.group(1).split() == ["off_cpu/nanoseconds[dflt]", "blocked/nanoseconds",
                                                               "runqueue/nanoseconds"]
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+): [\d ]+$", done.stdout, re.MULTILINE)
    assert rows
    return [sum(int(row[index]) for row in rows) for index in range(3)]


def test_go_tool_pprof_reads_the_profile_and_its_totals_are_the_reports(mmap_capture, tmp_path, go):
    # Given a real capture and its pprof export
    profile = exported(mmap_capture, "pprof", tmp_path / "offcpu.pb.gz")
    totals = report_json(mmap_capture)["totals"]
    # then go tool pprof reads it, and each sample type sums to the report's total
    assert pprof_sums(go, profile) == [totals["offcpu_us"] * 1000, totals["blocked_us"] * 1000,
                                       totals["runqueue_us"] * 1000]
    top = subprocess.run([go, "tool", "pprof", "-top", "-unit=ms", str(profile)], capture_output=True, text=True,
                         timeout=120)
    assert top.returncode == 0, top.stderr
    assert f"Total samples = {totals['offcpu_us'] / 1000:.2f}ms" in top.stdout
    assert "rwsem_down_write_slowpath" in top.stdout and "__schedule" not in top.stdout
    # and its labels choose as the report's filters do
    states = {state["state"]: state for state in report_json(mmap_capture)["states"]}
    assert pprof_sums(go, profile, "-tagfocus", "state=D")[0] == states["D"]["offcpu_us"] * 1000


def test_speedscope_of_a_recording_adds_up_to_the_report(mmap_capture, tmp_path):
    path = exported(mmap_capture, "speedscope", tmp_path / "offcpu.speedscope.json", "--by", "process")
    document = json.loads(path.read_text())
    totals = report_json(mmap_capture)["totals"]
    *offcpu, blocked, runqueue = document["profiles"]
    assert len(offcpu) == 1 and offcpu[0]["name"].startswith("off CPU: mmap_contention (pid ")
    assert [offcpu[0]["endValue"], blocked["endValue"], runqueue["endValue"]] == [
        totals["offcpu_us"], totals["blocked_us"], totals["runqueue_us"]]
    assert sum(offcpu[0]["weights"]) == totals["offcpu_us"]
    frames = [frame["name"] for frame in document["shared"]["frames"]]
    assert "rwsem_down_write_slowpath" in frames


def test_perfetto_trace_of_a_recording_has_the_threads_tracks_and_the_wakers_arrows(mmap_capture, tmp_path):
    # Given a recording of 17 threads, exported with room for 4 threads
    path = tmp_path / "offcpu.trace.json"
    result = run_offcpu("report", "perfetto", str(mmap_capture), "-o", str(path), "--threads", "4")
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    # then the 4 threads with most off-CPU time have tracks with their waits, named by the lock
    threads = sorted(report_json(mmap_capture)["threads"], key=lambda thread: -thread["offcpu_us"])
    waiting = {event["tid"] for event in events if event["ph"] == "X" and event["cat"] == "waiting for a CPU"}
    assert waiting == {thread["tid"] for thread in threads[:4]}
    assert any(event["ph"] == "X" and event["name"].startswith("mmap_lock") for event in events)
    # with arrows from their wakers, and what is left out said on stderr and in the trace
    starts = {event["id"] for event in events if event["ph"] == "s"}
    assert starts and starts == {event["id"] for event in events if event["ph"] == "f"}
    left_out = document["otherData"]["left_out"]
    assert "(--threads)" in left_out and f"the trace leaves out {left_out}" in result.stderr


def test_go_tool_pprof_lists_a_python_programs_frames_by_function_file_and_line(tmp_path, go):
    # Given a BPF capture of python_lock with its Python frames (tests/fixtures/python_lock_bpf) exported to pprof
    shutil.copytree(HERE / "python_lock_bpf", tmp_path / "cap")
    profile = exported(tmp_path / "cap", "pprof", tmp_path / "offcpu.pb.gz")
    # then pprof reads each as its function at its file's line, the two lines of `work` apart, and as one function
    lines = subprocess.run([go, "tool", "pprof", "-top", "-lines", "-unit=ms", str(profile)], capture_output=True,
                           text=True, timeout=120)
    assert lines.returncode == 0, lines.stderr
    assert re.search(r" main\.<locals>\.work python_lock:57$", lines.stdout, re.MULTILINE), lines.stdout
    assert re.search(r" main\.<locals>\.work python_lock:58$", lines.stdout, re.MULTILINE), lines.stdout
    functions = subprocess.run([go, "tool", "pprof", "-top", "-unit=ms", str(profile)], capture_output=True,
                               text=True, timeout=120)
    assert len(re.findall(r" main\.<locals>\.work$", functions.stdout, re.MULTILINE)) == 1, functions.stdout


def test_the_leaf_is_the_wait_site_in_pprof_speedscope_and_folded(tmp_path, go):
    # Given a recording with the default backend of futex_contention, 4 threads on one mutex
    capture = tmp_path / "cap"
    recorded = run_offcpu("record", "-o", str(capture), "-d", "5", "--", str(example("futex_contention")),
                          "-t", "4", "-s", "1")
    assert recorded.returncode == 0, recorded.stderr
    # When go tool pprof lists its pprof export's functions by their own (flat) time
    profile = exported(capture, "pprof", tmp_path / "offcpu.pb.gz")
    top = subprocess.run([go, "tool", "pprof", "-top", "-unit=ms", str(profile)], capture_output=True, text=True,
                         timeout=120)
    assert top.returncode == 0, top.stderr
    flat = re.findall(r"^\s*([\d.]+)ms\s+([\d.]+)%\s+[\d.]+%\s+\S+\s+[\d.]+%\s+(.+)$", top.stdout, re.MULTILINE)
    # Then none is the scheduler's, and the most is the wait on the mutex, in the kernel's futex wait
    assert flat and not SCHEDULER & {name for _, _, name in flat}, top.stdout
    assert "futex" in flat[0][2], top.stdout
    # and speedscope's stacks and the folded lines end at the same wait sites
    document = json.loads(exported(capture, "speedscope", tmp_path / "offcpu.speedscope.json").read_text())
    names = [frame["name"] for frame in document["shared"]["frames"]]
    leaves = {names[stack[-1]] for profile in document["profiles"] for stack in profile["samples"]}
    folded = run_offcpu("report", "folded", str(capture))
    assert folded.returncode == 0, folded.stderr
    folded_leaves = {line.rpartition(" ")[0].split(";")[-1] for line in folded.stdout.splitlines()}
    assert flat[0][2] in leaves and flat[0][2] in folded_leaves
    assert not SCHEDULER & (leaves | folded_leaves)
