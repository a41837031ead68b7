"""The verdict of a check on models built from the committed fixtures, and how it is written for CI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from offcpu.diagnosis.context import Context
from offcpu.diagnosis.rules import RULES
from offcpu.gate.policy import BLOCKED, Limits, Policy, Regression, Tolerance
from offcpu.gate.verdict import (
    Check,
    FindingFigures,
    Measurements,
    evaluate,
    measure,
    measurements_from_report,
    too_lossy,
    unrecorded,
)
from offcpu.model.stackview import StackView
from offcpu.renderers.json import JsonReport
from offcpu.renderers.verdict import (
    MAX_ANNOTATIONS,
    VerdictJson,
    VerdictJunit,
    VerdictMarkdown,
    VerdictTable,
    could_not_check_markdown,
    github_annotations,
    github_error,
)
from tests.fixtures import model_of


@pytest.fixture(scope="module")
def futex() -> Measurements:
    return measure(model_of("futex_pid"))


@pytest.fixture(scope="module")
def fixed() -> Measurements:
    return measure(model_of("mmap_fixed_pid"))


def names(checks) -> set[str]:
    return {check.name for check in checks}


def test_the_default_policy_fails_lock_contention(futex):
    verdict = evaluate(Policy(), futex)
    assert not verdict.passed and names(verdict.failures) == {"lock_contention not above info"}
    [failure] = verdict.failures
    assert failure.measured in ("warning", "critical") and "mutex" in failure.detail
    assert not verdict.comparisons


def test_the_fixed_program_passes_the_default_policy(fixed):
    verdict = evaluate(Policy(), fixed)
    assert verdict.passed and len(verdict.checks) == 10
    assert all(check.measured in ("not found", "info") for check in verdict.checks)


def test_limits_compare_the_measured_values(futex):
    share = futex.findings["lock_contention"].share
    p99_ms = futex.runqueue_p99_us / 1000
    policy = Policy(fail_above_info=(), limits={
        "lock_contention": Limits(max_share=share, max_ms_per_s=futex.ms_per_s("lock_contention") - 1),
        "runqueue": Limits(max_p99_ms=p99_ms - 0.001),
        "thread_churn": Limits(max_per_second=0),
    })
    verdict = evaluate(policy, futex)
    assert names(verdict.checks) == {"lock_contention.max_share", "lock_contention.max_ms_per_s",
                                     "runqueue.max_p99_ms", "thread_churn.max_per_second"}
    # a value equal to its limit passes; one over it fails
    assert names(verdict.failures) == {"lock_contention.max_ms_per_s", "runqueue.max_p99_ms"}


def test_ms_per_s_is_off_cpu_time_over_the_window(futex):
    figures = futex.findings["lock_contention"]
    assert futex.ms_per_s("lock_contention") == pytest.approx(figures.offcpu_us / 1000 / futex.window_s)
    assert futex.ms_per_s("io_wait") == 0.0 and futex.share("io_wait") == 0.0


def test_against_itself_nothing_grew(futex):
    verdict = evaluate(Policy(fail_above_info=()), futex, futex)
    assert verdict.passed and verdict.comparisons
    assert {check.rule for check in verdict.comparisons} == {*futex.findings, BLOCKED} - {"idle", "runqueue"}
    assert all(check.detail == "unchanged" for check in verdict.comparisons)


def test_cpu_saturation_is_compared_only_when_the_policy_asks(futex, fixed):
    # A fix that removes a lock keeps the threads busy: more preemption is no regression by default
    assert "runqueue" in futex.findings
    default = evaluate(Policy(fail_above_info=()), futex, fixed)
    assert "runqueue" not in {check.rule for check in default.comparisons}
    asked = evaluate(Policy(fail_above_info=(), regression=Regression(overrides={"runqueue": Tolerance()})),
                     futex, fixed)
    assert "runqueue" in {check.rule for check in asked.comparisons}


def test_growth_fails_only_past_both_tolerances(futex):
    # Given a run (recorded by --pid: compared a second) whose blocked time grew by a tenth of the threads' time
    grown = replace(futex, blocked_us=futex.blocked_us + futex.threads_us // 10)
    growth = 0.1  # of the threads' time
    relative = (futex.threads_us // 10) / futex.blocked_time_us

    def blocked_passes(regression: Regression) -> bool:
        verdict = evaluate(Policy(fail_above_info=(), regression=regression), grown, futex)
        return next(check for check in verdict.comparisons if check.rule == BLOCKED).passed

    assert not blocked_passes(Regression(Tolerance(max_share_growth=growth / 2, max_relative_growth=relative / 2)))
    assert blocked_passes(Regression(Tolerance(max_share_growth=growth * 2, max_relative_growth=relative / 2)))
    assert blocked_passes(Regression(Tolerance(max_share_growth=growth / 2, max_relative_growth=relative * 2)))
    # blocked time's own tolerances win over the default ones
    assert blocked_passes(Regression(Tolerance(growth / 2, relative / 2), {BLOCKED: Tolerance(growth * 2, 0)}))
    assert not blocked_passes(Regression(Tolerance(growth * 2, relative * 2), {BLOCKED: Tolerance(growth / 2, 0)}))


def test_a_finding_s_own_tolerance_applies_to_it_alone(futex, fixed):
    # Given futex contention that is new in the run, and a policy that tolerates it growing a lot
    loose = Regression(overrides={"lock_contention": Tolerance(max_share_growth=1.0)})
    verdict = evaluate(Policy(fail_above_info=(), regression=loose), futex, fixed)
    # Then that comparison passes, with its own limit shown, and the others keep the default tolerances
    growth = {check.rule: check for check in verdict.comparisons}
    threads_ms_per_s = futex.threads_us / futex.window_s / 1000
    assert growth["lock_contention"].passed
    assert threads_ms_per_s > 1000  # five threads: shown in whole ms, and 1% of it to a tenth
    assert growth["lock_contention"].limit == f"+50%, +{threads_ms_per_s:,.0f} ms/s"  # all the threads' time
    assert growth[BLOCKED].limit == f"+50%, +{threads_ms_per_s / 100:.1f} ms/s"  # 1% of it


def test_blocked_time_leaves_the_waits_for_work_out():
    # Given a recording of the whole machine, where some threads wait for work (the idle finding)
    model = model_of("mmap_all")
    idle = Context(model).idle_rows
    run = measure(model)
    assert idle and run.idle_blocked_us == sum(row.blocked_us for row in idle) > 0
    # Then the blocked time compared with a baseline is what remains of it
    assert run.blocked_time_us == run.blocked_us - run.idle_blocked_us < run.blocked_us
    blocked = next(check for check in evaluate(Policy(), run, run).comparisons if check.rule == BLOCKED)
    assert blocked.name == "baseline: blocked time, waits for work left out"


def test_a_finding_new_in_the_run_is_a_regression(futex, fixed):
    verdict = evaluate(Policy(fail_above_info=()), futex, fixed)
    new = next(check for check in verdict.comparisons if check.rule == "lock_contention")
    assert not new.passed and new.measured.startswith("0.0 -> ") and new.detail.endswith("(new)")


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "idle_pid"])
def test_a_json_report_measures_as_its_model(name):
    model = model_of(name)
    report = json.loads(JsonReport(StackView(), 5).render(model))
    assert measurements_from_report(report) == measure(model)


def test_a_report_of_part_of_a_run_is_no_baseline():
    model = model_of("futex_pid")
    report = json.loads(JsonReport(StackView(tids=frozenset({model.capture.target.pid})), 5).render(model))
    with pytest.raises(ValueError, match=r"part of a run \(--tid\)"):
        measurements_from_report(report)


def test_a_json_report_must_say_how_much_of_its_waits_for_work_was_blocked():
    # Given a report whose idle finding gives its off-CPU time but not the blocked part of it
    # (as reports written before findings carried blocked_us)
    report = json.loads(JsonReport(StackView(), 5).render(model_of("idle_pid")))
    [idle] = [finding for finding in report["findings"] if finding["id"] == "idle"]
    idle.pop("blocked_us", None)
    # Then blocked time without waits for work cannot be had from it: refused, not guessed
    with pytest.raises(ValueError, match="idle finding does not say how much of its time was blocked"):
        measurements_from_report(report)


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "idle_pid", "mmap_fixed_pid", "mmap_all"])
def test_recordings_of_a_running_target_are_checked(name):
    assert unrecorded(model_of(name)) is None


def test_a_recording_without_a_wait_is_not_checked():
    # as a command that ran and ended without leaving its CPU (`true`, most of the time)
    model = model_of("futex_pid")
    model.rows.clear()
    assert unrecorded(model) == "no thread of the target left the CPU during the window"


@pytest.mark.parametrize("report", [[], {"schema": "offcpu/2"}, {"schema": "offcpu/1"}])
def test_what_is_not_a_json_report(report):
    with pytest.raises((ValueError, KeyError)):
        measurements_from_report(report)


# -- how the verdict is written ---------------------------------------------------------------

@pytest.fixture(scope="module")
def failing(futex, fixed):
    return evaluate(Policy(limits={"runqueue": Limits(max_p99_ms=1000)}), futex, fixed)


def test_table_is_plain_and_stable_off_a_terminal(failing):
    text = VerdictTable("cap", "good", 100, color=False).render(failing)
    lines = text.splitlines()
    assert lines[0].startswith("Checked cap (") and "policy from defaults" in lines[0]
    assert lines[1].startswith("Baseline good (")
    assert "\x1b[" not in text and all(len(line) <= 100 and line == line.rstrip() for line in lines)
    assert lines[-1].startswith("offcpu check: FAIL (")
    first_row = next(line for line in lines if line.startswith("| FAIL") or line.startswith("| pass"))
    assert first_row.startswith("| FAIL")  # failures first


@pytest.mark.parametrize("width", [80, 100, 160])
def test_table_fits_the_width_without_cutting_a_row(failing, width):
    lines = VerdictTable("cap", "good", width, color=False).render(failing).splitlines()
    rows = [line for line in lines if line.startswith(("|", "+"))]
    assert rows and all(len(line) <= width and line.endswith(("|", "+")) for line in rows)
    assert any("blocked time" in line for line in rows)


def test_junit_has_a_testcase_per_rule_and_comparison_with_counts_and_times(failing):
    root = ET.fromstring(VerdictJunit().render(failing))
    policy, baseline = root.findall("testsuite")
    assert [case.get("name") for case in policy.findall("testcase")] == [rule.id for rule in RULES]
    assert [case.get("name") for case in baseline.findall("testcase")] == [c.rule for c in failing.comparisons]
    # the counts and times strict JUnit schemas require, and that add up
    for suite in (policy, baseline):
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(case.find("failure") is not None for case in cases) > 0
        assert suite.get("errors") == suite.get("skipped") == "0" and float(suite.get("time")) == 0
        assert all(float(case.get("time")) == 0 and case.get("classname") for case in cases)
    for count in ("tests", "failures", "errors"):
        assert int(root.get(count)) == int(policy.get(count)) + int(baseline.get(count))
    assert policy.get("failures") == "1" and float(root.get("time")) == 0
    failure = policy.find("testcase[@name='lock_contention']/failure")
    assert failure is not None and failure.get("message").startswith("lock_contention not above info: ")
    assert failure.get("type") == "offcpu.policy"  # what CI systems group failures by: kept across versions


def test_junit_says_why_a_rule_the_policy_does_not_gate_passes(futex):
    # Given the default policy, which gates neither runqueue nor idle, on a run with CPU saturation
    root = ET.fromstring(VerdictJunit().render(evaluate(Policy(), futex)))
    cases = {case.get("name"): case for case in root.iter("testcase")}
    # Then both pass, and say they were not checked, why, and what the run showed
    runqueue, idle = cases["runqueue"].findtext("system-out"), cases["idle"].findtext("system-out")
    assert cases["runqueue"].find("failure") is None and cases["idle"].find("failure") is None
    assert runqueue.startswith("pass: not checked, the policy (defaults) does not gate runqueue (CPU saturation")
    seen = futex.findings["runqueue"]
    assert runqueue.endswith(f"This run: {seen.severity}: {seen.summary}")
    idle_seen = futex.findings.get("idle")
    assert idle.endswith("does not gate idle (threads waiting for work are never a problem). This run: "
                         + (f"info: {idle_seen.summary}" if idle_seen else "not found"))
    assert cases["mmap_lock"].findtext("system-out") == ("pass: mmap_lock not above info: not found, within info: "
                                                         "not found")


def test_json_has_the_verdict_and_every_value(failing):
    data = json.loads(VerdictJson("cap", "good").render(failing))
    assert data["schema"] == "offcpu-check/1" and data["verdict"] == "fail"
    assert data["measurements"]["findings"]["lock_contention"]["share"] > 0
    assert data["baseline_measurements"]["threads"] == failing.baseline.threads
    assert len(data["checks"]) == 11 and data["policy"]["limits"] == {"runqueue": {"max_p99_ms": 1000}}


def test_markdown_summary(failing):
    text = VerdictMarkdown("cap").render(failing)
    lines = text.splitlines()
    assert lines[0] == "### " + VerdictTable("cap", None, 80, False).render(failing).splitlines()[-1]
    rows = [line for line in lines if line.startswith("| ✅") or line.startswith("| ❌")]
    assert len(rows) == len(failing.checks) + len(failing.comparisons) and rows[0].startswith("| ❌")


def test_table_counts_in_words_and_with_separators(futex):
    # Given a policy whose limits are in the thousands
    policy = Policy(fail_above_info=("lock_contention",),
                    limits={"lock_contention": Limits(max_ms_per_s=12_345), "thread_churn": Limits(max_per_second=5e6)})
    verdict = evaluate(policy, futex)
    text = VerdictTable("cap", None, 120, color=False).render(verdict)
    assert "12,345.0 ms/s" in text and "5,000,000/s" in text
    assert f"({futex.window_s:.2f} s, {futex.threads} threads)" in text.splitlines()[0]
    assert text.splitlines()[-1] == "offcpu check: FAIL (1 of 3 checks failed)"
    assert VerdictTable("cap", None, 120, False).render(evaluate(Policy(fail_above_info=("io_wait",)), futex)) \
        .splitlines()[-1] == "offcpu check: PASS (1 check)"


def test_annotations_are_escaped_and_at_most_ten(failing):
    many = replace(failing, checks=[replace(failing.failures[0], detail="50%\nof it")] * 12)
    lines = github_annotations(many).splitlines()
    assert len(lines) == MAX_ANNOTATIONS
    assert all(line.startswith("::error title=offcpu check::") and line.endswith("50%25%0Aof it") for line in lines)
    assert github_annotations(evaluate(Policy(fail_above_info=()), failing.run)) == ""


def test_could_not_check_on_github():
    assert github_error("policy p.toml, line 3:\n50%") == "::error title=offcpu check::policy p.toml, line 3:%0A50%25\n"
    assert github_error("in run\x1b[2J: 50%") == "::error title=offcpu check::in run\\x1b[2J: 50%25\n"
    lines = could_not_check_markdown("the recording holds no scheduler events").splitlines()
    assert lines[0] == "### offcpu check: could not check" and "the recording holds no scheduler events" in lines
    assert any("not a pass" in line for line in lines)


# -- events perf lost ---------------------------------------------------------------------------

def lossy_run(lost: int) -> Measurements:
    """futex_pid's run as if perf had lost `lost` of 1,000 events it meant to record."""
    model = model_of("futex_pid")
    model.capture = replace(model.capture, samples=900, switch_records=100 - lost, lost_events=lost)
    return measure(model)


