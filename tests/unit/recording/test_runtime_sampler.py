"""The runtime sampler forgets the processes it found running no runtime once they are no longer
recorded: a long whole-machine recording would hold every pid it saw, and a pid used again by a
Python program would never be read."""

from __future__ import annotations

import os
from pathlib import Path

from offcpu.recording.runtime_stacks import RuntimeSampler

GONE = 4_194_305  # a pid no process has: above the kernel's greatest pid_max (PID_MAX_LIMIT, 4M)
PARENT = os.getppid()  # a process that runs no runtime offcpu reads (pytest's shell or runner)


def test_processes_no_longer_recorded_are_forgotten_as_no_runtimes(tmp_path: Path) -> None:
    sampler = RuntimeSampler(tmp_path)
    # Given GONE and the test's parent found running no runtime, and the parent alone recorded now
    sampler.not_runtime = {GONE, PARENT}
    sampler.offer([PARENT])
    # When the sampler looks for the processes due a read
    due = sampler._due()
    # Then none is due (the parent was found running none), and GONE is forgotten
    assert due == []
    assert sampler.not_runtime == {PARENT}
