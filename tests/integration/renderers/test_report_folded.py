"""offcpu report folded on real recordings of the examples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from offcpu.model import ASLEEP_ALL_WINDOW, BEFORE_WINDOW, NEW_THREAD, STACK_LOST
from offcpu.renderers.flamegraph_tool import find_renderer
from offcpu.stacks import SCHEDULER
from tests.conftest import assert_one_line_error, run_offcpu


def folded(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    assert result.returncode == 0, result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack and count.isdigit(), line
        lines[stack] = int(count)
    return lines


def model_json(capture: Path) -> dict:
    return json.loads((capture / "model.json").read_text())


def test_folded_stacks_sum_to_the_threads_offcpu_time(mmap_capture):
    lines = folded(run_offcpu("report", "folded", str(mmap_capture)))
    model = model_json(mmap_capture)
    threads = {thread["tid"]: thread for thread in model["threads"]}
    assert sum(lines.values()) == sum(thread["offcpu_us"] for thread in threads.values())
    # the mmap_lock waits of the MemSQL story lead
    top = max(lines, key=lines.get)
    assert "rwsem_down_write_slowpath" in top or "rwsem_down_read_slowpath" in top
    assert any("lock_mm_and_find_vma" in stack for stack in lines)
    # stacks are root first: the comm, then user frames, then kernel down to the wait site, never the
    # scheduler's frames after it (but the labels of waits with no stack of their own: before the
    # window, a new thread, a lost sample)
    labels = (BEFORE_WINDOW, NEW_THREAD, STACK_LOST, ASLEEP_ALL_WINDOW)
    recorded = [stack for stack in lines if not any(label in stack for label in labels)]
    astray = [stack for stack in recorded
              if not stack.startswith("mmap_contention;") or stack.split(";")[-1] in SCHEDULER]
    assert recorded and not astray, astray


def test_model_invariants_on_a_real_recording(mmap_capture):
    run_offcpu("report", "folded", str(mmap_capture))
    model = model_json(mmap_capture)
    wall_us = (model["window_end_ns"] - model["window_start_ns"]) / 1000
    workers = [t for t in model["threads"] if t["tid"] != t["pid"]]
    assert len(workers) == 16
    for thread in workers:  # alive the whole window
        assert abs(thread["oncpu_us"] + thread["offcpu_us"] - wall_us) <= 0.02 * wall_us, thread
        assert thread["blocked_us"] + thread["runqueue_us"] == thread["offcpu_us"]
    for _, _, _, _, offcpu, blocked, runqueue, count, _, _ in model["rows"]:  # then its sub-windows, its variance
        assert blocked + runqueue == offcpu and count > 0


def test_flamegraph_pl_accepts_the_output_as_it_is(mmap_capture, tmp_path):
    renderer = find_renderer()
    assert renderer is not None, "scripts/setup installs Debian's flamegraph.pl"
    text = run_offcpu("report", "folded", str(mmap_capture)).stdout
    svg = subprocess.run([*renderer.command, "--colors", "io", "--countname", "us"], input=text,
                         capture_output=True, text=True, check=True).stdout
    assert svg.lstrip().startswith("<?xml") and "rwsem_down_write_slowpath" in svg


def test_filters(mmap_capture):
    model = model_json(mmap_capture)
    everything = folded(run_offcpu("report", "folded", str(mmap_capture)))
    # --state D keeps exactly the D rows
    d_rows = sum(row[4] for row in model["rows"] if row[2] == "D")
    assert sum(folded(run_offcpu("report", "folded", str(mmap_capture), "--state", "D")).values()) == d_rows
    # --by-thread roots every stack at comm-tid
    by_thread = folded(run_offcpu("report", "folded", str(mmap_capture), "--by-thread"))
    tids = {str(thread["tid"]) for thread in model["threads"]}
    assert all(stack.split(";")[0].rsplit("-", 1)[1] in tids for stack in by_thread)
    assert sum(by_thread.values()) == sum(everything.values())
    # --tid keeps one thread
    tid = model["threads"][1]["tid"]
    one = folded(run_offcpu("report", "folded", str(mmap_capture), "--tid", str(tid)))
    assert sum(one.values()) == next(t["offcpu_us"] for t in model["threads"] if t["tid"] == tid)
    # --kernel-only / --user-only split the frames
    kernel = folded(run_offcpu("report", "folded", str(mmap_capture), "--kernel-only"))
    assert not any("start_thread" in stack for stack in kernel) and any("__vm_munmap" in s for s in kernel)
    user = folded(run_offcpu("report", "folded", str(mmap_capture), "--user-only"))
    assert not any("__schedule" in stack for stack in user)
    # --min-us drops the small ones
    small = min(everything.values())
    assert all(v >= small + 1 for v in folded(run_offcpu("report", "folded", str(mmap_capture),
                                                          "--min-us", str(small + 1))).values())
    # --waker puts '--' and the waker's stack above the blocked one
    waker = folded(run_offcpu("report", "folded", str(mmap_capture), "--waker", "--state", "D"))
    assert all(";--;" in stack for stack in waker)
    assert any(";--;try_to_wake_up;" in stack and "rwsem_wake" in stack for stack in waker)


def test_time_slice_of_the_recording(mmap_capture):
    part = folded(run_offcpu("report", "folded", str(mmap_capture), "--time", "0.5,1.0"))
    # 16 workers and the main thread can wait at most 17 x 0.5 s in half a second
    assert 0 < sum(part.values()) <= 17 * 500_000
    for outside in ("100,200", "-5,-1", "-5,0"):
        assert_one_line_error(run_offcpu("report", "folded", str(mmap_capture), "--time", outside), "outside")
    # a part that overlaps the recording from before its start is the part of it that it covers
    assert folded(run_offcpu("report", "folded", str(mmap_capture), "--time", "-5,1")) == \
        folded(run_offcpu("report", "folded", str(mmap_capture), "--time", "0,1"))
    assert_one_line_error(run_offcpu("report", "folded", str(mmap_capture), "--time", "soon"), "START,END")
    # less than a millisecond is too little to read (perf script cannot cut it into a slice per CPU)
    for tiny in ("0.5,0.500000001", "0.5,0.5009", "0,0.0001"):
        assert_one_line_error(run_offcpu("report", "folded", str(mmap_capture), "--time", tiny),
                              f"--time {tiny}", "at least 1 ms")
    # also when the end is cut to the end of the recording
    info = json.loads((mmap_capture / "capture.json").read_text())
    seconds = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    assert_one_line_error(run_offcpu("report", "folded", str(mmap_capture), "--time", f"{seconds - 0.0002:.6f},999"),
                          "--time", "at least 1 ms")
    one_ms = run_offcpu("report", "folded", str(mmap_capture), "--time", "0.5,0.501")
    assert "Traceback" not in one_ms.stderr and "at least" not in one_ms.stderr and "failed" not in one_ms.stderr
    assert one_ms.returncode == 0 or "this part of the recording" in one_ms.stderr, one_ms.stderr


def test_parts_of_a_recording_add_up_to_it(mmap_capture):
    # Given the recording cut in two at 0.7 s
    info = json.loads((mmap_capture / "capture.json").read_text())
    seconds = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    whole = json.loads(run_offcpu("report", "json", str(mmap_capture)).stdout)
    parts = [json.loads(run_offcpu("report", "json", str(mmap_capture), "--time", span).stdout)
             for span in ("0,0.7", f"0.7,{seconds}")]
    # Then each thread there all along is on or off CPU for the whole of each part, waits
    # under way when a part begins included (the main thread sleeps through all of it)
    for part in parts:
        wall_us = part["window"]["seconds"] * 1e6
        for thread in part["threads"]:
            assert abs(thread["oncpu_us"] + thread["offcpu_us"] - wall_us) <= 0.02 * wall_us, thread
        main = next(thread for thread in part["threads"] if thread["tid"] == info["target"]["pid"])
        assert main["offcpu_us"] >= 0.98 * wall_us
    # and the parts add up to the whole, to the microsecond each cut interval is rounded to
    for key in ("offcpu_us", "blocked_us", "runqueue_us"):
        assert abs(sum(part["totals"][key] for part in parts) - whole["totals"][key]) <= 2 * 17, key


def test_the_model_is_reused_and_rebuilt_when_perf_data_changes(mmap_capture, example_capture, tmp_path):
    expected = folded(run_offcpu("report", "folded", str(mmap_capture)))
    # Given a copy of a capture with its saved model (its files' modification times new)
    copy = tmp_path / "copy"
    shutil.copytree(mmap_capture, copy, copy_function=shutil.copy)
    saved = (copy / "model.json").stat().st_mtime_ns
    # Then a report reads the saved model, which is not written again
    assert folded(run_offcpu("report", "folded", str(copy))) == expected
    assert (copy / "model.json").stat().st_mtime_ns == saved
    # When perf.data changes (another recording, with its capture.json), the saved model is
    # stale: the report is the other recording's, and its model is saved instead
    other = example_capture("mmap_contention_fixed")
    for name in ("perf.data", "capture.json"):
        shutil.copy(other / name, copy / name)
    assert folded(run_offcpu("report", "folded", str(copy))) == folded(run_offcpu("report", "folded", str(other)))
    assert (copy / "model.json").stat().st_mtime_ns != saved


def test_cpp_names_are_kept_whole(cpp_capture):
    lines = folded(run_offcpu("report", "folded", str(cpp_capture)))
    frames = {frame for stack in lines for frame in stack.split(";")}
    assert "shop::Basket<std::pair<int, long> >::wait_for_delivery" in frames
    assert "shop::Basket<std::pair<int, long> >::fill" in frames


def test_system_wide_capture_has_no_idle_task(tmp_path, workload):
    program = workload("futex_contention", "-t", "4", "-s", "30")
    capture = tmp_path / "cap"
    assert run_offcpu("record", "-a", "-d", "1", "-o", str(capture)).returncode == 0
    lines = folded(run_offcpu("report", "folded", str(capture), "--pid", str(program.pid)))
    assert lines and all(stack.startswith("futex_contentio;") for stack in lines)
    model = model_json(capture)
    assert 0 not in {thread["tid"] for thread in model["threads"]}
    assert len({thread["pid"] for thread in model["threads"]}) > 2  # other processes too
    wall_us = (model["window_end_ns"] - model["window_start_ns"]) / 1000
    workers = [t for t in model["threads"] if t["pid"] == program.pid and t["tid"] != program.pid]
    assert len(workers) == 4
    for thread in workers:
        assert abs(thread["oncpu_us"] + thread["offcpu_us"] - wall_us) <= 0.02 * wall_us, thread


class TestBadInput:
    @pytest.fixture
    def copy(self, mmap_capture, tmp_path) -> Path:
        target = tmp_path / "copy"
        shutil.copytree(mmap_capture, target)
        (target / "model.json").unlink(missing_ok=True)
        return target

    def test_truncated_perf_data(self, copy):
        perf_data = copy / "perf.data"
        data = perf_data.read_bytes()
        perf_data.write_bytes(data[: len(data) // 3])
        result = run_offcpu("report", "folded", str(copy))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1

    def test_empty_perf_data(self, copy):
        (copy / "perf.data").write_bytes(b"")
        assert_one_line_error(run_offcpu("report", "folded", str(copy)), "empty", "offcpu record")

    def test_not_perf_data(self, copy):
        (copy / "perf.data").write_bytes(b"not a perf file\n" * 100)
        assert_one_line_error(run_offcpu("report", "folded", str(copy)), "not a readable perf.data")
        assert_one_line_error(run_offcpu("report", "folded", str(copy), "--reader", "perf-script"),
                              "truncated or not a perf.data")

    def test_recorded_without_sched_switch(self, copy):
        subprocess.run(["perf", "record", "-e", "sched:sched_waking", "-o", str(copy / "perf.data"), "--",
                        "sleep", "0.1"], capture_output=True, check=True)
        assert_one_line_error(run_offcpu("report", "folded", str(copy)), "without sched:sched_switch",
                              "offcpu record")

    def test_from_another_machine(self, mmap_capture, copy):
        # Given a capture recorded on another kernel
        expected = folded(run_offcpu("report", "folded", str(mmap_capture)))
        info = json.loads((copy / "capture.json").read_text())
        info["kernel_release"] = "5.10.0-other"
        (copy / "capture.json").write_text(json.dumps(info))
        # Then read directly it is reported as it was, its kernel frames named by the kallsyms it carries
        assert folded(run_offcpu("report", "folded", str(copy))) == expected
        # while perf script, which names kernel frames by this machine's kernel, would name them wrongly
        assert_one_line_error(run_offcpu("report", "folded", str(copy), "--reader", "perf-script"), "5.10.0-other",
                              "machine that recorded")

    def test_no_capture_json(self, copy):
        (copy / "capture.json").unlink()
        assert_one_line_error(run_offcpu("report", "folded", str(copy)), "no capture.json")

    def test_damaged_capture_json(self, copy):
        (copy / "capture.json").write_text("{")
        assert_one_line_error(run_offcpu("report", "folded", str(copy)), "record it again")

    def test_a_model_json_that_is_not_a_model_is_built_again(self, mmap_capture, copy):
        expected = folded(run_offcpu("report", "folded", str(mmap_capture)))
        saved = model_json(mmap_capture)  # the copy's perf.data is the same
        for damaged in ("[]", "null", '"model"', "{", '{"schema": "offcpu-model/1"}',
                        json.dumps({**saved, "capture": []}), json.dumps({**saved, "rows": [[1, 2]]})):
            (copy / "model.json").write_text(damaged)
            result = run_offcpu("report", "folded", str(copy))
            assert folded(result) == expected and result.stderr == "", (damaged[:40], result.stderr)
            assert model_json(copy) == saved

    def test_a_model_json_whose_rows_name_nothing_is_built_again(self, mmap_capture, copy):
        expected = folded(run_offcpu("report", "folded", str(mmap_capture)))
        saved = model_json(mmap_capture)

        def row_of_thread(tid: int) -> dict:
            return {**saved, "rows": [[tid, *saved["rows"][0][1:]], *saved["rows"][1:]]}

        def row_of_stack(stack: int) -> dict:
            return {**saved, "rows": [[saved["rows"][0][0], stack, *saved["rows"][0][2:]], *saved["rows"][1:]]}

        missing_tid = max(thread["tid"] for thread in saved["threads"]) + 1
        assert any(row[3] is not None for row in saved["rows"])  # rows with a waker, to lose their wakers
        for damaged in (row_of_thread(missing_tid), row_of_stack(len(saved["stacks"])), row_of_stack(-1),
                        {**saved, "wakers": []}):
            (copy / "model.json").write_text(json.dumps(damaged))
            result = run_offcpu("report", "folded", str(copy))
            assert folded(result) == expected, result.stderr
            assert model_json(copy) == saved

    def test_a_read_only_capture_is_reported_without_saving_its_model(self, mmap_capture, copy, tmp_path):
        expected = folded(run_offcpu("report", "folded", str(mmap_capture)))
        read_only = tmp_path / "read-only"
        read_only.mkdir()
        # root writes through file modes: only a read-only mount stops it
        mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(copy), str(read_only)], capture_output=True,
                                 text=True)
        if mounted.returncode != 0:
            message = f"cannot mount a read-only copy of the capture: {mounted.stderr.strip()}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        try:
            with pytest.raises(OSError):
                (read_only / "probe").write_text("")
            recorded = sorted(path.name for path in copy.iterdir() if path.name != "model.json")
            for _ in range(2):  # nothing saved: built each time
                result = run_offcpu("report", "folded", str(read_only))
                assert folded(result) == expected and result.stderr == ""
                assert sorted(path.name for path in read_only.iterdir()) == recorded
        finally:
            subprocess.run(["umount", str(read_only)], check=True)

    def test_not_a_directory(self, tmp_path):
        assert_one_line_error(run_offcpu("report", "folded", str(tmp_path / "nothing")), "not a capture directory")

    def test_filters_that_match_nothing(self, mmap_capture):
        assert_one_line_error(run_offcpu("report", "folded", str(mmap_capture), "--comm", "nginx"),
                              "no off-CPU time matches")