def test_a_loss_within_the_bound_is_said_in_every_form():
    # Given a run in which perf lost 3 of the 1,000 events it meant to record (0.3%, within 5%)
    run = lossy_run(3)
    assert (run.lost_events, run.lost_share) == (3, 0.003) and not too_lossy(run.lost_share)
    verdict = evaluate(Policy(), run)
    said = "perf lost 3 events (0.30%): some waits are missing or cut short"
    # Then the table's header, the JSON, the JUnit policy suite and the step summary say it
    assert said in VerdictTable("cap", None, 200, color=False).render(verdict).splitlines()[0]
    measured = json.loads(VerdictJson("cap", None).render(verdict))["measurements"]
    assert (measured["lost_events"], measured["lost_share"]) == (3, 0.003)
    policy = ET.fromstring(VerdictJunit().render(verdict)).find("testsuite[@name='policy']")
    assert policy.findtext("system-out") == f"In this run, {said}."
    assert f"In this run, {said}." in VerdictMarkdown("cap").render(verdict).splitlines()


def test_nothing_lost_nothing_said(futex):
    verdict = evaluate(Policy(), futex)
    assert futex.lost_events == 0 and futex.lost_said is None
    assert ET.fromstring(VerdictJunit().render(verdict)).find("testsuite[@name='policy']/system-out") is None
    assert "lost" not in VerdictTable("cap", None, 200, color=False).render(verdict)


