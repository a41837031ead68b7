"""The files a BPF recording writes as root: never through a link someone put at their names,
made private, held to --max-size; and when they cannot be written (the disk fills, a read-only
file system), one line that says so, exit 2, and no half capture left (as with perf)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import OFFCPU, assert_one_line_error, example

START_TIMEOUT_S = 20
END_TIMEOUT_S = 60
SECRET = b"root's file, which no recording may write\n"
MAX_SIZE = "1M"
MAX_SIZE_BYTES = 1 << 20
# The waits in flight when the records reach the limit are written after it (their ends):
# a few thousand records of 112 bytes at most on a test machine
IN_FLIGHT_BYTES = 256 << 10
DISK = "40m"  # offcpu wants 32 MiB free to start recording


def start_recording(output: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(OFFCPU), "record", "--backend", "bpf", "-o", str(output), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def when_recording(output: Path, recording: subprocess.Popen[str]) -> None:
    """Until the programs write their records (bpf-records.bin is made as they attach)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (output / "bpf-records.bin").exists():
        assert recording.poll() is None, recording.communicate()
        assert time.monotonic() < deadline, "the recording never started"
        time.sleep(0.01)


def ended(recording: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = recording.communicate(timeout=END_TIMEOUT_S)
    return subprocess.CompletedProcess(recording.args, recording.returncode, stdout, stderr)


@pytest.fixture
def busy(recording_perf: str) -> Iterator[list[str]]:
    """A command that switches all the time, to record."""
    yield ["--", str(example("futex_contention")), "-t", "4"]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    return path


def written_or_changed(path: Path) -> tuple[int, int, int, int]:
    """What writing to `path` or changing its mode or owner would change (its change time)."""
    status = path.stat()
    return status.st_mode, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def plant_at(output: Path, name: str, secret: Path) -> None:
    """A link to `secret` at the stack table's name, which the core makes only at the end."""
    (output / name).symlink_to(secret)


def put_over(output: Path, name: str, secret: Path) -> None:
    """A link to `secret` renamed over the records the core writes, as another user could in a
    directory of theirs."""
    (output / "planted").symlink_to(secret)
    os.rename(output / "planted", output / name)


@pytest.mark.parametrize("name, plant", [("bpf-stacks.bin", plant_at), ("bpf-records.bin", put_over)],
                         ids=["planted at the stack table", "put over the records"])
def test_a_link_planted_while_recording_is_not_written_through(
        tmp_path: Path, secret: Path, busy: list[str], name: str, plant: Callable[[Path, str, Path], None]) -> None:
    output = tmp_path / "cap"
    before = written_or_changed(secret)
    recording = start_recording(output, "-d", "1.5", *busy)
    when_recording(output, recording)
    plant(output, name, secret)
    result = ended(recording)
    assert_one_line_error(result, name, "replaced by something else")
    assert secret.read_bytes() == SECRET and written_or_changed(secret) == before


def test_a_link_planted_at_the_records_before_the_programs_start_is_refused(
        recording_perf: str, tmp_path: Path, secret: Path) -> None:
    from offcpu import _core

    records = tmp_path / "bpf-records.bin"
    records.symlink_to(secret)
    before = written_or_changed(secret)
    with pytest.raises(FileExistsError):
        _core.BpfRecording(str(records), "thread", [os.getpid()], [], False, 100, 1_000_000)
    assert secret.read_bytes() == SECRET and written_or_changed(secret) == before


def test_the_files_of_a_capture_are_private_whatever_the_umask(tmp_path: Path, busy: list[str]) -> None:
    output = tmp_path / "cap"
    recording = subprocess.run([str(OFFCPU), "record", "--backend", "bpf", "-o", str(output), "-d", "0.5", *busy],
                               capture_output=True, text=True, timeout=END_TIMEOUT_S,
                               preexec_fn=lambda: os.umask(0))
    assert recording.returncode == 0, recording.stderr
    for name in ("bpf-records.bin", "bpf-stacks.bin"):
        mode = (output / name).lstat().st_mode
        assert stat.S_ISREG(mode) and mode & 0o777 == 0o600, (name, oct(mode))


def test_the_records_are_held_to_max_size(tmp_path: Path, busy: list[str]) -> None:
    output = tmp_path / "cap"
    recording = subprocess.run([str(OFFCPU), "record", "--backend", "bpf", "-a", "-d", "20", "--max-size", MAX_SIZE,
                                "-o", str(output), *busy], capture_output=True, text=True, timeout=END_TIMEOUT_S)
    assert recording.returncode == 0, recording.stderr
    info = json.loads((output / "capture.json").read_text())
    written = (output / "bpf-records.bin").stat().st_size
    assert info["ended_by"] == "max size" and info["duration_actual_s"] < 20, info["ended_by"]
    assert MAX_SIZE_BYTES // 2 < written <= MAX_SIZE_BYTES + IN_FLIGHT_BYTES, written
    assert info["perf_data_bytes"] == written


class Disk:
    """A small tmpfs of its own, mounted at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0700", "tmpfs", str(path)], check=True)

    def make_read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=True)


@pytest.fixture
def disk(tmp_path: Path, recording_perf: str) -> Iterator[Disk]:
    mounted = Disk(tmp_path / "disk")
    try:
        yield mounted
    finally:
        mounted.unmount()


def fill(directory: Path) -> None:
    """Write a file in `directory` until its file system has no room left."""
    with open(directory / "filler", "wb", buffering=0) as file:
        block = b"\0" * (1 << 20)
        try:
            while True:
                file.write(block)
        except OSError as error:
            assert error.errno == 28, error  # ENOSPC


def test_a_disk_that_fills_while_recording_ends_it_with_one_line_and_no_half_capture(
        disk: Disk, busy: list[str]) -> None:
    output = disk.path / "cap"
    recording = start_recording(output, "-a", "-d", "10", *busy)
    when_recording(output, recording)
    fill(disk.path)
    started = time.monotonic()
    result = ended(recording)
    assert_one_line_error(result, "full", str(output))
    assert time.monotonic() - started < 8, "the recording ran on after its disk filled"
    assert not output.exists() or not any(output.iterdir()), list(output.iterdir())


@pytest.mark.parametrize("existing", [True, False], ids=["an empty directory", "a directory to make"])
def test_a_read_only_output_directory_is_said_in_one_line(disk: Disk, busy: list[str], existing: bool) -> None:
    if existing:
        (disk.path / "cap").mkdir()
    disk.make_read_only()
    result = subprocess.run([str(OFFCPU), "record", "--backend", "bpf", "-o", str(disk.path / "cap"), "-d", "0.5",
                             *busy], capture_output=True, text=True, timeout=END_TIMEOUT_S)
    assert_one_line_error(result, "Read-only file system")
