"""What a call stack says about itself: is it complete, where does it start."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby

from offcpu.escaping import printable

# Synthetic frames for time whose stack could not have been recorded: the readers label such
# stacks with them, and the model shows them.
BEFORE_WINDOW = "[off CPU since before the recording]"
NEW_THREAD = "[new thread, waiting for its first run]"
# The stack of the waker of a wait that ended without a recorded wakeup: its waker was
# not recorded (another process, or an interrupt while an unrecorded thread ran).
WAKER_NOT_RECORDED = "[waker not recorded]"
# The stack of a switch-out whose sched_switch perf lost: only its switch record says when.
STACK_LOST = "[switch-out's stack lost]"
# The stacks a sampling recording (BPF under its stack budget) did not take: the waiter's, the waker's
STACK_NOT_TAKEN = "[stack not sampled]"
WAKER_STACK_NOT_TAKEN = "[waker's stack not sampled]"
# The outermost frame of a stack read from the live process at the end of the recording (a
# thread that never ran in it: offcpu.model.asleep), so that a flame graph tells it from perf's
ASLEEP_ALL_WINDOW = "[asleep all the recording]"


@dataclass(frozen=True, slots=True)
class Stack:
    """A call chain, leaf first; the first `kernel_frames` are kernel frames."""

    frames: tuple[str, ...]
    kernel_frames: int

    @property
    def user_frames(self) -> tuple[str, ...]:
        return self.frames[self.kernel_frames:]


_SUFFIX = re.compile(r"@.*$|\.(?:isra|constprop|part|cold|llvm)\b.*$")


def normal(frame: str) -> str:
    """A frame's name without glibc's internal alias prefix (__GI_), symbol versions
    (@@GLIBC_2.2.5) and compiler clone suffixes (.isra.0, .constprop.0)."""
    return _SUFFIX.sub("", frame).removeprefix("__GI_")


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
UNKNOWN_RUN = "[unknown ×"  # how a drawn stack writes a run of them, "[unknown ×120]"
# The tracing machinery a kernel stack taken in a tracepoint's probe may begin in: a BPF
# program's (the program, the tracepoint's call into it), and perf's too when a BPF program
# is attached to the same tracepoint (the iterator that calls both). perf's stack alone
# begins at the tracepoint's caller (__schedule, try_to_wake_up).
TRACING_FRAMES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_", "bpf_get_stack", "__bpf_get_stack")


# How a frame of a runtime's own (read from the program's runtime, not walked in native code:
# offcpu.runtime_frames) ends, by runtime: `work (app.py:57) [py]`,
# `MonitorSleep.pause (MonitorSleep.java:36) [java]`, `JS:*work (app.js:12) [js]` (V8's perf map:
# offcpu.recording.perf_maps)
RUNTIME_MARKS = {"CPython": "[py]", "HotSpot": "[java]", "V8": "[js]", "MRI": "[rb]"}
RUNTIME_MARK = "[runtime]"  # a runtime without a mark of its own
JDK_PACKAGES = ("java.", "javax.", "jdk.", "sun.")  # whose frames are the JVM's library, not the program's
_RUNTIME_ENDINGS = tuple(f") {mark}" for mark in (*RUNTIME_MARKS.values(), RUNTIME_MARK))


# What a runtime says its thread waits for, as a frame innermost of its runtime frames
# (offcpu.runtime_frames): `[waiting to lock a java.lang.Object]`, and the thread
# that held it then, `[held by worker-2: java.lang.Thread.sleep at MonitorSleep.pause (MonitorSleep.java:36)]`.
# The lock table names the waits by them (locks.toml: Java monitor, ReentrantLock).
_WAITED_FOR = re.compile(r"\[(?:waiting to lock|waiting to re-lock in wait\(\)|parking to wait for|waiting on) "
                         r"(a .+)\]")
HELD_BY = "[held by "
# What a Ruby thread waits to lock, as a Java one a monitor: `[waiting to lock a Thread::Mutex]`
RUBY_MUTEX = "Thread::Mutex"
# What a Ruby thread's own fields say it waits for where there is no object to name
# (offcpu.recording.mri_stacks): `[waiting for Ruby's GVL]`
RUBY_WAITS = ("waiting for Ruby's GVL", "waiting for another thread to end (Thread#join)",
              "asleep until another thread wakes it (Queue#pop, ConditionVariable#wait, sleep)")


def waited_for(frame: str) -> str | None:
    """The object a runtime's wait frame names (`a java.lang.Object`); None for any other frame."""
    found = _WAITED_FOR.fullmatch(frame)
    return found[1] if found else None


