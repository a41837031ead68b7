"""offcpu top and record --keep on real programs (futex_contention: threads queued on one
mutex; lock_chain on the screen): the JSON lines, the plain blocks, the flight record on SIGUSR1 and on a trigger, each
reportable; and the screen in a real terminal (tmux), driven by its keys."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, Workload, assert_one_line_error, example, missing, run_offcpu, wait_for_threads
from tests.programs import MissingProgram, WorkloadError, nginx_under_wrk

START_TIMEOUT_S = 30
PYTHON = "/usr/bin/python3"  # the examples' own (Debian's CPython)
LIVE = ["--interval", "0.5", "--window", "1", "--keep", "3"]


@pytest.fixture
def contention(workload: type[Workload]) -> Workload:
    return workload("futex_contention", "-s", "60", "-t", "4", threads=5)


@pytest.fixture
def chain(workload: type[Workload]) -> Workload:
    """lock_chain: a lock held across a 1 ms sleep, a few thousand waits a second whatever the machine's
    load (futex_contention's rate grows to 100,000s a second on an idle one, and the screen's frames with it)."""
    return workload("lock_chain", "-s", "60", "-t", "4", "-u", "1000", threads=5)


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """offcpu with its own TMPDIR, where its live directory goes (and must be gone after)."""
    return subprocess.Popen([str(OFFCPU), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp_path)}, cwd=tmp_path)


def lines_of(process: subprocess.Popen[str], count: int) -> Iterator[str]:
    assert process.stdout is not None
    for _ in range(count):
        line = process.stdout.readline()
        assert line, process.communicate()
        yield line


def end(process: subprocess.Popen[str], tmp_path: Path, signum: int = signal.SIGINT) -> str:
    """Stop it as a user would; it exits 0, leaving nothing of its own behind. Returns stderr."""
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob("offcpu-live-*"))
    return stderr


def test_json_lines_say_the_lock_and_its_waiters(tmp_path: Path, contention: Workload) -> None:
    top = start(tmp_path, "top", "--pid", str(contention.pid), "--json", *LIVE)
    frames = [json.loads(line) for line in lines_of(top, 4)]
    end(top, tmp_path)
    assert all(frame["schema"] == "offcpu-top/1" for frame in frames)
    assert [frame["elapsed_s"] for frame in frames] == sorted(frame["elapsed_s"] for frame in frames)
    last = frames[-1]
    # (the window covers the last --window, and less than its oldest interval more: intervals are as long as frames
    # were late, so on a loaded machine they are uneven; an interval ends when the waits open were read, before its
    # frame, so it is longer than the gap between frames by at most the next such delay: 1.621 s with a gap of 0.564 s
    # in one CI run)
    elapsed = [frame["elapsed_s"] for frame in frames]
    longest_gap_s = max(later - earlier for earlier, later in zip([0.0, *elapsed[:-1]], elapsed, strict=True))
    assert 1.0 <= last["window_s"] <= 1.01 + 2 * longest_gap_s
    # (on a loaded machine the threads' wait for a CPU may come first)
    assert any(finding["id"] == "lock_contention" and finding["severity"] != "info" for finding in last["findings"])
    assert "pthread mutex" in last["wait_sites"][0]["site"]
    workers = [thread for thread in last["threads"] if thread["pid"] == contention.pid]
    assert len(workers) >= 4 and all(thread["offcpu_ms_per_s"] <= 1000.5 for thread in workers)
    assert any(pair["waker"].startswith("futex_contenti") for pair in last["wakeups"])


def test_plain_blocks_when_not_on_a_terminal(tmp_path: Path, contention: Workload) -> None:
    top = start(tmp_path, "top", "--pid", str(contention.pid), *LIVE)
    text = "".join(lines_of(top, 30))
    end(top, tmp_path, signal.SIGTERM)
    blocks = text.split("offcpu top: ")
    assert len(blocks) >= 3 and str(contention.pid) in blocks[1].splitlines()[0], text
    assert "findings:\n  critical" in text or "findings:\n  warning" in text
    assert "wait sites (ms/s: the window, its last tenth; trend):" in text and "pthread mutex" in text
    assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith("offcpu top: "))


def test_sigusr1_writes_the_kept_seconds_as_a_capture(tmp_path: Path, contention: Workload) -> None:
    top = start(tmp_path, "top", "--pid", str(contention.pid), "--json", "--flight-output", str(tmp_path / "f"),
                *LIVE)
    list(lines_of(top, 3))
    top.send_signal(signal.SIGUSR1)
    written = next(frame["flight_records"] for frame in map(json.loads, lines_of(top, 4)) if frame["flight_records"])
    end(top, tmp_path)
    flight = Path(written[0])
    info = json.loads((flight / "capture.json").read_text())
    assert info["recorded_by"] == "top" and info["backend"] == "bpf"
    assert 1.0 <= info["duration_actual_s"] <= 3.5  # the kept seconds, --keep 3 at most
    report = run_offcpu("report", "json", str(flight))
    assert report.returncode == 0, report.stderr
    assert "lock_contention" in [finding["id"] for finding in json.loads(report.stdout)["findings"]]


def test_record_keep_writes_the_stall_when_the_trigger_holds(tmp_path: Path, contention: Workload) -> None:
    watch = start(tmp_path, "record", "--pid", str(contention.pid), "--keep", "3",
                  "--trigger", "lock_contention>=warning", "--flight-output", str(tmp_path / "f"))
    assert watch.stderr is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    said = ""
    while "flight record:" not in said:
        assert time.monotonic() < deadline and watch.poll() is None, said
        said += watch.stderr.readline()
    stderr = end(watch, tmp_path)
    flight = Path(said.split("flight record:")[1].split()[0])
    assert "flight record:" not in stderr  # once, while the trigger goes on holding
    assert json.loads((flight / "capture.json").read_text())["recorded_by"] == "record --keep"
    report = run_offcpu("report", "text", str(flight))
    assert report.returncode == 0, report.stderr
    assert "lock" in report.stdout.lower() and "pthread mutex" in report.stdout


def test_record_keep_writes_on_sigusr1_without_a_view(tmp_path: Path, contention: Workload) -> None:
    watch = start(tmp_path, "record", "--pid", str(contention.pid), "--keep", "2", "--flight-output", str(tmp_path))
    assert watch.stderr is not None
    assert watch.stderr.readline().startswith("Watching")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not any(target.startswith("anon_inode:bpf_link") for target in bpf_held_by(watch.pid)):
        assert time.monotonic() < deadline and watch.poll() is None
        time.sleep(0.05)  # recording: SIGUSR1 is offcpu's from before the recording starts
    watch.send_signal(signal.SIGUSR1)
    line = watch.stderr.readline()
    end(watch, tmp_path)
    assert line.startswith("flight record: "), line
    flight = Path(line.split()[-1])
    report = run_offcpu("report", "folded", str(flight))
    assert report.returncode == 0, report.stderr
    assert "__lll_lock_wait" in report.stdout
    # its files are its user's alone, as a recording's are (other processes' maps, the kernel's addresses)
    assert {path.name: path.stat().st_mode & 0o777 for path in flight.iterdir()} == dict.fromkeys(
        (path.name for path in flight.iterdir()), 0o600)


@contextmanager
def python_lock() -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """python_lock's 4 threads queued on a threading.Lock held across a 100 ms sleep, killed whole
    after: its source and process."""
    if not os.access(PYTHON, os.X_OK):
        missing(f"{PYTHON} is not installed: scripts/setup installs it")
    source = example("python_lock")
    program = subprocess.Popen([PYTHON, str(source), "-t", "4", "-s", "60", "-u", "100000"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_threads(program.pid, 5)
        yield source, program
    finally:
        os.killpg(program.pid, signal.SIGKILL)
        program.wait()


def test_a_flight_record_carries_the_programs_own_frames(tmp_path: Path) -> None:
    """python_lock (4 threads queued on a threading.Lock held across a sleep): the flight record's
    report names the lock and the program's line, as record's does."""
    with python_lock() as (source, program):
        watch = start(tmp_path, "record", "--pid", str(program.pid), "--keep", "3", "--flight-output", str(tmp_path))
        assert watch.stderr is not None
        assert watch.stderr.readline().startswith("Watching")
        time.sleep(2.5)  # the seconds kept: a dozen reads of the Python stacks
        watch.send_signal(signal.SIGUSR1)
        line = watch.stderr.readline()
        end(watch, tmp_path)
    assert line.startswith("flight record: "), line
    flight = Path(line.split()[-1])
    report = run_offcpu("report", "json", str(flight))
    assert report.returncode == 0, report.stderr
    found = json.loads(report.stdout)["findings"]
    [lock] = [finding for finding in found if finding["subject"] == "Python threading lock"]
    assert f"at main.<locals>.work ({source.name}:" in lock["summary"], lock["summary"]


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """A tmux server of the test's own; killed after. (Its shells get the tests' environment, where
    pytest may have set LINES and COLUMNS, which rich takes over the terminal's size: they unset them.)"""
    if shutil.which("tmux") is None:
        missing("tmux is not installed (apt-get install tmux)")
    command = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    yield command
    subprocess.run([*command, "kill-server"], capture_output=True)


