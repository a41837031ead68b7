"""The model as a speedscope profile (jlfwong/speedscope's file format,
src/lib/file-format-spec.ts): a sampled profile of off-CPU time per thread
(or per process), then one of blocked time and one of run-queue delay, each
rooted at the thread's name. Weights are microseconds; frames root first."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from offcpu import __version__
from offcpu.model import Model, Thread
from offcpu.model.stackview import StackView, row_frames, selected
from offcpu.model.summaries import sampling_note
from offcpu.stacks import runtime_parts

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


@dataclass
class Frames:
    """The file's shared frames, each name once, numbered in the order first met."""

    numbers: dict[str, int] = field(default_factory=dict)

    def number(self, name: str) -> int:
        return self.numbers.setdefault(name, len(self.numbers))


@dataclass
class Profile:
    """One sampled profile: the time of each distinct stack (frame numbers, root first)."""

    name: str
    weights: dict[tuple[int, ...], int] = field(default_factory=dict)

    def add(self, stack: tuple[int, ...], us: int) -> None:
        if us:
            self.weights[stack] = self.weights.get(stack, 0) + us

    def kept(self, min_us: int) -> list[tuple[tuple[int, ...], int]]:
        """Its stacks of `min_us` or more (--min-us), in order."""
        return sorted((stack, us) for stack, us in self.weights.items() if us >= min_us)

    def to_json(self, min_us: int) -> dict:
        kept = self.kept(min_us)
        return {"type": "sampled", "name": self.name, "unit": "microseconds", "startValue": 0,
                "endValue": sum(us for _, us in kept), "samples": [list(stack) for stack, _ in kept],
                "weights": [us for _, us in kept]}


class SpeedscopeProfile:
    def __init__(self, view: StackView, by_process: bool) -> None:
        self.view = view
        self.by_process = by_process

    def group_name(self, model: Model, thread: Thread) -> str:
        """The thread's profile name, or its process's with --by process (named as its main thread)."""
        if not self.by_process:
            return f"{thread.comm} (tid {thread.tid})"
        main = model.threads.get(thread.pid, thread)
        return f"{main.comm} (pid {thread.pid})"

    def render(self, model: Model) -> str:
        shown = selected(model, self.view)
        frames = Frames()
        groups: dict[str, Profile] = {}
        blocked, runqueue = Profile("blocked (until woken), all threads"), Profile("waiting for a CPU, all threads")
        for row in shown.rows:
            group = self.group_name(shown, shown.threads[row.tid])
            stack = tuple(frames.number(frame) for frame in row_frames(shown, self.view, row)[0])
            groups.setdefault(group, Profile(f"off CPU: {group}")).add(stack, row.offcpu_us)
            rooted = (frames.number(group), *stack)
            blocked.add(rooted, row.blocked_us)
            runqueue.add(rooted, row.runqueue_us)
        min_us = self.view.min_us
        most_first = sorted(groups.values(), key=lambda profile: (-sum(us for _, us in profile.kept(min_us)),
                                                                   profile.name))
        note = sampling_note(model)
        document = {
            "$schema": SCHEMA,
            "name": f"Off-CPU time of {model.capture.target.describe()}" + (f" ({note})" if note else ""),
            "exporter": f"offcpu {__version__}",
            "activeProfileIndex": 0,
            "shared": {"frames": [_frame(name) for name in frames.numbers]},
            "profiles": [profile.to_json(min_us) for profile in (*most_first, blocked, runqueue)],
        }
        return json.dumps(document, separators=(",", ":")) + "\n"


def _frame(name: str) -> dict:
    """A shared frame: its name, and a runtime's (a Python function's) file and line as speedscope shows them."""
    parts = runtime_parts(name)
    if parts is None:
        return {"name": name}
    function, file, line = parts
    return {"name": name, "file": file, **({"line": line} if line else {})}
