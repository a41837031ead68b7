"""What `offcpu check` decides: whether a run can be checked at all, and its
measurements against a policy and against a known-good baseline. Pure
functions; no I/O.

Every figure compared is normalised: a finding's share is of the time of the
threads it is about, and blocked time's of all the threads' time in the window
(the sum over threads of the time each was in it), so a longer recording or more
threads do not by themselves make a run look worse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from offcpu.capture import CaptureInfo
from offcpu.diagnosis.claims import LOCK_CONTENTION, MMAP_LOCK, STACK_CACHE_LOCK
from offcpu.diagnosis.context import Context
from offcpu.diagnosis.findings import SEVERITIES, Finding, findings
from offcpu.diagnosis.locktable import Lock, LockTable
from offcpu.gate.policy import BLOCKED, EXTRA_KEYS, NOT_GATED_BY_DEFAULT, WAITS_FOR_WORK, Policy
from offcpu.model import Model
from offcpu.model.summaries import lifecycle, runqueue_percentiles, totals


@dataclass(frozen=True)
class FindingFigures:
    severity: str
    share: float  # Finding.share_of_wall
    offcpu_us: int
    summary: str  # Finding.summary: the sentence with the numbers
    uncertainty: float = 0.0  # Finding.share_uncertainty
    settled_severity: str = "info"  # Finding.settled_severity


# The findings whose subject is a lock of the lock table, which a policy's [[lock]] may gate.
LOCK_FINDINGS = (MMAP_LOCK, STACK_CACHE_LOCK, LOCK_CONTENTION)


def by_id(found: list[tuple[str, FindingFigures]]) -> dict[str, FindingFigures]:
    """A finding id's figures when it was found for several locks or pools: its worst
    severity, its largest share, their time and their sentences together."""
    grouped: dict[str, list[FindingFigures]] = {}
    for finding_id, figures in found:
        grouped.setdefault(finding_id, []).append(figures)
    return {finding_id: FindingFigures(max((f.severity for f in group), key=SEVERITIES.index),
                                       max(f.share for f in group), sum(f.offcpu_us for f in group),
                                       " ".join(f.summary for f in group),
                                       max(group, key=lambda f: f.share).uncertainty,
                                       max((f.settled_severity for f in group), key=SEVERITIES.index))
            for finding_id, group in grouped.items()}


@dataclass(frozen=True)
class Measurements:
    """What a run measured: from a model, or from the JSON report of one."""

    window_s: float
    threads: int
    threads_us: int  # the threads' time in the window: on CPU + off CPU, summed over threads
    blocked_us: int
    idle_blocked_us: int  # of blocked_us, the waits for work (the idle finding's rows)
    runqueue_p99_us: int | None
    created_per_s: float
    findings: dict[str, FindingFigures]  # by finding id (see by_id)
    locks: dict[str, FindingFigures]  # the lock findings, by lock name
    lost_events: int = 0  # what perf lost of the events it meant to record
    lost_share: float = 0.0  # of those events (0-1)
    # The recording holds a command's whole run (CaptureInfo.whole_run): one run of the work it does
    whole_run: bool = False

    @property
    def lost_said(self) -> str | None:
        """The loss in words; None when perf lost nothing."""
        if not self.lost_events:
            return None
        return f"perf lost {self.lost_events:,} events ({self.lost_share:.2%}): some waits are missing or cut short"

    def share(self, rule: str) -> float:
        figures = self.findings.get(rule)
        return figures.share if figures else 0.0

    def uncertainty(self, rule: str) -> float:
        figures = self.findings.get(rule)
        return figures.uncertainty if figures else 0.0

    def time_us(self, rule: str) -> tuple[float, float]:
        """A finding's off-CPU time, all its threads together, and its uncertainty (its share's,
        relative to the share); 0 when not found."""
        figures = self.findings.get(rule)
        if figures is None:
            return 0.0, 0.0
        relative = figures.uncertainty / figures.share if figures.share else 0.0
        return float(figures.offcpu_us), figures.offcpu_us * relative

    @property
    def blocked_time_us(self) -> int:
        """Blocked time, waits for work left out."""
        return self.blocked_us - self.idle_blocked_us

    def ms_per_s(self, rule: str) -> float:
        return self._ms_per_s(self.findings.get(rule))

    def lock_ms_per_s(self, lock: str) -> float:
        return self._ms_per_s(self.locks.get(lock))

    def _ms_per_s(self, figures: FindingFigures | None) -> float:
        return figures.offcpu_us / 1000 / self.window_s if figures and self.window_s else 0.0


# Over this share of the events perf meant to record lost, whole waits are missing or run
# into others, and a check cannot check. Below it, shares are off by about as much of
# themselves (a finding at 5% by a quarter of a point), less than a run's own noise; a
# loaded machine loses a few percent with perf's default ring buffer.
LOST_BOUND = 0.05


def too_lossy(lost_share: float) -> bool:
    return lost_share > LOST_BOUND


def allowed_loss() -> str:
    """What a check allows of lost events, said beside a share."""
    return f"; a check allows {LOST_BOUND:.0%}"


def unrecorded(model: Model) -> str | None:
    """Why the model holds no scheduler event of its target, so that there is nothing
    to check; None when it does. perf counted no event at all, or none of the
    target's threads ran (switched in), or none left the CPU, during the window."""
    if model.capture.samples == 0:
        return f"capture.json counts 0 events and {model.capture.switch_records:,} switch records"
    if not any(thread.oncpu_us for thread in model.threads.values()):
        return "no thread of the target ran during the window"
    if not model.rows:
        return "no thread of the target left the CPU during the window"
    return None