def held_by(frame: str) -> str | None:
    """Who held what a runtime's thread waited for, from its holder frame
    (`worker-2: java.lang.Thread.sleep at ...`); None for any other frame."""
    return frame[len(HELD_BY):-1] if frame.startswith(HELD_BY) and frame.endswith("]") else None


def runtime_frame(frame: str) -> bool:
    """Whether a frame is a runtime's own (a Python function's, `work (app.py:57) [py]`, or what a
    Java thread waits for, `[waiting to lock a java.lang.Object]`), not a native one."""
    return (frame.endswith(_RUNTIME_ENDINGS) or waited_for(frame) is not None or held_by(frame) is not None
            or frame[1:-1] in RUBY_WAITS)


_RUNTIME_PARTS = re.compile(r"(.*?) \((.*?)(?::([0-9]+))?\) \[[a-z]+\]", re.DOTALL)


def runtime_parts(frame: str) -> tuple[str, str, int] | None:
    """A runtime's frame as its function, file (its name) and line (0: none); None for a native frame."""
    found = _RUNTIME_PARTS.fullmatch(frame) if runtime_frame(frame) else None
    return (found[1], found[2], int(found[3] or 0)) if found else None


def program_frame(frames: Sequence[str]) -> str | None:
    """The innermost runtime frame of the program's own among a stack's frames, without its mark:
    `work (app.py:57)`, `LockSleep.pause (LockSleep.java:41)` rather than the JDK's
    `java.lang.Thread.sleep` it called (the JDK's innermost where the stack has no frame of the
    program's). Not what a Java thread waits for, `[waiting to lock a java.lang.Object]`, which
    names no place. None: no runtime frame."""
    named = [(frame, parts[0]) for frame in frames if (parts := runtime_parts(frame)) is not None]
    own = next((frame for frame, function in named if not function.startswith(JDK_PACKAGES)), None)
    chosen = own or (named[0][0] if named else None)
    return chosen.rsplit(" [", 1)[0] if chosen is not None else None


def without_tracing(stack: Stack) -> Stack:
    """`stack` without the tracing machinery its kernel frames begin in (TRACING_FRAMES),
    nor the unnamed frames before it (a BPF program is not in kallsyms), so that every
    stack of a tracepoint begins at its caller, whoever else traced it."""
    cut = 0
    for index, frame in enumerate(stack.frames[:stack.kernel_frames]):
        if frame.startswith(TRACING_FRAMES):
            cut = index + 1
        elif frame != UNKNOWN:
            break
    return Stack(stack.frames[cut:], stack.kernel_frames - cut) if cut else stack


def unknown_run(shortest: int, longest: int) -> str:
    """One frame for runs of `shortest` to `longest` frames perf could not name."""
    if longest == 1:
        return UNKNOWN
    return f"{UNKNOWN_RUN}{shortest}]" if shortest == longest else f"{UNKNOWN_RUN}{shortest}–{longest}]"


def unnamed(frame: str) -> bool:
    """Whether a frame is one perf could not name, or a run of them."""
    return frame == UNKNOWN or frame.startswith(UNKNOWN_RUN)


Runs = list[int]  # the lengths of a stack's runs of unnamed frames, in the order of its frames


@dataclass(frozen=True)
class Part:
    """The user or the kernel part of a stack as it is drawn: root first, each run of unnamed
    frames as one UNKNOWN (see stackview), and the runs' lengths in order."""

    frames: tuple[str, ...]
    runs: Runs


