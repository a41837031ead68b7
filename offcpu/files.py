"""Files offcpu writes and reads as root, where others may have put something first.

Written whole: a reader sees the old file or the new one, never half of one, and a symbolic
link at the name is replaced, never written through. Read only when regular: a pipe, a device
or a directory planted where a capture names a file is refused, never waited on, and no read
takes more than its format allows."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import stat
from pathlib import Path
from typing import Any, BinaryIO

PARTIAL = ".partial"  # the suffix of a file being written, renamed to its name once whole
PRIVATE = 0o600  # readable by its owner only, as everything in a capture
# Opening never follows a link at the last component and never waits (a FIFO with no writer).
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def not_regular(path: Path | str) -> OSError:
    """The error for a name that leads to something other than a regular file."""
    return OSError(errno.EINVAL, "not a regular file (a link, pipe, device or directory)", str(path))


def too_large(path: Path | str, limit: int) -> OSError:
    return OSError(errno.EFBIG, f"larger than {limit:,} bytes, more than such a file ever holds", str(path))


def invoking_uid() -> int:
    """The user who ran offcpu: under sudo, the one sudo names (SUDO_UID), not root."""
    try:
        return int(os.environ.get("SUDO_UID", ""))
    except ValueError:
        return os.getuid()


def create_new(path: Path, mode: int = PRIVATE) -> int:
    """A new file at `path`, opened for writing: FileExistsError if anything is there (a link
    planted at the name included), so that nothing another user put there is written."""
    return os.open(path, _NEW, mode)


def write_whole(path: Path, text: str | bytes, mode: int = 0o666, replace: bool = True,
                directory: int | None = None) -> None:
    """Write `text` (or bytes) to a new PATH.partial, then rename it over `path`: a link at
    `path` is replaced, not followed, and anything there but a regular file or a link is
    refused. With `replace` False, FileExistsError if `path` exists when the file is whole. The
    file has at most the permissions of `mode` (less the umask). `directory`: a descriptor of
    the directory `path` is in, opened when the name was checked, so that the file goes there
    even if a link on the way there has been changed since (else it is opened now). OSError as
    raised; the partial file is removed."""
    at = directory if directory is not None else open_directory(path)
    try:
        _write_whole_at(at, path.name, text, mode, replace)
    finally:
        if directory is None:
            os.close(at)


def open_directory(path: Path) -> int:
    """A descriptor of the directory `path` is in, for write_whole."""
    return os.open(path.parent, _DIRECTORY)


def _write_whole_at(directory: int, name: str, text: str | bytes, mode: int, replace: bool) -> None:
    partial = name + PARTIAL
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=directory)  # left by a killed run; unlinking a link never touches its target
    try:
        fd = os.open(partial, _NEW, mode, dir_fd=directory)
    except FileExistsError:  # planted again since the unlink: not the name the caller asked for
        raise OSError(errno.EEXIST, "another process makes files of that name here", partial) from None
    try:
        with open(fd, "wb" if isinstance(text, bytes) else "w") as file:
            file.write(text)
        kind = _kind_at(directory, name)
        if kind not in (None, stat.S_IFREG, stat.S_IFLNK):
            raise not_regular(name)
        if replace:
            os.replace(partial, name, src_dir_fd=directory, dst_dir_fd=directory)
        else:
            _link_unless_taken(directory, partial, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=directory)
        raise


def _link_unless_taken(directory: int, partial: str, name: str) -> None:
    """`partial` renamed to `name` unless something is there (FileExistsError): a hard link
    fails if it is, at once; where the file system has no hard links (vfat), the name is
    looked at first."""
    try:
        os.link(partial, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP):
            raise
        if _kind_at(directory, name) is not None:
            raise FileExistsError(errno.EEXIST, "File exists", name) from None
        os.replace(partial, name, src_dir_fd=directory, dst_dir_fd=directory)
    else:
        os.unlink(partial, dir_fd=directory)


def _kind_at(directory: int, name: str) -> int | None:
    """What is at `name` (stat.S_IFREG, S_IFLNK, ...), links not followed; None if nothing."""
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def open_regular(path: Path | str) -> BinaryIO:
    """`path` opened for reading if it is a regular file (a link to one is followed);
    OSError otherwise, at once: a FIFO is never waited on, a device never read."""
    fd = os.open(path, _READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise not_regular(path)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int) -> bytes:
    """The whole of the regular file `path`, if it holds at most `limit` bytes (a sparse or
    growing file is not read past it); OSError otherwise."""
    with open_regular(path) as file:
        return _read_at_most(file, path, limit)


def read_owned(path: Path | str, uid: int, limit: int) -> bytes:
    """The whole of `path` if it is a regular file owned by `uid` of at most `limit` bytes, a file
    another user may have put in its place: a link at its name is not followed and a FIFO not
    waited on. OSError otherwise (FileNotFoundError when nothing is there)."""
    fd = os.open(path, _READ | os.O_NOFOLLOW)
    with open(fd, "rb") as file:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise not_regular(path)
        if status.st_uid != uid:
            raise OSError(errno.EPERM, f"owned by uid {status.st_uid}, not by the process's {uid}", str(path))
        return _read_at_most(file, path, limit)


def read_given(path: Path | str, limit: int) -> bytes:
    """A file the user named to be read, such as a folded file: a regular file as read_regular
    reads it, or a pipe (a shell's <(command)), read to its end or `limit`; never a device."""
    # Opened without waiting (a FIFO's writer is waited for below, a device's carrier never)
    with open(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK), "rb") as file:
        kind = stat.S_IFMT(os.fstat(file.fileno()).st_mode)
        if kind == stat.S_IFIFO:
            return _read_pipe(file.fileno(), path, limit)
        if kind != stat.S_IFREG:
            raise not_regular(path)
        os.set_blocking(file.fileno(), True)
        return _read_at_most(file, path, limit)


# How long a pipe's reader sleeps at most before Python runs a signal's handler: a Ctrl-C that
# comes just before a blocking read(2) would never interrupt it.
PIPE_POLL_S = 0.2


def _read_pipe(fd: int, path: Path | str, limit: int) -> bytes:
    """A pipe read to its end (its writer gone) or to `limit`, waiting for its writer as long as it
    takes. Linux says a FIFO readable only once a writer came: its end, read as b'', is a real end."""
    chunks: list[bytes] = []
    size = 0
    while True:
        readable, _, _ = select.select([fd], [], [], PIPE_POLL_S)
        if not readable:
            continue
        try:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        except BlockingIOError:  # another reader took it first
            continue
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise too_large(path, limit)


def _read_at_most(file: BinaryIO, path: Path | str, limit: int) -> bytes:
    """All of `file` if it holds at most `limit` bytes; a regular file larger than that is
    refused by its size, without reading its zeros if sparse, and a stream or a file that grows
    meanwhile is read no further than one byte past it."""
    if os.fstat(file.fileno()).st_size > limit:  # a pipe's size is 0
        raise too_large(path, limit)
    data = file.read(limit + 1)
    if len(data) > limit:
        raise too_large(path, limit)
    return data


def read_json(path: Path | str, limit: int) -> Any:
    """The JSON value of the regular file `path` of at most `limit` bytes: OSError if it cannot
    be read so, ValueError if it is not JSON (nested too deeply for Python included)."""
    data = read_regular(path, limit)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply to be offcpu's") from None
