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

A stratum none of whose waits carried a stack keeps its time, exactly, under `[stack not
sampled]`, with its state and its waker. (Lending it the stacks of its thread's other waits in
that state was tried: on thread_churn, whose waits are woken by thousands of short-lived
threads, it made a row for each stack and waker, and a report took minutes.)

docs/numbers.md#sampled-stacks says what the reports show of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from offcpu.model import SUB_WINDOWS, WaitTimes

# A stratum: tid, state, and the waker's pid, tid and comm (None: not woken, such as preempted)
StratumKey = tuple[int, str, tuple[int, int, str] | None]
# A row's key as the core hands it over: tid, chain, state, waker (pid, tid, name, chain) or None, all by id
CoreRowKey = tuple[int, int, int, "tuple[int, int, int, int] | None"]
# A model row's key: tid, stack, state, waker (offcpu.model.Row)
MergedKey = tuple[int, int, str, int | None]


@dataclass(slots=True)
class Stratum:
    """The exact times of a stratum's waits of weight other than 1; and, of those without a
    stack, what a stratum made of them alone needs: their sub-windows and the key of their
    row (their stack and their waker's not taken)."""

    times: WaitTimes
    unsampled_windows: list[int]
    unsampled_row: CoreRowKey | None


def add_windows(into: list[int], windows: list[int]) -> None:
    """Add sub-windows' times into others', window by window."""
    into[:] = [mine + theirs for mine, theirs in zip(into, windows, strict=True)]


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
            add_windows(self.windows.setdefault((key, weighted), [0] * SUB_WINDOWS), windows)

    def merged(self) -> tuple[dict[MergedKey, WaitTimes], dict[MergedKey, list[int]]]:
        """Both kinds of rows added up by key, exact ones first, and their sub-windows."""
        merged: dict[MergedKey, WaitTimes] = {}
        merged_windows: dict[MergedKey, list[int]] = {}
        for weighted, rows in ((False, self.exact), (True, self.weighted)):
            for key, times in rows.items():
                merged.setdefault(key, WaitTimes()).add_times(times)
                windows = self.windows.get((key, weighted))
                if windows:
                    add_windows(merged_windows.setdefault(key, [0] * SUB_WINDOWS), windows)
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


def scale_to_strata(rows: SampledRows, strata: dict[StratumKey, Stratum], key_of: Callable[[CoreRowKey], MergedKey],
                    stratum_key: Callable[[MergedKey], StratumKey]) -> dict[MergedKey, float]:
    """Scale each stratum's weighted rows to its exact times, and give a stratum without one a
    row of its own (see the module's doc); returns how much each weighted row's off-CPU
    time was scaled, for its links. `key_of` makes a tally's row key a model row's, and
    `stratum_key` says which stratum a model row is in."""
    in_stratum: dict[StratumKey, list[MergedKey]] = defaultdict(list)
    for row in rows.weighted:
        in_stratum[stratum_key(row)].append(row)
    factors: dict[MergedKey, float] = {}
    for key, stratum in strata.items():
        if key in in_stratum:
            factors.update(_scale(rows, in_stratum[key], stratum))
        elif stratum.unsampled_row is not None:  # its time, under [stack not sampled], with its waker
            exact = stratum.times
            rows.add(key_of(stratum.unsampled_row), True,
                     WaitTimes(exact.offcpu_us, exact.blocked_us, exact.runqueue_us, exact.count),
                     list(stratum.unsampled_windows) if rows.windows else [])
    return factors


def _parts(preferred: list[int], fallback: list[int]) -> list[int]:
    return preferred if any(preferred) else fallback


def _scale(rows: SampledRows, keys: list[MergedKey], stratum: Stratum) -> dict[MergedKey, float]:
    """Scale one stratum's weighted rows to its exact blocked and run-queue time (their sum the
    off-CPU time) and count; returns each row's factor. A row's variance becomes that of its
    share of the stratum as a ratio estimate, times the stratum's time, linearized:
    f²(V(1 - 2p) + p²V_all), with f the stratum's exact time over its estimate."""
    estimates = [rows.weighted[key] for key in keys]
    exact = stratum.times
    estimated_us = sum(times.offcpu_us for times in estimates)
    by_time = _parts([times.offcpu_us for times in estimates], [times.count for times in estimates])
    blocked = apportion(exact.blocked_us, _parts([times.blocked_us for times in estimates], by_time))
    runqueue = apportion(exact.runqueue_us, _parts([times.runqueue_us for times in estimates], by_time))
    counts = apportion(exact.count, [times.count for times in estimates])
    factor = exact.offcpu_us / estimated_us if estimated_us else 0.0
    stratum_variance = sum(times.variance for times in estimates)
    factors = {}
    for key, times, row_blocked, row_runqueue, count in zip(keys, estimates, blocked, runqueue, counts, strict=True):
        share = times.offcpu_us / estimated_us if estimated_us else 0.0
        variance = factor * factor * (times.variance * (1 - 2 * share) + share * share * stratum_variance)
        scaled = WaitTimes(row_blocked + row_runqueue, row_blocked, row_runqueue, count, round(variance))
        factors[key] = scaled.offcpu_us / times.offcpu_us if times.offcpu_us else 1.0
        windows = rows.windows.get((key, True))
        if windows:
            profile = _parts(windows, stratum.unsampled_windows)
            rows.windows[(key, True)] = apportion(scaled.offcpu_us, profile) if any(profile) else windows
        rows.weighted[key] = scaled
    return factors
