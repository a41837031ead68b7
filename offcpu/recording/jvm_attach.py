"""offcpu's own client of HotSpot's attach mechanism: a JVM's thread dump without starting a
JVM (`jcmd PID Thread.print` starts one each time, ~0.5 s of CPU).

The protocol (HotSpot's attachListener_linux.cpp, as jcmd and jattach speak it):
- a JVM listens, once its attach listener started, on the Unix socket
  `/tmp/.java_pid<pid>`, `<pid>` as its own pid namespace numbers it (the last of NSpid in
  /proc/PID/status) and /tmp as its own mount namespace sees it (/proc/PID/root/tmp here);
- a JVM that does not listen yet starts its listener when it gets SIGQUIT while a file
  `.attach_pid<pid>` (owned by its effective uid or root) is in its working directory or
  /tmp; on a SIGQUIT without that file it prints a thread dump on its own stdout; one
  started with -Xrs does not handle SIGQUIT at all (the signal's default action would end it)
  and starts its listener with the JVM instead, one started with -XX:+DisableAttachMechanism
  never starts it;
- a client writes the protocol's version ("1"), the command's name and exactly three
  arguments, each ending with a NUL; the JVM answers with a decimal result code on a line of
  its own (0: done), then the command's output, and closes the connection;
- the JVM accepts a client only when the peer's effective uid and gid are its own (or root's).

offcpu runs as root, and the target controls its /tmp. So a socket is trusted only when it is
a socket (never a symlink) owned by the target's effective uid, it is connected to with the
target's effective uid and gid (by a short-lived child that drops to them, when offcpu's are
not the same; HotSpot 11 and later would take root's too), and the peer at the other end must
be the target process (SO_PEERCRED) before anything is written to it. SIGQUIT is sent only
when there is no socket, the process handles SIGQUIT (SigCgt: never to a JVM started with
-Xrs, nor to one whose handlers are not yet installed), its command line and its options in
the environment do not disable the attach mechanism (-XX:+DisableAttachMechanism), and only
once a process: a JVM whose listener did not start is not signalled again. Every step is
bounded: the listener's start, the connection and the reply each within TIMEOUT_S, the reply
read up to MAX_REPLY bytes.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from offcpu.workers import end_with_parent

TIMEOUT_S = 2.0
MAX_REPLY = 16 << 20  # the most of a reply that is read
PROTOCOL_VERSION = b"1"
SOCKET_NAME = ".java_pid{}"
TRIGGER_NAME = ".attach_pid{}"
POLL_S = 0.02  # how often the listener's socket is looked for after SIGQUIT
_DISABLED = ("-XX:+DisableAttachMechanism",)
_OPTION_VARIABLES = (b"JAVA_TOOL_OPTIONS=", b"JDK_JAVA_OPTIONS=", b"_JAVA_OPTIONS=")


class AttachError(Exception):
    """Why a JVM could not be read (a sentence for a note)."""


@dataclass(frozen=True)
class Target:
    pid: int  # as offcpu's pid namespace numbers it
    nspid: int  # as its own does
    uid: int  # effective
    gid: int  # effective


def target_of(pid: int) -> Target:
    """The process's pids and effective ids (OSError when it is gone)."""
    with open(f"/proc/{pid}/status", errors="replace") as file:
        fields = dict(line.rstrip("\n").split(":\t", 1) for line in file if ":\t" in line)
    try:
        nspid = int(fields.get("NSpid", str(pid)).split()[-1])
        return Target(pid, nspid, int(fields["Uid"].split()[1]), int(fields["Gid"].split()[1]))
    except (KeyError, IndexError, ValueError):
        raise OSError(f"/proc/{pid}/status cannot be read") from None


def handles_sigquit(pid: int) -> bool:
    """Whether the process has a handler for SIGQUIT (else the signal's default action ends it)."""
    with open(f"/proc/{pid}/status", errors="replace") as file:
        for line in file:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGQUIT - 1) & 1)
    return False


