"""What a report shows: the view options every format shares, applied here and
only here. The filters (--time, --state, --pid, --tid, --comm) choose the
off-CPU time that every table and total covers; the drawing options
(--by-thread, --waker, --user-only, --kernel-only, --min-us) say how its
stacks are drawn, in flame graphs and in tables alike."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.escaping import printable
from offcpu.model import PREEMPTED, WAKER_NOT_RECORDED, Model, Row, Thread, WaitTimes
from offcpu.model.wakeups import cause_name, cause_of_waker
from offcpu.stacks import Runs, parts, reading, runs_said, wait_site

SEPARATOR = "--"  # between the blocked stack and the waker's, as in wakeup flame graphs
# flamegraph.pl and inferno read a line whose last frame ends in blanks and a number
# ("...;worker 3 120") as a differential line of two counts ("...;worker", 3 and 120).
NUMBER_AT_END = re.compile(r"\s+(\d+(?:\.\d*)?)$")


@dataclass(frozen=True)
class StackView:
    time: tuple[float, float] | None = None  # seconds from the start of the recording (the model is built of it)
    states: frozenset[str] = frozenset()  # empty: all
    pids: frozenset[int] = frozenset()
    tids: frozenset[int] = frozenset()
    comms: frozenset[str] = frozenset()
    by_thread: bool = False
    user_only: bool = False
    kernel_only: bool = False
    waker: bool = False
    min_us: int = 0
    # How the model is made and read, not a filter of it: which reader reads perf.data (None:
    # the one chosen for it), and a file of [[lock]] entries that name wait sites before
    # offcpu's own lock table
    reader: str | None = None
    locks: Path | None = None

    @property
    def filtered(self) -> bool:
        """Whether the filters leave out threads or states (--time makes the model, not a filter of it)."""
        return bool(self.states or self.pids or self.tids or self.comms)

    def keeps_thread(self, thread: Thread) -> bool:
        return ((not self.pids or thread.pid in self.pids) and (not self.tids or thread.tid in self.tids)
                and (not self.comms or thread.comm in self.comms))

    def keeps(self, model: Model, row: Row) -> bool:
        return (not self.states or row.state in self.states) and self.keeps_thread(model.threads[row.tid])

    @property
    def filters(self) -> str:
        """The filters in words ('' when there are none)."""
        parts = [f"{self.time[0]:g}-{self.time[1]:g} s"] if self.time else []
        for name, values in (("state", self.states), ("pid", self.pids), ("tid", self.tids), ("comm", self.comms)):
            if values:
                parts.append(f"{name}{'s' if len(values) > 1 else ''} "
                             f"{','.join(printable(str(v)) for v in sorted(values))}")
        return ", ".join(parts)

    @property
    def findings_note(self) -> str:
        """What findings cover when --state chooses states ('' otherwise): all of them."""
        return " (in every state: a finding weighs its waits against all its threads' time)" if self.states else ""

    @property
    def drawing(self) -> str:
        """How the stacks are drawn, in words ('' when as recorded)."""
        parts = [words for drawn, words in ((self.by_thread, "by thread"), (self.waker, "waker stacks"),
                                            (self.user_only, "user frames only"),
                                            (self.kernel_only, "kernel frames only")) if drawn]
        return ", ".join(parts + ([f"stacks of {self.min_us:,} µs or more"] if self.min_us else []))


def selected(model: Model, view: StackView) -> Model:
    """The model of what the filters keep, for totals and tables (threads, states, wakers,
    lifecycle) that follow them. With --state a thread's off-CPU time is its time in those
    states (its rows', whose strata are by state: exact also when sampled), and a thread
    without any is left out.
    (Run-queue delays are not kept per thread: they stay those of every thread recorded in
    the window.)"""
    if not view.filtered:
        return model
    kept = [index for index, row in enumerate(model.rows) if view.keeps(model, row)]
    rows = [model.rows[index] for index in kept]
    renumbered = {old: new for new, old in enumerate(kept)}
    links = [replace(link, waiter_row=renumbered[link.waiter_row], waker_row=renumbered[link.waker_row])
             for link in model.links if link.waiter_row in renumbered and link.waker_row in renumbered]
    threads = {tid: thread for tid, thread in model.threads.items() if view.keeps_thread(thread)}
    if view.states:
        times: dict[int, WaitTimes] = defaultdict(WaitTimes)
        for row in rows:
            times[row.tid].add_times(row)
        threads = {tid: replace(thread, offcpu_us=times[tid].offcpu_us, blocked_us=times[tid].blocked_us,
                                runqueue_us=times[tid].runqueue_us) for tid, thread in threads.items() if tid in times}
    return replace(model, rows=rows, threads=threads, links=links)


def of_threads(model: Model, view: StackView) -> Model:
    """The model of the threads the filters keep, in every state: what findings are about
    (a finding weighs its waits against all of its threads' time)."""
    return selected(model, replace(view, states=frozenset()))


@dataclass(frozen=True)
class DrawnStack:
    """Off-CPU time in one stack as a view draws it, in one switch-out state."""

    root: str  # the thread's name, or name-tid by thread
    frames: tuple[str, ...]  # root first (without the root)
    kernel_frames: int  # the last this many frames are the kernel's
    waker: tuple[str, ...]  # with --waker: the waker's frames leaf first, then who it was; else empty
    state: str
    offcpu_us: int
    blocked_us: int
    runqueue_us: int
    count: int
    variance: int = 0  # of offcpu_us, µs² (Row.variance): 0 unless sampled

    @property
    def stderr_us(self) -> float:
        return math.sqrt(self.variance)

    @property
    def folded(self) -> str:
        """As a folded line has it (before its count): frames root first, printable (a line
        each: a name's newline must not end it), joined by ';'."""
        waker = (SEPARATOR, *self.waker) if self.waker else ()
        frames = [printable(frame) for frame in (self.root, *self.frames, *waker)]
        # The last frame is a kernel or user symbol, one of the bracketed frames, or (waker)
        # a thread's name without blanks; only a perf map's symbol or the root of an empty
        # stack could still end in " <digits>".
        frames[-1] = NUMBER_AT_END.sub(r"_\1", frames[-1])
        return ";".join(frame.replace(";", ":") for frame in frames)

    @property
    def woken_by(self) -> str:
        """Who ended its waits (with --waker), as its flame graph's last frame names them."""
        return self.waker[-1] if self.waker else ""


# Runs of frames perf could not name: a frame-pointer walk through code built without frame
# pointers gives up to a hundred and more, which would draw a thin tower over an empty graph.
# A drawn stack has one frame for each run, which says how many frames it stands for; stacks
# that differ only in the lengths of their runs are one, and the frame says the shortest and
# longest run it stands for ("[unknown ×118–121]").
Spans = list[tuple[int, int]]  # the shortest and longest length of each run of a drawn stack
# root, frames (a run of unnamed frames as one), kernel frames, waker frames (likewise), state
DrawnKey = tuple[str, tuple[str, ...], int, tuple[str, ...], str]


def drawn(model: Model, view: StackView) -> list[DrawnStack]:
    """The stacks the view keeps, per switch-out state, most off-CPU time first; a stack
    whose time in all states is under --min-us is left out, as from its flame graph."""
    sums: dict[DrawnKey, WaitTimes] = defaultdict(WaitTimes)
    spans: dict[DrawnKey, Spans] = {}
    for row in model.rows:
        if row.offcpu_us and view.keeps(model, row):
            thread = model.threads[row.tid]
            root = f"{thread.comm}-{row.tid}" if view.by_thread else thread.comm
            frames, kernel, runs = _frames(model, view, row.stack)
            waker, waker_runs = _waker_frames(model, view, row) if view.waker else ((), [])
            key = (root, frames, kernel, waker, row.state)
            sums[key].add_times(row)
            spans[key] = _widened(spans.get(key), runs + waker_runs)
    stacks = []
    for key, times in sums.items():
        root, frames, kernel, waker, state = key
        said = iter(spans[key])
        stacks.append(DrawnStack(root, runs_said(frames, said), kernel, runs_said(waker, said), state,
                                 times.offcpu_us, times.blocked_us, times.runqueue_us, times.count, times.variance))
    lines = dict(lines_of(stacks))
    return sorted((stack for stack in stacks if lines[stack.folded] >= view.min_us),
                  key=lambda stack: (-stack.offcpu_us, stack.folded, stack.state))


def chosen(model: Model, view: StackView) -> list[DrawnStack]:
    """drawn(), for a report that has nothing to show without stacks: none is an error that says why."""
    stacks = drawn(model, view)
    if not stacks:
        part = (model.window_start_ns, model.window_end_ns) != (model.capture.window_start_ns,
                                                                model.capture.window_end_ns)
        switches = "" if model.capture.switch_records else ", with perf record --switch-events"
        raise OffcpuError("no off-CPU time matches these options; loosen --state, --pid, --tid, --comm or --min-us"
                          if any(row.offcpu_us for row in model.rows) else
                          "no off-CPU intervals in this part of the recording: no thread left or came back to the "
                          "CPU in it (give a longer --time)" if part else
                          "no off-CPU intervals in this capture: no thread of it both left the CPU and came back "
                          f"while recording (record a longer --duration{switches})")
    return stacks


def folded(model: Model, view: StackView) -> list[tuple[str, int]]:
    """(root-first frames joined by ';', microseconds) per distinct drawn stack, sorted."""
    return lines_of(drawn(model, view))


def lines_of(stacks: Iterable[DrawnStack]) -> list[tuple[str, int]]:
    """(folded stack, microseconds) per distinct folded line, sorted: a line holds all its states."""
    lines: dict[str, int] = defaultdict(int)
    for stack in stacks:
        lines[stack.folded] += stack.offcpu_us
    return sorted(lines.items())


def listed(stacks: list[DrawnStack]) -> list[DrawnStack]:
    """Drawn stacks as a table lists them, most first: stacks that read the same however
    wide the table (they differ only in frames perf could not name or in the scheduler's
    own, or only in the waker's stack where a table names the waker) are one row."""
    rows: dict[tuple[str, str, str, str], DrawnStack] = {}
    for stack in stacks:
        key = (stack.root, reading(stack.frames, stack.kernel_frames), stack.woken_by, stack.state)
        seen = rows.get(key)
        rows[key] = stack if seen is None else replace(
            seen, offcpu_us=seen.offcpu_us + stack.offcpu_us, blocked_us=seen.blocked_us + stack.blocked_us,
            runqueue_us=seen.runqueue_us + stack.runqueue_us, count=seen.count + stack.count,
            variance=seen.variance + stack.variance)
    return sorted(rows.values(), key=lambda stack: (-stack.offcpu_us, stack.folded, stack.state))


def _frames(model: Model, view: StackView, index: int) -> tuple[tuple[str, ...], int, Runs]:
    """A stack's frames the view draws, root first, each run of unnamed frames as one, how
    many of them (the last) are the kernel's, and the runs' lengths."""
    user, kernel = parts(model.stacks[index])
    kernel = wait_site(kernel)  # its leaf says what the thread waited for
    if view.user_only:
        return (user.frames, 0, user.runs) if user.frames else (("[no user frames]",), 0, [])
    if view.kernel_only:
        return (kernel.frames, len(kernel.frames), kernel.runs) if kernel.frames else (("[no kernel frames]",), 0, [])
    return user.frames + kernel.frames, len(kernel.frames), user.runs + kernel.runs


def row_frames(model: Model, view: StackView, row: Row) -> tuple[tuple[str, ...], range]:
    """One row's frames as the view draws them, root first (without the thread's name), each
    run of unnamed frames as one frame that says how long it is, with --waker then '--' and
    the waker's frames leaf first; and where the row's own kernel frames are among them. The
    frames of an export that keeps rows apart (per thread)."""
    frames, kernel, runs = _frames(model, view, row.stack)
    kernel_range = range(len(frames) - kernel, len(frames))
    if view.waker:
        waker, waker_runs = _waker_frames(model, view, row)
        frames, runs = (*frames, SEPARATOR, *waker), runs + waker_runs
    return runs_said(frames, ((length, length) for length in runs)), kernel_range


def _widened(spans: Spans | None, runs: Runs) -> Spans:
    """The shortest and longest of each run, with one more stack's runs."""
    if spans is None:
        return [(length, length) for length in runs]
    return [(min(shortest, length), max(longest, length)) for (shortest, longest), length
            in zip(spans, runs, strict=True)]


def _waker_frames(model: Model, view: StackView, row: Row) -> tuple[tuple[str, ...], Runs]:
    """The waker's stack leaf first (so its leaf meets the blocked leaf), then who it was; and
    the lengths of its runs of unnamed frames, in that order."""
    who = woken_by(model, row, view.by_thread)
    if row.waker is None or model.wakers[row.waker].kind == "unrecorded":
        return (who,), []
    frames, _, runs = _frames(model, view, model.wakers[row.waker].stack)
    return (*reversed(frames), who), runs[::-1]


def woken_by(model: Model, row: Row, by_thread: bool = True) -> str:
    """Who ended a row's waits, in one word: a thread's name (-tid `by_thread`), or what
    else it was in brackets; as a waker frame or an export's label."""
    if row.waker is None:
        return "[preempted]" if row.state == PREEMPTED else "[not woken in the window]"
    waker = model.wakers[row.waker]
    if waker.kind == "unrecorded":
        return WAKER_NOT_RECORDED
    if waker.kind != "thread":  # an interrupt's: what it was, not the thread it came in (see waker_pairs)
        return cause_name(cause_of_waker(waker, model.stacks[waker.stack], same_service=False))
    name = re.sub(r"\s", "_", waker.comm)  # a folded line's last frame: "worker 3" would read as a count
    return f"{name}-{waker.tid}" if by_thread else name
