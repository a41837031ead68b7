"""offcpu doctor --pid reads the binary a process runs, as root: a damaged ELF file there is
said to be unreadable, never a traceback."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess

from tests.conftest import example, run_offcpu, wait_for_exec

# Elf64_Ehdr up to e_shoff, where its section headers are: e_ident, e_type, e_machine, e_version,
# e_entry, e_phoff
BEFORE_SECTION_HEADERS = struct.calcsize("<16sHHIQQ")


def test_a_binary_whose_section_headers_are_past_its_end_cannot_be_read(tmp_path):
    """The kernel runs a program without its section headers; doctor reads them."""
    binary = tmp_path / "idle_pool"
    shutil.copy(example("idle_pool"), binary)
    with open(binary, "r+b") as file:
        file.seek(BEFORE_SECTION_HEADERS)
        file.write(struct.pack("<Q", (1 << 63) + 12345))
    program = subprocess.Popen([str(binary), "-t", "1", "-s", "30"], stdout=subprocess.DEVNULL)
    try:
        wait_for_exec(program.pid, binary)
        result = run_offcpu("doctor", "--pid", str(program.pid), "--json")
    finally:
        program.kill()
        program.wait()
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    target = checks["frame pointers: target binary"]
    assert target["status"] == "info" and target["detail"] == f"{binary}: unknown (cannot read it: a damaged or " \
                                                              "truncated ELF file)"