def attach_disabled(pid: int) -> str | None:
    """The option of the process's command line or environment that keeps SIGQUIT from
    starting its attach listener (None when none does)."""
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        words = file.read(1 << 20).split(b"\0")
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as file:
        for variable in file.read(1 << 20).split(b"\0"):
            if variable.startswith(_OPTION_VARIABLES):
                words += variable.split(b"=", 1)[1].split()
    options = [word.decode(errors="replace") for word in words]
    for option in reversed(options):  # the last of -XX:+X and -XX:-X is the one that holds
        if option in _DISABLED:
            return option
        if option.startswith("-XX:-") and f"-XX:+{option[5:]}" in _DISABLED:
            return None
    return None


class Attacher:
    """One JVM's attach client. `tmp`: the directory its sockets are in (its /tmp by default)."""

    def __init__(self, target: Target, parent: int, tmp: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.target = target
        self.parent = parent  # offcpu's pid: the child ends with it
        self.tmp = tmp if tmp is not None else f"/proc/{target.pid}/root/tmp"
        self.timeout_s = timeout_s
        self.signalled = False  # SIGQUIT was sent (it never is twice)

    def command(self, name: str, arguments: tuple[str, ...] = (), before: Callable[[], None] | None = None) -> str:
        """The output of an attach command (`before` runs just before it is sent). AttachError
        as raised when it cannot be had."""
        if len(arguments) > 3:
            raise ValueError("an attach command takes three arguments at most")
        try:
            directory = os.open(self.tmp, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise AttachError(f"its /tmp cannot be opened ({error.strerror})") from None
        try:
            self._listening(directory)
            connection = self._connect(directory)
        finally:
            os.close(directory)
        with connection:
            request = b"".join(part.encode() + b"\0" for part in
                               (PROTOCOL_VERSION.decode(), name, *arguments, *[""] * (3 - len(arguments))))
            if before is not None:
                before()
            reply = self._exchange(connection, request)
        code, _, output = reply.partition(b"\n")
        if code.strip() != b"0":
            said = output.decode(errors="replace").strip().splitlines()
            raise AttachError(f"the JVM answered {name} with code {code.decode(errors='replace').strip()[:20]}"
                              + (f": {said[0][:200]}" if said else ""))
        return output.decode(errors="replace")

    def _socket_name(self) -> str:
        return SOCKET_NAME.format(self.target.nspid)

    def _socket_state(self, directory: int) -> os.stat_result | None:
        try:
            return os.stat(self._socket_name(), dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise AttachError(f"its attach socket cannot be looked at ({error.strerror})") from None

    def _listening(self, directory: int) -> None:
        """Its listener's socket, checked: started with SIGQUIT when absent (once)."""
        found = self._socket_state(directory)
        if found is None:
            self._start_listener(directory)
            found = self._socket_state(directory)
            if found is None:
                raise AttachError("its attach socket is gone")
        if not stat.S_ISSOCK(found.st_mode) or found.st_uid != self.target.uid:
            raise AttachError(f"{self.tmp}/{self._socket_name()} is not a socket owned by its uid "
                              f"{self.target.uid}: not trusted")

    def _start_listener(self, directory: int) -> None:
        if self.signalled:
            raise AttachError("its attach listener did not start after a SIGQUIT (it is not signalled twice)")
        pid = self.target.pid
        try:
            disabled = attach_disabled(pid)
            handles = handles_sigquit(pid)
        except OSError:
            raise AttachError("it is gone") from None
        if disabled is not None:
            raise AttachError(f"it was started with {disabled}: its attach mechanism is off")
        if not handles:
            raise AttachError("it does not handle SIGQUIT (started with -Xrs?): its attach listener cannot be started")
        trigger = TRIGGER_NAME.format(self.target.nspid)
        try:  # never through a symlink, never over a file that is there (then it is the trigger)
            created = os.open(trigger, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                              dir_fd=directory)
        except FileExistsError:
            created = None
        except OSError as error:
            raise AttachError(f"{trigger} cannot be made in its /tmp ({error.strerror})") from None
        try:
            if created is not None:
                with contextlib.suppress(OSError):
                    os.fchown(created, self.target.uid, self.target.gid)
                os.close(created)
            self.signalled = True
            try:
                os.kill(pid, signal.SIGQUIT)
            except OSError:
                raise AttachError("it is gone") from None
            deadline = time.monotonic() + self.timeout_s
            while self._socket_state(directory) is None:
                if time.monotonic() > deadline:
                    raise AttachError(f"its attach listener did not start within {self.timeout_s:g} s of a SIGQUIT")
                time.sleep(POLL_S)
        finally:
            if created is not None:
                with contextlib.suppress(OSError):
                    os.unlink(trigger, dir_fd=directory)

    def _connect(self, directory: int) -> socket.socket:
        """A connection to its socket made with its uid and gid, whose peer is checked to be it."""
        path = f"/proc/self/fd/{directory}/{self._socket_name()}"
        if (os.geteuid(), os.getegid()) == (self.target.uid, self.target.gid):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(self.timeout_s)
            try:
                connection.connect(path)
            except OSError as error:
                connection.close()
                raise AttachError(f"its attach socket refused a connection ({error.strerror or error})") from None
        else:
            connection = self._connect_as_target(directory)
        try:
            pid, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                    struct.calcsize("3i")))
        except OSError:
            pid, uid = 0, -1
        if pid != self.target.pid or uid != self.target.uid:
            connection.close()
            raise AttachError(f"its attach socket is another process's (pid {pid}, uid {uid}): not trusted")
        return connection

    def _connect_as_target(self, directory: int) -> socket.socket:
        """A connection made by a child that dropped to the target's uid and gid (subprocess
        drops them before it runs preexec_fn), handed back over a socket pair (SCM_RIGHTS). The
        child connects in preexec_fn and exits there: it runs no program, so none need be one
        the target's user may run."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent, path, timeout_s = self.parent, f"/proc/self/fd/{directory}/{self._socket_name()}", self.timeout_s

        def connect() -> None:
            end_with_parent(parent, signal.SIGKILL)
            try:
                connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                connection.settimeout(timeout_s)
                connection.connect(path)
                socket.send_fds(theirs, [b"1"], [connection.fileno()])
            except OSError as error:
                with contextlib.suppress(OSError):
                    theirs.send(os.strerror(error.errno or 0).encode()[:200] if error.errno else b"?")
            os._exit(0)

        with ours, theirs:
            try:
                child = subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env={}, pass_fds=(directory, theirs.fileno()),
                                         user=self.target.uid, group=self.target.gid, extra_groups=[],
                                         start_new_session=True, cwd="/", preexec_fn=connect)
            except (OSError, subprocess.SubprocessError) as error:
                raise AttachError(f"no process could connect with its uid ({error})") from None
            theirs.close()
            try:
                ours.settimeout(timeout_s + 1)
                try:
                    said, fds, _, _ = socket.recv_fds(ours, 256, 1)
                except OSError:
                    said, fds = b"", []
                if not fds:
                    raise AttachError("its attach socket refused a connection"
                                      + (f" ({said.decode(errors='replace')})" if said else ""))
                for extra in fds[1:]:
                    os.close(extra)
                return socket.socket(fileno=fds[0])
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()

    def _exchange(self, connection: socket.socket, request: bytes) -> bytes:
        """The request written, the whole reply read (up to MAX_REPLY bytes), within the timeout."""
        deadline = time.monotonic() + self.timeout_s
        connection.setblocking(False)
        try:
            sent = 0
            while sent < len(request):
                _wait(connection, deadline, self.timeout_s, write=True)
                sent += connection.send(request[sent:])
            chunks, size = [], 0
            while size < MAX_REPLY:
                _wait(connection, deadline, self.timeout_s, write=False)
                chunk = connection.recv(min(1 << 20, MAX_REPLY - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except (BlockingIOError, InterruptedError):
            raise AttachError("the JVM's reply could not be read") from None
        except OSError as error:
            raise AttachError(f"the JVM's reply could not be read ({error.strerror or error})") from None
        return b"".join(chunks)


def _wait(connection: socket.socket, deadline: float, timeout_s: float, write: bool) -> None:
    left = deadline - time.monotonic()
    ready = select.select([], [connection], [], max(left, 0)) if write else \
        select.select([connection], [], [], max(left, 0))
    if not any(ready):
        raise AttachError(f"the JVM did not answer within {timeout_s:g} s")
