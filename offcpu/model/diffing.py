"""Comparing two sets of off-CPU stacks, BASE and NEW: how much time each stack
held in either, so a change (a fix, a new version, more load) shows where
waiting grew or shrank. Pure functions over folded lines and models; no I/O.

A capture knows how long it recorded, so when both sides are captures NEW's
microseconds are scaled to BASE's window: a 3 s recording is not "50% worse"
than a 2 s one just for being longer. A folded file has no window length, so a
diff with one is not normalised, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from offcpu.errors import OffcpuError
from offcpu.model import Model
from offcpu.model.stackview import SEPARATOR, StackView, folded
from offcpu.stacks import SCHEDULER

# Root-most frames of the kernel's part of a stack (system call, fault, interrupt,
# kernel thread; x86-64 and arm64): a folded line does not say where the kernel
# begins, and the table's short stacks put the program's frames before the kernel's.
KERNEL_ENTRY_PREFIXES = ("entry_SYSCALL", "entry_INT80", "asm_", "ret_from_fork", "el0")
# A differential flame graph colours a frame by the change in its self time, which is all the
# leaf's: with the scheduler's frames (stacks.SCHEDULER) at the leaf, only they would be
# coloured, not the frame that says why the thread waited. A capture's drawn stacks are
# without them already (stacks.wait_site); a folded file's may not be.


@dataclass(frozen=True)
class Side:
    """One side of a diff: off-CPU microseconds per folded stack (root first, ';'-joined)."""

    label: str
    stacks: Mapping[str, int]
    wall_us: int | None  # the recording's window; None for a folded file, which does not know it
    view_ignored: bool = False  # view options were given but could not apply (a folded file)

    @property
    def total_us(self) -> int:
        return sum(self.stacks.values())


@dataclass(frozen=True)
class StackChange:
    stack: str
    base_us: int
    new_us: int  # scaled to BASE's window when the diff is normalised

    @property
    def change_us(self) -> int:
        return self.new_us - self.base_us


@dataclass(frozen=True)
class Diff:
    base: Side
    new: Side
    changes: tuple[StackChange, ...]  # every stack of either side, sorted by stack
    scale: float | None  # what NEW's microseconds were multiplied by; None: not normalised
    normalisation: str  # in words, for titles and tables
    notes: tuple[str, ...] = ()  # anything else the reader must know (options that did not apply)

    @property
    def base_us(self) -> int:
        return sum(change.base_us for change in self.changes)

    @property
    def new_us(self) -> int:
        return sum(change.new_us for change in self.changes)

    def lines(self) -> list[str]:
        """Differential folded lines, "frames base_us new_us", as flamegraph.pl and inferno take them,
        without the scheduler's leaf frames (stacks.SCHEDULER); stacks that differed only
        there add up, so both sides keep their totals."""
        drawn: dict[str, list[int]] = {}
        for change in self.changes:
            if change.base_us or change.new_us:
                times = drawn.setdefault(without_scheduler_leaf(change.stack), [0, 0])
                times[0] += change.base_us
                times[1] += change.new_us
        return [f"{stack} {base_us} {new_us}" for stack, (base_us, new_us) in sorted(drawn.items())]

    def grown(self, limit: int) -> list[StackChange]:
        """The stacks whose time grew most, most first (ties by stack, so the order is stable)."""
        grew = [change for change in self.changes if change.change_us > 0]
        return sorted(grew, key=lambda change: (-change.change_us, change.stack))[:limit]


def without_scheduler_leaf(stack: str) -> str:
    """A folded stack without the scheduler's frames at the leaf of its blocked part
    (before a waker's '--'); the root frame is always kept."""
    frames = stack.split(";")
    blocked_end = frames.index(SEPARATOR) if SEPARATOR in frames else len(frames)
    end = blocked_end
    while end > 1 and frames[end - 1] in SCHEDULER:
        end -= 1
    return ";".join(frames[:end] + frames[blocked_end:]) if end < blocked_end else stack


def parse_folded(text: str, source: str) -> dict[str, int]:
    """Folded lines ("frames count", as `offcpu report folded` prints them) into
    microseconds per stack; a stack given twice adds up, as flamegraph.pl adds it."""
    stacks: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack.strip() or not count.isdigit():
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise OffcpuError(f"{source}, line {number}, is not a folded line ('frames count', as "
                              f"'offcpu report folded' prints): {shown!r}")
        stacks[stack] = stacks.get(stack, 0) + int(count)
    return stacks


def from_model(model: Model, view: StackView, label: str) -> Side:
    """A capture's side: its stacks as the view draws them, with its window."""
    return Side(label, dict(folded(model, view)), model.wall_us)


def from_folded(stacks: Mapping[str, int], label: str, view: StackView) -> Side:
    """A folded file's side: it was filtered when it was written, so of the view
    only --min-us can still apply."""
    ignored = view != StackView(min_us=view.min_us)
    return Side(label, {stack: us for stack, us in stacks.items() if us >= view.min_us}, None, ignored)


def normalise(base: Side, new: Side) -> tuple[float | None, str]:
    """What to multiply NEW's microseconds by to compare them with BASE's, and why, in words."""
    if base.wall_us is None or new.wall_us is None:
        which = ("BASE and NEW are folded files, which have" if base.wall_us is None and new.wall_us is None
                 else f"{'BASE' if base.wall_us is None else 'NEW'} is a folded file, which has")
        return None, f"not normalised: {which} no window length"
    if base.wall_us == new.wall_us:
        return None, f"not scaled: both windows are {base.wall_us / 1e6:.3f} s"
    if not base.wall_us or not new.wall_us:
        return None, "not scaled: a window of 0 s cannot be scaled to"
    scale = base.wall_us / new.wall_us
    return scale, (f"NEW scaled by {scale:.4g} from its {new.wall_us / 1e6:.3f} s window to BASE's "
                   f"{base.wall_us / 1e6:.3f} s")


def compare(base: Side, new: Side) -> Diff:
    """Every stack of either side with its time in both, NEW normalised when it can be."""
    if not base.total_us and not new.total_us:
        raise OffcpuError("neither BASE nor NEW has off-CPU time matching these options; loosen --state, --pid, "
                          "--tid, --comm or --min-us")
    scale, normalisation = normalise(base, new)
    changes = tuple(
        StackChange(stack, base.stacks.get(stack, 0),
                    round(new.stacks.get(stack, 0) * scale) if scale else new.stacks.get(stack, 0))
        for stack in sorted(base.stacks.keys() | new.stacks.keys()))
    notes = tuple(f"{name} is a folded file: view options other than --min-us were not applied to it"
                  for name, side in (("BASE", base), ("NEW", new)) if side.view_ignored)
    return Diff(base, new, changes, scale, normalisation, notes)


def title(diff: Diff) -> str:
    """The differential flame graph's title: both sides, how to read the colours, the normalisation.
    (flamegraph.render_svg makes it safe for the SVG.)"""
    return f"Off-CPU time of {diff.new.label} against {diff.base.label}: red grew, blue shrank; {diff.normalisation}"


def split_stack(stack: str) -> tuple[str, tuple[str, ...], int, str]:
    """A folded stack as a table shows it: its root (the thread), its frames root first,
    how many of them (the last) are the kernel's, and who woke it ('' without a waker).
    A folded line does not say where the kernel begins: from its entry frame on; a
    stack of user or kernel frames only is read as one chain of the kernel's."""
    root, *frames = stack.split(";")
    woken_by = ""
    if SEPARATOR in frames:
        woken_by = frames[-1]
        frames = frames[:frames.index(SEPARATOR)]
    entry = next((i for i, frame in enumerate(frames) if frame.startswith(KERNEL_ENTRY_PREFIXES)), None)
    return root, tuple(frames), len(frames) - entry if entry else len(frames), woken_by
