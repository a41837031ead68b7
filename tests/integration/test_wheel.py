"""The release wheel (scripts/build-wheel) installs and records where no build tool is: a
fresh virtual environment, made and filled by pip in a mount namespace that hides the C
compilers, Rust and libelf's and zlib's headers, runs `offcpu doctor` and records an example
for 1 s."""

from __future__ import annotations

import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, example

BUILD_BUDGET_S = 1800  # a hang guard: a first build compiles the core, libbpf, libelf and zlib (minutes on 2 CPUs)
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "rustc", "cargo")
HEADERS = ("libelf.h", "gelf.h", "zlib.h")
# What a manylinux wheel may link: glibc's own libraries (auditwheel's policy), nothing else
GLIBC_LIBRARIES = re.compile(r"lib(c|m|dl|pthread|rt|util)\.so\.\d+|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2")

ELSEWHERE = """
set -euo pipefail
for path in "$@"; do mount --bind /dev/null "$path"; done
for directory in "$HOME/.cargo" "$HOME/.rustup"; do [ ! -d "$directory" ] || mount -t tmpfs hidden "$directory"; done
for tool in cc gcc clang rustc cargo; do
    if "$tool" --version >/dev/null 2>&1; then echo "$tool still runs" >&2; exit 3; fi
done
/usr/bin/python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "$WHEEL"
"$VENV/bin/offcpu" doctor
"$VENV/bin/offcpu" record -d 1 -o "$CAPTURE" -- "$EXAMPLE" -s 1
"$VENV/bin/offcpu" report text "$CAPTURE"
"""


@pytest.fixture(scope="module")
def wheel() -> Path:
    built = subprocess.run([str(ROOT / "scripts" / "build-wheel")], capture_output=True, text=True,
                           timeout=BUILD_BUDGET_S, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout + built.stderr[-3000:]
    return ROOT / built.stdout.strip().splitlines()[-1]


def hidden_build_tools() -> list[str]:
    """The compilers' executables and the headers a build of the core would need, as real paths."""
    found = [f"/usr/bin/{name}" for name in COMPILERS] + [f"/usr/include/{name}" for name in HEADERS]
    return sorted({os.path.realpath(path) for path in found if os.path.exists(path)})


def test_the_wheel_is_abi3_manylinux_with_the_core_and_only_glibc_linked(wheel: Path) -> None:
    # Given the release wheel
    assert wheel.name.startswith("offcpu-") and "-cp311-abi3-" in wheel.name, wheel.name
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64"} <= set(wheel.stem.split("-")[-1].split(".")), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        [core] = [name for name in archive.namelist() if name.startswith("offcpu/_core") and name.endswith(".so")]
        core_bytes = archive.read(core)
    # then its core embeds the BPF object: an ELF inside the library whose machine is BPF (247)
    embedded = [found.start() for found in re.finditer(b"\x7fELF", core_bytes) if found.start() > 0]
    assert any(core_bytes[at + 18:at + 20] == (247).to_bytes(2, "little") for at in embedded), embedded
    # and links glibc's libraries only: no libelf, zlib or libbpf of the machine
    library = Path(os.environ.get("TMPDIR", "/tmp")) / f"offcpu-wheel-core-{os.getpid()}.so"
    library.write_bytes(core_bytes)
    try:
        dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    finally:
        library.unlink()
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert needed and all(GLIBC_LIBRARIES.fullmatch(name) for name in needed), needed


def test_the_wheel_installs_and_records_where_no_build_tool_is(wheel: Path, tmp_path: Path) -> None:
    # Given a mount namespace where no compiler, Rust or libelf header is
    hidden = hidden_build_tools()
    assert any(path.endswith("libelf.h") for path in hidden) and any("clang" in path for path in hidden), hidden
    environment = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"} | {
        "VENV": str(tmp_path / "venv"), "WHEEL": str(wheel), "CAPTURE": str(tmp_path / "capture"),
        "EXAMPLE": str(example("mmap_contention"))}
    # When pip installs the wheel in a fresh virtual environment there, and offcpu checks the
    # machine and records an example for 1 s
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", ELSEWHERE, "bash",
                           *hidden], env=environment, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    # Then doctor says it can record, and the recording's report names the mmap_lock contention
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "offcpu can record here." in done.stdout
    assert "Threads wait for the process's memory-map lock (mmap_lock)" in done.stdout, done.stdout[-3000:]
