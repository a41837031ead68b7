"""One `perf record` process under offcpu's control.

perf runs in its own session, so a Ctrl-C at the terminal reaches offcpu
only; offcpu then ends perf in order (disable, SIGINT so it finishes the
file, then SIGTERM and SIGKILL if it hangs). Events start disabled (`-D -1`)
and are switched on and off through perf's control pipe, so the recording
window is known to within the pipe's round trip.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.machine.limits import read_stat
from offcpu.workers import child_environment, end_with_parent

CONTROL_PLACEHOLDER = "{control}"  # in argv, becomes perf's --control=fd:CTL,ACK
READY_LINE = "Events disabled"
# What perf says once its command runs (or failed to: "Failed to collect ... workload"): anything else
# written to their stderr then is the command's
PERF_LINES = ("[ perf record:", "Events enabled", READY_LINE, "Failed to collect ")
START_TIMEOUT_S = 60.0  # perf opens one event per thread and CPU: slow for big processes
ACK_TIMEOUT_S = 20.0  # perf answers between reads of its ring buffers: slow on a saturated machine
FINISH_TIMEOUT_S = 30.0  # for perf to finish its file on its own once its command has exited
STOP_TIMEOUTS_S = ((signal.SIGINT, 30.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
# For perf's command to end on the SIGTERM perf sends it (perf waits for it before it
# finishes perf.data), and for what the command started to end on offcpu's; then SIGKILL.
COMMAND_GRACE_S = 2.0
STDERR_POLL_S = 0.01


class PerfProcess:
    def __init__(self, argv: list[str], has_command: bool = False) -> None:
        """Start perf; `argv` must carry the CONTROL_PLACEHOLDER, replaced by the pipes.
        With `has_command` (perf runs a command), perf and the command read offcpu's stdin; what the
        command writes to its stderr goes on to offcpu's."""
        control_read, self._control = os.pipe()
        self._ack, ack_write = os.pipe()
        argv = [arg.replace(CONTROL_PLACEHOLDER, f"fd:{control_read},{ack_write}") for arg in argv]
        self.argv = argv
        self.ended_itself = False  # perf exited without a signal from stop()
        # its command, or what that started, outlived the grace after SIGTERM: killed (SIGKILL)
        self.killed_command = False
        # perf's stderr is a file, not a pipe: once offcpu is gone, a pipe would
        # kill perf by SIGPIPE at its next message, before it finished perf.data.
        self._errors = tempfile.TemporaryFile()
        parent = os.getpid()
        try:
            # stdout is offcpu's: perf prints nothing there, the command it runs may.
            # perf also holds the control pipe's write end: were offcpu killed, the
            # pipe's hangup would otherwise make perf (6.1) fail its main loop
            # ("pollfd index mismatch") and exit without finishing perf.data.
            self._process = subprocess.Popen(
                argv, stdin=None if has_command else subprocess.DEVNULL, stderr=self._errors,
                pass_fds=(control_read, ack_write, self._control), start_new_session=True,
                env=_environment(has_command),
                # if offcpu dies, even by SIGKILL, perf gets SIGINT, finishes its file and exits
                preexec_fn=lambda: end_with_parent(parent, signal.SIGINT),
            )
        except BaseException:
            self._errors.close()
            raise
        finally:
            os.close(control_read)
            os.close(ack_write)
        self._perf_arguments = _arguments(self._process.pid)  # as its child's are until it execs the command
        self._copy_seen = False  # perf's child seen before it exec'd the command
        self._command_began = False
        self._has_command = has_command
        self._stderr: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        """Follow perf's stderr file line by line until perf has exited and all is read.
        perf's command writes there too (it inherits perf's stderr): once it has begun,
        lines that are not perf's go on to offcpu's stderr."""
        fd = self._errors.fileno()
        position, partial = 0, b""
        while True:
            gone = self._process.poll() is not None  # before reading: what it wrote before exiting is there
            chunk = os.pread(fd, 1 << 16, position)
            # after reading: a line the command wrote as it began is passed on, never dropped. perf's
            # own lines from before are read by then (offcpu waits for perf's events to be open
            # before it lets a command run alongside start; a command recorded alone starts as
            # they open, so a warning perf printed just then may pass as the command's)
            began = self._has_command and self._began()
            if chunk:
                position += len(chunk)
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    self._take(line, began)
            elif gone:
                break
            else:
                time.sleep(STDERR_POLL_S)
        if partial:
            self._take(partial, began, end=b"")
        self._ready.set()  # perf is gone: stop waiting for it

    def _began(self) -> bool:
        """Whether perf's command has begun: perf's child exec'd it, or has gone after it
        was seen as perf's copy. perf says what it says before then (its errors, its
        warnings while it opens its events), and from then on only PERF_LINES."""
        if not self._command_began:
            child = _child_of(self.pid)
            if child is not None and _arguments(child) == self._perf_arguments:
                self._copy_seen = True
            else:
                self._command_began = child is not None or self._copy_seen
        return self._command_began

    def _take(self, raw: bytes, began: bool, end: bytes = b"\n") -> None:
        line = raw.decode(errors="replace")
        self._stderr.append(line)
        if line.startswith(READY_LINE):
            self._ready.set()
        if began and not line.startswith(PERF_LINES):
            _to_stderr(raw + end)

    @property
    def stderr(self) -> list[str]:
        return list(self._stderr)

    @property
    def pid(self) -> int:
        return self._process.pid

    def exited(self) -> bool:
        return self._process.poll() is not None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def wait_until_ready(self) -> None:
        """Block until perf has opened its events (or died trying)."""
        if not self._ready.wait(START_TIMEOUT_S) and not self.exited():
            raise OffcpuError(f"perf did not start within {START_TIMEOUT_S:.0f} s")

    def wait_for_command(self) -> int | None:
        """Block until perf's command has started (perf forks, then execs it once its
        events are open, and they switch on at that exec) or already ended; its pid,
        None if perf ended before it forked."""
        deadline = time.monotonic() + START_TIMEOUT_S
        # Until it execs, perf's child is a copy of perf, arguments and all; after, its
        # arguments are the command's (a strict part of perf's), whatever program it is:
        # perf itself, or a wrapper that execs perf (env, sh -c) before offcpu looks.
        child = None
        while not self.exited():
            child = child or _child_of(self.pid)
            if child is not None and _arguments(child) != self._perf_arguments:
                return child  # exec'd, or gone already
            if time.monotonic() > deadline:
                raise OffcpuError(f"perf did not start the command within {START_TIMEOUT_S:.0f} s")
            time.sleep(STDERR_POLL_S)
        return child

    def cpu_time_s(self) -> float | None:
        """perf's CPU time so far, user and system; None once it has exited."""
        try:
            _, fields = read_stat(f"/proc/{self.pid}/stat")  # utime and stime are its 14th and 15th fields
        except (OSError, ValueError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def command_pid(self) -> int | None:
        """The pid of perf's command, once perf has started it (None once it has exited)."""
        return _child_of(self.pid)

    def command(self, word: str) -> int | None:
        """Send 'enable' or 'disable'; CLOCK_MONOTONIC ns when perf acknowledged it
        (perf switches its events, then answers), None when it did not answer."""
        try:
            os.write(self._control, f"{word}\n".encode())
        except BrokenPipeError:
            return None  # perf has exited: nothing left to switch
        readable, _, _ = select.select([self._ack], [], [], ACK_TIMEOUT_S)
        if not readable:
            return None
        if not os.read(self._ack, 64):  # perf closed its end: it is exiting, and says why once it has
            try:
                self._process.wait(FINISH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            return None
        return time.monotonic_ns()

    def stop(self, let_finish: bool = False) -> None:
        """End perf, escalating; it never outlives this call. With `let_finish`
        (its command has exited, so perf is finishing its file), perf is first
        given FINISH_TIMEOUT_S to exit on its own, with its command's status."""
        if let_finish and not self.exited():
            try:
                self._process.wait(FINISH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self.ended_itself = self.exited()
        for sig, timeout in STOP_TIMEOUTS_S:
            if self.exited():
                break
            try:
                self._process.send_signal(sig)
                if sig == signal.SIGINT:
                    self._kill_command_after_grace()
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        self._process.wait()
        self._reader.join(timeout=5)
        if not self._reader.is_alive():
            self._errors.close()
        for fd in (self._control, self._ack):
            os.close(fd)


    def _kill_command_after_grace(self) -> None:
        """perf, told to stop, sends its command SIGTERM and waits for it before it finishes
        perf.data: a command that ignores SIGTERM would hold perf (and offcpu) for as long as
        it runs. It gets COMMAND_GRACE_S, then SIGKILL."""
        deadline = time.monotonic() + COMMAND_GRACE_S
        while not self.exited() and time.monotonic() < deadline:
            time.sleep(STDERR_POLL_S)
        command = None if self.exited() else _child_of(self.pid)
        if command is not None and _alive(command):
            with contextlib.suppress(ProcessLookupError):
                os.kill(command, signal.SIGKILL)
            self.killed_command = True

    def end_command_group(self) -> None:
        """Once perf has exited after ending its command: end the processes the command
        started (a shell's commands, perf bench's workers), which would run on, unrecorded,
        holding offcpu's stdout. They are in perf's process group, as perf has a session of
        its own; the group outlives perf while they do, so its id is still theirs."""
        self.killed_command |= end_group(self._process.pid)


def signals_sent(killed: bool) -> list[str]:
    """What a command still running at the recording's end was sent (capture.json's command_cut_short)."""
    return ["SIGTERM", "SIGKILL"] if killed else ["SIGTERM"]


def end_group(group: int) -> bool:
    """End process group `group`: SIGTERM, and SIGKILL for those still there after
    COMMAND_GRACE_S. Whether any had to be killed."""
    deadline = time.monotonic() + COMMAND_GRACE_S
    try:
        os.killpg(group, signal.SIGTERM)
        # not os.killpg(group, 0): it finds the zombies an init that does not reap leaves
        while _group_alive(group):
            if time.monotonic() > deadline:
                os.killpg(group, signal.SIGKILL)
                return True
            time.sleep(STDERR_POLL_S)
    except ProcessLookupError:
        pass  # nothing (more) left of it
    return False


def _to_stderr(data: bytes) -> None:
    """On to offcpu's stderr, through sys.stderr: a countdown on the terminal moves below it."""
    try:
        sys.stderr.write(data.decode(errors="replace"))
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # offcpu's stderr is closed or gone: as it would be for the command


def _child_of(pid: int) -> int | None:
    """The only child of `pid` (perf's command)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _running_group(pid: int) -> int | None:
    """The process group of `pid` while it runs; None once it is gone or a zombie."""
    try:
        _, fields = read_stat(f"/proc/{pid}/stat")  # the state, the parent, the process group, ...
    except (OSError, ValueError):
        return None
    return None if fields[0] in "ZX" else int(fields[2])


def _alive(pid: int) -> bool:
    return _running_group(pid) is not None


def _group_alive(group: int) -> bool:
    """Whether a process of process group `group` runs."""
    return any(_running_group(int(entry.name)) == group for entry in Path("/proc").iterdir() if entry.name.isdigit())


def _arguments(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _environment(has_command: bool) -> dict[str, str]:
    """perf's environment: a child's (workers.child_environment), but when perf runs the user's
    command, which inherits it: the command runs as the user asked, in their environment (as
    the BPF backend runs it), all but what steers perf itself (PERF_CONFIG and the like)."""
    if not has_command:
        return child_environment()
    return {name: value for name, value in os.environ.items() if not name.startswith("PERF_")}