def test_more_than_five_percent_lost_cannot_be_checked():
    assert not too_lossy(lossy_run(50).lost_share)  # 50 of 1,000: 5.0%, at the bound
    assert too_lossy(lossy_run(51).lost_share)  # 5.1%


def test_a_json_report_carries_the_loss_to_a_baseline():
    model = model_of("futex_pid")
    model.capture = replace(model.capture, samples=900, switch_records=80, lost_events=20)
    report = json.loads(JsonReport(StackView(), 5).render(model))
    assert measurements_from_report(report).lost_share == 0.02


# -- a share's uncertainty: near the limit passes, unless the policy is strict --------------------

TAKE_TURNS = "serialization"


def turns(share: float, uncertainty: float, severity: str, settled: str) -> Measurements:
    """A run whose only finding is threads taking turns, with this share ± uncertainty."""
    figures = FindingFigures(severity, share, 100_000, "8 threads of postgres ... waiting for each other.",
                             uncertainty, settled)
    return Measurements(window_s=10.0, threads=8, threads_us=80_000_000, blocked_us=0, idle_blocked_us=0,
                        runqueue_p99_us=None, created_per_s=0.0, findings={TAKE_TURNS: figures}, locks={})


def test_a_share_over_the_warning_bound_by_less_than_its_uncertainty_is_near_and_passes():
    # Given the same healthy run measured twice: 5.0% (info) and 5.2% ± 0.4% (warning, but only
    # 0.2 points over the 5% bound, less than its uncertainty: settled at info)
    once, again = turns(0.050, 0.004, "info", "info"), turns(0.052, 0.004, "warning", "info")
    # Then both pass; the second says it is near the limit
    assert evaluate(Policy(), once).passed
    verdict = evaluate(Policy(), again)
    [check] = [check for check in verdict.checks if check.rule == TAKE_TURNS]
    assert verdict.passed and check.near and check.measured == "warning (5.2% ± 0.4%)"
    assert check.detail.startswith("near the limit, within its uncertainty")
    assert "near" in VerdictTable("cap", None, 120, color=False).render(verdict)
    # unless the policy is strict
    assert not evaluate(Policy(strict=True), again).passed


