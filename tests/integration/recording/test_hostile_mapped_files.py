"""A BPF recording reads, as root, the build id of each file its processes map, at the path the
process's memory maps name. That path is the one in the process's own mount namespace: in
offcpu's, whoever may write there puts what they like (a process in a user namespace of its
own mounts what it likes at a directory of its user's): a FIFO, a link to a device, a sparse
20 GB file. The recording skips such a file, and ends on time."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import run_offcpu
from tests.hostile_files import PLANTS

# Maps the first page of a file executable, says so, then switches until it is killed
MAPPER = ("import mmap, sys, time\n"
          "file = open(sys.argv[1], 'rb')\n"
          "mapped = mmap.mmap(file.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_EXEC)\n"
          "print('mapped', flush=True)\n"
          "while True:\n"
          "    time.sleep(0.001)\n")
DURATION_S = 0.5
RECORDING_TIMEOUT_S = 30  # a recording of DURATION_S, with room for a loaded machine


@pytest.mark.parametrize("plant", PLANTS)
def test_a_mapped_file_whose_path_names_what_cannot_be_read_is_skipped(tmp_path, plant):
    mounted = tmp_path / "mnt"
    mounted.mkdir()
    mapped = mounted / "library.so"
    # In a mount namespace of its own, a tmpfs at `mounted` holds the file the process maps
    program = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount -t tmpfs none "$1" && head -c 8192 /dev/urandom > "$2" && exec "$3" -c "$4" "$2"', "sh",
         str(mounted), str(mapped), sys.executable, MAPPER], stdout=subprocess.PIPE, text=True)
    try:
        assert program.stdout is not None and program.stdout.readline() == "mapped\n"
        plant(mapped)  # outside its namespace, at the same path
        capture = tmp_path / "cap"
        started = time.monotonic()
        result = run_offcpu("record", "--backend", "bpf", "--pid", str(program.pid), "-d", str(DURATION_S), "-o",
                            str(capture), timeout=RECORDING_TIMEOUT_S)
    finally:
        program.kill()
        program.wait()
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < RECORDING_TIMEOUT_S
    maps = json.loads((capture / "bpf-maps.json").read_text())["snapshots"]
    entries = [entry for snapshot in maps for entry in snapshot["maps"] if entry["path"] == str(mapped)]
    assert entries and all(entry["build_id"] is None for entry in entries), entries
