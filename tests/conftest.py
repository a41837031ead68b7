"""Fixtures shared by the tests: the real offcpu console script, the example
programs, and a guard that makes perf-dependent tests fail (not skip) in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from offcpu.workers import SYSTEM_PATH

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "bin"
OFFCPU = Path(sys.executable).parent / "offcpu"


@pytest.fixture(scope="session", autouse=True)
def no_stale_jvm_sockets() -> Iterator[None]:
    """Removes, after the session, the attach sockets (/tmp/.java_pidN) of the JVMs the tests
    attached to and then killed: a JVM ended by SIGKILL leaves its socket behind."""
    started = time.time()
    yield
    for path in Path("/tmp").glob(".java_pid*"):
        pid = path.name.removeprefix(".java_pid")
        try:
            made_here = path.lstat().st_mtime >= started and path.is_socket() and not path.is_symlink()
        except OSError:
            continue
        if made_here and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def perf() -> str:
    """perf's path, for reading perf.data (which needs no privilege); in CI a missing perf
    is a failure, elsewhere a skip."""
    found = shutil.which("perf")
    if found is None:
        missing("perf is not installed (scripts/setup installs linux-perf)")
    return found


@pytest.fixture(scope="session")
def recording_perf(perf: str) -> str:
    """perf's path, for recording: as root (tracepoints and system-wide events)."""
    if os.geteuid() != 0:
        missing("recording tests run as root (sudo scripts/test)")
    return perf


def missing(message: str) -> NoReturn:
    """What a test needs is not here: a failure in CI, elsewhere a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)



CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture(scope="session")
def chromium() -> tuple[Path, Path]:
    """Debian's chromium and its driver, for the HTML report; in CI missing is a failure, elsewhere a skip."""
    absent = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if absent:
        missing(f"{' and '.join(absent)} missing (scripts/setup installs chromium and chromium-driver)")
    return CHROMIUM, CHROMEDRIVER


def example(name: str) -> Path:
    path = EXAMPLES / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run 'make -C examples' (scripts/setup does)")
    return path