def parts(stack: Stack) -> tuple[Part, Part]:
    """A stack's user and kernel parts, each run of unnamed frames as one."""
    return (_one_frame_a_run(tuple(reversed(stack.user_frames))),
            _one_frame_a_run(tuple(reversed(stack.frames[:stack.kernel_frames]))))


def _one_frame_a_run(frames: tuple[str, ...]) -> Part:
    kept: list[str] = []
    runs: Runs = []
    for frame, run in groupby(frames):
        count = len(list(run))
        if frame == UNKNOWN:
            kept.append(UNKNOWN)
            runs.append(count)
        else:
            kept += [frame] * count
    return Part(tuple(kept), runs)


def runs_said(frames: tuple[str, ...], spans: Iterator[tuple[int, int]]) -> tuple[str, ...]:
    """`frames` with each run's frame saying how many frames it stands for: the shortest and
    longest run (the next of `spans`)."""
    return tuple(unknown_run(*next(spans)) if frame == UNKNOWN else frame for frame in frames)


def wait_site(kernel: Part) -> Part:
    """A stack's kernel part (root first) as the exports and flame graphs draw it: without the
    scheduler's frames at its leaf end, so that its leaf is the wait site, the frame that says
    what the thread waited for (a lock's slow path, a system call's wait); as it is when
    nothing else would be left."""
    end = len(kernel.frames)
    while end and kernel.frames[end - 1] in SCHEDULER:
        end -= 1
    return Part(kernel.frames[:end], kernel.runs) if end else kernel


def drawn_alone(stack: Stack) -> tuple[tuple[str, ...], int]:
    """One stack as it is drawn on its own (a finding's evidence): root first, each run of
    unnamed frames as one frame that says how long it is; and how many (the last) are the kernel's."""
    user, kernel = parts(stack)
    spans = ((length, length) for length in user.runs + kernel.runs)
    return runs_said(user.frames + kernel.frames, spans), len(kernel.frames)


def user_stack_complete(user_frames: Sequence[str]) -> bool:
    """Whether a leaf-first user stack reaches a thread root after any junk."""
    named = [frame for frame in user_frames if frame != UNKNOWN and not runtime_frame(frame)]
    return bool(named) and named[-1] in THREAD_ROOTS


def looks_truncated(user_stacks: Sequence[Sequence[str]]) -> bool | None:
    """Most user stacks stop short of a thread root (None: no user stacks)."""
    if not user_stacks:
        return None
    incomplete = sum(not user_stack_complete(stack) for stack in user_stacks)
    return incomplete > len(user_stacks) / 2


# The scheduler's own frames: the leaf end of every off-CPU kernel stack, they say that the
# thread left the CPU, not what it waited for.
SCHEDULER = frozenset({
    "__schedule", "schedule", "schedule_preempt_disabled", "schedule_timeout", "schedule_hrtimeout_range",
    "schedule_hrtimeout_range_clock", "io_schedule", "io_schedule_timeout", "preempt_schedule_common",
})
# With the system call entry, which most off-CPU stacks have too: they say nothing about why
# this one waited.
PLUMBING = SCHEDULER | {"entry_SYSCALL_64_after_hwframe", "do_syscall_64", "syscall_exit_to_user_mode"}


def meaningful(frames: Sequence[str]) -> list[str]:
    """Frames without the scheduler's plumbing and unnamed frames (all of them if nothing else is left)."""
    kept = [frame for frame in frames if frame not in PLUMBING and not unnamed(frame)]
    return kept or list(frames)


# Taking a lock: between the code that wants it (lock_mm_and_find_vma, __vm_munmap) and the
# slow path it waits in (rwsem_down_read_slowpath, which already says what kind of lock).
LOCK_TAKING = frozenset({
    "down_read", "down_write", "down_read_killable", "down_write_killable", "down_read_interruptible",
    "down_write_interruptible", "mutex_lock", "mutex_lock_killable", "mutex_lock_interruptible",
})


