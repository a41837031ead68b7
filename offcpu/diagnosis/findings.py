"""Findings: what holds a model's threads back, named, with its evidence and its fix.

Pure functions over the model. Every wait is first classified by what ended it and
where it waited (offcpu.diagnosis.waits), then claimed by at most one finding
(offcpu.diagnosis.claims): no microsecond is in two findings. The rules
(offcpu.diagnosis.rules) turn their claimed waits into matches; here each match becomes
a finding, with its evidence (offcpu.diagnosis.evidence), graded by its share and
ranked, worst first.

What a finding counts (its `offcpu_us`) is the whole off-CPU time of its waits: the
time blocked until the wakeup and then the time waiting for a CPU (a thread that had
not blocked would not have lost its CPU); summaries say both parts. `runqueue`
counts the time threads were preempted while they still had work.

Shares: `share_of_wall` is that time over the wall time of the threads it is about
(each one's on-CPU plus off-CPU time, and never less than one thread's whole window,
so that one short-lived thread's wait does not look like a process-wide problem);
`share_of_offcpu` is its share of all off-CPU time, idle time (threads waiting for
work) left out for every rule but `idle`.
"""

from __future__ import annotations

from dataclasses import dataclass

from offcpu.diagnosis.claims import IDLE, RUNQUEUE
from offcpu.diagnosis.context import Context, blocked, tids, total
from offcpu.diagnosis.evidence import (
    CgroupShare,
    ChainStep,
    Evidence,
    RootShare,
    WakerShare,
    cgroup_shares,
    chain,
    evidence,
    release_sites,
    roots,
    waker_shares,
)
from offcpu.diagnosis.locktable import LockTable, lock_table
from offcpu.diagnosis.rules import RULES, Match, Rule
from offcpu.model import Model
from offcpu.model.stackview import StackView, of_threads

# Severity from share_of_wall. On the examples (2 CPUs, 1 s): the pathologies'
# findings carry 20-80% of their threads' time, the same programs' secondary
# effects (madvise at thread exit, a pool's queue lock) 0.2-15%, idle programs'
# stray waits < 1%.
CRITICAL_FROM = 0.20
WARNING_FROM = 0.05
REPORT_FROM = 0.01  # below this share a finding is noise and is left out (unless a rule raises its floor)
SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # "info", "warning" or "critical"
    title: str
    summary: str
    offcpu_us: int
    blocked_us: int  # of offcpu_us, until the wakeups (the rest: waiting for a CPU after them)
    # The time it is graded and ranked by: its waits' blocked time; CPU saturation's, every
    # wait's time waiting for a CPU (preempted, and after the wakeups of the others' waits)
    graded_us: int
    share_of_wall: float
    share_of_offcpu: float
    threads: int
    evidence: tuple[Evidence, ...]  # the wait site: the stacks its waits were in, heaviest first
    remedy: str
    confidence: str  # "high" or "low"
    confidence_reason: str
    subject: str = ""  # which lock or pool, for findings that can be there several times
    release_sites: tuple[Evidence, ...] = ()  # the wakers' stacks at the wakeups
    wakers: tuple[WakerShare, ...] = ()
    chain: tuple[ChainStep, ...] = ()
    roots: tuple[RootShare, ...] = ()
    cgroups: tuple[CgroupShare, ...] = ()  # of a recording of the whole machine: the cgroups of its threads
    # The standard error of share_of_wall, from its spread over the window's sub-windows
    share_uncertainty: float = 0.0
    # The severity the share reaches by more than its uncertainty (severity when it is 0):
    # a lower one says the finding is near the limit of its severity, and may fall below it
    # in another run
    settled_severity: str = "info"


def severity_of(share: float) -> str:
    return "critical" if share >= CRITICAL_FROM else "warning" if share >= WARNING_FROM else "info"


def _finding(rule: Rule, ctx: Context, match: Match) -> Finding | None:
    us = total(match.rows)
    idle = rule.id == IDLE
    graded = ctx.own_us(match.rows) if match.graded_us is None else match.graded_us
    graded_rows = match.rows if match.graded_rows is None else match.graded_rows
    share_of_wall = ctx.share_of_wall(graded, graded_rows) if graded_rows else 0.0
    offcpu = ctx.offcpu_us if idle else ctx.offcpu_us - ctx.idle_us
    # The sub-windows keep off-CPU time: a share of its graded part spreads as much in
    # proportion (its graded part taken to be the same share of each sub-window's)
    graded_rows_us = total(graded_rows)
    uncertainty = ctx.share_uncertainty(graded_rows) * (graded / graded_rows_us if graded_rows_us else 1.0)
    rank = SEVERITIES.index

    def severity_at(share: float) -> str:
        return SEVERITIES[min(max(rank(severity_of(share)), rank(match.floor)), rank(match.cap))]

    severity = severity_at(share_of_wall)
    if not idle and severity == "info" and match.floor == "info" and share_of_wall < REPORT_FROM:
        return None
    peer_waits = rule.id not in (IDLE, RUNQUEUE, "thread_limits")
    return Finding(
        id=rule.id, severity=severity, title=match.title or rule.title, summary=match.summary, offcpu_us=us,
        blocked_us=blocked(match.rows), graded_us=graded, share_of_wall=share_of_wall,
        share_of_offcpu=min(us / offcpu, 1.0) if offcpu > 0 else 0.0,
        threads=match.threads if match.threads is not None else tids(match.rows),
        evidence=evidence(ctx.model, match.rows), remedy=match.remedy or rule.remedy,
        confidence=match.confidence, confidence_reason=match.confidence_reason, subject=match.subject,
        release_sites=release_sites(ctx.model, match.rows) if peer_waits else (),
        wakers=waker_shares(ctx, match.rows) if peer_waits else (),
        chain=chain(ctx, match.rows) if peer_waits else (),
        roots=roots(ctx, match.rows) if peer_waits else (),
        cgroups=cgroup_shares(ctx, match.rows),
        share_uncertainty=uncertainty, settled_severity=severity_at(share_of_wall - uncertainty),
    )


def findings(model: Model, rules: tuple[Rule, ...] = RULES, table: LockTable | None = None) -> list[Finding]:
    """What every rule found in the model, worst first: by severity, then waits with a
    cause in the program before waits for a CPU (which the machine's other load shares),
    then by time."""
    ctx = Context(model, table)
    found = [finding for rule in rules for match in rule.detect(ctx)
             if (finding := _finding(rule, ctx, match)) is not None]
    return sorted(found, key=lambda f: (-SEVERITIES.index(f.severity), f.id == RUNQUEUE, -f.graded_us))


def view_findings(model: Model, view: StackView) -> list[Finding]:
    """The findings about the threads a report's filters keep, in every state."""
    return findings(of_threads(model, view), table=lock_table(view.locks))

