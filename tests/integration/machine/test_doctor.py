"""offcpu doctor on this machine, and python -m offcpu."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, assert_one_line_error, run_offcpu, run_offcpu_without


def checks_by_name(output: str) -> dict[str, dict]:
    return {check["name"]: check for check in json.loads(output)["checks"]}


def test_doctor_says_recording_can_work_here():
    result = run_offcpu("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "offcpu can record here." in result.stdout
    report = json.loads(run_offcpu("doctor", "--json").stdout)
    assert report["can_record"] is True and report["limits"] is None
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["perf"]["status"] == "ok" and "version 6." in checks["perf"]["detail"]
    assert checks["sched:sched_switch"]["status"] == "ok"
    # the schedstats state is read from the kernel, not assumed
    state = "absent" if not os.path.exists("/proc/sys/kernel/sched_schedstats") else None
    if state == "absent":
        assert "CONFIG_SCHEDSTATS" in checks["schedstats"]["detail"]
        assert checks["sched:sched_stat_sleep"]["detail"] == "absent"
    assert checks["frame pointers: system libc"]["detail"].startswith("/")
    assert "flame graph renderer" in checks
    unwinder = checks["stacks of threads that never run"]  # scripts/setup installs elfutils
    assert unwinder["status"] == "ok" and unwinder["detail"].startswith("/usr/bin/eu-stack"), unwinder
    # and BPF records here, and what one recorded switch and its wakeup cost with each backend,
    # measured by short recordings of a ping-pong
    assert checks["BPF recording"]["status"] == "ok", checks["BPF recording"]
    assert checks["BPF recording"]["detail"].startswith("offcpu record uses it by default: ")
    cost = re.fullmatch(r"one switch and its wakeup cost perf ([\d.]+) µs, BPF ([\d.]+) µs here: a program switching "
                        r"50,000 times a second would lose about (\d+)% of a CPU to perf's recording, (\d+)% to "
                        r"BPF's", checks["cost of recording"]["detail"])
    assert cost is not None, checks["cost of recording"]
    perf_us, bpf_us, perf_share, bpf_share = (float(value) for value in cost.groups())
    assert 0 < perf_us < 1000 and 0 <= bpf_us < 1000
    # 50,000 switches a second at 1 µs each are 5% of a CPU
    assert abs(perf_us * 5 - perf_share) <= 1 and abs(bpf_us * 5 - bpf_share) <= 1


def test_doctor_without_bpf_says_why_and_that_perf_records(tmp_path):
    # Given root whose container dropped CAP_BPF and CAP_SYS_ADMIN but kept CAP_PERFMON: perf may
    # record, BPF programs may not load
    result = subprocess.run(["capsh", "--drop=cap_bpf,cap_sys_admin", "--", "-c", f"{OFFCPU} doctor --json"],
                            capture_output=True, text=True, timeout=60)
    # Then doctor can record, says why BPF cannot and that perf does, and measures perf alone
    assert result.returncode == 0, result.stderr
    checks = checks_by_name(result.stdout)
    bpf = checks["BPF recording"]
    assert bpf["status"] == "warn" and bpf["detail"] == ("cannot record here: loading BPF programs needs root, or "
                                                         "CAP_BPF and CAP_PERFMON; perf records here instead "
                                                         "(offcpu record picks it)"), bpf
    cost = re.fullmatch(r"one switch and its wakeup cost perf ([\d.]+) µs here \(BPF could not record: loading BPF "
                        r"programs needs root, or CAP_BPF and CAP_PERFMON\): a program switching 50,000 times a "
                        r"second would lose about (\d+)% of a CPU to perf's recording",
                        checks["cost of recording"]["detail"])
    assert cost is not None, checks["cost of recording"]
    perf_us, perf_share = (float(value) for value in cost.groups())
    assert 0 < perf_us < 1000 and abs(perf_us * 5 - perf_share) <= 1


def test_doctor_says_when_flamegraph_dir_holds_no_renderer(tmp_path):
    result = run_offcpu("doctor", "--json", env={**os.environ, "FLAMEGRAPH_DIR": str(tmp_path)})
    check = next(check for check in json.loads(result.stdout)["checks"] if check["name"] == "flame graph renderer")
    assert check["status"] == "warn" and f"{tmp_path} ($FLAMEGRAPH_DIR) is not flamegraph.pl" in check["detail"]


def test_doctor_pid_shows_limits_and_frame_pointers(workload):
    program = workload("idle_pool", "-t", "16", "-s", "30", threads=17)
    report = json.loads(run_offcpu("doctor", "--pid", str(program.pid), "--json").stdout)
    assert report["limits"]["threads"] == 17
    limits = {limit["name"]: limit for limit in report["limits"]["limits"]}
    with open(f"/proc/{program.pid}/maps") as maps:
        assert limits["vm.max_map_count"]["used"] == sum(1 for _ in maps)
    assert set(limits) == {"RLIMIT_NPROC", "kernel.threads-max", "kernel.pid_max", "vm.max_map_count"}
    checks = {check["name"]: check for check in report["checks"]}
    # examples/ are built with -fno-omit-frame-pointer
    assert checks["frame pointers: target binary"]["detail"].startswith(str(program.process.args[0]))
    assert "kept" in checks["frame pointers: target binary"]["detail"]
    table = run_offcpu("doctor", "--pid", str(program.pid))
    assert f"Limits of pid {program.pid}" in table.stdout and "vm.max_map_count" in table.stdout


def test_doctor_warns_near_a_limit(workload):
    # Given a process whose RLIMIT_NPROC is lowered to just above what its user runs
    program = workload("idle_pool", "-t", "16", "-s", "30", threads=17)
    before = json.loads(run_offcpu("doctor", "--pid", str(program.pid), "--json").stdout)
    used = next(limit["used"] for limit in before["limits"]["limits"] if limit["name"] == "RLIMIT_NPROC")
    lowered = int(used / 0.9)
    subprocess.run(["prlimit", f"--pid={program.pid}", f"--nproc={lowered}:{lowered}"], check=True)
    # When doctor looks at it, Then RLIMIT_NPROC is flagged as near (from 80%)
    report = json.loads(run_offcpu("doctor", "--pid", str(program.pid), "--json").stdout)
    nproc = next(limit for limit in report["limits"]["limits"] if limit["name"] == "RLIMIT_NPROC")
    assert nproc["limit"] == lowered and nproc["near"] is True
    wide = {**os.environ, "COLUMNS": "200"}
    assert "near the limit" in run_offcpu("doctor", "--pid", str(program.pid), env=wide).stdout


def test_doctor_without_perf_cannot_record():
    result = run_offcpu_without(("perf",), "doctor", "--json")
    assert result.returncode == 1
    assert checks_by_name(result.stdout)["perf"]["status"] == "fail"


def without_perfmon(*args: str) -> subprocess.CompletedProcess[str]:
    """offcpu as root with CAP_PERFMON and CAP_SYS_ADMIN dropped, as in a container that drops them."""
    return subprocess.run(["capsh", "--drop=cap_perfmon,cap_sys_admin", "--", "-c",
                           " ".join([str(OFFCPU), *args])], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip() == "-1",
                    reason="perf_event_paranoid=-1 lets anyone record: nothing to refuse")
def test_root_without_the_capabilities_is_told_so(tmp_path):
    # Given root whose container dropped CAP_PERFMON and CAP_SYS_ADMIN (the kernel then refuses
    # tracepoints as it refuses a user: it asks for the capabilities, not for uid 0)
    result = without_perfmon("doctor", "--json")
    # Then doctor says recording cannot work, and why, and record says so before perf starts
    permissions = checks_by_name(result.stdout)["permissions"]
    assert result.returncode == 1 and permissions["status"] == "fail"
    assert "without CAP_PERFMON or CAP_SYS_ADMIN" in permissions["detail"], permissions
    recorded = without_perfmon("record", "-d", "1", "-o", str(tmp_path / "cap"), "--", "sleep", "0.1")
    assert_one_line_error(recorded, "without CAP_PERFMON", "recording-inside-a-container")


def test_a_pid_namespace_of_its_own_is_refused(tmp_path):
    # Given offcpu in a PID namespace of its own, as in a container (the tracepoints would name
    # threads by the host's pids and perf by the namespace's: every thread twice)
    result = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", str(OFFCPU), "doctor", "--json"],
                            capture_output=True, text=True, timeout=60)
    # Then doctor says recording cannot work there, and why
    namespace = checks_by_name(result.stdout)["PID namespace"]
    assert result.returncode == 1 and namespace["status"] == "fail" and "counted twice" in namespace["detail"]
    assert checks_by_name(run_offcpu("doctor", "--json").stdout)["PID namespace"]["status"] == "ok"
    # and record refuses before perf starts
    recorded = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", str(OFFCPU), "record", "-d", "1",
                               "-o", str(tmp_path / "cap"), "--", "sleep", "0.1"], capture_output=True, text=True,
                              timeout=60)
    assert_one_line_error(recorded, "PID namespace of its own", "recording-inside-a-container")
    assert not (tmp_path / "cap" / "perf.data").exists()


PF_KTHREAD = 0x00200000


def a_kernel_thread() -> int:
    """A kernel thread's pid (kthreadd is 2 on most machines; found by its flags)."""
    for entry in sorted(Path("/proc").glob("[0-9]*/stat"), key=lambda path: int(path.parent.name)):
        try:
            stat = entry.read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[6]) & PF_KTHREAD:
            return int(entry.parent.name)
    pytest.fail("no kernel thread found in /proc")


def test_doctor_pid_of_a_kernel_thread():
    # Given a kernel thread, which has no binary (/proc/PID/exe cannot be read)
    pid = a_kernel_thread()
    result = run_offcpu("doctor", "--pid", str(pid), "--json")
    # Then doctor says so instead of failing
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    target = checks_by_name(result.stdout)["frame pointers: target binary"]
    assert target["status"] == "info" and "kernel thread" in target["detail"]
    assert report["limits"]["pid"] == pid
    table = run_offcpu("doctor", "--pid", str(pid), env={**os.environ, "COLUMNS": "200"})
    assert table.returncode == 0 and "kernel thread" in table.stdout and "Traceback" not in table.stderr


def test_doctor_bad_pid():
    assert_one_line_error(run_offcpu("doctor", "--pid", "999999999"), "no such process")


def test_python_m_offcpu_runs_the_same_cli():
    result = subprocess.run([sys.executable, "-m", "offcpu", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "record" in result.stdout and "doctor" in result.stdout