def measure(model: Model, table: LockTable | None = None) -> Measurements:
    total = totals(model)
    found = findings(model, table=table)
    return Measurements(
        window_s=(model.window_end_ns - model.window_start_ns) / 1e9,
        threads=total.threads,
        threads_us=sum(t.oncpu_us + t.offcpu_us for t in model.threads.values()),
        blocked_us=total.blocked_us,
        idle_blocked_us=sum(row.blocked_us for row in Context(model, table).idle_rows),
        runqueue_p99_us=runqueue_percentiles(model).get(99),
        created_per_s=lifecycle(model).created_per_s,
        findings=by_id([(f.id, _figures(f)) for f in found]),
        locks={f.subject: _figures(f) for f in found if f.id in LOCK_FINDINGS and f.subject},
        lost_events=model.capture.lost_events,
        lost_share=model.capture.lost_share,
        whole_run=model.capture.whole_run,
    )


def _figures(finding: Finding) -> FindingFigures:
    return FindingFigures(finding.severity, finding.share_of_wall, finding.offcpu_us, finding.summary,
                          finding.share_uncertainty, finding.settled_severity)


# The options of a JSON report that leave part of a run out of its numbers.
PART_OPTIONS = ("time", "states", "pids", "tids", "comms")


def measurements_from_report(report: dict) -> Measurements:
    """The measurements in a JSON report ("offcpu/1"). KeyError, TypeError or
    ValueError when it is not one, or when its idle finding does not say how much
    of it was blocked."""
    if not isinstance(report, dict) or report.get("schema") != "offcpu/1":
        raise ValueError("its schema is not \"offcpu/1\"")
    chosen = [option for option in PART_OPTIONS if report.get("view", {}).get(option)]
    if chosen:
        options = ", ".join("--" + option.rstrip("s") for option in chosen)
        raise ValueError(f"it is a report of part of a run ({options}); "
                         "a baseline is a whole run: write it without those options")
    runqueue = report["runqueue_delay_us"]
    capture = CaptureInfo.from_json(report["capture"])
    idle = next((finding for finding in report["findings"] if finding["id"] == WAITS_FOR_WORK), {"blocked_us": 0})
    if "blocked_us" not in idle:
        raise ValueError(f"its {WAITS_FOR_WORK} finding does not say how much of its time was blocked")
    return Measurements(
        window_s=float(report["window"]["seconds"]),
        threads=int(report["totals"]["threads"]),
        threads_us=sum(int(t["oncpu_us"]) + int(t["offcpu_us"]) for t in report["threads"]),
        blocked_us=int(report["totals"]["blocked_us"]),
        idle_blocked_us=int(idle["blocked_us"]),
        runqueue_p99_us=int(runqueue["p99"]) if "p99" in runqueue else None,
        created_per_s=float(report["lifecycle"]["created_per_s"]),
        findings=by_id([(str(f["id"]), _reported(f)) for f in report["findings"]]),
        locks={str(f["subject"]): _reported(f) for f in report["findings"]
               if f["id"] in LOCK_FINDINGS and f["subject"]},
        lost_events=capture.lost_events,
        lost_share=capture.lost_share,
        whole_run=capture.whole_run,
    )


def _reported(finding: dict) -> FindingFigures:
    """A JSON report's finding; one written before findings had an uncertainty has none."""
    return FindingFigures(str(finding["severity"]), float(finding["share_of_wall"]), int(finding["offcpu_us"]),
                          str(finding["summary"]), float(finding.get("share_uncertainty", 0.0)),
                          str(finding.get("settled_severity", finding["severity"])))