def telling(kernel: Sequence[str]) -> list[str]:
    """Kernel frames (root first) that say what the kernel was doing and why it waited:
    without the scheduler's plumbing, nor the taking of a lock when the frame it waits in
    is there below it."""
    kept = meaningful(kernel)
    return [frame for frame in kept[:-1] if frame not in LOCK_TAKING] + kept[-1:]


class _Shortened:
    """A root-first stack (its last `kernel_frames` the kernel's) as its user frames without
    the unnamed ones and its telling kernel frames, shown in part: the last `users` of the
    one and the last `kernels` of the other, '…' for what is left out. Where a runtime's own
    frames were joined to the stack (a Python program's), they say where the program waited:
    its user frames are those (the native ones are the interpreter's machinery), and where
    comes before why when both do not fit."""

    def __init__(self, frames: Sequence[str], kernel_frames: int) -> None:
        frames = [printable(frame) for frame in frames]  # shown to people
        split = len(frames) - kernel_frames
        self.kernel = telling(frames[split:]) if kernel_frames else []
        self.user = [frame for frame in frames[:split] if not unnamed(frame)] or (
            [] if self.kernel else list(frames[:split]))
        runtime = [frame for frame in self.user if runtime_frame(frame)]
        self.program_first = bool(runtime)
        if runtime:
            self.user = runtime

    def shown(self, users: int, kernels: int) -> str:
        users, kernels = min(users, len(self.user)), min(kernels, len(self.kernel))
        parts = (["…"] if users < len(self.user) else []) + self.user[len(self.user) - users:]
        if kernels < len(self.kernel) and parts[-1:] != ["…"]:
            parts.append("…")
        return ";".join(parts + self.kernel[len(self.kernel) - kernels:])

    @property
    def whole(self) -> str:
        return self.shown(len(self.user), len(self.kernel))

    def fitted(self, limit: int) -> tuple[int, int]:
        """How many user and kernel frames to show in `limit` characters: the kernel's
        leaf-most frame, which says why it waited, then the program's nearest the kernel,
        which says where, and so on in turn while they fit."""
        users, kernels = min(1, len(self.user)), min(1, len(self.kernel))
        if users and kernels and len(self.shown(users, kernels)) > limit:  # why it waited matters most,
            if self.program_first:  # but for the line of the program's own that waited
                kernels = 0
            else:
                users = 0
        while True:
            wider = [(users, kernels + 1)] * (kernels < len(self.kernel)) + [(users + 1, kernels)] * (
                users < len(self.user))
            if users < kernels:
                wider.reverse()
            fitting = [choice for choice in wider if len(self.shown(*choice)) <= limit]
            if not fitting:
                return users, kernels
            users, kernels = fitting[0]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "…"


def shorten(frames: Sequence[str], kernel_frames: int, limit: int) -> str:
    """A root-first stack (its last `kernel_frames` frames the kernel's) in at most `limit`
    characters, joined by ';': the kernel's leaf-most frames, which say why it waited (see
    telling()), and the program's frames nearest the kernel, which say where it was, one
    of each in turn while they fit. '…' marks frames left out; a leaf too long for `limit`
    on its own is cut."""
    stack = _Shortened(frames, kernel_frames)
    return _cut(stack.shown(*stack.fitted(limit)), limit)


def reading(frames: Sequence[str], kernel_frames: int) -> str:
    """How a root-first stack reads however much room it is given: stacks that differ only
    in frames perf could not name or in the scheduler's own read the same, and are one row."""
    return _Shortened(frames, kernel_frames).whole  # what shorten() gives with room for all of it


