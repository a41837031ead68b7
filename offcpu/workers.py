"""Processes offcpu starts end with it however it ends: perf finishes its file and exits,
and a reading pool's worker goes, where it would wait forever on its pipes, when offcpu
gets a SIGTERM (`timeout`), a SIGHUP or a SIGKILL."""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that made it ends
ORPHANED_EXIT = 127

# Looked up here, once, in offcpu's own process: after fork, while other threads of offcpu
# may hold the dynamic loader's lock, a child must not dlopen (ctypes.CDLL) anything.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def end_with_parent(parent: int, signal_number: int) -> None:
    """In a child, as it starts (before exec, or as a pool's initializer): it gets
    `signal_number` when offcpu (pid `parent`) ends, even by SIGKILL. If offcpu ended before
    the request took effect, nobody is left to ask: it exits. The thread that forks it
    must be the main thread, which ends only with the process."""
    if _prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
        os._exit(ORPHANED_EXIT)
    if os.getppid() != parent:
        os._exit(ORPHANED_EXIT)
