"""--trigger: when the flight recorder writes what it kept by itself. A finding's id at a
severity (`lock_contention>=warning`), or the slowest waits of the window
(`p99_wait_ms>200`: the 99th percentile of the off-CPU time of its waits that ended)."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

import click

from offcpu.diagnosis.findings import SEVERITIES, Finding
from offcpu.diagnosis.rules import RULES

SHAPE = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|>|<|==)\s*([a-z0-9_.]+)\s*$")
COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
P99_WAIT_MS = "p99_wait_ms"
EXAMPLES = "such as 'lock_contention>=warning' or 'p99_wait_ms>200'"


@dataclass(frozen=True)
class Trigger:
    text: str
    subject: str  # a finding's id, or P99_WAIT_MS
    compare: str
    value: float  # milliseconds, or a severity's rank in SEVERITIES

    def holds(self, findings: list[Finding], p99_wait_ms: float | None) -> bool:
        test = COMPARE[self.compare]
        if self.subject == P99_WAIT_MS:
            return p99_wait_ms is not None and test(p99_wait_ms, self.value)
        return any(test(SEVERITIES.index(finding.severity), self.value) for finding in findings
                   if finding.id == self.subject)


def parse(text: str) -> Trigger:
    """A trigger as given; click.BadParameter (exit 2, one line) when it is none."""
    shape = SHAPE.match(text)
    if not shape:
        raise click.BadParameter(f"{text!r} is not a trigger: give a finding's id or {P99_WAIT_MS}, a comparison "
                                 f"and a value, {EXAMPLES}", param_hint="--trigger")
    subject, compare, value = shape.groups()
    if subject == P99_WAIT_MS:
        try:
            return Trigger(text, subject, compare, float(value))
        except ValueError:
            raise click.BadParameter(f"{P99_WAIT_MS} is compared with milliseconds, not {value!r}; "
                                     f"{EXAMPLES}", param_hint="--trigger") from None
    ids = sorted(rule.id for rule in RULES)
    if subject not in ids:
        raise click.BadParameter(f"no finding is called {subject!r}: give {P99_WAIT_MS} or one of {', '.join(ids)}",
                                 param_hint="--trigger")
    if value not in SEVERITIES:
        raise click.BadParameter(f"a finding is compared with a severity ({', '.join(SEVERITIES)}), not {value!r}",
                                 param_hint="--trigger")
    return Trigger(text, subject, compare, SEVERITIES.index(value))
