from __future__ import annotations

from offcpu.framepointers import check_binary, libc_of
from tests.conftest import example


def test_examples_keep_frame_pointers():
    result = check_binary(example("mmap_contention"))
    assert result.verdict == "kept" and result.share is not None and result.share >= 0.5


def test_debian_libc_omits_them():
    libc = libc_of("self")
    assert libc is not None and "libc" in libc
    assert check_binary(libc).verdict == "omitted"


def test_not_an_elf_file(tmp_path):
    text = tmp_path / "script.sh"
    text.write_text("#!/bin/sh\n")
    assert check_binary(text).verdict == "unknown"
    assert check_binary(tmp_path / "missing").verdict == "unknown"
