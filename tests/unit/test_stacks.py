from __future__ import annotations

from offcpu.stacks import looks_truncated, user_stack_complete


def test_stack_reaching_clone3_is_complete():
    # leaf first, as perf prints them (from a dwarf recording of futex_contention)
    assert user_stack_complete(["__GI___lll_lock_wait", "___pthread_mutex_lock", "worker", "start_thread", "clone3"])


def test_frame_pointer_walk_through_libc_is_truncated():
    # fp recording: the program's frames between the libc leaf and start_thread are lost
    assert not user_stack_complete(["__GI___lll_lock_wait", "start_thread"])
    assert not user_stack_complete(["__futex_abstimed_wait_common"])
    assert user_stack_complete(["clone3", "[unknown]", "[unknown]"])


def test_majority_decides():
    complete, short = ["main", "__libc_start_call_main"], ["__futex_abstimed_wait_common"]
    assert looks_truncated([short, short, complete]) is True
    assert looks_truncated([complete, complete, short]) is False
    assert looks_truncated([]) is None
