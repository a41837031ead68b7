"""Files written and read as root where another user may have planted something first: a link
is replaced and never written through, a pipe or a device is never waited on or read, and no
read goes past what its format holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from offcpu.commands.report.common import checked_output
from offcpu.errors import OffcpuError
from offcpu.files import PARTIAL, create_new, read_json, read_regular, write_whole


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file root could write, which a planted link leads to."""
    path = tmp_path / "victim"
    path.write_text("untouched")
    return path


def test_a_link_at_the_name_is_replaced_not_written_through(tmp_path, victim):
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    write_whole(link, "report")
    assert not link.is_symlink() and link.read_text() == "report"
    assert victim.read_text() == "untouched"


def test_a_link_planted_at_the_partial_name_is_not_written_through(tmp_path, victim):
    (tmp_path / ("report.html" + PARTIAL)).symlink_to(victim)
    write_whole(tmp_path / "report.html", "report")
    assert (tmp_path / "report.html").read_text() == "report"
    assert victim.read_text() == "untouched"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.html", "victim"]


def test_without_replace_a_name_taken_meanwhile_is_kept(tmp_path, victim):
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        write_whole(link, "report", replace=False)
    assert link.is_symlink() and victim.read_text() == "untouched"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.html", "victim"]


def test_a_pipe_at_the_name_is_refused(tmp_path):
    fifo = tmp_path / "report.html"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_whole(fifo, "report")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.html"]


def test_a_new_capture_file_is_never_opened_through_a_link(tmp_path, victim):
    (tmp_path / "bpf-records.bin").symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_new(tmp_path / "bpf-records.bin")
    assert victim.read_text() == "untouched"


def test_a_link_planted_after_the_check_is_not_written_through(tmp_path, victim):
    # Given the check done before the report is built, with nothing at the name yet
    output = checked_output(tmp_path / "report.html", force=False, reading=())
    # When a link is planted there meanwhile
    (tmp_path / "report.html").symlink_to(victim)
    # Then writing the report refuses it, in one line, and the file it leads to is untouched
    with pytest.raises(OffcpuError, match="appeared while the report was made; pass --force"):
        output.write("report")
    assert victim.read_text() == "untouched"


@pytest.mark.parametrize("planted", ["fifo", "/dev/zero", "directory"])
def test_only_regular_files_are_read(tmp_path, planted):
    path = tmp_path / "perf.data"
    if planted == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would wait for ever
    elif planted == "directory":
        path.mkdir()
    else:
        path.symlink_to(planted)
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(path, 1 << 20)


def test_a_sparse_file_is_read_no_further_than_its_bound(tmp_path):
    path = tmp_path / "bpf-stacks.bin"
    with path.open("wb") as file:
        file.truncate(20 << 30)  # 20 GiB that take no disk
    with pytest.raises(OSError, match="larger than 1,024 bytes"):
        read_regular(path, 1024)


def test_json_nested_past_pythons_limit_is_a_value_error(tmp_path):
    path = tmp_path / "capture.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_json(path, 1 << 20)