def test_a_share_over_the_bound_by_more_than_its_uncertainty_fails():
    # 6.0% ± 0.4%: 1.0 point over 5%, more than 0.4
    verdict = evaluate(Policy(), turns(0.060, 0.004, "warning", "warning"))
    [check] = [check for check in verdict.checks if check.rule == TAKE_TURNS]
    assert not verdict.passed and not check.near and check.measured == "warning"


@pytest.mark.parametrize(("share", "passed", "near"), [(0.100, True, False), (0.103, True, True),
                                                        (0.105, True, True), (0.106, False, False)])
def test_a_max_share_is_over_only_past_its_uncertainty(share, passed, near):
    # max_share 10%, uncertainty 0.5 points: over from 10.5% on
    policy = Policy(fail_above_info=(), limits={TAKE_TURNS: Limits(max_share=0.10)})
    [check] = evaluate(policy, turns(share, 0.005, "warning", "warning")).checks
    assert (check.passed, check.near, check.measured) == (passed, near, f"{share:.1%} ± 0.5%")


def timed(offcpu_ms: float, threads_ms: float, uncertainty: float = 0.0, window_s: float = 1.0,
          whole_run: bool = True) -> Measurements:
    """A run whose only finding is threads taking turns, `offcpu_ms` of `threads_ms` (its share),
    its share ± `uncertainty` of itself (relative); a whole run of a command unless said."""
    share = offcpu_ms / threads_ms
    figures = FindingFigures("critical", share, round(offcpu_ms * 1000), "waiting for each other.",
                             share * uncertainty, "critical")
    return Measurements(window_s=window_s, threads=1, threads_us=round(threads_ms * 1000), blocked_us=0,
                        idle_blocked_us=0, runqueue_p99_us=None, created_per_s=0.0, findings={TAKE_TURNS: figures},
                        locks={}, whole_run=whole_run)


