"""Estimates of each stack's time when a backend took stacks for a sample of the waits.

Every wait is timed, whether its stacks were taken or not: which thread, in which state,
and who woke it are known for all of them. Only the stacks are sampled. So the waits are
counted twice while a capture is read: each wait with a stack in its row, `w` times
(taken with probability 1/w: Horvitz-Thompson), and every wait once, exactly, in its
stratum: the waits of one thread, in one state, ended by one waker (or by none). At the
end each stratum's rows are scaled so that they add up to its exact times
(post-stratification): only how a stratum's time divides among its stacks is estimated,
never how much time it holds. A preemption's time, or the time a thread waited for one
waker, is then exact however few of those waits were sampled; and a stratum none of whose
waits carried a stack keeps its time, under `[stack not sampled]`.

docs/numbers.md#sampled-stacks says what the reports show of it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from offcpu.model import SUB_WINDOWS, WaitTimes

if TYPE_CHECKING:
    from offcpu.engine import RowKey, Tally

# A stratum: tid, state, and the waker's pid, tid and comm (None: not woken, such as preempted)
StratumKey = tuple[int, str, tuple[int, int, str] | None]


@dataclass(slots=True)
class Stratum:
    """The exact times of a stratum's waits, and the row its waits without a stack would
    have (their stack and their waker's stack not taken), should none of them carry one."""

    times: WaitTimes = field(default_factory=WaitTimes)
    windows: list[int] = field(default_factory=lambda: [0] * SUB_WINDOWS)
    unsampled_row: RowKey | None = None

    def add(self, other: Stratum) -> None:
        self.times.add_times(other.times)
        self.windows = [mine + theirs for mine, theirs in zip(self.windows, other.windows, strict=True)]
        self.unsampled_row = self.unsampled_row or other.unsampled_row


def stratum_of(row: RowKey) -> StratumKey:
    tid, _, state, waker = row
    return tid, state, waker[:3] if waker else None


def apportion(total: int, parts: list[int]) -> list[int]:
    """`total` divided in proportion to `parts` (not all 0), in integers that add up to it:
    each part's share rounded down, and what rounding left given to the largest remainders."""
    whole = sum(parts)
    shares = [total * part // whole for part in parts]
    remainders = sorted(range(len(parts)), key=lambda index: total * parts[index] % whole, reverse=True)
    for index in remainders[:total - sum(shares)]:
        shares[index] += 1
    return shares


def scale_to_strata(totals: Tally, synthetic: tuple[str, ...]) -> None:
    """Scale the rows of each of `totals.strata` (rows of `synthetic` stacks are in none: they
    were not sampled) to the stratum's exact times, with their sub-windows and links, and
    each row's variance to that of the scaled estimate; give a stratum without rows one."""
    by_stratum: dict[StratumKey, list[int]] = defaultdict(list)
    for number, row_key in enumerate(totals.row_numbers):
        if row_key[1] not in synthetic:
            by_stratum[stratum_of(row_key)].append(number)
    factors: dict[int, float] = {}  # row number -> how much its off-CPU time was scaled
    for key, stratum in (totals.strata or {}).items():
        numbers = by_stratum.get(key, [])
        if sum(totals.rows[number].offcpu_us for number in numbers) > 0:
            factors.update(_scale_rows(totals, numbers, stratum))
        elif stratum.times.offcpu_us and stratum.unsampled_row is not None:
            number = totals.row_number(stratum.unsampled_row)
            totals.rows[number].add_times(stratum.times)
            if totals.by_window:
                totals.by_window[number] = list(stratum.windows)
    for pair, link in totals.links.items():
        factor = factors.get(pair[0], 1.0) * factors.get(pair[1], 1.0)
        link.ns, link.count = round(link.ns * factor), round(link.count * factor)


def _scale_rows(totals: Tally, numbers: list[int], stratum: Stratum) -> dict[int, float]:
    """Scale one stratum's rows (off-CPU time above 0) to its exact times; returns each
    row's factor. The variance is the linearized one of a ratio estimate: of each row's
    share of the stratum, times the stratum's exact time."""
    rows = [totals.rows[number] for number in numbers]
    exact = stratum.times
    estimated_us = sum(row.offcpu_us for row in rows)
    factor = exact.offcpu_us / estimated_us
    stratum_variance = sum(row.variance for row in rows)
    offcpu = apportion(exact.offcpu_us, [row.offcpu_us for row in rows])
    blocked_parts = [row.blocked_us for row in rows] if any(row.blocked_us for row in rows) else offcpu
    blocked = apportion(exact.blocked_us, blocked_parts) if any(blocked_parts) else [0] * len(rows)
    counts = apportion(exact.count, [row.count for row in rows]) if any(row.count for row in rows) else \
        [row.count for row in rows]
    for number, row, row_us, row_blocked, count in zip(numbers, rows, offcpu, blocked, counts, strict=True):
        share = row.offcpu_us / estimated_us
        row.variance = round(factor * factor * (row.variance * (1 - 2 * share) + share * share * stratum_variance))
        if totals.by_window and any(totals.by_window[number]):
            totals.by_window[number] = apportion(row_us, totals.by_window[number])
        row.offcpu_us, row.count = row_us, count
        row.blocked_us = min(row_blocked, row_us)
        row.runqueue_us = row_us - row.blocked_us
    return {number: factor for number in numbers}