def shorten_apart(stacks: Sequence[tuple[Sequence[str], int]], limit: int) -> list[str]:
    """Each (frames, kernel_frames) shortened as by shorten(), except stacks that would read
    the same although they differ: they are shown the same number of user and kernel frames
    that tells them all apart, the most that fit `limit` characters; when no such choice
    fits, each is shown from where it parts from every other stack (see _parting), and if
    they still read the same (what that leaves out or cuts is where they differ), from where
    it parts from those it reads the same as; failing that, numbered."""
    parsed = [_Shortened(frames, kernel_frames) for frames, kernel_frames in stacks]
    shown = [stack.shown(*stack.fitted(limit)) for stack in parsed]
    for group in _alike(shown, stacks):
        wholes = {parsed[index].whole for index in group}
        together = ([parsed[index].shown(*choice) for index in group] for choice in _choices(
            max(len(parsed[index].user) for index in group), max(len(parsed[index].kernel) for index in group)))
        fitting = next((texts for texts in together
                        if len(set(texts)) == len(wholes) and all(len(text) <= limit for text in texts)), None)
        if len(wholes) == len(group) and fitting is not None:
            for place, index in enumerate(group):
                shown[index] = fitting[place]
    told = [stack.user + stack.kernel for stack in parsed]
    # stacks that read the same whole differ in frames a shortened stack leaves out (the
    # scheduler's, unnamed ones): those tell them apart
    whole_frames = [[printable(frame) for frame in frames] for frames, _ in stacks]
    for group in _alike(shown, stacks):
        alike_whole = len({parsed[index].whole for index in group}) < len(group)
        sequences = whole_frames if alike_whole else told
        for index in group:
            shown[index] = _parting(sequences[index], sequences, limit) or shown[index]
    shown = [_cut(text, limit) for text in shown]
    for group in _alike(shown, stacks):
        alike_told = len({tuple(told[index]) for index in group}) < len(group)
        mates = [(whole_frames if alike_told else told)[index] for index in group]
        for index, sequence in zip(group, mates, strict=True):
            shown[index] = _cut(_parting(sequence, mates, limit) or shown[index], limit)
    for group in _alike(shown, stacks):
        for number, index in enumerate(group, 1):
            mark = f" #{number}"
            shown[index] = _cut(shown[index], limit - len(mark)) + mark
    return shown


def _alike(shown: list[str], stacks: Sequence[tuple[Sequence[str], int]]) -> list[list[int]]:
    """The indexes of stacks shown alike although their frames differ, by group."""
    alike: dict[str, list[int]] = {}
    for index, text in enumerate(shown):
        alike.setdefault(text, []).append(index)
    return [group for group in alike.values() if len({tuple(stacks[index][0]) for index in group}) > 1]


def _parting(sequence: list[str], sequences: list[list[str]], limit: int) -> str | None:
    """A root-first frame sequence shown from the frame where it parts from the one of the
    others that shares the most of its leaf end: that frame, then the frames they share, as
    many as fit in `limit` characters, the one it called there and those nearest the leaf
    first ('…' for those left out, and before it unless it is the root). None when no other
    sequence differs from it."""
    shared = [_shared_leaf_end(sequence, other) for other in sequences if other != sequence]
    if not shared:
        return None
    parting = max(len(sequence) - max(shared) - 1, 0)  # 0 also when all of it is another's leaf end
    head = ["…"] if parting > 0 else []
    frame, after = sequence[parting], sequence[parting + 1:]
    # the frame under it (what it called there), then those nearest the leaf (why it waited)
    under = [[*head, frame, after[0], "…", *after[len(after) - kept:]] for kept in range(len(after) - 2, 0, -1)]
    leafward = [[*head, frame, "…", *after[len(after) - kept:]] for kept in range(len(after) - 1, -1, -1)]
    shapes = [[*head, frame, *after], *under, *leafward]
    return next((";".join(shape) for shape in shapes if len(";".join(shape)) <= limit), ";".join(shapes[-1]))


def _shared_leaf_end(one: list[str], other: list[str]) -> int:
    """How many frames at the leaf end two root-first sequences share."""
    shared = 0
    while shared < min(len(one), len(other)) and one[-1 - shared] == other[-1 - shared]:
        shared += 1
    return shared


def _choices(users: int, kernels: int) -> list[tuple[int, int]]:
    """How many user and kernel frames a short stack can show (at least one of the kernel's
    when there are any), the most first, the kernel's first."""
    return sorted(((shown_users, shown_kernels) for shown_users in range(users + 1)
                   for shown_kernels in range(min(1, kernels), kernels + 1)),
                  key=lambda choice: (-sum(choice), -choice[1]))
