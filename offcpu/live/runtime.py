"""The runtimes' frames in the live window: the samples of Python's, Java's and Ruby's stacks that
the runtime sampler reads while `top` records (offcpu.recording.runtime_stacks) handed to the core
with each interval's records, where a wait that began in the interval takes the first that falls
inside it (as a capture's runtime-stacks.json joins its waits, offcpu.runtime_frames), and the
frames their stack ids stand for, for naming the chains.

Samples come late: a read is kept when it ends, and the waits it falls in may have begun an
interval before. So once a runtime is found, each frame pairs the interval before its own
(offcpu.live.follow), with the samples read from that interval's start until the waits open were
read for this frame (`LiveWindow.add`'s `read`): any of them inside a wait is of that wait, as
the waits open then were open all along. A later sample may be of the wait open or of the next
one, which nothing yet tells apart, so a wait not read by then keeps its native frames alone in
the live view (its flight record has them all).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from offcpu.runtime_frames import Frame, WaitFrame, sample_stack

if TYPE_CHECKING:
    from offcpu._core import Samples
    from offcpu.recording.runtime_stacks import RuntimeSampler


class LiveRuntime:
    """The sampler's samples and stacks, as the live window's chains take them (RuntimeNames)."""

    def __init__(self, sampler: RuntimeSampler) -> None:
        self.sampler = sampler
        self.read: list[tuple[Frame, ...]] = []  # the sampler's stacks by its ids, as last copied
        # the stacks the window's chains name by id: a sample's stack with what it waits for before it
        self.stacks: list[tuple[Frame | WaitFrame, ...]] = []
        self.ids: dict[tuple[Frame | WaitFrame, ...], int] = {}

    def samples(self, first_ns: int, last_ns: int) -> Samples | None:
        """The samples read from `first_ns` to `last_ns` (both included) that have come: their
        threads, times and stack ids (here, in `stacks`); None when there are none."""
        # (in time order: the sampler reads one process at a time; it replaces the list whole when
        # it lets the oldest go, and adds to its end)
        samples = self.sampler.samples
        chosen = samples[bisect_left(samples, first_ns, key=_time):bisect_right(samples, last_ns, key=_time)]
        if not chosen:
            return None
        if max(sample["stack"] for sample in chosen) >= len(self.read):
            # copied again only when a sample names a stack read since (a copy: the sampler's thread adds to it)
            self.read = list(self.sampler.stacks.copy())
        return ([sample["tid"] for sample in chosen], [sample["time_ns"] for sample in chosen],
                [self._id(sample_stack(sample, self.read)) for sample in chosen])

    def _id(self, stack: tuple[Frame | WaitFrame, ...]) -> int:
        at = self.ids.get(stack)
        if at is None:
            at = self.ids[stack] = len(self.stacks)
            self.stacks.append(stack)
        return at

    def runtime_of(self, pid: int) -> str:
        return str(self.sampler.found.get(pid, {}).get("runtime", "CPython"))


def _time(sample: dict) -> int:
    return int(sample["time_ns"])
