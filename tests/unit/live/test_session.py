"""The live directories a killed offcpu left: removed at the next live recording's start, and
nothing else."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from offcpu.live.session import remove_stale


def gone_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def private_directory(path: Path, mode: int = 0o700) -> Path:
    path.mkdir()
    path.chmod(mode)
    return path


def test_only_the_directories_of_gone_offcpu_processes_go(tmp_path: Path) -> None:
    dead = gone_pid()
    stale = private_directory(tmp_path / f"offcpu-live-{dead}-ab12_x")
    (stale / "bpf-maps.json").write_text("{}")
    mine = private_directory(tmp_path / f"offcpu-live-{os.getpid()}-cd34")
    shared = private_directory(tmp_path / f"offcpu-live-{dead}-ef56", 0o755)  # not as offcpu makes them
    unnamed = private_directory(tmp_path / "offcpu-live-abc")  # an older offcpu's, or another's
    target = private_directory(tmp_path / "elsewhere")
    link = tmp_path / f"offcpu-live-{dead}-gh78"
    link.symlink_to(target)
    assert remove_stale(tmp_path) == [stale]
    assert not stale.exists()
    assert all(path.exists() for path in (mine, shared, unnamed, target, link))