def growth_of(after: Measurements, before: Measurements, **policy) -> Check:
    verdict = evaluate(Policy(fail_above_info=(), **policy), after, before)
    return next(check for check in verdict.comparisons if check.rule == TAKE_TURNS)


def test_a_growth_can_fail_from_a_large_baseline_share():
    # Given a benchmark whose waits took 680 ms of its 1,000 ms (68%), and then 1,100 ms of 1,420 ms
    # (77.5%): as shares, +9.5 points and +14% (never +50% from 68%); as times a run, +420 ms, +62%
    before, after = timed(680, 1000), timed(1100, 1420)
    growth = growth_of(after, before)
    # Then it fails: past +50% of 680 ms (340 ms) and past 1% of the run's 1,420 ms (14.2 ms)
    assert not growth.passed and not growth.near
    assert growth.measured == "680 -> 1,100 ms a run"
    assert growth.limit == "+50%, +14.2 ms"
    assert growth.detail == "grew 420 ms (+62%)"
    # and 950 ms (+40%) passes
    assert growth_of(timed(950, 1270), before).passed


def test_a_growth_over_its_tolerance_by_less_than_its_uncertainty_is_near():
    # Given 400 ms ± 5% (20 ms) in the baseline and 620 ms ± 5% (31 ms) in the run: it grew 220 ms
    # (+55%), past +50% (200 ms), but the growth's uncertainty is sqrt(20² + 31²) = 36.9 ms, and
    # 220 - 36.9 = 183.1 ms is within 200 ms
    before, after = timed(400, 1000, 0.05), timed(620, 1220, 0.05)
    growth = growth_of(after, before)
    assert growth.passed and growth.near and growth.detail.endswith("grew 220 ms ± 36.9 ms (+55%)")
    assert not growth_of(after, before, strict=True).passed
    # 660 ms ± 33 ms grew 260 ms: 221.4 ms past its uncertainty of 38.6 ms, over
    over = growth_of(timed(660, 1260, 0.05), before)
    assert not over.passed and not over.near


