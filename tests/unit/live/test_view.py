"""How offcpu top names a wait site: by the lock table, with the program's own frame where a
runtime's read joined one to the wait (hand-worked stacks)."""

from __future__ import annotations

from offcpu.diagnosis.locktable import load_table
from offcpu.live.view import site_name
from offcpu.stacks import Stack

FUTEX = ("__schedule", "schedule", "futex_do_wait", "__futex_wait", "futex_wait", "do_futex", "__x64_sys_futex")
SLEEP = ("__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_nanosleep")


def test_a_site_is_named_by_its_lock_and_the_programs_own_frame() -> None:
    table = load_table()
    python = ("main.<locals>.work (python_lock:57) [py]", "Thread.run (threading.py:975) [py]")
    java = ("java.lang.Thread.sleep (Thread.java) [java]", "LockSleep.pause (LockSleep.java:41) [java]")
    # a wait no read joined: the frame the lock table matched
    assert site_name(Stack((*FUTEX, "__futex_abstimed_wait_common"), len(FUTEX)), table, 60) == "futex (futex_do_wait)"
    # one that a read of its Python stack joined: the innermost of them
    assert site_name(Stack((*FUTEX, "__futex_abstimed_wait_common", *python), len(FUTEX)), table, 60) == \
        "futex at main.<locals>.work (python_lock:57)"
    # the program's frame rather than the JDK's it called, cut to the width
    assert site_name(Stack((*SLEEP, "__nanosleep", *java), len(SLEEP)), table, 60) == \
        "sleep at LockSleep.pause (LockSleep.java:41)"
    assert site_name(Stack((*SLEEP, "__nanosleep", *java), len(SLEEP)), table, 12) == "sleep at Loc"
