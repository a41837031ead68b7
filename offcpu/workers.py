"""Worker processes end with offcpu however it ends: a SIGTERM (`timeout`), a SIGHUP or a
SIGKILL leaves no process behind, where a pool's worker would wait forever on its pipes."""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that made it ends


def die_with_parent(parent: int) -> None:
    """In a worker (ProcessPoolExecutor's initializer), as it starts: SIGKILL it when `parent`
    ends. The pool forks its workers from the main thread, which ends only with the process."""
    import ctypes  # in the worker only: the commands start without it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it ended before the line above took effect
        os._exit(1)
