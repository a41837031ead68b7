"""A finding's evidence: where its threads waited (the wait site, its heaviest stacks), where
they were let go (the release site: the wakers' stacks at the wakeups), who let them go, what
those wakers were themselves waiting for meanwhile (the chain), and what that came down to (the
roots)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from offcpu.diagnosis.claims import RUNQUEUE
from offcpu.diagnosis.context import Context
from offcpu.diagnosis.roots import root_words
from offcpu.model import Model, Row
from offcpu.model.wakeups import CAUSE_WORDS
from offcpu.stacks import STACK_NOT_TAKEN, WAKER_STACK_NOT_TAKEN, drawn_alone, reading

EVIDENCE_STACKS = 3
CHAIN_STEPS = 3  # the chain's and the roots' parts shown, the largest
WAKERS = 3
CGROUPS = 3  # the cgroups a finding's threads were in, the largest


@dataclass(frozen=True)
class Evidence:
    frames: tuple[str, ...]  # root first
    kernel_frames: int  # the last this many frames are the kernel's
    state: str  # the waits' switch-out state ("" for a release site)
    offcpu_us: int  # the waits' time off CPU (for a release site: of the waits let go there, until then)
    count: int
    variance: int = 0  # of offcpu_us when it is an estimate (Row.variance; µs²); 0 for a release site


@dataclass(frozen=True)
class WakerShare:
    """Who let a finding's waits go: a pool of threads, or what else ended them."""

    who: str
    wakeups: int
    blocked_us: int


@dataclass(frozen=True)
class ChainStep:
    """Part of a finding's blocked time, and what the threads that ended those waits were
    themselves doing meanwhile: waiting somewhere, or running."""

    what: str
    us: int
    share: float  # of the finding's blocked time that peers ended


@dataclass(frozen=True)
class RootShare:
    """Part of a finding's blocked time by what it came down to: following each wait's waker
    to what that waker was itself waiting for, and on, to a thread on CPU, a device, a
    timer or work from outside."""

    what: str
    us: int
    share: float  # of the finding's blocked time that peers ended


@dataclass(frozen=True)
class CgroupShare:
    """A cgroup (a container, a systemd unit) some of a finding's threads were in."""

    path: str
    threads: int


def cgroup_shares(ctx: Context, rows: list[Row]) -> tuple[CgroupShare, ...]:
    """Of a recording of the whole machine, the cgroups the rows' threads were in, by how many
    (each process's own: offcpu.machine.cgroups.own_cgroup_paths)."""
    if ctx.model.capture.target.kind != "all":
        return ()
    threads: dict[str, int] = defaultdict(int)
    for tid in {row.tid for row in rows}:
        path = ctx.cgroup_of_pid.get(ctx.model.threads[tid].pid)
        if path is not None:
            threads[path] += 1
    ranked = sorted(threads.items(), key=lambda item: (-item[1], item[0]))
    return tuple(CgroupShare(path, count) for path, count in ranked[:CGROUPS])


def evidence(model: Model, rows: list[Row]) -> tuple[Evidence, ...]:
    """The stacks (with their state) that carry most of the rows' off-CPU time, grouped
    as the stack tables group them: stacks that read the same (they differ only in frames
    perf could not name or in the scheduler's own) are one. Waits whose stack was not sampled
    (nor any of their thread's in that state: offcpu.model.sampling) count in the finding's
    time, but say nothing of where it waited: they are none."""
    return _heaviest(model, [(row.stack, row.state, row.offcpu_us, row.count, row.variance) for row in rows
                             if model.stacks[row.stack].frames != (STACK_NOT_TAKEN,)])


def release_sites(model: Model, rows: list[Row]) -> tuple[Evidence, ...]:
    """The wakers' stacks at the wakeups that ended the rows' waits, weighted by how long
    those waits had been blocked (of a sampling recording, those it took)."""
    return _heaviest(model, [(model.wakers[row.waker].stack, "", row.blocked_us, row.count, 0) for row in rows
                             if row.waker is not None and model.wakers[row.waker].kind in ("thread", "interrupt")
                             and model.stacks[model.wakers[row.waker].stack].frames != (WAKER_STACK_NOT_TAKEN,)])


