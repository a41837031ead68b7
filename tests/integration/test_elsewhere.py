"""The unit tests on committed captures pass on a machine that did not record them: there
every file the captures' processes mapped is another file at the same path (another
inode), and perf's build-id cache (~/.debug) is empty. Made here with a mount namespace in
which each such file is a copy bind-mounted over the original, and an empty HOME."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.fixtures import HERE

# perf script --show-mmap-events: "... PERF_RECORD_MMAP2 pid/tid: [start(size) @ offset ...]: r-xp PATH"
MAPPED_FILE = re.compile(r"PERF_RECORD_MMAP2? .*\]: [r-][w-]x[ps] (/\S.*)$", re.MULTILINE)

ELSEWHERE = """
set -euo pipefail
mount -t tmpfs offcpu-elsewhere "$COPIES"
number=0
while IFS= read -r path; do
    number=$((number + 1))
    cp "$path" "$COPIES/$number"
    mount --bind "$COPIES/$number" "$path"
done < "$LIST"
stat -c '%d:%i' "$(head -n 1 "$LIST")"
# the unit tests that read the committed captures
exec "$PYTHON" -m pytest -q -p no:cacheprovider -n auto $(grep -rl --include="test_*.py" "tests.fixtures" tests/unit)
"""


def mapped_files(perf: str) -> list[str]:
    """The files the committed captures' processes mapped executable that this machine has."""
    found: set[str] = set()
    for perf_data in HERE.glob("*/perf.data"):
        shown = subprocess.run([perf, "script", "-i", str(perf_data), "--show-mmap-events", "-F", "comm"],
                               capture_output=True, text=True, errors="replace", check=True).stdout
        found.update(MAPPED_FILE.findall(shown))
    return sorted(path for path in found if os.path.isfile(path) and not os.path.islink(path))


def test_unit_tests_pass_where_every_mapped_file_is_a_copy(perf: str, tmp_path: Path) -> None:
    # Given every file the captures name, copied and mounted over itself, and no perf cache
    files = mapped_files(perf)
    assert any(path.endswith("librocksdb.so.7.8.3") for path in files) and len(files) > 20, files
    (tmp_path / "copies").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "files").write_text("\n".join(files) + "\n")
    environment = {key: value for key, value in os.environ.items() if key != "PERF_BUILDID_DIR"} | {
        "HOME": str(tmp_path / "home"), "COPIES": str(tmp_path / "copies"), "LIST": str(tmp_path / "files"),
        "PYTHON": sys.executable}
    # When the unit tests run there
    done = subprocess.run([shutil.which("unshare") or "unshare", "--mount", "--propagation", "private",
                           "bash", "-c", ELSEWHERE], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=600)
    # Then the first file was another inode there, and every test passed
    inode_there, _, report = done.stdout.partition("\n")
    here = os.stat(files[0])
    assert inode_there != f"{here.st_dev}:{here.st_ino}", inode_there
    assert done.returncode == 0, report[-3000:] + done.stderr[-2000:]