def screen(tmux: list[str]) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout


def wait_for(tmux: list[str], text: str) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in (shown := screen(tmux)):
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
    return shown


@pytest.mark.parametrize("columns", [80, 200])
def test_the_screen_driven_by_its_keys(tmp_path: Path, chain: Workload, tmux: list[str], columns: int) -> None:
    status = tmp_path / "status"
    shell = (f"unset LINES COLUMNS; TMPDIR={tmp_path} NO_COLOR=1 {OFFCPU} top --pid {chain.pid} --interval 0.5 "
             f"--window 2 --keep 3 --flight-output {tmp_path / 'f'}; echo $? > {status}; "
             f"stty -a > {tmp_path / 'stty'}; sleep 30")
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", str(columns), "-y", "40", shell], check=True)
    wait_for(tmux, "who wakes whom")
    shown = wait_for(tmux, "pthread mutex")
    assert all(len(line) <= columns for line in shown.splitlines())
    subprocess.run([*tmux, "send-keys", "-t", "top", "t"], check=True)
    assert "threads, ms/s, by off CPU" in wait_for(tmux, "threads, ms/s")
    subprocess.run([*tmux, "send-keys", "-t", "top", "r"], check=True)
    wait_for(tmux, "by blocked")
    subprocess.run([*tmux, "send-keys", "-t", "top", "e"], check=True)
    assert "where it waited:" in wait_for(tmux, "where it waited:")
    subprocess.run([*tmux, "send-keys", "-t", "top", "d"], check=True)
    wait_for(tmux, "flight record:")  # its path, which may wrap at 80 columns
    subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (tmp_path / "stty").exists():
        assert time.monotonic() < deadline, screen(tmux)
        time.sleep(0.2)
    assert status.read_text().strip() == "0"
    modes = (tmp_path / "stty").read_text().split()
    assert "icanon" in modes and "echo" in modes  # the terminal as it was
    assert not list(tmp_path.glob("offcpu-live-*"))
    [flight] = (tmp_path / "f").iterdir()
    assert json.loads((flight / "capture.json").read_text())["recorded_by"] == "top"