@dataclass(frozen=True)
class Check:
    """One limit of the policy, or one comparison with the baseline."""

    rule: str  # the finding id, or BLOCKED
    name: str  # "mmap_lock.max_share", "baseline: mmap_lock"
    measured: str
    limit: str
    passed: bool
    detail: str
    # Over the limit by no more than the measurement's uncertainty: passed, unless the policy
    # is strict
    near: bool = False

    @property
    def sentence(self) -> str:
        """The check on one line, for annotations and JUnit messages."""
        verb = "near" if self.near else "within" if self.passed else "over"
        return f"{self.name}: {self.measured}, {verb} {self.limit}: {self.detail}"


@dataclass(frozen=True)
class Verdict:
    policy: Policy
    run: Measurements
    baseline: Measurements | None
    checks: list[Check]
    comparisons: list[Check]  # against the baseline, when there is one
    baseline_rule: str = ""  # how the comparisons were made (Unit.rule)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks + self.comparisons)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks + self.comparisons if not check.passed]


def evaluate(policy: Policy, run: Measurements, baseline: Measurements | None = None) -> Verdict:
    checks = [_not_above_info(rule, run, policy.strict) for rule in policy.fail_above_info]
    checks += [check for rule, limits in policy.limits.items()
               for check in _limit_checks(rule, vars(limits), run, policy.strict)]
    checks += [check for name, lock in policy.locks.limits().items()
               for check in _lock_checks(name, lock, run, policy.strict)]
    if baseline is None:
        return Verdict(policy, run, baseline, checks, [])
    unit = Unit(run.whole_run and baseline.whole_run)
    return Verdict(policy, run, baseline, checks, _compare(policy, unit, run, baseline), unit.rule)


def _not_above_info(rule: str, run: Measurements, strict: bool) -> Check:
    """Above info fails, unless only by its share's uncertainty (near the limit of warning)."""
    figures = run.findings.get(rule)
    name = f"{rule} not above info"
    if figures is None:
        return Check(rule, name, "not found", "info", True, "not found")
    if figures.severity == "info":
        return Check(rule, name, figures.severity, "info", True, figures.summary)
    near = figures.settled_severity == "info"
    measured = f"{figures.severity} ({_pct(figures.share)} ± {_pct(figures.uncertainty)})" if near \
        else figures.severity
    detail = f"{_NEAR}{figures.summary}" if near else figures.summary
    return Check(rule, name, measured, "info", near and not strict, detail, near)


# What a check near its limit says first: passed, as far as the run can tell.
_NEAR = "near the limit, within its uncertainty (passes unless the policy is strict): "


def _within(value: float, uncertainty: float, maximum: float, strict: bool) -> tuple[bool, bool]:
    """(passed, near): a value over its maximum by no more than its uncertainty is near it,
    and passes unless strict."""
    near = maximum < value <= maximum + uncertainty
    return value <= maximum or (near and not strict), near


def _limit_checks(rule: str, limits: dict[str, float | None], run: Measurements, strict: bool) -> list[Check]:
    """One check per limit set, in the order of Limits' fields; a share is near its limit
    when over it by no more than its uncertainty."""
    measured = {
        "max_share": (run.share(rule), _pct, "share of its threads' time"),
        "max_ms_per_s": (run.ms_per_s(rule), lambda v: f"{v:,.1f} ms/s", "off CPU per second of recording"),
    }
    if "max_p99_ms" in EXTRA_KEYS.get(rule, ()):
        p99 = run.runqueue_p99_us / 1000 if run.runqueue_p99_us is not None else 0.0
        measured["max_p99_ms"] = (p99, lambda v: f"{v:,.1f} ms", "p99 wakeup-to-run delay")
    if "max_per_second" in EXTRA_KEYS.get(rule, ()):
        measured["max_per_second"] = (run.created_per_s, lambda v: f"{v:,.0f}/s", "threads created a second")
    checks = []
    for key, maximum in limits.items():
        if maximum is None:
            continue
        value, shown, what = measured[key]
        if key == "max_share":
            checks.append(_share_check(rule, f"{rule}.{key}", value, run.uncertainty(rule), maximum, strict, what))
        else:
            checks.append(Check(rule, f"{rule}.{key}", shown(value), shown(maximum), value <= maximum, what))
    return checks


def _share_check(rule: str, name: str, share: float, uncertainty: float, maximum: float, strict: bool,
                 what: str) -> Check:
    passed, near = _within(share, uncertainty, maximum, strict)
    measured = f"{_pct(share)} ± {_pct(uncertainty)}" if uncertainty else _pct(share)
    return Check(rule, name, measured, _pct(maximum), passed, _NEAR + what if near else what, near)


