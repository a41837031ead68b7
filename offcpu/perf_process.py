"""One `perf record` process under offcpu's control.

perf runs in its own session, so a Ctrl-C at the terminal reaches offcpu
only; offcpu then ends perf in order (disable, SIGINT so it finishes the
file, then SIGTERM and SIGKILL if it hangs). Events start disabled (`-D -1`)
and are switched on and off through perf's control pipe, so the recording
window is known to within the pipe's round trip.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import threading
import time

from offcpu.errors import OffcpuError

CONTROL_PLACEHOLDER = "{control}"  # in argv, becomes perf's --control=fd:CTL,ACK
READY_LINE = "Events disabled"
START_TIMEOUT_S = 60.0  # perf opens one event per thread and CPU: slow for big processes
ACK_TIMEOUT_S = 5.0
STOP_TIMEOUTS_S = ((signal.SIGINT, 30.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In perf, before exec: if offcpu dies (even by SIGKILL), perf gets SIGINT,
    finishes its file and exits instead of recording on alone."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)


class PerfProcess:
    def __init__(self, argv: list[str]) -> None:
        """Start perf; `argv` must carry the CONTROL_PLACEHOLDER, replaced by the pipes."""
        control_read, self._control = os.pipe()
        self._ack, ack_write = os.pipe()
        argv = [arg.replace(CONTROL_PLACEHOLDER, f"fd:{control_read},{ack_write}") for arg in argv]
        self.argv = argv
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True, pass_fds=(control_read, ack_write), start_new_session=True,
                preexec_fn=_end_with_parent,
            )
        finally:
            os.close(control_read)
            os.close(ack_write)
        self._stderr: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self._stderr.append(line.rstrip("\n"))
            if line.startswith(READY_LINE):
                self._ready.set()
        self._ready.set()  # perf is gone: stop waiting for it

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

    def command(self, word: str) -> int:
        """Send 'enable' or 'disable'; CLOCK_MONOTONIC ns when perf acknowledged it."""
        sent = time.monotonic_ns()
        try:
            os.write(self._control, f"{word}\n".encode())
        except BrokenPipeError:
            return sent  # perf has exited: nothing left to switch
        readable, _, _ = select.select([self._ack], [], [], ACK_TIMEOUT_S)
        if readable:
            os.read(self._ack, 64)
        return sent if word == "enable" else time.monotonic_ns()

    def stop(self) -> None:
        """End perf, escalating; it never outlives this call."""
        for sig, timeout in STOP_TIMEOUTS_S:
            if self.exited():
                break
            try:
                self._process.send_signal(sig)
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        self._process.wait()
        self._reader.join(timeout=5)
        for fd in (self._control, self._ack):
            os.close(fd)
