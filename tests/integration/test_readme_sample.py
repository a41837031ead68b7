"""The README's sample output is what scripts/make-readme-picture makes of a fresh BPF
recording of the quick start: the same lines, but for the numbers (and the frames a stack
leaves out to fit, which follow from the numbers' widths)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "make-readme-picture"
BUDGET_S = 120  # a hang guard: a 2 s recording and its text report
MARKER = "<!-- readme-sample"


def readme_sample() -> str:
    """The block after README.md's readme-sample comment."""
    after = (ROOT / "README.md").read_text().split(MARKER, 1)[1]
    block = re.search(r"\n```\n(.*?)```\n", after, re.S)
    assert block, "README.md has no ``` block after its readme-sample comment"
    return block.group(1)


def shape(text: str) -> str:
    """The text with every number as N, a finding's severity as SEV, every stack as its last
    frame (its shortening depends on the room the numbers leave), how a finding's time splits as
    TIME (until woken and waiting for a CPU, or a convoy: it changes from run to run) and every run
    of blanks as one."""
    text = re.sub(r"\[(critical|warning|info)\]", "[SEV]", text)
    text = re.sub(r"\([^()]*of (its|their) time[^()]*\)", "(TIME)", text)
    text = re.sub(r"\S*;(\S+)", r"\1", text)
    text = re.sub(r"\d[\d,.]*", "N", text)
    return " ".join(text.split())


def test_the_readmes_sample_output_is_what_the_script_makes(recording_perf, tmp_path: Path) -> None:
    # Given the excerpt the script makes of a new BPF recording of the quick start
    made = tmp_path / "sample.txt"
    result = subprocess.run([str(SCRIPT), "--sample", str(made)], capture_output=True, text=True, cwd=ROOT,
                            timeout=BUDGET_S, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    # Then the README's sample reads the same, but for its numbers
    assert "recorded with BPF" in made.read_text()
    assert shape(made.read_text()) == shape(readme_sample()), made.read_text()