def run_offcpu(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    return subprocess.run([str(OFFCPU), *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def run_offcpu_without(programs: tuple[str, ...], *args: str, env: dict[str, str] | None = None,
                       cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """offcpu run as by run_offcpu, on a machine where `programs` are not installed: in a mount
    namespace where each is /dev/null in the system's directories (offcpu, as root, looks
    nowhere else, whatever PATH says)."""
    hidden = [f"{directory}/{name}" for directory in SYSTEM_PATH.split(":") for name in programs
              if os.path.lexists(f"{directory}/{name}")]
    script = "".join(f'mount --bind /dev/null "{path}" && ' for path in dict.fromkeys(map(os.path.realpath, hidden)))
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{script}exec "$@"', "sh",
                           str(OFFCPU), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
                          stdin=subprocess.DEVNULL)


def said(output: str) -> str:
    """What an output says, its words separated by single spaces: where the terminal's width
    breaks a line depends on the paths in it (a clone's, a temporary directory's)."""
    return " ".join(output.split())


def processes_with_arguments(*argv: str) -> list[int]:
    """pids of the processes whose command line ends with `argv`."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if entry.read_bytes().endswith(wanted):
                found.append(int(entry.parent.name))
        except OSError:
            continue
    return found


def programs_running(program: str) -> dict[int, list[bytes]]:
    """The processes whose executable's name ends with `program`: their pids and arguments."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = entry.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(program.encode()):
            found[int(entry.parent.name)] = argv
    return found


STARTUP_TIMEOUT_S = 10.0


def perf_processes_writing(capture: Path) -> list[int]:
    """pids of perf processes whose command line names this capture."""
    return [pid for pid, argv in programs_running("perf").items() if str(capture).encode() in b" ".join(argv)]


def wait_for_threads(pid: int, count: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Until process `pid` has `count` threads; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (found := len(os.listdir(f"/proc/{pid}/task"))) != count:
        if time.monotonic() > deadline:
            pytest.fail(f"pid {pid} has {found} threads after {timeout_s:.0f} s, expected {count}")
        time.sleep(0.01)


def wait_for_exec(pid: int, binary: Path, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Until process `pid` runs `binary` (it has been forked but not exec'd yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if os.readlink(f"/proc/{pid}/exe") == str(binary):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"pid {pid} did not start {binary} within {timeout_s:.0f} s")
        time.sleep(0.01)


class Workload:
    """An example program running in the background for a test. With
    `threads`, it is ready once it runs that many threads (main included)."""

    def __init__(self, name: str, *args: str, threads: int | None = None) -> None:
        binary = example(name)
        self.process = subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.pid = self.process.pid
        wait_for_exec(self.pid, binary)
        if threads is not None:
            self.wait_for_threads(threads)

    def wait_for_threads(self, count: int) -> None:
        wait_for_threads(self.pid, count)

    def threads(self) -> set[int]:
        return {int(tid) for tid in os.listdir(f"/proc/{self.pid}/task")}

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()


@pytest.fixture
def workload() -> Iterator[type[Workload]]:
    """Start example programs; they are all killed after the test."""
    started: list[Workload] = []

    def start(name: str, *args: str, threads: int | None = None) -> Workload:
        running = Workload(name, *args, threads=threads)
        started.append(running)
        return running

    yield start  # type: ignore[misc]
    for running in started:
        running.stop()


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2, one line on stderr naming the problem, no traceback."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="session")
def mmap_capture(tmp_path_factory: pytest.TempPathFactory, recording_perf: str) -> Path:
    """2 s of mmap_contention (16 threads) recorded by --pid with perf, shared by the tests that only
    read it (they hold reports to perf.data and what perf script reads of it; tests/integration/
    test_bpf_recording.py and test_backends_agree.py hold the BPF backend to perf)."""
    capture = tmp_path_factory.mktemp("mmap") / "cap"
    program = subprocess.Popen([str(example("mmap_contention")), "-t", "16", "-s", "30"], stdout=subprocess.DEVNULL)
    try:
        wait_for_threads(program.pid, 17)
        result = run_offcpu("record", "--backend", "perf", "--pid", str(program.pid), "-d", "2", "-o", str(capture))
        assert result.returncode == 0, result.stderr
    finally:
        program.kill()
        program.wait()
    return capture


@pytest.fixture(scope="session")
def example_capture(tmp_path_factory: pytest.TempPathFactory, recording_perf: str) -> Callable[[str], Path]:
    """A capture of an example program run as a command for 1 s, to its end (recorded by perf,
    for at most 5 s: a check does not check a run cut short, and a loaded machine has made the
    1 s run take more than 1.5 s; frame-pointer stacks), recorded once per session and shared by
    the tests that only read it (reports may save model.json there), as mmap_capture."""
    captures: dict[str, Path] = {}

    def capture(name: str) -> Path:
        if name not in captures:
            directory = tmp_path_factory.mktemp(name) / "cap"
            result = run_offcpu("record", "--backend", "perf", "-o", str(directory), "-d", "5", "--",
                                str(example(name)), "-s", "1")
            assert result.returncode == 0, result.stderr
            captures[name] = directory
        return captures[name]

    return capture


@pytest.fixture(scope="session")
def cpp_capture(tmp_path_factory: pytest.TempPathFactory, recording_perf: str) -> Path:
    """1 s of cpp_names (2 threads waiting in templated C++ code) with DWARF stacks, which reach
    its frames through libstdc++ and a libc without frame pointers; shared by the tests that read it."""
    capture = tmp_path_factory.mktemp("cpp") / "cap"
    result = run_offcpu("record", "--call-graph", "dwarf", "-o", str(capture), "--", str(example("cpp_names")),
                        "-t", "2", "-s", "1")
    assert result.returncode == 0, result.stderr
    return capture
