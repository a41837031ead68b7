from __future__ import annotations

from pathlib import Path

import pytest

from offcpu.machine.framepointers import check_binary, libc_of
from tests.conftest import example


def test_examples_keep_frame_pointers():
    result = check_binary(example("mmap_contention"))
    assert result.verdict == "kept" and result.share is not None and result.share >= 0.5


# Whether a distribution builds its libc with frame pointers, from its announcements:
# Fedora since 38, Ubuntu since 24.04; Debian (12 and 13) does not.
LIBC_FRAME_POINTERS_SINCE = {"debian": None, "fedora": 38.0, "ubuntu": 24.04}


def libc_verdict_here() -> str | None:
    """"kept" or "omitted" as this machine's distribution builds libc (None: not known here)."""
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    distribution = release.get("ID", "").strip('"')
    if distribution not in LIBC_FRAME_POINTERS_SINCE:
        return None
    since = LIBC_FRAME_POINTERS_SINCE[distribution]
    version = release.get("VERSION_ID", "").strip('"')
    if since is None:
        return "omitted"
    return "kept" if version and float(version) >= since else "omitted"


def test_the_system_libc_is_as_its_distribution_builds_it():
    expected = libc_verdict_here()
    if expected is None:
        pytest.skip("how this distribution builds libc is not known here")
    libc = libc_of("self")
    assert libc is not None and "libc" in libc
    assert check_binary(libc).verdict == expected


def test_not_an_elf_file(tmp_path):
    text = tmp_path / "script.sh"
    text.write_text("#!/bin/sh\n")
    assert check_binary(text).verdict == "unknown"
    assert check_binary(tmp_path / "missing").verdict == "unknown"
