"""Every way offcpu record can be asked the impossible: exit 2, one line, no traceback."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import programs
from tests.conftest import OFFCPU, assert_one_line_error, run_offcpu, run_offcpu_without
from tests.fixtures import HERE

# perf's recording is what these tests hold (perf.data, its command line, its complaints);
# tests/integration/recording/test_bpf_recording.py holds the BPF backend's
RECORD = ("record", "--backend", "perf")


def unused_pid() -> int:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return next(pid for pid in range(pid_max - 1, 1, -1) if not Path(f"/proc/{pid}").exists())


def test_no_such_pid(tmp_path):
    pid = unused_pid()
    result = run_offcpu(*RECORD, "--pid", str(pid), "-o", str(tmp_path / "cap"))
    assert_one_line_error(result, "no such process", str(pid))
    assert not (tmp_path / "cap").exists()


def test_thread_given_as_pid(workload, tmp_path):
    program = workload("idle_pool", "-s", "30", threads=17)
    thread = max(program.threads())
    result = run_offcpu(*RECORD, "--pid", str(thread), "-o", str(tmp_path / "cap"))
    assert_one_line_error(result, f"--tid {thread}", f"--pid {program.pid}")


@pytest.mark.parametrize("args, words", [
    ((), ["no target"]),
    (("--pid", "1", "-a"), ["more than one target"]),
    (("-a", "--duration", "601"), ["--no-limit"]),
    (("-a", "--duration", "600.0001"), ["600.0001 s is more than 600 s", "--no-limit"]),
    (("-a", "--duration", "0"), ["--duration"]),
    (("-a", "--duration", "nan"), ["--duration", "nan"]),
    (("-a", "--duration", "nan", "--no-limit"), ["--duration", "nan"]),
    (("-a", "--duration", "inf"), ["--duration", "inf"]),
    (("-a", "--duration", "inf", "--no-limit"), ["--duration", "inf"]),
    (("-a", "--duration", "1e999", "--no-limit"), ["--duration", "inf"]),
    (("-a", "--max-size", "0"), ["--max-size", "B, K, M or G"]),
    (("-a", "--max-size", "0M"), ["--max-size", "too small to hold anything", "at least 1M"]),
    (("-a", "--max-size", "1K"), ["--max-size", "too small to hold anything", "at least 1M"]),
    # what perf takes: a number and one of B, K, M or G, in capitals (else its help, or a size it cannot hold)
    (("-a", "--max-size", "10b"), ["--max-size", "'10b'", "B, K, M or G"]),
    (("-a", "--max-size", "1000"), ["--max-size", "'1000'", "B, K, M or G"]),
    (("-a", "--max-size", "10MB"), ["--max-size", "'10MB'", "B, K, M or G"]),
    (("-a", "--max-size", "17179869184G"), ["--max-size", "at most"]),
    (("-a", "--stack-budget", "4294967296"), ["--stack-budget", "1<=x<=1000000000"]),
    (("-a", "--stack-budget", "0"), ["--stack-budget", "1<=x<=1000000000"]),
    (("-a", "--call-graph", "lbr"), ["fp, dwarf"]),
    (("-a", "--call-graph", "dwarf,1000000"), ["65528"]),
    (("-a", "--max-size", "lots"), ["512M"]),
    (("-a", "--mmap-pages", "1000"), ["power of two"]),
    (("-a", "--mmap-pages", "0"), ["--mmap-pages", "power of two from 1 to"]),
    (("--", "no-such-program-offcpu"), ["command not found"]),
    (("--", "/etc/passwd"), ["/etc/passwd", "not executable", "chmod +x"]),
    (("--", "/etc"), ["/etc", "is a directory"]),
    (("--", "/no/such/program"), ["/no/such/program", "no such file"]),
    (("--pid", "1", "--cgroup", "x"), ["more than one target", "processes", "--cgroup"]),
    (("--unit", "x.service", "-a"), ["more than one target", "--unit", "-a"]),
    (("--pid", "12,abc"), ["--pid", "process ids separated by commas"]),
    (("--tree", "0"), ["--tree", "process ids separated by commas"]),
    (("--comm", "offcpu-no-such1"), ["no process is named 'offcpu-no-such1'"]),
    (("--comm", "a-name-of-16-bytes"), ["first 15 bytes", "--comm 'a-name-of-16-by'"]),
    (("--exe", "/no/such/program"), ["--exe /no/such/program", "no such file"]),
    (("--exe", "no-such-program-offcpu"), ["--exe no-such-program-offcpu", "PATH"]),
    (("--cgroup", "offcpu-no-such-cgroup"), ["no cgroup offcpu-no-such-cgroup", "/proc/PID/cgroup"]),
    (("--cgroup", "../.."), ["no cgroup ../.."]),
    # an empty name or path (a shell variable left unset), which names nothing
    (("--comm", ""), ["--comm", "give a NAME, not an empty one"]),
    (("--exe", ""), ["--exe", "give a PATH, not an empty one"]),
    (("-G", ""), ["--cgroup", "give a PATH, not an empty one"]),
    (("--unit", ""), ["--unit", "give a NAME, not an empty one"]),
])
def test_bad_arguments(tmp_path, args, words):
    assert_one_line_error(run_offcpu(*RECORD, "-o", str(tmp_path / "cap"), *args), *words)
    assert not (tmp_path / "cap").exists()


def test_output_to_stdout_is_refused(tmp_path):
    # a capture is a directory: "-" would make one named "-"
    assert_one_line_error(run_offcpu(*RECORD, "-a", "-d", "0.5", "-o", "-", cwd=tmp_path), "--output", "stdout")
    assert list(tmp_path.iterdir()) == []


def test_perf_missing(tmp_path):
    result = run_offcpu_without(("perf",), *RECORD, "-a", "-o", str(tmp_path / "cap"))
    assert_one_line_error(result, "perf was not found", "apt-get install linux-perf", "dnf install perf")


def test_not_permitted(tmp_path):
    # A user namespace: root by name, without the capabilities perf needs.
    result = subprocess.run(["unshare", "--user", "--map-root-user", str(OFFCPU), *RECORD, "-a", "-d", "1",
                             "-o", str(tmp_path / "cap")], capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, "CAP_PERFMON", "kernel.perf_event_paranoid")
    assert not (tmp_path / "cap").exists()


TRACEFS = "/sys/kernel/tracing"


def test_tracefs_not_mounted_is_mounted_for_root(tmp_path):
    # In a mount namespace of its own, so the machine's tracefs stays mounted:
    # unmount tracefs there, record, and list that namespace's mounts afterwards.
    script = ("for m in $(awk '$3 == \"tracefs\" {print $2}' /proc/self/mounts); do umount $m || exit 90; done; "
              "grep -q ' tracefs ' /proc/self/mounts && exit 91; "
              '"$@"; status=$?; echo "mounts after:"; grep " tracefs " /proc/self/mounts; exit $status')
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                             str(OFFCPU), *RECORD, "-a", "-d", "0.5", "-o", str(tmp_path / "cap")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "cap" / "capture.json").exists()
    mounts = result.stdout.split("mounts after:\n")[1].splitlines()
    assert [line.split()[1:3] for line in mounts] == [[TRACEFS, "tracefs"]]
    assert f" {TRACEFS} tracefs " in Path("/proc/mounts").read_text()  # never unmounted out here


def as_nobody(*args: str, capabilities: str = "") -> subprocess.CompletedProcess[str]:
    """offcpu run by user nobody, with `capabilities` (e.g. "+perfmon") kept."""
    caps = [f"--inh-caps={capabilities}", f"--ambient-caps={capabilities}"] if capabilities else []
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *caps, str(OFFCPU), *args],
                          capture_output=True, text=True, timeout=120, cwd="/")


@pytest.fixture
def open_directory():
    """A directory anybody may write to, sticky as /tmp is (so that none may rename another's files)."""
    path = Path(tempfile.mkdtemp(prefix="offcpu-open-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path)


def test_doctor_as_a_user_who_cannot_record(open_directory):
    result = as_nobody("doctor", "--json")
    assert result.returncode == 1, result.stderr
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["permissions"]["status"] == "fail"
    if os.stat(TRACEFS).st_mode & 0o005 != 0o005:  # as on Debian: tracefs is root's alone
        assert checks["tracefs"]["status"] == "fail" and "not readable" in checks["tracefs"]["detail"]


def test_record_with_cap_perfmon_but_an_unreadable_tracefs(open_directory):
    capture = open_directory / "cap"
    result = as_nobody(*RECORD, "-a", "-d", "0.5", "-o", str(capture), capabilities="+perfmon")
    if os.stat(TRACEFS).st_mode & 0o005 == 0o005:  # tracefs open to all: recording works
        assert result.returncode == 0, result.stderr
        return
    assert_one_line_error(result, f"{TRACEFS} is not readable", "sudo")
    assert not capture.exists()


@pytest.fixture
def small_mount(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """A directory backed by its own tmpfs, unmounted afterwards."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], check=True)
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


def test_output_not_writable(small_mount):
    read_only = small_mount("ro,size=4m")
    result = run_offcpu(*RECORD, "-a", "-o", str(read_only / "cap"))
    assert_one_line_error(result, "cannot write", "choose another directory with -o")


def test_a_directory_another_user_owns_is_refused(tmp_path):
    # Given an empty directory that anybody may write to, made by another user ('mkdir -m777 /tmp/cap')
    theirs = tmp_path / "cap"
    theirs.mkdir()
    theirs.chmod(0o777)
    os.chown(theirs, 65534, 65534)
    # Then root records nothing there: its owner could swap the capture's files for links
    assert_one_line_error(run_offcpu(*RECORD, "-a", "-d", "0.2", "-o", str(theirs)), str(theirs), "another user", "-o")
    assert list(theirs.iterdir()) == []


@pytest.mark.parametrize("owner, mode", [((65534, 65534), 0o755), ((0, 65534), 0o2775)],
                         ids=["another user's", "a group's to change"])
def test_a_directory_under_one_another_user_may_change_is_refused(tmp_path, owner, mode):
    above = tmp_path / "above"
    above.mkdir()
    os.chown(above, *owner)
    above.chmod(mode)
    result = run_offcpu(*RECORD, "-a", "-d", "0.2", "-o", str(above / "cap"))
    assert_one_line_error(result, str(above), "another user", "-o")


def test_a_directory_that_is_refused_keeps_its_mode(tmp_path):
    # Given a directory open to all, as /tmp is, holding another user's file ('-o /tmp')
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "theirs").write_text("x")
    # Then it is no capture directory, and it is left as it was
    result = run_offcpu(*RECORD, "-a", "-d", "0.2", "-o", str(shared))
    assert_one_line_error(result, str(shared), "not a capture directory")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_roots_open_directory_is_made_private_before_it_is_recorded_into(tmp_path):
    mine = tmp_path / "cap"
    mine.mkdir()
    mine.chmod(0o777)
    result = run_offcpu(*RECORD, "-d", "0.2", "-o", str(mine), "--", "true")
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700


def test_disk_full(small_mount):
    full = small_mount("size=1m")
    result = run_offcpu(*RECORD, "-a", "-o", str(full / "cap"))
    assert_one_line_error(result, "MiB free", "-o")


@pytest.mark.parametrize("content", ["[]", '"text"', "3", '{"schema": "offcpu-capture/1", "target": []}'])
def test_capture_json_that_is_not_an_object(tmp_path, content):
    capture = tmp_path / "cap"
    capture.mkdir()
    (capture / "perf.data").write_bytes(b"")
    (capture / "capture.json").write_text(content)
    assert_one_line_error(run_offcpu("report", "json", str(capture)), "not a capture description")


@pytest.mark.parametrize("damage, words", [
    ({"window_start_ns": "abc"}, ["window_start_ns", "not int"]),
    ({"window_end_ns": None}, ["window_end_ns"]),
    ({"samples": True}, ["samples", "not int"]),
    ({"target": {"kind": "pid", "comm": 3}}, ["comm", "not str"]),
])
def test_a_damaged_capture_json_is_said_to_be_damaged(tmp_path, damage, words):
    # Given a real capture.json with one field damaged, and a perf.data beside it
    data = json.loads((HERE / "futex_pid" / "capture.json").read_text())
    data.update(damage)
    capture = tmp_path / "cap"
    capture.mkdir()
    (capture / "perf.data").write_bytes(b"PERFILE2")
    (capture / "capture.json").write_text(json.dumps(data))
    # Then every command that reads it says so in one line, and none computes with it
    for command in (["report", "json"], ["check"]):
        assert_one_line_error(run_offcpu(*command, str(capture)), "not a capture description", *words)


def largest_mmap_pages(message: str) -> int:
    """The most --mmap-pages an error message says perf maps here."""
    found = re.search(r"power of two from 1 to ([\d,]+)", message)
    assert found, message
    return int(found[1].replace(",", ""))


def perf_record_pages(perf: str, pages: int, directory: Path, *run_as: str) -> subprocess.CompletedProcess[str]:
    """Plain perf with `pages` of ring buffer a CPU, as root or through `run_as` (setpriv ...)."""
    return subprocess.run([*run_as, perf, "record", "-m", str(pages), "-e", "cpu-clock", "-a",
                           "-o", str(directory / "pages.data"), "--", "true"], capture_output=True, text=True,
                          timeout=120, cwd="/")


@pytest.mark.parametrize("pages", ["2147483648", "524288"])
def test_more_mmap_pages_than_the_kernel_maps(tmp_path, perf, pages):
    # Given more pages than perf can map (2147483648 was taken, recorded nothing, and blamed the target)
    result = run_offcpu(*RECORD, "-a", "--mmap-pages", pages, "-o", str(tmp_path / "cap"))
    assert_one_line_error(result, "--mmap-pages", "the kernel maps")
    assert not (tmp_path / "cap").exists()
    # Then the most it names is the most: perf itself cannot map twice as many
    failed = perf_record_pages(perf, 2 * largest_mmap_pages(result.stderr), tmp_path)
    assert failed.returncode != 0 and "Cannot allocate memory" in failed.stderr, failed.stderr


def test_mmap_pages_of_a_user_bound_by_perf_event_mlock_kb(open_directory, perf):
    # Given a user who may trace (CAP_PERFMON) but not lock memory beyond kernel.perf_event_mlock_kb and ulimit -l
    result = as_nobody(*RECORD, "-a", "--mmap-pages", "262144", "-o", str(open_directory / "cap"),
                       capabilities="+perfmon")
    assert_one_line_error(result, "--mmap-pages", "kernel.perf_event_mlock_kb")
    most = largest_mmap_pages(result.stderr)
    # Then perf, as that user, maps that many pages a CPU and not twice as many
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+perfmon",
              "--ambient-caps=+perfmon"]
    mapped = perf_record_pages(perf, most, open_directory, *nobody)
    assert mapped.returncode == 0, mapped.stderr
    refused = perf_record_pages(perf, 2 * most, open_directory, *nobody)
    assert refused.returncode != 0 and "Permission error mapping pages" in refused.stderr, refused.stderr


MANY_MAPS = """
import mmap, sys
# neighbours with other protections do not merge: each is a map of its own, and perf writes one record each
maps = [mmap.mmap(-1, 4096, prot=mmap.PROT_READ | (mmap.PROT_EXEC if i % 2 else mmap.PROT_WRITE))
        for i in range(40000)]
print("ready", flush=True)
sys.stdin.read()
"""


def test_max_size_smaller_than_what_perf_writes_first(tmp_path):
    # Given a process with 40000 memory maps: perf describes its 20000 executable ones before any event (with
    # 20000 maps, 0.7 MB in one CI run: under the least --max-size)
    program = subprocess.Popen([sys.executable, "-c", MANY_MAPS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        assert program.stdout.readline() == "ready\n"
        result = run_offcpu(*RECORD, "--pid", str(program.pid), "-d", "1", "--max-size", "1M", "-o",
                            str(tmp_path / "cap"))
    finally:
        program.kill()
        program.wait()
    # Then the size is said to be too small, with how much perf wrote first and a size that holds it
    assert_one_line_error(result, "--max-size 1M is too small to hold anything", "MB", "give more than that")
    assert not (tmp_path / "cap").exists()


def test_a_process_offcpu_may_not_read_even_as_root():
    # pid 1 here is the sandbox's init, outside the Landlock domain every other process runs in:
    # the kernel denies reading its memory maps to root, as it denies them to perf
    if _readable("/proc/1/maps"):
        pytest.skip("pid 1's memory maps are readable here")
    result = run_offcpu(*RECORD, "--pid", "1", "-d", "0.5")
    assert_one_line_error(result, "/proc/1/maps", "even as root", "security module")
    assert "run offcpu as the process's user or as root" not in result.stderr


def _readable(path: str) -> bool:
    try:
        Path(path).read_bytes()
    except OSError:
        return False
    return True


def test_a_process_that_has_exited_is_no_target(tmp_path):
    # Given a process that has exited (its parent has not reaped it yet: it keeps its pid, a zombie)
    child = subprocess.Popen(["true"])
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    try:
        # Then neither as one of several pids nor as a tree's root is it recorded
        for args in (("--pid", f"{os.getpid()},{child.pid}"), ("--tree", str(child.pid))):
            result = run_offcpu(*RECORD, *args, "-d", "0.5", "-o", str(tmp_path / "cap"))
            assert_one_line_error(result, "no such process", str(child.pid))
            assert not (tmp_path / "cap").exists()
    finally:
        child.wait()


# Exits as soon as a perf that records it (its pid in perf's --pid list) has opened an event:
# perf then fails saying nothing ("Ignored open failure" is all perf 6.1 does of it), or
# ends as if it had recorded, before its events are on.
QUITS_WHEN_RECORDED = """#!/bin/sh
until perf=$(pgrep -f -- "perf record .*--pid ([0-9]+,)*$$(,|$| )"); do sleep 0.001; done
until ls -l /proc/$perf/fd 2>/dev/null | grep -q perf_event; do sleep 0.001; done
"""


@pytest.mark.parametrize("how", ["--pid", "--comm"])
def test_a_target_that_exits_as_perf_starts(tmp_path, how):
    # Given a process that exits as perf starts to record it
    script = tmp_path / "offcpu-quitter"
    script.write_text(QUITS_WHEN_RECORDED)
    script.chmod(0o755)
    target = subprocess.Popen([str(script)])
    try:
        time.sleep(0.2)  # running its loop, under its own name
        # When it is recorded
        chosen = ("--pid", str(target.pid)) if how == "--pid" else ("--comm", script.name)
        result = run_offcpu(*RECORD, *chosen, "-d", "5", "-o", str(tmp_path / "cap"))
        # Then offcpu says that it exited (was: "perf record failed: no message", or perf's last line)
        named = f"(pid {target.pid})" if how == "--pid" else f"processes named {script.name}"
        assert_one_line_error(result, named, "exited as perf started", "record it while it runs")
        assert target.wait(timeout=10) == 0
        assert not (tmp_path / "cap").exists()
    finally:
        target.kill()
        target.wait()


def test_an_executable_nothing_runs(tmp_path):
    program = tmp_path / "unused"
    shutil.copy("/bin/true", program)
    assert_one_line_error(run_offcpu(*RECORD, "--exe", str(program), "-o", str(tmp_path / "cap")),
                          f"no process runs {program}")


def test_a_systemd_unit_where_systemd_does_not_run(tmp_path):
    result = run_offcpu(*RECORD, "--unit", "offcpu-no-such.service", "-o", str(tmp_path / "cap"))
    if Path("/run/systemd/system").is_dir():  # systemd runs here: it has no such unit
        assert_one_line_error(result, "no unit offcpu-no-such.service")
    else:
        assert_one_line_error(result, "--unit offcpu-no-such.service needs systemd", "--cgroup")
    assert not (tmp_path / "cap").exists()


def test_an_empty_cgroup(tmp_path):
    with programs.cgroup() as group:
        result = run_offcpu(*RECORD, "--cgroup", group.name, "-o", str(tmp_path / "cap"))
    assert_one_line_error(result, f"cgroup /{group.name} holds no process")


def test_cgroup_v1_only(tmp_path):
    # In a mount namespace of its own, so the machine's cgroup v2 stays mounted: unmount it there
    script = ("for m in $(awk '$3 == \"cgroup2\" {print $2}' /proc/self/mounts); do umount $m || exit 90; done; "
              "grep -q ' cgroup2 ' /proc/self/mounts && exit 91; "
              '"$@"')
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                             str(OFFCPU), *RECORD, "--cgroup", "anything", "-o", str(tmp_path / "cap")],
                            capture_output=True, text=True, timeout=120)
    assert_one_line_error(result, "no cgroup v2 hierarchy is mounted", "--tree PID")
    assert " cgroup2 " in Path("/proc/mounts").read_text()  # never unmounted out here


def test_more_threads_than_perf_may_open_files_for(workload, tmp_path):
    # Given a process of 17 threads, and perf allowed 64 open files: fewer than an event for each thread needs
    program = workload("idle_pool", "-s", "30", threads=17)
    result = subprocess.run([str(OFFCPU), *RECORD, "--pid", str(program.pid), "-d", "1", "-o", str(tmp_path / "cap")],
                            capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    assert_one_line_error(result, "more files than perf may open (ulimit -Hn is 64)", "--cgroup")


def test_a_tree_whose_processes_come_and_go_faster_than_perf_starts(tmp_path):
    # Given a process that starts a process every 5 ms, each living 50 ms (some 10 at any time: with 20 ms, the tree
    # was listed once between them, the shell alone, in one CI run)
    churn = subprocess.Popen(["sh", "-c", "while :; do sleep 0.05 & sleep 0.005; done"])
    try:
        while not programs.children(churn.pid):
            time.sleep(0.01)
        # Then its tree cannot be listed to perf: perf finds some of them gone each time it starts
        result = run_offcpu(*RECORD, "--tree", str(churn.pid), "-d", "1", "-o", str(tmp_path / "cap"))
    finally:
        churn.kill()
        churn.wait()
    assert_one_line_error(result, "kept exiting before perf could start recording them (3 tries)",
                          f"--pid {churn.pid}", "--cgroup")
