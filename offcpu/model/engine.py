"""From a capture to the off-CPU model.

The compiled core pairs each thread's switch-out with its next switch-in, splits the time
between into blocked time and run-queue delay at the wakeup, and adds it all up
(core/src/engine/ says how, and offcpu.reading.pairing how each reader hands it the events).
This module runs it over the window in time slices, then makes the model of what it counted:
the reader names each distinct call chain once, and a sampling backend's weighted rows are
scaled to their strata (offcpu.model.sampling).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from offcpu import _core
from offcpu.capture import CaptureInfo
from offcpu.model import Link, Model, Row, Thread, TimedWait, WaitTimes, Waker
from offcpu.model.sampling import CoreRowKey, MergedKey, Naming, SampledRows, Stratum, StratumKey, scale_to_strata
from offcpu.model.wakeups import from_interrupt
from offcpu.reading.pairing import SYNTHETIC_STACKS, CaptureReader, Paired, ThreadAtStart
from offcpu.stacks import WAKER_NOT_RECORDED, Stack


def waker_kind(tid: int, stack: Stack) -> str:
    """"interrupt" when the wakeup came from an interrupt's handler (in whatever thread it
    interrupted), "idle" when the idle task woke it otherwise, "unrecorded" when no wakeup was
    recorded, else "thread"."""
    if stack.frames == (WAKER_NOT_RECORDED,):
        return "unrecorded"
    if from_interrupt(stack.frames[:stack.kernel_frames]):
        return "interrupt"
    return "idle" if tid == 0 else "thread"


# A capture is paired in time slices, in parallel. How many follows the capture, not the machine
# reading it: a wakeup is followed to what its waker waited for within a slice only
# (core/src/engine/tally.rs), so a capture cut as many ways as the reader has CPUs read otherwise
# on each machine (python_lock_bpf's lock finding: 1.60 s behind its holders' futex waits in one
# slice, 1.30 s in two). A slice is BYTES_PER_SLICE of the recording at least (some 60,000 perf
# records, 75,000 BPF waits, or 2,500 samples with DWARF stacks): a small capture is one slice.
BYTES_PER_SLICE = 8 << 20
MAX_SLICES = 16


def slice_count(info: CaptureInfo) -> int:
    return max(1, min(MAX_SLICES, info.perf_data_bytes // BYTES_PER_SLICE))


def threads_at_start(info: CaptureInfo) -> list[ThreadAtStart]:
    """The target's threads when recording began: (tid, comm, state) each."""
    return [(int(tid), comm, state) for tid, (comm, state) in info.threads_at_start.items()]


def build_model(reader: CaptureReader, info: CaptureInfo, window: tuple[int, int] | None = None,
                on_progress: Callable[[int, int], None] | None = None) -> Model:
    """Pair the capture in parallel time slices and build the model of `window` (default: the
    capture's). Part of a recording is read from its start, to know where each thread was
    when the part begins, up to the part's end."""
    start_ns, end_ns = window or (info.window_start_ns, info.window_end_ns)
    slices = reader.time_slices(info.window_start_ns, end_ns, slice_count(info))

    def done(count: int) -> None:
        if on_progress:
            on_progress(count, len(slices))

    paired = reader.pair(slices, (info.window_start_ns, end_ns), threads_at_start(info), (start_ns, end_ns),
                         info.switch_cost_ns or 0, done)
    return to_model(paired, reader, info, start_ns, end_ns)


