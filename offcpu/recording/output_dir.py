"""The capture directory a recording writes into: made or cleared for it, locked while
offcpu records (a second offcpu fails instead of sharing perf.data), and marked until
the capture is whole."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from offcpu.capture import METADATA, PERF_DATA, RECORDING, is_capture, own_files
from offcpu.errors import OffcpuError
from offcpu.files import write_whole

MIN_FREE_BYTES = 32 << 20


@contextmanager
def output_taken(directory: Path, force: bool) -> Iterator[None]:
    """Hold `directory` while offcpu records into it. It is locked, so that a second offcpu
    fails (exit 2) instead of both writing one perf.data, and marked (RECORDING) until the
    capture is whole, so that what an offcpu that was killed leaves is known for an
    unfinished recording. An existing capture or unfinished recording is replaced only
    with --force, and then only offcpu's files are deleted; any other directory must be
    empty. A directory made here and left empty is removed."""
    created = _made(directory)
    with _locked(directory):
        marker = directory / RECORDING
        try:
            if not created:
                _clear_for_capture(directory, force)
            _check_free_space(directory)
            try:
                directory.chmod(0o700)  # its files are the owner's alone too: capture.json holds the command line
                # private as the capture is (it names offcpu's pid), and never written through a link
                write_whole(marker, f"offcpu (pid {os.getpid()}) records here; once it ends this file goes, unless "
                                    "the recording was not finished\n", private=True)
            except OSError as error:
                raise _not_writable(directory, error) from None
            yield
        except BaseException:
            if not (directory / PERF_DATA).exists():  # nothing of a recording is left: nothing to mark
                marker.unlink(missing_ok=True)
            if created:
                _remove_if_empty(directory)
            raise
        marker.unlink()


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
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` (the kernel releases it however offcpu ends)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise _not_writable(directory, error) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OffcpuError(f"another offcpu is recording into {directory}; wait for it to end or choose another "
                              "directory with -o") from None
        yield
    finally:
        os.close(fd)


def _not_writable(directory: Path, error: OSError) -> OffcpuError:
    return OffcpuError(f"cannot write to {directory} ({error.strerror}); choose another directory with -o")


def _check_free_space(directory: Path) -> None:
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE_BYTES:
        raise OffcpuError(f"only {free >> 20} MiB free where {directory} is; free space or record elsewhere with -o")


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # not empty (a capture, or something else): keep it


def _clear_for_capture(directory: Path, force: bool) -> None:
    if is_capture(directory) or (directory / RECORDING).exists():
        if not force:
            what = ("a capture" if is_capture(directory) else
                    f"an unfinished recording (its offcpu was stopped before it wrote {METADATA})")
            raise OffcpuError(f"{directory} already holds {what}; pass --force to replace it or choose another "
                              "directory with -o")
        for path in own_files(directory):
            path.unlink()
    elif (directory / PERF_DATA).exists():
        raise OffcpuError(f"{directory} holds a {PERF_DATA} that offcpu did not record (no offcpu {METADATA}); "
                          "move it away or choose another directory with -o")
    elif any(directory.iterdir()):
        raise OffcpuError(f"{directory} exists and is not a capture directory; choose another with -o")
