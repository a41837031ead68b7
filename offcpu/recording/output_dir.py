"""The capture directory a recording writes into: made or cleared for it, locked while
offcpu records (a second offcpu fails instead of sharing perf.data), and marked until
the capture is whole."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from offcpu.capture import BPF_RECORDS, METADATA, PERF_DATA, RECORDING, is_capture, own_files
from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.files import PARTIAL, PRIVATE, invoking_uid, write_whole

MIN_FREE_BYTES = 32 << 20
REPLACED = f"replaced{PARTIAL}"  # the capture `--force` replaces, kept aside until the new one has its perf.data


@contextmanager
def output_taken(given: Path, force: bool) -> Iterator[Path]:
    """Hold the directory `given` while offcpu records into it; yields it as the path to record
    into (resolved, so that no link another user may change is followed later). It is locked,
    so that a second offcpu fails (exit 2) instead of both writing one perf.data, and marked
    (RECORDING) until the capture is whole, so that what an offcpu that was killed leaves is
    known for an unfinished recording. An existing capture or unfinished recording is replaced
    only with --force, and then only offcpu's files, once the new recording has left a
    perf.data: until then they are kept aside (REPLACED), and put back when it fails. Any other
    directory must be empty. A directory made here and left empty is removed."""
    directory = given.resolve()
    _refuse_unless_trusted_above(directory)
    created = _made(directory)
    with _locked(directory) as fd:
        _refuse_unless_owned(directory, fd)
        if not created:
            _clear_for_capture(directory, force)
        marker = directory / RECORDING
        replaced = directory / REPLACED
        try:
            _make_private(directory, fd)
            _check_free_space(directory)
            try:
                # private as the capture is (it names offcpu's pid), and never written through a link
                write_whole(marker, f"offcpu (pid {os.getpid()}) records here; once it ends this file goes, unless "
                                    "the recording was not finished\n", mode=PRIVATE)
            except OSError as error:
                raise _not_writable(directory, error) from None
            yield directory
        except BaseException:
            if not any((directory / name).exists() for name in (PERF_DATA, BPF_RECORDS)):
                # nothing of a recording is left: nothing to mark
                marker.unlink(missing_ok=True)
                _put_back(replaced, directory)
            shutil.rmtree(replaced, ignore_errors=True)
            if created:
                _remove_if_empty(directory)
            raise
        marker.unlink()
        shutil.rmtree(replaced, ignore_errors=True)


def _made(directory: Path) -> bool:
    """Make `directory` unless it exists; whether it was made here."""
    try:
        directory.mkdir(parents=True)
        return True
    except FileExistsError:
        if not directory.is_dir():
            raise OffcpuError(f"{directory} exists and is not a directory; choose another with -o") from None
        return False
    except OSError as error:
        raise _not_writable(directory, error) from None


@contextmanager
def _locked(directory: Path) -> Iterator[int]:
    """An exclusive lock on `directory` (the kernel releases it however offcpu ends), and a
    descriptor of it (never of where a link put there meanwhile leads)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise _not_writable(directory, error) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OffcpuError(f"another offcpu is recording into {directory}; wait for it to end or choose another "
                              "directory with -o") from None
        yield fd
    finally:
        os.close(fd)


# Root writes a capture's files by their names, so nobody else may rename, add or replace them.
def _refuse_unless_trusted_above(directory: Path) -> None:
    """Each directory above the capture's is root's or the invoking user's and writable by no
    one else (but sticky, as /tmp is, where none may rename another's files)."""
    for above in directory.parents:
        try:
            status = above.stat()
        except FileNotFoundError:
            continue  # made here, by root
        shared = status.st_mode & stat.S_IWOTH or (status.st_mode & stat.S_IWGRP and status.st_gid != 0)
        if status.st_uid not in _trusted_users() or (shared and not status.st_mode & stat.S_ISVTX):
            raise OffcpuError(f"{above}, above {directory}, can be changed by another user, who could swap the "
                              "capture for links to root's files; choose a directory of your own with -o")


def _refuse_unless_owned(directory: Path, fd: int) -> None:
    if os.fstat(fd).st_uid not in _trusted_users():
        raise OffcpuError(f"{directory} belongs to another user, who could replace the capture's files with links "
                          "to root's; choose a directory of your own with -o")


def _make_private(directory: Path, fd: int) -> None:
    """The directory made its owner's alone. If others could write to it, it must be empty now
    (or hold only the capture kept aside): a link planted before is seen, none can be after.
    Its files are private too: capture.json holds the command line."""
    shared = stat.S_IMODE(os.fstat(fd).st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
    try:
        os.fchmod(fd, 0o700)
    except OSError as error:
        raise _not_writable(directory, error) from None
    planted = sorted(set(os.listdir(fd)) - {REPLACED}) if shared else []
    if planted:
        raise OffcpuError(f"{printable(planted[0])} appeared in {directory}, which others could write to, while "
                          "offcpu made way for the capture; choose a directory only you can write to with -o")


def _trusted_users() -> tuple[int, ...]:
    return 0, os.getuid(), invoking_uid()


def _not_writable(directory: Path, error: OSError) -> OffcpuError:
    return OffcpuError(f"cannot write to {directory} ({error.strerror}); choose another directory with -o")


def _check_free_space(directory: Path) -> None:
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE_BYTES:
        raise OffcpuError(f"only {free >> 20} MiB free where {directory} is; free space or record elsewhere with -o")


def _put_back(replaced: Path, directory: Path) -> None:
    """The capture that a recording which failed was to replace, back where it was."""
    if replaced.is_dir():
        for path in replaced.iterdir():
            path.rename(directory / path.name)


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # not empty (a capture, or something else): keep it


def _clear_for_capture(directory: Path, force: bool) -> None:
    """Make way for a new capture: with `force`, offcpu's files are moved aside into REPLACED
    (when an offcpu killed while recording left one there, it holds the last whole capture,
    and the unfinished recording is deleted)."""
    replaced = directory / REPLACED
    if is_capture(directory) or (directory / RECORDING).exists() or replaced.exists():
        if not force:
            what = ("a capture" if is_capture(directory) else
                    f"an unfinished recording (its offcpu was stopped before it wrote {METADATA})")
            raise OffcpuError(f"{directory} already holds {what}; pass --force to replace it or choose another "
                              "directory with -o")
        if replaced.exists() and not is_capture(directory):
            for path in own_files(directory):
                path.unlink()
            return
        shutil.rmtree(replaced, ignore_errors=True)
        replaced.mkdir(mode=0o700)
        for path in own_files(directory):
            path.rename(replaced / path.name)
    elif (directory / PERF_DATA).exists():
        raise OffcpuError(f"{directory} holds a {PERF_DATA} that offcpu did not record (no offcpu {METADATA}); "
                          "move it away or choose another directory with -o")
    elif any(directory.iterdir()):
        raise OffcpuError(f"{directory} exists and is not a capture directory; choose another with -o")
