"""Estimates of each stack's time when a backend took stacks for a sample of the waits.

Every wait is timed, whether its stacks were taken or not: which thread, in which state,
and who woke it are known for all of them. Only the stacks are sampled. So a wait taken
with probability 1/w (w > 1) counts w times in its row (Horvitz-Thompson), and every wait
of weight other than 1 also counts once, exactly, in its stratum: the waits of one thread,
in one state, ended by one waker (by its thread, whatever its stack), or by none. When the
model is made, each stratum's weighted rows are scaled to its exact times
(post-stratification): only how a stratum's time divides among its stacks is estimated,
never how much time it holds. A preemption's time, or the time a thread waited for one
waker, is then exact however few of those waits were sampled. Rows of waits of weight 1
(their stacks always taken) are exact and left as they are.

A stratum none of whose waits carried a stack (its waker a thread that ended few of them: a
short-lived peer, or whatever ran when a disk's interrupt came) is lent the stacks of its class:
its thread's rows in that state whose waker is of the same process, else all its thread's rows
in that state. Its exact times are divided among those stacks as a stratum's among its own, in
rows that keep its waker. With nothing to lend (the thread has no other wait in that state with
a stack), its time stays, exactly, under `[stack not sampled]`, with its state and its waker.

docs/numbers.md#sampled-stacks says what the reports show of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from offcpu.model import WaitTimes

# A stratum: tid, state, and the waker's pid, tid and comm (None: not woken, such as preempted)
StratumKey = tuple[int, str, tuple[int, int, str] | None]
# A row's key as the core hands it over: tid, chain, state, waker (pid, tid, name, chain) or None, all by id
CoreRowKey = tuple[int, int, int, "tuple[int, int, int, int] | None"]
# A model row's key: tid, stack, state, waker (offcpu.model.Row)
MergedKey = tuple[int, int, str, int | None]
Key = TypeVar("Key", bound=Hashable)


@dataclass(slots=True)
class Stratum:
    """The exact times of a stratum's waits of weight other than 1; and, of those without a
    stack, what a stratum made of them alone needs: their sub-windows and the key of their
    row (their stack and their waker's not taken)."""

    times: WaitTimes
    unsampled_windows: list[int]
    unsampled_row: CoreRowKey | None


def add_windows(table: dict[Key, list[int]], key: Key, windows: list[int]) -> None:
    """Add sub-windows' times into those `table` keeps under `key` (a copy of them if none), window by window."""
    kept = table.get(key)
    table[key] = list(windows) if kept is None else [mine + theirs for mine, theirs in zip(kept, windows, strict=True)]


@dataclass
class SampledRows:
    """A capture's rows by their model key, the estimates of weighted waits apart from the
    exact rows of waits of weight 1, with their sub-windows (none when not kept)."""

    exact: dict[MergedKey, WaitTimes] = field(default_factory=dict)
    weighted: dict[MergedKey, WaitTimes] = field(default_factory=dict)
    windows: dict[tuple[MergedKey, bool], list[int]] = field(default_factory=dict)

    def add(self, key: MergedKey, weighted: bool, times: WaitTimes, windows: list[int]) -> None:
        (self.weighted if weighted else self.exact).setdefault(key, WaitTimes()).add_times(times)
        if windows:
            add_windows(self.windows, (key, weighted), windows)

    def merged(self) -> tuple[dict[MergedKey, WaitTimes], dict[MergedKey, list[int]]]:
        """Both kinds of rows added up by key, exact ones first, and their sub-windows."""
        merged: dict[MergedKey, WaitTimes] = {}
        merged_windows: dict[MergedKey, list[int]] = {}
        for weighted, rows in ((False, self.exact), (True, self.weighted)):
            for key, times in rows.items():
                merged.setdefault(key, WaitTimes()).add_times(times)
                windows = self.windows.get((key, weighted))
                if windows:
                    add_windows(merged_windows, key, windows)
        return merged, merged_windows


def apportion(total: int, parts: list[int]) -> list[int]:
    """`total` divided in proportion to `parts` (not all 0), in integers that add up to it:
    each part's share rounded down, and what rounding left given to the largest remainders."""
    whole = sum(parts)
    shares = [total * part // whole for part in parts]
    remainders = sorted(range(len(parts)), key=lambda index: total * parts[index] % whole, reverse=True)
    for index in remainders[:total - sum(shares)]:
        shares[index] += 1
    return shares


@dataclass(frozen=True)
class Naming:
    """How the engine names what the core counted: a tally's row key as a model row's, the
    waker of a tally's row, and the stratum a model row is in; and the stacks that stand for
    no call chain (before the window, a new thread's first run, a lost switch-out), which are
    lent to no wait."""

    row: Callable[[CoreRowKey], MergedKey]
    waker: Callable[[CoreRowKey], int | None]
    stratum: Callable[[MergedKey], StratumKey]
    synthetic: frozenset[int]


# A class of rows that lend their stacks: tid, state, and the waker's pid (None: not woken), or not
LenderKey = tuple[int, str, int | None] | tuple[int, str]


def scale_to_strata(rows: SampledRows, strata: dict[StratumKey, Stratum], naming: Naming) -> dict[MergedKey, float]:
    """Scale each stratum's weighted rows to its exact times, and lend a stratum without one
    the stacks of its class (see the module's doc); returns how much each weighted row's
    off-CPU time was scaled, for its links."""
    in_stratum: dict[StratumKey, list[MergedKey]] = defaultdict(list)
    for row in rows.weighted:
        in_stratum[naming.stratum(row)].append(row)
    factors: dict[MergedKey, float] = {}
    unsampled: list[tuple[StratumKey, Stratum, CoreRowKey]] = []
    for key, stratum in strata.items():
        if key in in_stratum:
            factors.update(_scale(rows, in_stratum[key], stratum))
        elif stratum.unsampled_row is not None:
            unsampled.append((key, stratum, stratum.unsampled_row))
    lenders = _lenders(rows, naming)  # (before any is lent: a lent row lends nothing)
    for (tid, state, identity), stratum, core_key in unsampled:
        lent = lenders.get((tid, state, identity[0] if identity else None)) or lenders.get((tid, state))
        if lent:
            _lend(rows, lent, stratum, (tid, state, naming.waker(core_key)))
        else:  # its time, under [stack not sampled], with its waker
            exact = stratum.times
            rows.add(naming.row(core_key), True,
                     WaitTimes(exact.offcpu_us, exact.blocked_us, exact.runqueue_us, exact.count),
                     list(stratum.unsampled_windows) if rows.windows else [])
    return factors


def _lenders(rows: SampledRows, naming: Naming) -> dict[LenderKey, dict[int, WaitTimes]]:
    """The times of each class's stacks, exact rows and scaled ones alike: by thread, state
    and the waker's process, and by thread and state."""
    lenders: dict[LenderKey, dict[int, WaitTimes]] = defaultdict(dict)
    for kind in (rows.exact, rows.weighted):
        for key, times in kind.items():
            tid, stack, state, _ = key
            if stack in naming.synthetic or not (times.offcpu_us or times.count):
                continue
            waker = naming.stratum(key)[2]
            for lender in ((tid, state, waker[0] if waker else None), (tid, state)):
                lenders[lender].setdefault(stack, WaitTimes()).add_times(times)
    return lenders


def _lend(rows: SampledRows, lent: dict[int, WaitTimes], stratum: Stratum, row: tuple[int, str, int | None]) -> None:
    """A stratum's exact times divided among the stacks `lent` as among its own rows (_divide),
    its sub-windows with them, in rows of its thread, state and waker (`row`)."""
    stacks = list(lent)
    for stack, times in zip(stacks, _divide([lent[stack] for stack in stacks], stratum.times), strict=True):
        windows = stratum.unsampled_windows
        profile = apportion(times.offcpu_us, windows) if rows.windows and any(windows) else []
        tid, state, waker = row
        rows.add((tid, stack, state, waker), True, times, profile)


def _parts(preferred: list[int], fallback: list[int]) -> list[int]:
    return preferred if any(preferred) else fallback


def _scale(rows: SampledRows, keys: list[MergedKey], stratum: Stratum) -> dict[MergedKey, float]:
    """Scale one stratum's weighted rows to its exact times (_divide); returns each row's factor."""
    estimates = [rows.weighted[key] for key in keys]
    factors = {}
    for key, times, scaled in zip(keys, estimates, _divide(estimates, stratum.times), strict=True):
        factors[key] = scaled.offcpu_us / times.offcpu_us if times.offcpu_us else 1.0
        windows = rows.windows.get((key, True))
        if windows:
            profile = _parts(windows, stratum.unsampled_windows)
            rows.windows[(key, True)] = apportion(scaled.offcpu_us, profile) if any(profile) else windows
        rows.weighted[key] = scaled
    return factors


def _divide(estimates: list[WaitTimes], exact: WaitTimes) -> list[WaitTimes]:
    """`exact`'s blocked and run-queue time (their sum the off-CPU time) and count divided in
    proportion to `estimates` (not all empty). A part's variance is that of its share of the
    estimates as a ratio estimate, times the exact time, linearized: f²(V(1 - 2p) + p²V_all),
    with f the exact time over the estimates'."""
    estimated_us = sum(times.offcpu_us for times in estimates)
    by_time = _parts([times.offcpu_us for times in estimates], [times.count for times in estimates])
    blocked = apportion(exact.blocked_us, _parts([times.blocked_us for times in estimates], by_time))
    runqueue = apportion(exact.runqueue_us, _parts([times.runqueue_us for times in estimates], by_time))
    counts = apportion(exact.count, _parts([times.count for times in estimates], by_time))
    factor = exact.offcpu_us / estimated_us if estimated_us else 0.0
    all_variance = sum(times.variance for times in estimates)
    parts = []
    for times, part_blocked, part_runqueue, count in zip(estimates, blocked, runqueue, counts, strict=True):
        share = times.offcpu_us / estimated_us if estimated_us else 0.0
        variance = factor * factor * (times.variance * (1 - 2 * share) + share * share * all_variance)
        parts.append(WaitTimes(part_blocked + part_runqueue, part_blocked, part_runqueue, count, round(variance)))
    return parts