def _heaviest(model: Model, weighted: list[tuple[int, str, int, int, int]]) -> tuple[Evidence, ...]:
    """(stack, state, µs, count, variance) grouped by how the stack reads, heaviest first."""
    groups: dict[tuple[str, str], list[tuple[int, int, int, int]]] = defaultdict(list)
    for stack_index, state, us, count, variance in weighted:
        stack = model.stacks[stack_index]
        groups[(reading(tuple(reversed(stack.frames)), stack.kernel_frames), state)].append(
            (stack_index, us, count, variance))
    said = []
    for (_, state), group in groups.items():
        by_stack: dict[int, int] = defaultdict(int)
        for stack_index, us, _, _ in group:
            by_stack[stack_index] += us
        frames, kernel_frames = drawn_alone(model.stacks[max(by_stack, key=by_stack.__getitem__)])  # the heaviest
        said.append(Evidence(frames, kernel_frames, state, sum(us for _, us, _, _ in group),
                             sum(count for _, _, count, _ in group), sum(variance for *_, variance in group)))
    return tuple(sorted(said, key=lambda item: -item.offcpu_us)[:EVIDENCE_STACKS])


def waker_shares(ctx: Context, rows: list[Row]) -> tuple[WakerShare, ...]:
    """Who ended the rows' waits: the wakers' pools, or what else it was."""
    shares: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    index = ctx.row_number
    for row in rows:
        cause = ctx.waits.classes[index[id(row)]].cause
        if row.waker is None:
            continue  # not let go in the window
        if ctx.model.wakers[row.waker].kind == "thread":
            waker = ctx.model.wakers[row.waker]
            who = ctx.waits.pool_of(waker.tid) if waker.tid in ctx.model.threads else f"{waker.comm} ({waker.pid})"
        else:
            who = CAUSE_WORDS[cause]
        shares[who][0] += row.count
        shares[who][1] += row.blocked_us
    ranked = sorted(shares.items(), key=lambda item: -item[1][1])
    return tuple(WakerShare(who, wakeups, us) for who, (wakeups, us) in ranked[:WAKERS] if us)


def _peer_ended(ctx: Context, rows: list[Row]) -> list[int]:
    """The model's numbers of the rows whose waits a recorded thread ended: what the chain and
    the roots follow."""
    index = ctx.row_number
    return [index[id(row)] for row in rows if ctx.waits.followed[index[id(row)]]]


def chain(ctx: Context, rows: list[Row]) -> tuple[ChainStep, ...]:
    """What the threads that ended the rows' waits were doing meanwhile: their waits that
    overlapped them (by where they waited), and running for the rest."""
    numbers = _peer_ended(ctx, rows)
    whole = sum(ctx.model.rows[number].blocked_us for number in numbers)
    if not whole:
        return ()
    pools = {ctx.waits.pool_of(row.tid) for row in rows}
    steps: dict[str, int] = defaultdict(int)
    for number in numbers:
        overlapped = 0
        for waker_row, overlap in ctx.waits.links_by_waiter.get(number, ()):
            steps[_step_words(ctx, waker_row, pools)] += overlap
            overlapped += overlap
        steps["ran"] += max(0, ctx.model.rows[number].blocked_us - overlapped)
    ranked = sorted(steps.items(), key=lambda item: -item[1])
    return tuple(ChainStep(what, us, us / whole) for what, us in ranked[:CHAIN_STEPS] if us >= 0.01 * whole)


def _step_words(ctx: Context, number: int, pools: set[str]) -> str:
    """A waker's overlapping wait: where it waited (and whose, when not the waiters' own pool)."""
    pool = ctx.waits.pool_of(ctx.model.rows[number].tid)
    whose = "" if pool in pools else f" ({pool})"
    claim = ctx.claims.of_row[number]
    if claim is not None and claim.finding == RUNQUEUE:
        return f"waited for a CPU{whose}"
    return f"waited for {root_words(ctx.waits, ctx.claims, number)}{whose}"


def roots(ctx: Context, rows: list[Row]) -> tuple[RootShare, ...]:
    """The peer-ended part of the rows' blocked time, followed down the wake-up links to its
    roots (wPerf's cascaded redistribution): the time a waker was itself waiting for a peer
    goes to what that peer was doing, in proportion, and so on; the rest of each wait goes
    to the waker's own wait (a disk, a timer...) or to its being on CPU."""
    numbers = _peer_ended(ctx, rows)
    whole = sum(ctx.model.rows[number].blocked_us for number in numbers)
    if not whole:
        return ()
    shares = ctx.root_shares
    found: dict[str, float] = defaultdict(float)
    for number in numbers:
        for what, share in shares[number].items():
            found[what] += share * ctx.model.rows[number].blocked_us
    ranked = sorted(found.items(), key=lambda item: -item[1])
    return tuple(RootShare(what, round(us), us / whole) for what, us in ranked[:CHAIN_STEPS + 1] if us >= 0.01 * whole)
