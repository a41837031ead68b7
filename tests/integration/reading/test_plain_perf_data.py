"""offcpu report and check on perf.data files that perf recorded alone, in the ways users
record them: the seed articles' 'perf record -g -e sched:sched_switch -e sched:sched_waking
-p PID', without wakeups, with sched_wakeup and --switch-events, 'perf sched record', and
with no scheduler event at all. Each report says once what its file lacks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from offcpu.machine.system import tracefs_mount, tracepoint_exists
from tests.conftest import assert_one_line_error, example, run_offcpu
from tests.fixtures import HERE

NO_WAKEUPS = "holds no wakeups"
NO_SWITCH_RECORDS = "holds no switch records"
NO_KERNEL_SYMBOLS = "no copy of the kernel's symbols"
# perf 6.1 here sometimes crashes in its build-id pass at the end of a recording of a program that
# maps and unmaps as fast as mmap_contention ("assertion failed at util/build-id.c:1010", then
# "stack smashing detected"); --buildid-mmap, which offcpu record passes too, skips that pass.
BUILD_IDS = "--buildid-mmap"


def perf_record(perf: str, path: Path, *options: str, seconds: str = "1") -> Path:
    """perf itself records mmap_contention (16 threads on the mmap_lock) for about a second."""
    done = subprocess.run([perf, *options, BUILD_IDS, "-o", str(path), "--", str(example("mmap_contention")),
                           "-s", seconds],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return path


def report(path: Path) -> dict:
    result = run_offcpu("report", "json", str(path))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def lacks(document: dict) -> list[str]:
    """The caveats that say what the file lacks (each said once)."""
    said = [caveat for caveat in document["caveats"]
            if any(words in caveat for words in (NO_WAKEUPS, NO_SWITCH_RECORDS, NO_KERNEL_SYMBOLS))]
    assert len(said) == len(set(said))
    return said


def finding_ids(document: dict) -> set[str]:
    return {finding["id"] for finding in document["findings"]}


def test_the_seed_articles_recording_of_a_process(recording_perf, workload, tmp_path):
    # Given perf record -g -e sched:sched_switch -e sched:sched_waking -p PID, as the articles record
    program = workload("mmap_contention", "-s", "30", threads=17)
    path = tmp_path / "perf.data"
    done = subprocess.run([recording_perf, "record", "-g", "-e", "sched:sched_switch", "-e", "sched:sched_waking",
                           "-p", str(program.pid), BUILD_IDS, "-o", str(path), "--", "sleep", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # when it is reported
    document = report(path)
    # then it names the process, splits blocked time from run-queue delay, knows the wakers
    assert document["capture"]["target"]["kind"] == "pid" and document["capture"]["target"]["pid"] == program.pid
    assert document["capture"]["target"]["comm"] == "mmap_contention"
    assert document["totals"]["blocked_us"] > 0 and document["totals"]["runqueue_us"] > 0
    assert any(pair["waker_kind"] == "thread" for pair in document["wakers"])
    assert "mmap_lock" in finding_ids(document)
    # and says once what it lacks: switch records and the kernel's symbols, not wakeups
    said = lacks(document)
    assert len(said) == 2 and NO_SWITCH_RECORDS in said[0] and "left out" in said[0]
    assert NO_KERNEL_SYMBOLS in said[1] and "this machine's" in said[1]
    text = run_offcpu("report", "text", str(path))
    assert text.returncode == 0 and text.stdout.count(NO_SWITCH_RECORDS) == 1
    assert text.stdout.startswith(f"Off-CPU time of mmap_contention (pid {program.pid})")
    assert not (tmp_path / "model.json").exists()  # nothing is written beside it


def test_without_wakeups_nothing_is_split_and_no_wait_has_a_waker(recording_perf, tmp_path):
    path = perf_record(recording_perf, tmp_path / "perf.data", "record", "-g", "-e", "sched:sched_switch")
    document = report(path)
    said = lacks(document)
    assert NO_WAKEUPS in said[0] and "no wait has a waker" in said[0]
    assert document["wakers"] == []
    # time waiting for a CPU is only that of preempted threads (state R)
    preempted = sum(state["offcpu_us"] for state in document["states"] if state["state"] == "R")
    assert document["totals"]["runqueue_us"] == preempted
    assert document["capture"]["target"]["kind"] == "command"


def test_switch_events_and_sched_wakeup(recording_perf, tmp_path):
    path = perf_record(recording_perf, tmp_path / "perf.data", "record", "-g", "-e", "sched:sched_switch",
                       "-e", "sched:sched_wakeup", "--switch-events")
    document = report(path)
    said = lacks(document)
    assert len(said) == 1 and NO_KERNEL_SYMBOLS in said[0]  # wakeups and switch records are there
    assert "mmap_lock" in finding_ids(document)
    assert any(pair["waker_kind"] == "thread" for pair in document["wakers"])
    # and check reads it too: the mmap_lock fails the default policy
    checked = run_offcpu("check", str(path))
    assert checked.returncode == 1, checked.stderr
    assert "mmap_lock" in checked.stdout and checked.stderr.count(NO_KERNEL_SYMBOLS) == 1


def test_perf_sched_record(recording_perf, tmp_path):
    # perf sched record records every CPU, with sched_waking and more scheduler events
    path = perf_record(recording_perf, tmp_path / "perf.data", "sched", "record", "-g")
    document = report(path)
    assert document["capture"]["target"]["kind"] == "all"
    said = lacks(document)
    assert NO_SWITCH_RECORDS in said[0] and "every CPU" in said[0] and "left out" not in said[0]
    assert "mmap_lock" in finding_ids(document)


def test_the_seed_articles_schedstats_command(recording_perf, tmp_path):
    # The articles' 'perf record -e sched:sched_stat_sleep -e sched:sched_switch -e
    # sched:sched_process_exit -a -g': on a kernel without schedstats perf refuses it
    has_schedstats = tracepoint_exists(tracefs_mount(), "sched:sched_stat_sleep")
    path = tmp_path / "perf.data"
    done = subprocess.run([recording_perf, "record", "-e", "sched:sched_stat_sleep", "-e", "sched:sched_switch",
                           "-e", "sched:sched_process_exit", "-a", "-g", BUILD_IDS, "-o", str(path), "--", "sleep",
                           "1"],
                          capture_output=True, text=True, timeout=120)
    if not has_schedstats:
        assert done.returncode != 0 and "sched:sched_stat_sleep" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    document = report(path)
    assert document["capture"]["schedstats"] == "on" and document["totals"]["offcpu_us"] > 0


@pytest.mark.parametrize("command", ["report", "check"])
def test_no_scheduler_events_says_what_to_record(recording_perf, tmp_path, command):
    path = perf_record(recording_perf, tmp_path / "perf.data", "record", "-g", "-e", "cpu-clock")
    arguments = ("report", "text", str(path)) if command == "report" else ("check", str(path))
    assert_one_line_error(run_offcpu(*arguments), "holds no sched:sched_switch events",
                          "perf record -g -e sched:sched_switch -e sched:sched_waking")


def test_a_captures_perf_data_read_alone(tmp_path: Path) -> None:
    # Given the perf.data of an offcpu capture, copied out of its directory: its events were
    # enabled late (perf's --control), so its first rounds hold no sample, and perf left its
    # header's sample times 0 (--buildid-mmap)
    alone = tmp_path / "copied.data"
    alone.write_bytes((HERE / "exits_all" / "perf.data").read_bytes())
    # Then it is read as a perf.data of its own: a report, and a check (which may pass or fail)
    reported = report(alone)
    assert reported["totals"]["offcpu_us"] > 0
    checked = run_offcpu("check", str(alone))
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    # and a report diff takes it as it takes a capture
    diffed = run_offcpu("report", "diff", str(alone), str(alone), "--text")
    assert diffed.returncode == 0, diffed.stderr
    # and it serves as a baseline too, compared with itself
    compared = run_offcpu("check", str(alone), "--baseline", str(alone))
    assert compared.returncode == checked.returncode, compared.stdout + compared.stderr


def test_a_perf_data_that_lost_events_is_not_checked(perf: str, tmp_path: Path) -> None:
    # Given a perf.data that perf recorded with a ring buffer too small for DWARF stacks of a
    # program that creates and ends threads all the time: it loses many of its events
    lossy = tmp_path / "lossy.data"
    done = subprocess.run([perf, "record", "-m", "8", "--call-graph", "dwarf", "-e", "sched:sched_switch",
                           "-o", str(lossy), "--", str(example("thread_churn")), "-t", "16", "-s", "0.5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "lost" in done.stderr.lower(), done.stderr
    # Then check says it could not check it, as for a capture that lost as many
    assert_one_line_error(run_offcpu("check", str(lossy)), "could not check", "lost")


def test_a_perf_data_with_no_wait_that_ended_says_why(perf: str, tmp_path: Path) -> None:
    # Given perf's recording of a command that sleeps once, without --switch-events: its one
    # wait is not seen to end (it comes back from the idle task, which is not recorded)
    path = tmp_path / "sleep.data"
    done = subprocess.run([perf, "record", "-q", "-g", "-e", "sched:sched_switch", "-e", "sched:sched_waking",
                           "-o", str(path), "--", "sleep", "0.2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # Then the report says there is no wait to show and how to record one, not that options hid them
    assert_one_line_error(run_offcpu("report", "text", str(path)), "no thread of it both left the CPU and came back",
                          "--switch-events")