def _lock_checks(name: str, lock: Lock, run: Measurements, strict: bool) -> list[Check]:
    """A [[lock]] entry's limits on that lock's waits (not found: nothing waited there)."""
    figures = run.locks.get(name)
    share = figures.share if figures else 0.0
    checks = []
    max_share, max_ms_per_s = lock.max_share, lock.max_ms_per_s
    if max_share is not None:
        checks.append(_share_check(LOCK, f"lock {name}.max_share", share, figures.uncertainty if figures else 0.0,
                                   max_share, strict, "share of its threads' time" if figures else "not found"))
    if max_ms_per_s is not None:
        rate = run.lock_ms_per_s(name)
        checks.append(Check(LOCK, f"lock {name}.max_ms_per_s", f"{rate:,.1f} ms/s", f"{max_ms_per_s:,.1f} ms/s",
                            rate <= max_ms_per_s, "off CPU per second of recording" if figures else "not found"))
    return checks


# The rule name of the checks of a [[lock]] entry's limits.
LOCK = "lock"


def _compare(policy: Policy, unit: Unit, run: Measurements, baseline: Measurements) -> list[Check]:
    """Each finding seen in either run, and blocked time, by its time per unit of work (see
    Unit). Waits for work are never compared, nor, unless the policy gives it tolerances of its
    own, CPU saturation: a fix that removes a lock makes the threads busy, and that is no regression."""
    rules = [rule for rule in dict.fromkeys([*baseline.findings, *run.findings])
             if rule != WAITS_FOR_WORK and (rule not in NOT_GATED_BY_DEFAULT or rule in policy.regression.overrides)]
    times = [(rule, baseline.time_us(rule), run.time_us(rule)) for rule in rules]
    times.append((BLOCKED, (baseline.blocked_time_us, 0.0), (run.blocked_time_us, 0.0)))
    return [_growth(policy, rule, unit, baseline, run, before, after) for rule, before, after in times]


@dataclass(frozen=True)
class Unit:
    """What a time is compared per: a run, when both recordings hold a command's whole run (a
    benchmark doing the same work each time); otherwise a second of recording. Unlike a share
    (which cannot pass 100%), a time per run grows as the time itself does at any share."""

    per_run: bool

    def of(self, measurements: Measurements, us: float) -> float:
        return us if self.per_run else us / measurements.window_s if measurements.window_s else 0.0

    def said(self, us: float) -> str:
        return f"{_ms(us)} ms" + ("" if self.per_run else "/s")

    @property
    def rule(self) -> str:
        """The rule of the comparisons, in words, for the verdict to say above them."""
        per = "a run (both recorded a command's whole run)" if self.per_run else \
            "a second of recording (not both recorded a command's whole run)"
        return (f"times {per}; each fails past both its limits (of the baseline's time, and of the run's threads' "
                "time) by more than its ±")


def _growth(policy: Policy, rule: str, unit: Unit, baseline: Measurements, run: Measurements,
            before: tuple[float, float], after: tuple[float, float]) -> Check:
    """A time per unit of work grew too much when it grew past both of its tolerances: by more
    than max_relative_growth of the baseline's, and by more than max_share_growth of the run's
    threads' time (so that a few ms more of a rare wait never fails); and by more than the
    uncertainty of the growth (of both times together, √(a² + b²)) past them. Within that, it is
    near them, and passes unless the policy is strict."""
    tolerance = policy.regression.tolerance(rule)
    was, now = unit.of(baseline, before[0]), unit.of(run, after[0])
    uncertainty = math.hypot(unit.of(baseline, before[1]), unit.of(run, after[1]))
    floor = tolerance.max_share_growth * unit.of(run, run.threads_us)
    growth = now - was

    def within(grown: float) -> bool:
        return grown <= floor or grown <= tolerance.max_relative_growth * was

    near = not within(growth) and within(growth - uncertainty)
    passed = within(growth) or (near and not policy.strict)
    what = "blocked time, waits for work left out" if rule == BLOCKED else rule
    relative = f"{growth / was:+,.0%}" if was else "new"
    plus_minus = f" ± {unit.said(uncertainty)}" if uncertainty else ""
    detail = f"{'grew' if growth > 0 else 'shrank'} {unit.said(abs(growth))}{plus_minus} ({relative})" \
        if growth else "unchanged"
    limit = f"+{tolerance.max_relative_growth:,.0%}, +{unit.said(floor)}"
    measured = f"{_ms(was)} -> {unit.said(now)}" + (" a run" if unit.per_run else "")
    return Check(rule, f"baseline: {what}", measured, limit, passed,
                 _NEAR + detail if near else detail, near)


def _ms(us: float) -> str:
    """Microseconds as milliseconds, to a tenth below 100 ms (a table's column stays narrow)."""
    return f"{us / 1000:,.0f}" if us >= 100_000 else f"{us / 1000:.1f}"


def _pct(share: float) -> str:
    return f"{share:.1%}"