def quit_top(tmux: list[str], status: Path) -> None:
    """`q` pressed, and top ended with status 0 (its shell writes it to `status`)."""
    subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not status.exists():
        assert time.monotonic() < deadline, screen(tmux)
        time.sleep(0.2)
    assert status.read_text().strip() == "0"


def test_the_screen_names_the_programs_own_lines(tmp_path: Path, tmux: list[str]) -> None:
    """python_lock (4 threads queued on a threading.Lock held across a 100 ms sleep): the wait sites
    name the Python function and line where the threads wait, read while top records, as report does."""
    with python_lock() as (source, program):
        status = tmp_path / "status"
        shell = (f"unset LINES COLUMNS; TMPDIR={tmp_path} NO_COLOR=1 {OFFCPU} top --pid {program.pid} "
                 f"--interval 0.5 --window 2 --keep 3; echo $? > {status}; sleep 30")
        subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "100", "-y", "40", shell], check=True)
        wait_for(tmux, "wait sites")
        subprocess.run([*tmux, "send-keys", "-t", "top", "s"], check=True)
        shown = wait_for(tmux, f" at main.<locals>.work ({source.name}:")
        quit_top(tmux, status)
        assert not list(tmp_path.glob("offcpu-live-*"))
    sites = shown.split("wait site", 1)[1]
    assert f"futex at main.<locals>.work ({source.name}:" in sites, shown


