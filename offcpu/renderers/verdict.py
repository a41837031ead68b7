"""The verdict of `offcpu check` for people and for CI: a table for the terminal,
JSON, JUnit XML, a GitHub step summary (Markdown) and GitHub error annotations."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict

from rich import box
from rich.table import Table
from rich.text import Text

from offcpu.diagnosis.wording import counted
from offcpu.escaping import printable
from offcpu.gate.policy import NOT_GATED_BY_DEFAULT, RULE_IDS
from offcpu.gate.verdict import Check, Measurements, Verdict
from offcpu.renderers.console import printed

SCHEMA = "offcpu-check/1"
MAX_ANNOTATIONS = 10
COULD_NOT_CHECK_HEADING = "offcpu check: could not check"
DETAIL_WIDTH = 12  # the check names and limits wrap before the detail is squeezed to nothing


def headline(verdict: Verdict) -> str:
    checks = len(verdict.checks) + len(verdict.comparisons)
    if verdict.passed:
        return f"offcpu check: PASS ({counted(checks, 'check')})"
    return f"offcpu check: FAIL ({len(verdict.failures):,} of {counted(checks, 'check')} failed)"


class VerdictTable:
    """For the terminal: one row per check, failures first; plain when not a terminal."""

    def __init__(self, capture: str, baseline: str | None, width: int, color: bool, notes: Sequence[str] = ()) -> None:
        self.capture = capture
        self.baseline = baseline
        self.width = width
        self.color = color
        self.notes = notes  # what to know before reading the comparisons

    def render(self, verdict: Verdict) -> str:
        header = [Text(printable(f"Checked {self.capture} ({_described(verdict.run)}) against the policy from "
                                 f"{verdict.policy.source}"))]
        if verdict.baseline is not None:
            header.append(Text(printable(f"Baseline {self.baseline} ({_described(verdict.baseline)})")))
        header += [Text(printable(f"Note: {note}")) for note in self.notes]
        if verdict.comparisons:
            header.append(Text(f"Against the baseline: {verdict.baseline_rule}"))
        tables = [self._table(title, checks) for title, checks in
                  (("Policy", verdict.checks), ("Against the baseline", verdict.comparisons)) if checks]
        status = ("bold green" if verdict.passed else "bold red") if self.color else ""
        return printed([*header, *tables, Text(headline(verdict), style=status)], self.width, self.color)

    def _table(self, title: str, checks: list[Check]) -> Table:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if self.color else box.ASCII2,
                      title_style="bold" if self.color else "")
        table.add_column("result", no_wrap=True)
        table.add_column("check", overflow="fold")
        table.add_column("measured", justify="right", no_wrap=True)
        table.add_column("limit", justify="right")
        table.add_column("detail", min_width=DETAIL_WIDTH)
        for check in sorted(checks, key=lambda check: check.passed):
            result = Text(_result(check), style="bold red" if not check.passed else "yellow" if check.near else "green")
            table.add_row(result, *(Text(printable(cell)) for cell in (check.name, check.measured, check.limit,
                                                                      check.detail)))
        return table


def _result(check: Check) -> str:
    """pass, near (passed, over its limit by no more than the uncertainty) or FAIL."""
    return "FAIL" if not check.passed else "near" if check.near else "pass"


def _described(run: Measurements) -> str:
    lost = f"; {run.lost_said}" if run.lost_said else ""
    return f"{run.window_s:,.2f} s, {counted(run.threads, 'thread')}{lost}"


def _lost_lines(verdict: Verdict) -> list[str]:
    """What the run and the baseline lost, a line each."""
    runs = [("this run", verdict.run), ("the baseline", verdict.baseline)]
    return [f"In {which}, {run.lost_said}." for which, run in runs if run is not None and run.lost_said]


class VerdictJson:
    """The verdict and every measured value."""

    def __init__(self, capture: str, baseline: str | None) -> None:
        self.capture = capture
        self.baseline = baseline

    def render(self, verdict: Verdict) -> str:
        return json.dumps({
            "schema": SCHEMA,
            "verdict": "pass" if verdict.passed else "fail",
            "capture": self.capture,
            "baseline": self.baseline,
            "policy": verdict.policy.to_json(),
            "checks": [asdict(check) for check in verdict.checks],
            "comparisons": [asdict(check) for check in verdict.comparisons],
            "comparison_rule": verdict.baseline_rule or None,
            "measurements": asdict(verdict.run),
            "baseline_measurements": asdict(verdict.baseline) if verdict.baseline else None,
        }, indent=2) + "\n"


class VerdictJunit:
    """JUnit XML: a `policy` suite with one testcase per finding rule (one the policy
    does not check passes, and its text says so) and a `baseline` suite with one per
    comparison. Checking takes no measurable time, so every `time` is 0."""

    def render(self, verdict: Verdict) -> str:
        suites = ET.Element("testsuites", name="offcpu check")
        checks = _by_rule(verdict.checks)
        policy = self._suite(suites, "policy", [(rule, checks.get(rule, []), _unchecked(rule, verdict))
                                                for rule in RULE_IDS])
        lost = _lost_lines(verdict)
        if lost:  # the suite's own output, after its testcases
            ET.SubElement(policy, "system-out").text = "\n".join(lost)
        if verdict.comparisons:
            self._suite(suites, "baseline", [(check.rule, [check], "") for check in verdict.comparisons])
        for count in ("tests", "failures", "errors"):
            suites.set(count, str(sum(int(suite.get(count, "0")) for suite in suites)))
        suites.set("time", "0")
        ET.indent(suites)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"

    @staticmethod
    def _suite(parent: ET.Element, name: str, cases: list[tuple[str, list[Check], str]]) -> ET.Element:
        """`cases`: (name, its checks, the text of a case without checks)."""
        failures = sum(not all(check.passed for check in checks) for _, checks, _ in cases)
        suite = ET.SubElement(parent, "testsuite", name=name, tests=str(len(cases)), failures=str(failures),
                              errors="0", skipped="0", time="0")
        for rule, checks, unchecked in cases:
            case = ET.SubElement(suite, "testcase", classname=f"offcpu.check.{name}", name=rule, time="0")
            details = "\n".join(f"{_result(check)}: {printable(check.sentence)}"
                                for check in checks)  # XML allows no control character
            failed = [check for check in checks if not check.passed]
            if failed:
                failure = ET.SubElement(case, "failure", message="; ".join(printable(check.sentence)
                                                                           for check in failed),
                                        type="offcpu.policy")
                failure.text = details
            else:
                ET.SubElement(case, "system-out").text = details or unchecked
        return suite


def _unchecked(rule: str, verdict: Verdict) -> str:
    """Why a finding passes without a check, and what the run showed of it."""
    why = f" ({NOT_GATED_BY_DEFAULT[rule]})" if rule in NOT_GATED_BY_DEFAULT else ""
    figures = verdict.run.findings.get(rule)
    seen = f"{figures.severity}: {figures.summary}" if figures else "not found"
    return f"pass: not checked, the policy ({verdict.policy.source}) does not gate {rule}{why}. This run: {seen}"


def _by_rule(checks: list[Check]) -> dict[str, list[Check]]:
    grouped: dict[str, list[Check]] = {}
    for check in checks:
        grouped.setdefault(check.rule, []).append(check)
    return grouped


class VerdictMarkdown:
    """A GitHub step summary: the headline and a table of every check."""

    def __init__(self, capture: str) -> None:
        self.capture = capture

    def render(self, verdict: Verdict) -> str:
        rows = [f"| {'❌' if not check.passed else '✅ near' if check.near else '✅'} | {_cell(check.name)} | "
                f"{_cell(check.measured)} | "
                f"{_cell(check.limit)} | {_cell(check.detail)} |"
                for check in sorted(verdict.checks + verdict.comparisons, key=lambda check: check.passed)]
        lost = [line for said in _lost_lines(verdict) for line in (printable(said), "")]
        rule = [f"Against the baseline: {verdict.baseline_rule}.", ""] if verdict.comparisons else []
        return "\n".join([f"### {headline(verdict)}", "", f"Capture: `{printable(self.capture)}`", "", *lost, *rule,
                          "| | check | measured | limit | detail |", "|---|---|---|---|---|", *rows, "", ""])


def _cell(text: str) -> str:
    return printable(text).replace("|", "\\|")


def github_annotations(verdict: Verdict) -> str:
    """At most MAX_ANNOTATIONS `::error` workflow commands, one per failed check."""
    return "".join(github_error(check.sentence) for check in verdict.failures[:MAX_ANNOTATIONS])


def github_error(message: str) -> str:
    """One `::error` workflow command (a line): an annotation on the run."""
    return f"::error title=offcpu check::{_escape(message)}\n"


def could_not_check_markdown(reason: str) -> str:
    """A GitHub step summary for a check that could not run."""
    return "\n".join([f"### {COULD_NOT_CHECK_HEADING}", "", printable(reason), "",
                      "This is not a pass: fix the problem and run the check again.", "", ""])


def _escape(message: str) -> str:
    """As GitHub's workflow commands want a message: %, CR and LF encoded, and what else does
    not print escaped (see escaping.printable)."""
    return printable(message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))
