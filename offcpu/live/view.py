"""What `offcpu top` shows of a frame, in every form (the screen, plain blocks, JSON lines):
the wait sites with their time per second and trend, the threads, and who wakes whom."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from offcpu.diagnosis.locktable import LockTable
from offcpu.model import SUB_WINDOWS, Model
from offcpu.model.summaries import waker_pairs
from offcpu.stacks import Stack, drawn_alone, program_frame, shorten

# The last interval's rate against the window's: above RISING times it is rising, below
# 1/RISING falling
RISING = 1.5


@dataclass(frozen=True)
class Site:
    """A place where threads wait (not preempted): the lock table's name for it, else its stack."""

    name: str
    ms_per_s: float  # over the window
    last_ms_per_s: float  # over the window's last tenth
    threads: int
    waits: int

    @property
    def trend(self) -> str:
        if self.last_ms_per_s > self.ms_per_s * RISING:
            return "rising"
        return "falling" if self.last_ms_per_s * RISING < self.ms_per_s else "steady"


@dataclass(frozen=True)
class ThreadRate:
    tid: int
    pid: int
    comm: str
    offcpu_ms_per_s: float
    blocked_ms_per_s: float
    runqueue_ms_per_s: float
    oncpu_ms_per_s: float


@dataclass(frozen=True)
class Wakeups:
    waker: str  # a thread ("nginx 1234"), or what else ended the waits ("timer")
    wakee: str
    per_s: float
    blocked_ms_per_s: float


def wait_sites(model: Model, table: LockTable, width: int) -> list[Site]:
    """The sites by their time per second, heaviest first, named in `width` characters."""
    seconds = max(model.wall_us, 1) / 1e6
    times: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    threads: dict[str, set[int]] = defaultdict(set)
    names: dict[int, str] = {}  # by stack: the rows of a stack are many (a thread's, a waker's)
    for row in model.rows:
        if row.state == "R":
            continue
        name = names.get(row.stack)
        if name is None:
            name = names[row.stack] = site_name(model.stacks[row.stack], table, width)
        sums = times[name]
        sums[0] += row.offcpu_us
        sums[1] += row.windows[-1] if row.windows else 0
        sums[2] += row.count
        threads[name].add(row.tid)
    sites = [Site(name, us / 1e3 / seconds, last / 1e3 / (seconds / SUB_WINDOWS), len(threads[name]), count)
             for name, (us, last, count) in times.items()]
    return sorted(sites, key=lambda site: -site.ms_per_s)


def site_name(stack: Stack, table: LockTable, width: int) -> str:
    """A stack's site in `width` characters: the lock table's name for it, with the program's own
    frame when a runtime's read joined one (`futex at work (app.py:57)`) else the frame it matched
    (`futex (futex_do_wait)`); else the stack shortened."""
    site = table.site(stack)
    if site is None:
        return shorten(*drawn_alone(stack), width)[:width]
    program = program_frame(stack.frames)
    return (f"{site.lock.name} at {program}" if program is not None else f"{site.lock.name} ({site.frame})")[:width]


def thread_rates(model: Model) -> list[ThreadRate]:
    """Each thread's time per second, longest off CPU first."""
    seconds = max(model.wall_us, 1) / 1e6
    rates = [ThreadRate(t.tid, t.pid, t.comm, t.offcpu_us / 1e3 / seconds, t.blocked_us / 1e3 / seconds,
                        t.runqueue_us / 1e3 / seconds, t.oncpu_us / 1e3 / seconds) for t in model.threads.values()]
    return sorted(rates, key=lambda rate: (-rate.offcpu_ms_per_s, rate.tid))


def wakeups(model: Model) -> list[Wakeups]:
    """Who woke whom, by the time the wakees had waited, longest first."""
    seconds = max(model.wall_us, 1) / 1e6
    return [Wakeups(f"{pair.waker_comm} {pair.waker_tid}" if pair.waker_kind == "thread" else
                    pair.ended_by or pair.waker_kind, f"{pair.wakee_comm} {pair.wakee_tid}",
                    pair.wakeups / seconds, pair.blocked_us / 1e3 / seconds) for pair in waker_pairs(model)]
