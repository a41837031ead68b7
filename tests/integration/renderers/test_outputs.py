"""Where reports and verdicts are written: -o, --junit and --json onto devices, pipes and
symbolic links (only regular files and links are replaced, the link itself and never where it
leads; root's or the user's device or pipe is written to, another user's is refused, and a disk
is never written), and a stdout that is full, closed or has lost its reader."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from offcpu.renderers.console import MAX_WIDTH
from tests.conftest import OFFCPU, assert_one_line_error, example, run_offcpu

NULL_DEVICE = os.makedev(1, 3)  # what /dev/null is
UNUSED_BLOCK_DEVICE = os.makedev(240, 0)  # major 240: "local/experimental use", no driver behind it
NOBODY = 65534  # a user other than root and the one running the tests


def device_node(path: Path, kind: int, number: int) -> Path:
    os.mknod(path, kind | 0o666, number)
    return path


def assert_still_device(path: Path, kind: int, number: int) -> None:
    mode = path.lstat().st_mode
    assert stat.S_IFMT(mode) == kind and path.lstat().st_rdev == number, oct(mode)


@pytest.mark.parametrize("report", ["text", "json", "svg"])
def test_a_character_device_is_written_to_not_replaced(mmap_capture, tmp_path, report):
    null = device_node(tmp_path / "null", stat.S_IFCHR, NULL_DEVICE)
    for force in ([], ["--force"]):  # nothing to lose in a device: --force changes nothing
        result = run_offcpu("report", report, str(mmap_capture), "-o", str(null), *force)
        assert result.returncode == 0, result.stderr
        assert_still_device(null, stat.S_IFCHR, NULL_DEVICE)
    assert sorted(tmp_path.iterdir()) == [null]  # no partial file left beside it


def test_a_block_device_is_refused(mmap_capture, tmp_path):
    disk = device_node(tmp_path / "disk", stat.S_IFBLK, UNUSED_BLOCK_DEVICE)
    result = run_offcpu("report", "text", str(mmap_capture), "-o", str(disk), "--force")
    assert_one_line_error(result, str(disk), "block device", "-o")
    assert_still_device(disk, stat.S_IFBLK, UNUSED_BLOCK_DEVICE)


def test_a_fifo_with_a_reader_gets_the_report(mmap_capture, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    try:
        result = run_offcpu("report", "json", str(mmap_capture), "-o", str(fifo), "--force")
        received = reader.communicate(timeout=30)[0]
    finally:
        reader.kill()
        reader.wait()
    assert result.returncode == 0, result.stderr
    assert json.loads(received)["schema"] == "offcpu/1"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_link_to_stdout_writes_to_stdout(mmap_capture, tmp_path):
    # Given a path like /dev/stdout (a link to /proc/self/fd/1), made here so that the real one is never at risk
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    result = run_offcpu("report", "json", str(mmap_capture), "-o", str(stdout), "--force")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["schema"] == "offcpu/1"
    assert stdout.is_symlink() and os.readlink(stdout) == "/proc/self/fd/1"


def test_a_descriptor_given_as_dev_fd_is_written_to(mmap_capture, tmp_path):
    # Given 'report json CAP -o /dev/fd/3 3>FILE', as a shell's >(command) hands one over
    received = tmp_path / "received.json"
    with received.open("w") as file:
        result = subprocess.run([str(OFFCPU), "report", "json", str(mmap_capture), "-o", f"/dev/fd/{file.fileno()}"],
                                capture_output=True, text=True, pass_fds=(file.fileno(),), timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(received.read_text())["schema"] == "offcpu/1"


def test_a_closed_stdout_named_as_dev_stdout_is_no_file_to_make(mmap_capture):
    result = subprocess.run([str(OFFCPU), "report", "json", str(mmap_capture), "-o", "/dev/stdout", "--force"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                            preexec_fn=lambda: os.close(1))
    assert_one_line_error(result, "/dev/stdout", "no file in /dev or /proc")
    assert Path("/dev/stdout").is_symlink()


def test_a_symbolic_link_is_replaced_never_written_through(mmap_capture, tmp_path):
    # Given a link planted where root writes a report, leading to a file root can write
    victim = tmp_path / "victim"
    victim.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(victim)
    # Without --force it is an existing output, kept
    assert_one_line_error(run_offcpu("report", "json", str(mmap_capture), "-o", str(link)), "exists", "--force")
    # With it, the link itself is replaced by the report; what it led to is untouched
    result = run_offcpu("report", "json", str(mmap_capture), "-o", str(link), "--force")
    assert result.returncode == 0, result.stderr
    assert not link.is_symlink() and json.loads(link.read_text())["schema"] == "offcpu/1"
    assert victim.read_text() == "old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.json", "victim"]


def test_a_dangling_symbolic_link_makes_no_file_where_it_leads(mmap_capture, tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "new.txt")
    assert_one_line_error(run_offcpu("report", "text", str(mmap_capture), "-o", str(link)), "exists", "--force")
    result = run_offcpu("report", "text", str(mmap_capture), "-o", str(link), "--force")
    assert result.returncode == 0, result.stderr
    assert not link.is_symlink() and link.read_text().startswith("Off-CPU time of mmap_contention")
    assert not (tmp_path / "new.txt").exists()


def test_the_default_output_beside_the_capture_is_not_written_through_a_link(mmap_capture, tmp_path):
    capture = tmp_path / "cap"
    shutil.copytree(mmap_capture, capture)
    victim = tmp_path / "victim"
    victim.write_text("old")
    (tmp_path / "cap.html").symlink_to(victim)
    assert_one_line_error(run_offcpu("report", "html", str(capture)), "cap.html", "exists", "--force")
    assert victim.read_text() == "old"


def test_a_pipe_another_user_owns_is_refused(mmap_capture, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    result = run_offcpu("report", "json", str(mmap_capture), "-o", str(fifo), "--force")
    assert_one_line_error(result, str(fifo), "another user owns", "-o")


def test_check_writes_its_verdicts_to_devices_and_replaces_links(example_capture, tmp_path):
    null = device_node(tmp_path / "null", stat.S_IFCHR, NULL_DEVICE)
    victim = tmp_path / "victim"
    victim.write_text("old")
    link = tmp_path / "link.xml"
    link.symlink_to(victim)
    capture = str(example_capture("idle_pool"))
    refused = run_offcpu("check", "--junit", str(link), "--json", str(null), capture)
    assert_one_line_error(refused, str(link), "exists", "--force")
    result = run_offcpu("check", "--junit", str(link), "--json", str(null), "--force", capture)
    assert result.returncode == 0, result.stderr
    assert_still_device(null, stat.S_IFCHR, NULL_DEVICE)
    assert not link.is_symlink() and ElementTree.parse(link).getroot().tag == "testsuites"
    assert victim.read_text() == "old"


@pytest.fixture
def full_disk(tmp_path):
    """A directory on a 64 KiB tmpfs filled to the last byte; unmounted afterwards."""
    point = tmp_path / "full"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], check=True)
    try:
        with open(point / "filler", "wb", buffering=0) as filler:
            with pytest.raises(OSError, match="No space left"):
                while True:
                    filler.write(b"\0" * 4096)
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)


def offcpu_with_stdout(args: list[str], stdout, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The offcpu command with its stdout going to `stdout` (a file, a pipe)."""
    return subprocess.run([str(OFFCPU), *args], stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True, timeout=120, cwd=cwd)


