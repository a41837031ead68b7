"""What the benchmarks share: offcpu recordings in their own sessions, and
never leaving offcpu, perf or a workload behind, whatever interrupts them."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

# A recorded pipe run writes ~0.9 KB per loop (~7 events with stacks): the
# default 512M would end recordings early.
MAX_SIZE = "4G"
START_TIMEOUT_S = 30.0
SETTLE_S = 1.0  # perf's start to its events enabled took ~0.25 s here; windows are checked afterwards
FINISH_TIMEOUT_S = 300.0  # after the window offcpu reads the capture back (perf report, perf script)
STOP_STEPS = ((signal.SIGINT, 30.0), (signal.SIGTERM, 10.0))  # then SIGKILL
PR_SET_CHILD_SUBREAPER = 36


class BenchError(Exception):
    """Something the benchmark needs is missing or failed; reported in one line, status 2."""


class Recording:
    """`offcpu record -a` (or of a command) in its own session: a Ctrl-C at the terminal
    reaches the benchmark only, which then ends offcpu in order (and offcpu ends its perf
    or detaches its BPF programs)."""

    def __init__(self, offcpu: list[str], backend: str, output: Path, duration: int, log: Path,
                 max_size: str = MAX_SIZE, target: tuple[str, ...] = ("-a",)) -> None:
        """`backend`: offcpu record --backend, perf or bpf; `target`: offcpu record's, the
        whole machine by default (or "--", COMMAND, ARGS...)."""
        self.output = output
        self.duration = duration
        self.backend = backend
        self.argv = [*offcpu, "record", "--backend", backend, "--duration", str(duration), "--max-size", max_size,
                     "-o", str(output), *target]
        self._log_path = log
        self._log = log.open("w")
        self.started = 0.0
        self._workloads: set[int] = set()
        self.process: subprocess.Popen | None = None

    def wait_until_recording(self) -> None:
        """Start offcpu; return once it records (its perf runs, or it holds its attached BPF
        programs) and has had time to enable its events."""
        self.started = time.monotonic()
        self._workloads = set(children(os.getpid()))  # a server the benchmark runs is no orphan of offcpu
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=default_sigint)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not recording(self.process.pid, self.backend):
            if self.process.poll() is not None:
                raise BenchError(f"offcpu record exited (status {self.process.returncode}) before it recorded: "
                                 f"{self._last_line()}")
            if time.monotonic() > deadline:
                raise BenchError(f"offcpu record did not start recording within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        time.sleep(SETTLE_S)

    def wait(self, seconds: float) -> None:
        """Let the recording end by itself (its duration, or --max-size), for at most `seconds`."""
        assert self.process is not None
        try:
            self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            pass

    def finish(self) -> dict:
        """End the recording now that its run is done; its capture.json."""
        assert self.process is not None
        # SIGINT is offcpu's documented early end, leaving a complete capture; once the duration
        # is (nearly) over offcpu is reading the capture back, and an interrupt would lose it.
        if self.process.poll() is None and time.monotonic() - self.started < self.duration - 1:
            self.process.send_signal(signal.SIGINT)
        try:
            status = self.process.wait(FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BenchError(f"offcpu record did not finish within {FINISH_TIMEOUT_S:.0f} s") from None
        if status != 0:
            raise BenchError(f"offcpu record failed (status {status}): {self._last_line()}")
        try:
            return json.loads((self.output / "capture.json").read_text())
        except (OSError, ValueError) as error:
            raise BenchError(f"cannot read the capture's capture.json: {error}") from None

    def close(self) -> None:
        """offcpu and its perf are gone after this, however the run ended."""
        killed: list[int] = []
        if self.process is not None and self.process.poll() is None:
            killed = stop(self.process)
        # A perf whose offcpu died before ending it was orphaned to this process (the subreaper).
        with interrupts_blocked():
            for pid in children(os.getpid()):
                if pid in self._workloads:
                    continue
                if pid not in killed:
                    print(f"bench: killing leftover process {pid} ({comm(pid)})", file=sys.stderr)
                    kill_tree(pid)
                os.waitpid(pid, 0)
        self._log.close()

    def _last_line(self) -> str:
        lines = [line for line in self._log_path.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else "no message"


def stop(process: subprocess.Popen) -> list[int]:
    """End offcpu as Ctrl-C would (it stops perf and finishes the file), escalating;
    a second Ctrl-C skips to killing it and every process under it. The pids killed."""
    for sig, timeout in STOP_STEPS:
        if process.poll() is not None:
            return []
        try:
            process.send_signal(sig)
            process.wait(timeout)
            return []
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            break
    with interrupts_blocked():
        killed = kill_tree(process.pid)
        process.wait()
    return killed


def reap_group(pgid: int) -> None:
    """Wait for the rest of a killed process group, orphaned to this process (the subreaper)."""
    while True:
        try:
            os.waitid(os.P_PGID, pgid, os.WEXITED)
        except ChildProcessError:
            return


def kill_tree(root: int) -> list[int]:
    """SIGKILL a process and its descendants (perf runs in a session of its own, so no
    process group holds them all). Each is stopped first, so that none starts another
    child or is reaped, and its pid reused, while the tree is collected."""
    tree: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        tree.append(pid)
        todo.extend(children(pid))
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return tree


def default_sigint() -> None:
    """In offcpu's process: Ctrl-C's signal as Python expects it, even when this benchmark was
    started with SIGINT ignored (a shell's background job), so that SIGINT ends the recording."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def become_subreaper() -> None:
    """Processes orphaned below this one become its children, where Recording.close finds them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise BenchError(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")


def children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return children


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += children(child)
    return found


def recording(offcpu: int, backend: str) -> bool:
    """Whether offcpu records: a perf under it runs, or it holds a BPF link (an attached program)."""
    if backend == "bpf":
        return holds_bpf_link(offcpu)
    return any(comm(pid) == "perf" for pid in descendants(offcpu))


def holds_bpf_link(pid: int) -> bool:
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            if os.readlink(fd) == "anon_inode:bpf_link":
                return True
        except OSError:
            pass  # closed since the listing, or the process is gone
    return False


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def offcpu_command() -> list[str]:
    """The offcpu installed next to this Python (the project's .venv), else `python -m offcpu`."""
    script = Path(sys.executable).parent / "offcpu"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "offcpu"]


def last_cpu() -> int:
    """The last CPU this process may run on: where a benchmark is pinned unless told."""
    return max(os.sched_getaffinity(0))


def pin_cpu(cpu: int | None, no_pin: bool) -> int | None:
    if no_pin:
        return None
    if cpu is None:
        return last_cpu()
    allowed = os.sched_getaffinity(0)
    if cpu not in allowed:
        raise BenchError(f"CPU {cpu} is not one this process may run on ({', '.join(map(str, sorted(allowed)))})")
    return cpu


def run_guarded(name: str, measure: Callable[[], int], stopped: str) -> int:
    """A benchmark's run: its exit code, 2 with one line for a BenchError, 130 when interrupted
    (SIGTERM and SIGHUP as Ctrl-C), with what was `stopped` said; orphans reaped by it."""
    with interrupts_as_keyboard_interrupt():
        try:
            become_subreaper()
            return measure()
        except BenchError as error:
            print(f"{name}: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"{name}: interrupted ({stopped})", file=sys.stderr)
            return 130


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP clean up as Ctrl-C does, instead of leaving offcpu and perf running."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def interrupts_blocked() -> Iterator[None]:
    """Killing must not be cut short by one more Ctrl-C."""
    blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
