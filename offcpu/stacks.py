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


# The scheduler's own frames and the system call entry: every off-CPU stack has
# them, so they say nothing about why this one waited.
PLUMBING = frozenset({
    "__schedule", "schedule", "schedule_preempt_disabled", "schedule_timeout", "schedule_hrtimeout_range",
    "schedule_hrtimeout_range_clock", "io_schedule", "preempt_schedule_common", "entry_SYSCALL_64_after_hwframe",
    "do_syscall_64", "syscall_exit_to_user_mode", "[unknown]",
})


def meaningful(frames: Sequence[str]) -> list[str]:
    """Frames without the scheduler's plumbing (all of them if nothing else is left)."""
    kept = [frame for frame in frames if frame not in PLUMBING]
    return kept or list(frames)


def shorten(frames: Sequence[str], kernel_frames: int, limit: int) -> str:
    """A leaf-first stack in about `limit` characters, callers first and joined by ';':
    the user frames nearest the kernel (where the program was), then the kernel's
    leaf-most meaningful frame (why it waited); '…' marks frames left out."""
    kernel = meaningful(frames[:kernel_frames]) if kernel_frames else []
    user = [frame for frame in frames[kernel_frames:] if frame != UNKNOWN]
    why = kernel[:1]
    where: list[str] = []
    for frame in user:
        if where and len(";".join([frame, *where, "…", *why])) > limit:
            break
        where.insert(0, frame)
    parts = (["…"] if len(where) < len(user) else []) + where + (["…"] if len(kernel) > 1 else []) + why
    return ";".join(parts)
