"""The wait-for graph: who waited for whom, and how long.

Nodes are pools of threads (threads of one service whose names differ only in a
trailing number), and what else ends waits: timers, devices, the network, threads
outside the services recorded, kernel threads. An edge A -> B carries the time A's
threads were blocked until B woke them. A pool with an edge to itself takes turns.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from offcpu.diagnosis.context import Context
from offcpu.diagnosis.waits import WaitClass
from offcpu.model.wakeups import CAUSE_WORDS, DEVICE, OUTSIDE, PEER, TIMER, UNRECORDED, UNWOKEN

MIN_EDGE_SHARE = 0.01  # edges under this share of all blocked time are left out, as noise


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # "pool", or the cause that ends waits there ("timer", "device", ...)
    threads: int  # of a pool
    cpus: float  # CPUs a pool ran on, on average


@dataclass(frozen=True)
class Edge:
    waiter: str  # a pool's name
    waker: str  # a node's name
    blocked_us: int
    wakeups: int


@dataclass(frozen=True)
class WaitGraph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]  # heaviest first


# What most likely ended a wait whose wakeup was not recorded, by where it waited.
UNRECORDED_BY_SITE = {"io": DEVICE, "sleep": TIMER, "work": OUTSIDE}


def _unrecorded_as(cls: WaitClass) -> str:
    return UNRECORDED_BY_SITE.get(cls.site.lock.kind, UNRECORDED) if cls.site is not None else UNRECORDED


def wait_graph(ctx: Context) -> WaitGraph:
    """The graph of a model's waits ended within the window (preemptions and new threads
    are waits for a CPU, not for anyone)."""
    weights: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    kinds: dict[str, str] = {}
    for row, cls in zip(ctx.model.rows, ctx.waits.classes, strict=True):
        if row.waker is None or cls.cause == UNWOKEN or not row.blocked_us:
            continue
        waker = ctx.model.wakers[row.waker]
        if waker.kind == "thread" and waker.tid in ctx.model.threads and cls.cause == PEER:
            target = ctx.waits.pool_of(waker.tid)
            kinds[target] = "pool"
        elif cls.cause == OUTSIDE:
            target = f"outside: {waker.comm}"
            kinds[target] = cls.cause
        else:
            cause = _unrecorded_as(cls) if cls.cause == UNRECORDED else cls.cause
            target = CAUSE_WORDS[cause] + (" (not recorded)" if cls.cause == UNRECORDED and cause != UNRECORDED else "")
            kinds[target] = cause
        weight = weights[(ctx.waits.pool_of(row.tid), target)]
        weight[0] += row.blocked_us
        weight[1] += row.count
    whole = sum(us for us, _ in weights.values())
    edges = sorted((Edge(waiter, waker, us, count) for (waiter, waker), (us, count) in weights.items()
                    if whole and us >= MIN_EDGE_SHARE * whole), key=lambda edge: -edge.blocked_us)
    names = list(dict.fromkeys(name for edge in edges for name in (edge.waiter, edge.waker)))
    pools = ctx.claims.pools
    nodes = tuple(Node(name, "pool", len(pools[name].tids), pools[name].parallelism) if name in pools
                  else Node(name, kinds.get(name, "pool"), 0, 0.0) for name in names)
    return WaitGraph(nodes, tuple(edges))