def test_the_screen_of_a_server_under_load(tmp_path: Path, tmux: list[str]) -> None:
    """nginx (a master, 2 workers) serving wrk: its workers on the screen, waiting in epoll for the
    next request, and the keys still answered under the load."""
    try:
        with nginx_under_wrk(workers=2) as nginx:
            status = tmp_path / "status"
            shell = (f"unset LINES COLUMNS; TMPDIR={tmp_path} NO_COLOR=1 {OFFCPU} top --tree {nginx.pid} "
                     f"--interval 0.5 --window 2 --keep 3; echo $? > {status}; sleep 30")
            subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "120", "-y", "45", shell], check=True)
            shown = wait_for(tmux, "epoll")
            assert "nginx" in shown, shown
            assert all(len(line) <= 120 for line in shown.splitlines())
            subprocess.run([*tmux, "send-keys", "-t", "top", "t"], check=True)
            threads = wait_for(tmux, "threads, ms/s")
            assert any(str(tid) in threads for tid in nginx.worker_tids), threads
            subprocess.run([*tmux, "send-keys", "-t", "top", "w"], check=True)
            assert "wrk" in wait_for(tmux, "who wakes whom")  # its requests wake the workers
            quit_top(tmux, status)
    except (MissingProgram, WorkloadError) as error:
        missing(str(error))


def test_sigterm_puts_the_terminal_back(tmp_path: Path, chain: Workload, tmux: list[str]) -> None:
    shell = (f"unset LINES COLUMNS; TMPDIR={tmp_path} {OFFCPU} top --pid {chain.pid} --interval 0.5 --window 1 "
             f"--keep 1; stty -a > {tmp_path / 'stty'}; sleep 30")
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "80", "-y", "30", shell], check=True)
    wait_for(tmux, "wait sites")
    pane = subprocess.run([*tmux, "list-panes", "-t", "top", "-F", "#{pane_pid}"], capture_output=True, text=True,
                          check=True).stdout.split()[0]
    children = Path(f"/proc/{pane}/task/{pane}/children").read_text().split()
    os.kill(int(children[0]), signal.SIGTERM)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (tmp_path / "stty").exists():
        assert time.monotonic() < deadline, screen(tmux)
        time.sleep(0.2)
    modes = (tmp_path / "stty").read_text().split()
    assert "icanon" in modes and "echo" in modes
    assert "offcpu top:" not in screen(tmux)  # the main screen again, not the live one


def bpf_held_by(pid: int) -> list[str]:
    """The BPF objects (programs, links, maps) a process holds open: none once it is gone."""
    held = []
    for fd in Path(f"/proc/{pid}/fd").glob("*") if Path(f"/proc/{pid}").exists() else []:
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile, or the process has gone
        if target.startswith("anon_inode:bpf"):
            held.append(target)
    return held


def test_nothing_stays_attached_after_sigkill(tmp_path: Path, contention: Workload) -> None:
    """SIGKILL in the middle of following: offcpu's BPF programs go with its file descriptors, and the
    workers it forks for a frame (which inherit them) end as they find it gone."""
    top = start(tmp_path, "top", "--pid", str(contention.pid), "--json", *LIVE)
    list(lines_of(top, 2))
    assert any(target.startswith("anon_inode:bpf_link") for target in bpf_held_by(top.pid))
    holders = {top.pid}
    for task in Path(f"/proc/{top.pid}/task").iterdir():
        holders.update(int(pid) for pid in (task / "children").read_text().split())
    top.kill()
    top.wait()
    deadline = time.monotonic() + 10
    while held := {pid: bpf_held_by(pid) for pid in holders if bpf_held_by(pid)}:
        assert time.monotonic() < deadline, held
        time.sleep(0.1)
    # its live directory stays, until the next live recording starts
    [left] = tmp_path.glob(f"offcpu-live-{top.pid}-*")
    again = start(tmp_path, "top", "--pid", str(contention.pid), "--json", *LIVE)
    list(lines_of(again, 1))
    assert not left.exists()
    end(again, tmp_path)


@pytest.mark.parametrize(("args", "words"), [
    (("top", "-a", "--trigger", "lock_contention>=bad"), "compared with a severity"),
    (("top", "-a", "--trigger", "lock_contentoin>=warning"), "no finding is called"),
    (("top", "-a", "--window", "0.5"), "shorter than --interval"),
    (("top", "-a", "--keep", "5"), "give from --window"),
    (("top", "-a", "--keep-size", "10K"), "at least 1M"),
    (("top", "-a", "--interval", "nan"), "above 0"),
    (("record", "-a", "--keep", "30", "-d", "3"), "--duration cannot go with --keep"),
    (("record", "-a", "--keep", "30", "-o", "x"), "--output cannot go with --keep"),
])
def test_bad_options_are_one_line(args: tuple[str, ...], words: str) -> None:
    assert_one_line_error(run_offcpu(*args), words)

