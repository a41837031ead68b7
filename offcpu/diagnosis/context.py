"""What every rule and every finding reads of a model, computed once: the waits' classes and
claims, the threads' wall time, and the sums and shares over rows."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cached_property

from offcpu.diagnosis.claims import IDLE, LOCK_CONTENTION, MMAP_LOCK, STACK_CACHE_LOCK, Claims
from offcpu.diagnosis.locktable import LockTable, default_table
from offcpu.diagnosis.roots import root_shares
from offcpu.diagnosis.waits import Waits
from offcpu.machine.cgroups import own_cgroup_paths
from offcpu.model import PREEMPTED, SUB_WINDOWS, Model, Row
from offcpu.stacks import NEW_THREAD


def total(rows: Iterable[Row]) -> int:
    return sum(row.offcpu_us for row in rows)


def blocked(rows: Iterable[Row]) -> int:
    return sum(row.blocked_us for row in rows)


def tids(rows: Iterable[Row]) -> int:
    return len({row.tid for row in rows})


# A lock whose woken waiters make up this much of all the waiting for a CPU is a convoy: each
# release wakes a waiter that queues for a CPU behind the lock's other woken waiters
CONVOY_FROM = 0.5
LOCKS = (LOCK_CONTENTION, MMAP_LOCK, STACK_CACHE_LOCK)


class Context:
    """The model with what every rule needs computed once: classes, claims, totals."""

    def __init__(self, model: Model, table: LockTable | None = None) -> None:
        self.model = model
        self.waits = Waits(model, table or default_table())
        self.claims = Claims(model, self.waits)
        self.wall_by_tid = {tid: t.oncpu_us + t.offcpu_us for tid, t in model.threads.items()}
        self.offcpu_us = sum(t.offcpu_us for t in model.threads.values())
        self.idle_rows = self.claims.rows(IDLE)
        self.idle_us = total(self.idle_rows)

    def own_us(self, rows: Iterable[Row]) -> int:
        """The time of these waits that is their own: until their wakeups, and all of a new
        thread's wait for its first run (its creation's cost) or of a lock convoy's waiter's;
        the other waits for a CPU after a wakeup are CPU saturation's."""
        return sum(row.offcpu_us if self.model.stacks[row.stack].frames == (NEW_THREAD,) or id(row) in self.convoy
                   else row.blocked_us for row in rows)

    @cached_property
    def woken_waiting_for_a_cpu(self) -> list[Row]:
        """The rows of waits that ended with a wakeup and then waited for a CPU (not a new
        thread's first run: its creation's cost)."""
        return [row for row in self.model.rows if row.state != PREEMPTED and row.runqueue_us > 0
                and self.model.stacks[row.stack].frames != (NEW_THREAD,)]

    @cached_property
    def convoy(self) -> frozenset[int]:
        """The rows (by id) of the locks that were convoys (CONVOY_FROM): their waiters' wait for
        a CPU after the release came from the lock's own handoffs, and is the lock's."""
        waiting = sum(row.runqueue_us for row in self.model.rows)
        convoys: set[int] = set()
        for finding in LOCKS:
            for key in self.claims.keys(finding):
                rows = self.claims.rows(finding, key)
                if waiting and sum(row.runqueue_us for row in rows) >= CONVOY_FROM * waiting:
                    convoys.update(id(row) for row in rows)
        return frozenset(convoys)

    def share_of_wall(self, us: int, rows: list[Row]) -> float:
        """`us` over the wall time of the threads of `rows`, at least one whole window."""
        wall = max(sum(self.wall_by_tid[tid] for tid in {row.tid for row in rows}), self.model.wall_us)
        return us / wall if wall > 0 else 0.0

    def share_uncertainty(self, rows: list[Row]) -> float:
        """The standard error of share_of_wall(total(rows), rows), from how the share spreads
        over the model's sub-windows (see share_uncertainty); 0 when the rows do not say."""
        if not rows or any(len(row.windows) != SUB_WINDOWS for row in rows):
            return 0.0
        parts = [sum(row.windows[window] for row in rows) for window in range(SUB_WINDOWS)]
        walls = [0.0] * SUB_WINDOWS
        for tid in {row.tid for row in rows}:
            for window, presence in enumerate(self.presence[tid]):
                walls[window] += self.wall_by_tid[tid] * presence
        # as share_of_wall, of at least one whole window
        present, whole = sum(walls), max(sum(walls), self.model.wall_us)
        walls = [wall * whole / present for wall in walls] if present else [whole / SUB_WINDOWS] * SUB_WINDOWS
        return share_uncertainty(parts, walls)

    @cached_property
    def presence(self) -> dict[int, list[float]]:
        """Each thread's time in the window, as the share of it in each sub-window: spread evenly
        from its creation (or the window's start) to its exit (or the window's end)."""
        start, end = self.model.window_start_ns, self.model.window_end_ns
        edges = [start + (end - start) * window // SUB_WINDOWS for window in range(SUB_WINDOWS + 1)]
        found = {}
        for tid, thread in self.model.threads.items():
            born, gone = thread.created_ns or start, thread.exited_ns or end
            spans = [max(0, min(gone, edges[window + 1]) - max(born, edges[window])) for window in range(SUB_WINDOWS)]
            found[tid] = [span / sum(spans) for span in spans] if sum(spans) else [1 / SUB_WINDOWS] * SUB_WINDOWS
        return found

    def truncated(self) -> bool:
        return bool(self.model.capture.user_stacks_truncated)

    @cached_property
    def row_number(self) -> dict[int, int]:
        """Each row's number in the model, by the row's id (rows are dataclasses, not hashable)."""
        return {id(row): number for number, row in enumerate(self.model.rows)}

    @cached_property
    def cgroup_of_pid(self) -> dict[int, str]:
        """Each recorded process's own cgroup (capture.json's cgroups), for the findings to say."""
        return own_cgroup_paths(self.claims.cgroups)

    @cached_property
    def root_shares(self) -> dict[int, dict[str, float]]:
        """What each peer-ended row's blocked time came down to (see roots.root_shares): the same
        for every finding, so worked out once."""
        return root_shares(self.model, self.waits, self.claims)


def share_uncertainty(parts: list[int], walls: list[float]) -> float:
    """The standard error of a share sum(parts) / sum(walls) measured in sub-windows (a part
    and the wall time it is of, in each), from the spread of the sub-windows: the ratio
    estimator's, sqrt(n / (n - 1) * sum((part - share * wall)^2)) / sum(walls). With equal
    walls it is the standard deviation of the sub-windows' shares over the square root of
    their number."""
    whole = sum(walls)
    if len(parts) < 2 or whole <= 0:
        return 0.0
    share = sum(parts) / whole
    spread = sum((part - share * wall) ** 2 for part, wall in zip(parts, walls, strict=True))
    return math.sqrt(len(parts) / (len(parts) - 1) * spread) / whole
