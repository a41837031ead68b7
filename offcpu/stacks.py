"""What a call stack says about itself: is it complete, where does it start."""

from __future__ import annotations

from collections.abc import Sequence

# Where every complete user stack begins (outermost frame): a thread's entry
# through clone, or a process's through _start. Not start_thread: a frame-pointer
# walk through a libc without frame pointers ends there after skipping the
# leaf's callers (`__lll_lock_wait;start_thread` with the program's frames lost).
THREAD_ROOTS = frozenset({
    "_start", "clone", "clone3", "__clone", "__clone3", "__GI___clone", "__GI___clone3",
    "__libc_start_main", "__libc_start_call_main", "__libc_start_main_impl",
})
# perf's frame-pointer walker follows garbage past a frameless libc: those frames are unnamed.
UNKNOWN = "[unknown]"


def user_stack_complete(user_frames: Sequence[str]) -> bool:
    """Whether a leaf-first user stack reaches a thread root after any junk."""
    named = [frame for frame in user_frames if frame != UNKNOWN]
    return bool(named) and named[-1] in THREAD_ROOTS


def looks_truncated(user_stacks: Sequence[Sequence[str]]) -> bool | None:
    """Most user stacks stop short of a thread root (None: no user stacks)."""
    if not user_stacks:
        return None
    incomplete = sum(not user_stack_complete(stack) for stack in user_stacks)
    return incomplete > len(user_stacks) / 2