def stdout_commands(capture: str) -> list[list[str]]:
    """A command of each kind that prints on stdout."""
    return [["report", "json", capture], ["report", "text", capture], ["report", "folded", capture],
            ["report", "diff", "--text", capture, capture], ["check", capture], ["doctor"]]


def test_stdout_on_a_full_disk_is_one_line(example_capture, full_disk):
    for args in stdout_commands(str(example_capture("idle_pool"))):
        with open(full_disk / "out", "w") as stdout:
            result = offcpu_with_stdout(args, stdout)
        assert_one_line_error(result, "cannot write to stdout", "No space left on device")


def test_a_report_file_on_a_full_disk_is_one_line(example_capture, full_disk):
    result = run_offcpu("report", "json", str(example_capture("idle_pool")), "-o", str(full_disk / "r.json"))
    assert_one_line_error(result, str(full_disk / "r.json"), "No space left on device", "-o")
    assert sorted(path.name for path in full_disk.iterdir()) == ["filler"]  # no partial file left


def test_a_reader_that_went_away_ends_offcpu_quietly(example_capture):
    # Given stdout a pipe whose reader has gone (as '| head -c 10' does once it has read enough)
    for args in stdout_commands(str(example_capture("idle_pool"))):
        process = subprocess.Popen([str(OFFCPU), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True)
        process.stdout.close()
        stderr = process.communicate(timeout=120)[1]
        # Then it stops as a program killed by SIGPIPE would (the shell's 141), saying nothing
        assert process.returncode == 128 + signal.SIGPIPE and stderr == "", (args, process.returncode, stderr)


def test_a_report_to_dev_stdout_whose_reader_went_away_ends_quietly(example_capture):
    # Given 'report html -o /dev/stdout | head -c 10' once head has gone: the report goes to
    # stdout through its link
    process = subprocess.Popen([str(OFFCPU), "report", "html", str(example_capture("idle_pool")), "-o", "/dev/stdout"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    process.stdout.close()
    stderr = process.communicate(timeout=120)[1]
    # Then offcpu ends as cat would: 141, saying nothing
    assert process.returncode == 128 + signal.SIGPIPE and stderr == b"", (process.returncode, stderr)


def test_a_closed_stdout_is_one_line(example_capture):
    for args in stdout_commands(str(example_capture("idle_pool"))):
        result = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", str(OFFCPU), *args], capture_output=True,
                                text=True, timeout=120)
        assert_one_line_error(result, "stdout is closed")


def test_a_stderr_reader_that_went_away_ends_offcpu_quietly(example_capture, tmp_path):
    # Given stderr a pipe whose reader has gone ('2>&1 | head -1' once head has its line)
    target = tmp_path / "report.json"
    process = subprocess.Popen([str(OFFCPU), "report", "json", str(example_capture("idle_pool")), "-o", str(target)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    process.stderr.close()
    # Then the report is written, and saying so fails quietly: 141, as for stdout, not 1 ("found a problem")
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
    assert json.loads(target.read_text())["schema"] == "offcpu/1"


def test_a_reader_that_goes_away_midway_ends_offcpu_as_sigpipe_would(mmap_capture):
    # Given a report longer than its pipe holds, read by one that stops after the first line ('| head -1')
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # the smallest pipe: the report does not fit in it
    process = subprocess.Popen([str(OFFCPU), "report", "text", "--top", "100000", "--by-thread", str(mmap_capture)],
                               stdout=write_end, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    os.close(write_end)
    with open(read_end) as reader:
        first = reader.readline()
    stderr = process.communicate(timeout=120)[1]
    # Then offcpu does not take the part the pipe took for the whole: it ends as a shell shows SIGPIPE's end
    assert first.startswith("Off-CPU time of mmap_contention")
    assert process.returncode == 128 + signal.SIGPIPE and stderr == "", (process.returncode, stderr)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_a_stdout_in_another_encoding_gets_the_report(mmap_capture, encoding):
    # Given a stdout set up in an encoding without some of what a report prints (latin-1 has no "…")
    for args in (["report", "text", str(mmap_capture)], ["report", "diff", "--text", str(mmap_capture),
                                                         str(mmap_capture)]):
        result = subprocess.run([str(OFFCPU), *args], capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONIOENCODING": encoding})
        # Then the report is printed in it, what it cannot hold as '?', and no traceback
        assert result.returncode == 0 and result.stderr == b"", result.stderr.decode()
        text = result.stdout.decode(encoding)
        assert text.startswith(("Off-CPU time of mmap_contention", "The 0 stacks", "No stack grew")), text[:200]


def test_a_huge_columns_is_bounded(mmap_capture):
    # Given COLUMNS far wider than any terminal (100000000 took 20 s and 5 GB)
    for args in (["report", "text", str(mmap_capture)], ["report", "diff", "--text", str(mmap_capture),
                                                         str(mmap_capture)], ["check", str(mmap_capture)]):
        result = run_offcpu(*args, env={**os.environ, "COLUMNS": "100000000"})
        # Then the report is made as MAX_WIDTH columns at most
        assert result.returncode in (0, 1), result.stderr
        assert max(len(line) for line in result.stdout.splitlines()) <= MAX_WIDTH


def file_digests(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


def test_no_output_is_a_file_of_a_capture_being_read(example_capture, tmp_path):
    # Given two captures, each with its saved model
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(example_capture("futex_contention"), first)
    shutil.copytree(example_capture("futex_contention_fixed"), second)
    for capture in (first, second):
        assert run_offcpu("report", "json", str(capture)).returncode == 0
    before = {capture: file_digests(capture) for capture in (first, second)}
    link = tmp_path / "looks-harmless.json"
    link.symlink_to(first / "model.json")
    # When a report or a verdict is to be written over one of their files, --force or not
    for args, option in ((["report", "text", str(first), "-o", str(first / "perf.data")], "-o"),
                         (["report", "svg", str(first), "-o", str(first / "capture.json")], "-o"),
                         (["report", "json", str(first), "-o", str(link)], "-o"),
                         (["report", "html", str(first), "-o", str(first / "kallsyms")], "-o"),
                         (["check", str(first), "--json", str(first / "capture.json")], "--json"),
                         (["check", str(first), "--junit", str(first / "model.json")], "--junit"),
                         (["report", "diff", str(first), str(second), "-o", str(first / "perf.data")], "-o")):
        result = run_offcpu(*args, "--force")
        # Then it is refused before any work, and the captures are as they were
        assert_one_line_error(result, "is a file of the capture", "which this command reads", option)
    assert {capture: file_digests(capture) for capture in (first, second)} == before


def test_a_folded_input_is_not_overwritten_by_the_diff(example_capture, tmp_path):
    folded = tmp_path / "before.folded"
    folded.write_text(run_offcpu("report", "folded", str(example_capture("futex_contention"))).stdout)
    result = run_offcpu("report", "diff", str(folded), str(example_capture("futex_contention_fixed")), "-o",
                        str(folded), "--force")
    assert_one_line_error(result, str(folded), "which this command reads", "-o")
    assert folded.read_text().endswith("\n") and " " in folded.read_text().splitlines()[0]


def test_check_does_not_record_over_its_baseline(example_capture, tmp_path):
    # Given a baseline capture
    baseline = tmp_path / "base"
    shutil.copytree(example_capture("idle_pool"), baseline)
    before = file_digests(baseline)
    # When a check is to record into it, with --force
    result = run_offcpu("check", "-o", str(baseline), "--force", "--baseline", str(baseline), "--",
                        str(example("idle_pool")), "-s", "0.5")
    # Then it is refused before recording, and the baseline is as it was
    assert_one_line_error(result, str(baseline), "which this command reads", "-o")
    assert file_digests(baseline) == before


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_reports_are_as_private_as_their_capture(example_capture, tmp_path):
    # Given a capture as recorded (its files its owner's alone), and a copy its owner made readable by all
    private = tmp_path / "private"
    shared = tmp_path / "shared"
    for capture in (private, shared):
        shutil.copytree(example_capture("futex_contention"), capture)
    for path in shared.iterdir():
        path.chmod(0o644)
    assert mode(private / "capture.json") == 0o600
    for capture, expected in ((private, 0o600), (shared, 0o644)):
        # When reports and verdicts are written beside it, or anywhere with -o
        written = [capture.with_name(capture.name + ".svg"), capture.with_name(capture.name + ".html"),
                   tmp_path / f"{capture.name}.txt", tmp_path / f"{capture.name}.xml",
                   tmp_path / f"{capture.name}.verdict.json"]
        for args in (["report", "svg", str(capture)], ["report", "html", str(capture)],
                     ["report", "text", str(capture), "-o", str(written[2])],
                     ["check", str(capture), "--junit", str(written[3]), "--json", str(written[4])]):
            assert run_offcpu(*args).returncode in (0, 1)
        # Then they are as readable as the capture, no more
        assert {path.name: mode(path) for path in written} == {path.name: expected for path in written}