def to_model(paired: Paired, reader: CaptureReader, info: CaptureInfo, start_ns: int, end_ns: int) -> Model:
    """Number the distinct stacks and wakers; the reader names each call chain once. Chains
    that differ only in addresses (other call sites in the same functions) are one stack.
    A sampling backend's weighted rows are then scaled to their strata (offcpu.model.sampling)."""
    tally, names, states, chains = paired.tally, paired.names, paired.states, paired.chains
    keys = tally.rows()
    strata: dict[StratumKey, Stratum] = {
        (tid, states[state], (waker[0], waker[1], names[waker[2]]) if waker else None):
            Stratum(WaitTimes(*times), windows, unsampled_row)
        for (tid, state, waker), times, windows, unsampled_row in tally.strata()}
    unsampled_keys = [stratum.unsampled_row for stratum in strata.values() if stratum.unsampled_row]
    used = {chain for (_, chain, _, waker) in [key for key, *_ in keys] + unsampled_keys
            for chain in (chain, waker[3] if waker else 0)}
    named = reader.stacks(chains[chain] for chain in used if chain >= _core.SEEDED_CHAINS)
    chain_ids: dict[int, int] = {}
    stack_ids: dict[Stack, int] = {}
    waker_ids: dict[Waker, int] = {}

    def stack_of(chain: int) -> Stack:
        if chain < _core.SEEDED_CHAINS:
            return Stack((SYNTHETIC_STACKS[chain - 1],), 0)
        return named[chains[chain]]

    def stack_id(chain: int) -> int:
        if chain not in chain_ids:
            chain_ids[chain] = stack_ids.setdefault(stack_of(chain), len(stack_ids))
        return chain_ids[chain]

    waker_of: dict[tuple[int, int, int, int], int] = {}  # rows share wakers: each is made and looked up once
    waker_identities: dict[int | None, tuple[int, int, str] | None] = {None: None}  # waker id -> pid, tid, comm

    def waker_id(key: tuple[int, int, int, int] | None) -> int | None:
        if key is None:
            return None
        number = waker_of.get(key)
        if number is None:
            pid, tid, name, chain = key
            waker = Waker(waker_kind(tid, stack_of(chain)), pid, tid, names[name], stack_id(chain))
            number = waker_of[key] = waker_ids.setdefault(waker, len(waker_ids))
            waker_identities[number] = (pid, tid, names[name])
        return number

    def merged_key(key: CoreRowKey) -> MergedKey:
        tid, chain, state, waker = key
        return tid, stack_id(chain), states[state], waker_id(waker)

    rows_by_kind = SampledRows()
    row_of: list[tuple[MergedKey, bool]] = []  # by the tally's row number
    waits_counted = 0  # (a wait of weight w counts w)
    for key, weighted, times, windows in keys:
        row_of.append((merged_key(key), weighted))
        rows_by_kind.add(*row_of[-1], WaitTimes(*times), windows)
        waits_counted += times[3]
    counts = tally.counts()
    stacked_waits = waits_counted - counts["stand_in_waits"]
    synthetic = frozenset(stack_ids[stack] for stack in (Stack((frame,), 0) for frame in SYNTHETIC_STACKS)
                          if stack in stack_ids)
    factors = scale_to_strata(rows_by_kind, strata, Naming(
        merged_key, lambda key: waker_id(key[3]), lambda key: (key[0], key[2], waker_identities[key[3]]), synthetic))
    merged, merged_windows = rows_by_kind.merged()
    row_index = {key: index for index, key in enumerate(merged)}
    rows = [Row(*key, times.offcpu_us, times.blocked_us, times.runqueue_us, times.count,
                merged_windows.get(key, []), times.variance)
            for key, times in merged.items()]
    links: dict[tuple[int, int], list[int]] = {}  # overlap ns, count
    for waiter_row, waker_row, overlap_ns, count in tally.links():
        (waiter, waiter_weighted), (waker, waker_weighted) = row_of[waiter_row], row_of[waker_row]
        factor = (factors.get(waiter, 1.0) if waiter_weighted else 1.0) * \
            (factors.get(waker, 1.0) if waker_weighted else 1.0)
        link = links.setdefault((row_index[waiter], row_index[waker]), [0, 0])
        link[0] += round(overlap_ns * factor)
        link[1] += round(count * factor)
    stacks, wakers = list(stack_ids), list(waker_ids)  # in the order they were numbered
    waited = {row.tid for row in rows}

    def inside(ns: int | None) -> int | None:
        return ns if ns is not None and start_ns <= ns <= end_ns else None

    threads = {}
    for tid, pid, comm, oncpu_ns, offcpu_us, blocked_us, runqueue_us, observer_ns, created_ns, exited_ns \
            in tally.threads():
        if oncpu_ns or tid in waited or inside(created_ns) or inside(exited_ns):
            # a thread with no event of its own (blocked throughout) is of the process it was of
            # when recording began; perf.data cannot say
            pid = pid if pid is not None else info.processes_at_start.get(str(tid), tid)
            threads[tid] = Thread(tid, pid, names[comm], round(oncpu_ns / 1000), offcpu_us, blocked_us, runqueue_us,
                                  inside(created_ns), inside(exited_ns), round(observer_ns / 1000))
    # sorted as tuples, in TimedWait's order: its generated comparisons took 40 ms for 4,096 waits
    timeline = [TimedWait(*wait) for wait in sorted(
        (tid, row_index[row_of[number][0]], since_ns, woken_ns, back_ns, ran_ns)
        for _, since_ns, tid, woken_ns, back_ns, ran_ns, number in tally.longest())]
    return Model(info, start_ns, end_ns, stacks, wakers, rows, threads, Counter(tally.runqueue_delays()),
                 [Link(waiter, waker, round(overlap_ns / 1000), count)
                  for (waiter, waker), (overlap_ns, count) in links.items()],
                 counts["clipped"], counts["unseen_wakeups"], paired.skipped, counts["estimated_switch_ins"],
                 counts["half_recorded_switches"], timeline=timeline, waits=stacked_waits + counts["stackless_waits"],
                 stacked_waits=stacked_waits,
                 sampled=bool(counts["stackless_waits"] or counts["stand_in_waits"]))
