"""Which off-CPU time a report shows, and how its stacks are drawn: the
options `report folded` and the flame graphs share."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from offcpu.model import PREEMPTED, Model, Row

SEPARATOR = "--"  # between the blocked stack and the waker's, as in wakeup flame graphs
# flamegraph.pl and inferno read a line whose last frame ends in blanks and a number
# ("...;worker 3 120") as a differential line of two counts ("...;worker", 3 and 120).
NUMBER_AT_END = re.compile(r"\s+(\d+(?:\.\d*)?)$")


@dataclass(frozen=True)
class StackView:
    states: frozenset[str] = frozenset()  # empty: all
    pids: frozenset[int] = frozenset()
    tids: frozenset[int] = frozenset()
    comms: frozenset[str] = frozenset()
    by_thread: bool = False
    user_only: bool = False
    kernel_only: bool = False
    waker: bool = False
    min_us: int = 0

    def keeps(self, model: Model, row: Row) -> bool:
        thread = model.threads[row.tid]
        return ((not self.states or row.state in self.states)
                and (not self.pids or thread.pid in self.pids)
                and (not self.tids or row.tid in self.tids)
                and (not self.comms or thread.comm in self.comms))


def folded(model: Model, view: StackView) -> list[tuple[str, int]]:
    """(root-first frames joined by ';', microseconds) per distinct drawn stack, sorted."""
    totals: dict[str, int] = defaultdict(int)
    for row in model.rows:
        if row.offcpu_us and view.keeps(model, row):
            totals[_draw(model, view, row)] += row.offcpu_us
    return sorted((stack, us) for stack, us in totals.items() if us >= view.min_us)


def _draw(model: Model, view: StackView, row: Row) -> str:
    thread = model.threads[row.tid]
    root = f"{thread.comm}-{row.tid}" if view.by_thread else thread.comm
    frames = [root, *reversed(_frames(model, view, row.stack))]
    if view.waker:
        frames += [SEPARATOR, *_waker_frames(model, view, row)]
    # The last frame is a kernel or user symbol, one of the bracketed frames, or (waker)
    # a thread's name without blanks; only a perf map's symbol or the root of an empty
    # stack could still end in " <digits>".
    frames[-1] = NUMBER_AT_END.sub(r"_\1", frames[-1])
    return ";".join(frame.replace(";", ":") for frame in frames)


def _frames(model: Model, view: StackView, index: int) -> tuple[str, ...]:
    stack = model.stacks[index]
    if view.user_only:
        return stack.user_frames or ("[no user frames]",)
    if view.kernel_only:
        return stack.frames[:stack.kernel_frames] or ("[no kernel frames]",)
    return stack.frames


def _waker_frames(model: Model, view: StackView, row: Row) -> list[str]:
    """The waker's stack leaf first (so its leaf meets the blocked leaf), then who it was."""
    if row.waker is None:
        return ["[preempted]" if row.state == PREEMPTED else "[waker not recorded]"]
    waker = model.wakers[row.waker]
    name = re.sub(r"\s", "_", waker.comm)  # the line's last frame: "worker 3" would read as a count
    thread = f"{name}-{waker.tid}" if view.by_thread else name
    who = {"thread": thread, "idle": "[idle]", "interrupt": f"[interrupt in {waker.comm}]"}
    return [*_frames(model, view, waker.stack), who[waker.kind]]
