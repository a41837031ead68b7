"""Processes offcpu starts: found in the system's directories and given an environment of
their own (offcpu runs as root); and ended with offcpu however it ends: perf finishes its
file and exits, and a reading pool's worker goes, where it would wait forever on its pipes,
when offcpu gets a SIGTERM (`timeout`), a SIGHUP or a SIGKILL."""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil

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


# The system's directories for programs (root's PATH on Debian and most distributions).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the programs offcpu runs may keep of offcpu's environment: the time zone they print times in.
KEPT_VARIABLES = ("TZ",)


def find_program(name: str) -> str | None:
    """Where the program `name` is. As root, in the system's directories only: a PATH that
    `sudo -E` kept, or a root shell's, may name a directory another user writes to, and what
    is found there runs as root."""
    return shutil.which(name, path=SYSTEM_PATH if os.geteuid() == 0 else None)


def child_environment() -> dict[str, str]:
    """The whole environment of a program offcpu runs for its own ends (perf, perl for
    flamegraph.pl, eu-stack, systemctl, mount). offcpu runs as root and its user's environment
    may hold what would steer those programs: PERL5OPT runs Perl code, PERF_CONFIG changes what
    perf records and prints, LD_PRELOAD loads a library into each, a PATH finds other programs.
    So they get none of it: the system's PATH, a fixed locale (their output is parsed), the
    time zone, and the home directory of the user offcpu runs as (perf keeps its build-id
    cache there), from the system's user database rather than from $HOME."""
    environment = {"PATH": SYSTEM_PATH, "LC_ALL": "C.UTF-8", "HOME": pwd.getpwuid(os.geteuid()).pw_dir}
    environment.update((name, os.environ[name]) for name in KEPT_VARIABLES if name in os.environ)
    return environment
