"""offcpu's attach client against stand-ins for a JVM: what it refuses (a socket that is not
the target user's, a peer that is not the target, a process that would die of SIGQUIT, one
whose attach mechanism is off, one whose listener does not start, one that does not answer),
and the protocol it speaks with one that answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from offcpu.recording.jvm_attach import Attacher, AttachError, Target, attach_disabled, target_of

NSPID = 4242  # the stand-in's pid as its own namespace would number it: names its socket


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[socket.socket]:
    """A socket where a JVM's would be, listening in this process."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / f".java_pid{NSPID}"))
    server.listen()
    with server:
        yield server


def ours(pid: int = 0) -> Target:
    return Target(pid or os.getpid(), NSPID, os.geteuid(), os.getegid())


def serve(server: socket.socket, reply: bytes | None) -> list[bytes]:
    """Answers one connection with `reply` (None: never), in a thread; what it was sent."""
    received: list[bytes] = []

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.settimeout(5)
            data = b""
            while data.count(b"\0") < 5:
                data += connection.recv(4096)
            received.append(data)
            if reply is None:
                time.sleep(2)
            else:
                connection.sendall(reply)

    threading.Thread(target=answer, daemon=True).start()
    return received


def test_the_protocol_with_a_stand_in_that_answers(tmp_path: Path, listener: socket.socket) -> None:
    received = serve(listener, b"0\nFull thread dump\n")
    ran = []
    assert Attacher(ours(), os.getpid(), str(tmp_path)).command("threaddump", before=lambda: ran.append(1)) == \
        "Full thread dump\n"
    assert received == [b"1\0threaddump\0\0\0\0"] and ran == [1]
    serve(listener, b"101\nno such command\n")
    with pytest.raises(AttachError, match="answered threaddump with code 101: no such command"):
        Attacher(ours(), os.getpid(), str(tmp_path)).command("threaddump")


def test_a_jvm_that_does_not_answer_is_left_within_the_timeout(tmp_path: Path, listener: socket.socket) -> None:
    serve(listener, None)
    start = time.monotonic()
    with pytest.raises(AttachError, match="did not answer within 0.3 s"):
        Attacher(ours(), os.getpid(), str(tmp_path), timeout_s=0.3).command("threaddump")
    assert time.monotonic() - start < 1.5


def test_a_socket_not_owned_by_the_targets_uid_or_a_symlink_is_not_trusted(tmp_path: Path,
                                                                          listener: socket.socket) -> None:
    other = Target(os.getpid(), NSPID, 65534, 65534)  # the socket is root's
    with pytest.raises(AttachError, match="is not a socket owned by its uid 65534: not trusted"):
        Attacher(other, os.getpid(), str(tmp_path)).command("threaddump")
    os.rename(tmp_path / f".java_pid{NSPID}", tmp_path / "elsewhere")
    (tmp_path / f".java_pid{NSPID}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AttachError, match="not trusted"):
        Attacher(ours(), os.getpid(), str(tmp_path)).command("threaddump")


def test_a_peer_that_is_not_the_target_is_not_written_to(tmp_path: Path, listener: socket.socket) -> None:
    received = serve(listener, b"0\n")
    with pytest.raises(AttachError, match=f"another process's \\(pid {os.getpid()}, uid 0\\)"):
        Attacher(ours(1), os.getpid(), str(tmp_path)).command("threaddump")
    # the target's user connects (a child that dropped to uid 65534 reached the socket): the peer is root's
    os.chown(tmp_path / f".java_pid{NSPID}", 65534, 65534)
    tmp_path.chmod(0o755)  # as a /tmp, whose files anyone may look up
    nobody = Target(os.getpid(), NSPID, 65534, 65534)
    with pytest.raises(AttachError, match=f"another process's \\(pid {os.getpid()}, uid 0\\)"):
        Attacher(nobody, os.getpid(), str(tmp_path)).command("threaddump")
    assert received == []


CATCHES_SIGQUIT = ("import signal, time; signal.signal(signal.SIGQUIT, lambda *_: print('quit', flush=True)); "
                   "print('ready', flush=True); time.sleep(60)")


@pytest.fixture
def catcher() -> Iterator[subprocess.Popen[str]]:
    """A process that handles SIGQUIT and never listens."""
    process = subprocess.Popen([sys.executable, "-c", CATCHES_SIGQUIT, "-Xmx64m"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    yield process
    process.kill()
    process.wait()


def test_sigquit_is_never_sent_to_a_process_it_would_end(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])  # SIGQUIT's default action: it would dump core and end
    try:
        time.sleep(0.1)
        attacher = Attacher(target_of(sleeper.pid), os.getpid(), str(tmp_path))
        with pytest.raises(AttachError, match="does not handle SIGQUIT"):
            attacher.command("threaddump")
        assert sleeper.poll() is None and not attacher.signalled and list(tmp_path.iterdir()) == []
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_listener_that_does_not_start_is_signalled_once(tmp_path: Path, catcher: subprocess.Popen[str]) -> None:
    attacher = Attacher(Target(catcher.pid, NSPID, os.geteuid(), os.getegid()), os.getpid(), str(tmp_path),
                        timeout_s=0.3)
    with pytest.raises(AttachError, match="did not start within 0.3 s of a SIGQUIT"):
        attacher.command("threaddump")
    assert catcher.stdout is not None and catcher.stdout.readline() == "quit\n"
    assert list(tmp_path.iterdir()) == []  # its trigger file removed
    with pytest.raises(AttachError, match="not signalled twice"):
        attacher.command("threaddump")
    assert catcher.poll() is None


def test_a_jvm_whose_attach_mechanism_is_off_is_not_signalled(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", CATCHES_SIGQUIT, "-XX:+DisableAttachMechanism"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        assert attach_disabled(process.pid) == "-XX:+DisableAttachMechanism"
        attacher = Attacher(target_of(process.pid), os.getpid(), str(tmp_path))
        with pytest.raises(AttachError, match="started with -XX:\\+DisableAttachMechanism"):
            attacher.command("threaddump")
        assert not attacher.signalled
    finally:
        process.kill()
        process.wait()
    assert attach_disabled(os.getpid()) is None