def test_a_growth_is_per_second_unless_both_recorded_a_whole_run():
    # Given 400 ms in a 2 s recording and 700 ms in a 4 s one: +75% a run, but 200 -> 175 ms a second
    before, after = timed(400, 2000, window_s=2.0), timed(700, 4000, window_s=4.0)
    assert not growth_of(after, before).passed
    for whole in ((False, True), (True, False)):
        per_second = growth_of(replace(after, whole_run=whole[0]), replace(before, whole_run=whole[1]))
        assert per_second.passed and per_second.measured == "200 -> 175 ms/s"
        assert per_second.detail == "shrank 25.0 ms/s (-12%)"
    # and the verdict says which it used
    verdict = evaluate(Policy(fail_above_info=()), replace(after, whole_run=False), before)
    assert "a second of recording" in verdict.baseline_rule
    table = VerdictTable("cap", "base", 200, color=False).render(verdict)
    assert f"Against the baseline: {verdict.baseline_rule}" in table


def test_near_is_said_in_junit_and_the_step_summary():
    verdict = evaluate(Policy(), turns(0.052, 0.004, "warning", "info"))
    case = ET.fromstring(VerdictJunit().render(verdict)).find(f".//testcase[@name='{TAKE_TURNS}']")
    assert case.find("failure") is None and case.findtext("system-out").startswith("near: serialization not above")
    assert any(line.startswith("| ✅ near | serialization not above info")
               for line in VerdictMarkdown("cap").render(verdict).splitlines())
