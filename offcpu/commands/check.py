"""offcpu check: a pre-deploy gate on off-CPU contention."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from offcpu.capture import CaptureInfo, Target, load
from offcpu.commands.record import (
    DEFAULT_DURATION_S,
    Settings,
    cut_short_fix,
    default_output,
    output_option,
    record_into,
    recording_options,
    resolve_target,
    settings_given,
    target_options,
    targets_given,
)
from offcpu.commands.report.common import (
    checked_output,
    read_with_progress,
    refuse_to_overwrite,
    same_file,
    warn_if_unread,
)
from offcpu.diagnosis.claims import DEADLOCK, STUCK
from offcpu.errors import Interrupted, OffcpuError, more_in
from offcpu.escaping import printable
from offcpu.files import not_regular, read_json
from offcpu.gate.policy import NOT_GATED_BY_DEFAULT, Policy, load_policy
from offcpu.gate.verdict import (
    Measurements,
    Verdict,
    allowed_loss,
    evaluate,
    measure,
    measurements_from_report,
    too_lossy,
    unrecorded,
)
from offcpu.model import Model
from offcpu.model.summaries import unreadable_note, untrusted
from offcpu.reading.plain_perf_data import is_perf_data
from offcpu.recording.end_watch import PERF_SPINNING
from offcpu.recording.request import RecordRequest
from offcpu.recording.targets import Choice
from offcpu.renderers.console import stdout_layout
from offcpu.renderers.verdict import (
    VerdictJson,
    VerdictJunit,
    VerdictMarkdown,
    VerdictTable,
    could_not_check_markdown,
    github_annotations,
    github_error,
)
from offcpu.stdout import write_stdout

EXIT_VIOLATED = 1
COULD_NOT_CHECK_PREFIX = "could not check: "
INTERRUPTED = ("SIGINT", "SIGTERM", "SIGHUP")
# How long a check records a command at most when not told (--duration): a CI benchmark runs
# to its end, and one cut short is not checked
UNTIL_COMMAND_S = 600.0
BASELINE_MAX = 256 << 20  # the most of a JSON report read as a baseline: every stack of a large capture


class _CheckCommand(click.Command):
    """Keeps how many arguments came after `--` (they are a command to run, the rest a
    capture), and says on GitHub Actions when the check could not check."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["after_separator"] = len(args) - args.index("--") - 1 if "--" in args else 0
        with _could_not_check_on_github():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        with _could_not_check_on_github():
            return super().invoke(ctx)


@click.command(cls=_CheckCommand)
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              help="TOML policy: the findings that fail, limits, the baseline's tolerances, your own [[lock]] "
                   f"entries [default: fail on any finding above info but {', '.join(NOT_GATED_BY_DEFAULT)}]. Its "
                   "keys and their defaults: docs/check.md in offcpu's repository.")
@click.option("--baseline", type=click.Path(path_type=Path),
              help="A known-good capture directory (or a perf.data perf recorded), or its 'offcpu report json' "
                   "output, to compare with.")
@target_options
@recording_options(f"{DEFAULT_DURATION_S:g}; with a COMMAND, until it ends, at most {UNTIL_COMMAND_S:g}")
@output_option("Where to keep the recording")
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), help="Also write the verdict as JUnit XML.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the verdict and every measured value as JSON.")
@click.option("--force", is_flag=True,
              help="Replace an existing capture at --output and existing --junit/--json files.")
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED, metavar="[CAPTURE | -- COMMAND [ARGS]...]")
def check(policy_path: Path | None, baseline: Path | None, settings: Settings, output: Path | None,
          junit: Path | None, json_path: Path | None, force: bool, arguments: tuple[str, ...], **chosen: Any) -> int:
    """Check a run against a policy: pass (exit 0), fail (exit 1), or could
    not check (exit 2; never a pass).

    Checks an existing capture, or records one first (as 'offcpu record'
    does, with the same targets and recording options, and kept for
    'offcpu report').
    A target with a COMMAND is recorded while the command runs: a service
    while its load generator runs. The default policy fails on every finding
    above info but those --policy names; a --policy file changes the keys it
    sets. With --baseline, each finding's time a run of the command (a second
    of recording unless both recorded a command to its end), and blocked time
    (waits for work left out) likewise, must not grow past the tolerances. A
    command is recorded until it ends, and a run cut short is not checked.

    \b
      offcpu check CAPTURE
      offcpu check --pid 1234 --duration 10
      offcpu check --policy offcpu.toml --baseline good.json --junit offcpu.xml -- ./bench --quick
      offcpu check --tree "$(cat server.pid)" -d 60 -- wrk -d 20s http://127.0.0.1:8080/

    On GitHub Actions, a summary goes to $GITHUB_STEP_SUMMARY and failed
    checks become error annotations (at most 10); so does a check that could
    not check.
    """
    policy = load_policy(policy_path)
    capture_args, command = _split_arguments(arguments)
    choice = Choice(command=command, **chosen)
    if capture_args and (targets_given(choice) or output is not None):
        raise click.UsageError("give a CAPTURE to check, or a target (--pid, ..., -- COMMAND) to record one, not both")
    recording_given = settings_given(click.get_current_context())
    if capture_args and recording_given:
        raise click.UsageError(f"{', '.join(recording_given)} say how to record, and a CAPTURE is checked as it was "
                               "recorded: give a target (--pid, ..., -- COMMAND) to record, or leave them out")
    request = None if capture_args else _recording(choice, settings, output)
    capture = request.output if request is not None else Path(capture_args[0])
    reading = (capture, baseline) if baseline is not None else (capture,)
    if request is not None:
        refuse_to_overwrite(capture, reading[1:], "-o")
    junit_file, json_file = (checked_output(path, force, reading, option) if path is not None else None
                             for option, path in (("--junit", junit), ("--json", json_path)))
    if junit is not None and json_path is not None and same_file(junit, json_path):
        raise OffcpuError(f"--junit {junit} and --json {json_path} are the same file, and the JSON verdict would "
                          "overwrite the JUnit one; give each its own file")
    if request is None:
        _check_capture(capture)
    base, base_target = _baseline(baseline, policy) if baseline is not None else (None, None)
    if request is not None:
        _record(request, force)
    run, run_target = _measure(capture, policy)
    verdict = evaluate(policy, run, base)
    width, color = stdout_layout()
    baseline_label = str(baseline) if baseline else None
    note = _other_target(run_target, base_target) if base_target else None
    write_stdout(VerdictTable(str(capture), baseline_label, width, color, [note] if note else []).render(verdict))
    if junit_file is not None:
        junit_file.write(VerdictJunit().render(verdict))
    if json_file is not None:
        json_file.write(VerdictJson(str(capture), baseline_label).render(verdict))
    _github_outputs(verdict, str(capture))
    if not capture_args:
        where = printable(shlex.quote(str(capture)))
        click.echo(f"The capture is kept in {where}/; to see where its threads waited: offcpu report text {where}",
                   err=True)
    return 0 if verdict.passed else EXIT_VIOLATED


def _split_arguments(arguments: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(CAPTURE), (COMMAND...): what came after `--` is the command."""
    after = click.get_current_context().meta.get("after_separator", 0)
    captures, command = arguments[:len(arguments) - after], arguments[len(arguments) - after:]
    if len(captures) > 1:
        raise click.UsageError(f"give one CAPTURE, not {len(captures)} (put a command to record after --)")
    if captures and command:
        raise click.UsageError("give a CAPTURE to check or -- COMMAND to record, not both")
    return captures, command


def _recording(choice: Choice, settings: Settings, output: Path | None) -> RecordRequest:
    """What to record, checked before any work: the target, the bounds, where the capture goes."""
    if not targets_given(choice) and not choice.command:
        raise click.UsageError("nothing to check: give a CAPTURE, a target to record (--pid, --tree, --comm, --exe, "
                               "--tid, --cgroup, --unit, -a), or -- COMMAND")
    target = resolve_target(choice)
    return settings.request(target, output or default_output(target),
                            UNTIL_COMMAND_S if target.command else DEFAULT_DURATION_S)


def _record(request: RecordRequest, force: bool) -> None:
    """Record the target; a run that did not finish by itself is not checked."""
    info = record_into(request, force, suggest_report=False)
    _refuse_unfinished(info, request.output)


def _refuse_unfinished(info: CaptureInfo, capture: Path) -> None:
    if info.ended_by in INTERRUPTED:
        raise Interrupted(f"the recording was ended by {info.ended_by}, so the run is not checked; the capture is "
                          f"kept: 'offcpu check {capture}' checks it as it is")
    if info.command_exit_status:
        raise OffcpuError(f"the command exited with status {info.command_exit_status}, so the run is not checked; "
                          f"fix the command (its capture is kept in {capture})")
    if info.target.command and info.target.kind != "command" and info.target_exited:
        raise OffcpuError(f"{info.target.recorded()} exited before the command did, so the run is not checked; "
                          f"its capture is kept in {capture}")
    _refuse_cut_short(info, capture)
    _refuse_partial(info, capture)


def _refuse_cut_short(info: CaptureInfo, capture: Path | str) -> None:
    """A run whose command the recording ended is part of a run, and is not checked."""
    if info.cut_short_note:
        where = printable(shlex.quote(str(capture)))
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}{info.cut_short_note}; {cut_short_fix(info)} (the capture is "
                          f"kept in {where})")


def _check_capture(capture: Path) -> None:
    if is_perf_data(capture):
        return  # recorded by perf alone: its report says what it lacks
    if not capture.is_dir():
        raise OffcpuError(f"{capture} is not a capture directory; record one with 'offcpu record -o DIR' "
                          "or let 'offcpu check --pid PID' record it")
    info = load(capture)  # says clearly when it is not a capture
    if info.command_exit_status:
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}the command recorded in {capture} exited with status "
                          f"{info.command_exit_status}: a run that failed is not checked; record one that succeeds")
    _refuse_cut_short(info, capture)
    _refuse_partial(info, capture)


def _refuse_partial(info: CaptureInfo, capture: Path) -> None:
    """A run that lost more events than a check allows (whole waits are missing), or whose
    recording was ended early because perf spun, is not checked."""
    if too_lossy(info.lost_share):
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}in {capture}, {info.lost_sentence(allowed_loss())}")
    if info.ended_by == PERF_SPINNING:
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}in {capture}, perf spun once one of the recorded processes "
                          f"exited, and the recording was ended after {info.duration_actual_s:.1f} s of the "
                          f"{info.duration_requested_s:g} s asked: record the cgroup that holds them (--cgroup, "
                          "--unit) or the whole machine (-a) instead" + more_in("perf-spins"))


def _measure(capture: Path, policy: Policy) -> tuple[Measurements, Target]:
    """The run's measurements, and the target it recorded."""
    model = _readable_model(capture)
    measurements = measure(model, policy.locks)
    reason = unrecorded(model)
    # threads that never ran are still checked when the stacks they slept in show them stuck
    if reason and not {DEADLOCK, STUCK} & measurements.findings.keys():
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}the recording holds no scheduler events of the target ({reason}); "
                          "record it while it does its work (a sleeping process, or a kernel thread, gives nothing "
                          "to check)")
    return measurements, model.capture.target


def _readable_model(capture: Path) -> Model:
    """The capture's model, unless too much of perf.data could not be read to trust it."""
    model = read_with_progress(capture, None)
    _refuse_partial(model.capture, capture)  # a perf.data recorded alone is judged here
    if untrusted(model):
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}in {capture}, {unreadable_note(model)}")
    warn_if_unread(model)
    for lack in model.lacks:  # a perf.data recorded by perf alone
        click.echo(f"offcpu: note: {lack}", err=True)
    return model


def _baseline(path: Path, policy: Policy) -> tuple[Measurements, Target | None]:
    """A capture directory or a perf.data (its model, read with the policy's lock table), or a
    JSON report of a capture; and the target it recorded, when it says."""
    if path.is_dir() or is_perf_data(path):
        _check_capture(path)
        model = _readable_model(path)
        return measure(model, policy.locks), model.capture.target
    try:
        report = read_json(path, BASELINE_MAX)
        measurements = measurements_from_report(report)
    except OSError as error:
        raise OffcpuError(f"cannot read the baseline {path} ({error.strerror}); give a capture directory or "
                          "the output of 'offcpu report json CAPTURE'") from None
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
        why = f" ({error})" if type(error) is ValueError else ""
        raise OffcpuError(f"the baseline {path} is not an offcpu JSON report this offcpu can compare with{why}; "
                          "give the capture directory, or its 'offcpu report json CAPTURE -o FILE' output") from None
    if too_lossy(measurements.lost_share):
        raise OffcpuError(f"{COULD_NOT_CHECK_PREFIX}the baseline {path} is of a run in which perf lost "
                          f"{measurements.lost_events:,} events ({measurements.lost_share:.1%}{allowed_loss()}): "
                          "record a known-good run that loses fewer and compare with it")
    recorded = _reported_capture(report)
    if recorded is not None:
        _refuse_cut_short(recorded, path)
    return measurements, recorded.target if recorded is not None else None


def _reported_capture(report: dict) -> CaptureInfo | None:
    """What a JSON report says of its capture; None when it does not say it as offcpu writes it."""
    try:
        return CaptureInfo.from_json(report["capture"])
    except (KeyError, TypeError, ValueError):
        return None


def _other_target(run: Target, baseline: Target) -> str | None:
    """What to say when the baseline recorded another kind of target than the run (every CPU
    against one command, a cgroup against processes): its shares are of other threads."""
    if run.kind == baseline.kind:
        return None
    return (f"the baseline recorded {baseline.describe()}, and this run {run.describe()}: each time is of the "
            "threads its own recording covered, so they compare only as far as those are the same work")


def _github_outputs(verdict: Verdict, capture: str) -> None:
    """Only on GitHub Actions (or wherever these variables are set): a step summary, error annotations."""
    _append_step_summary(VerdictMarkdown(capture).render(verdict))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        write_stdout(github_annotations(verdict))


@contextmanager
def _could_not_check_on_github() -> Iterator[None]:
    """A check that could not check (exit 2) says why in an annotation and the step summary too."""
    try:
        yield
    except click.ClickException as error:
        if error.exit_code == OffcpuError.exit_code or isinstance(error, Interrupted):
            reason = error.format_message().removeprefix(COULD_NOT_CHECK_PREFIX)
            if os.environ.get("GITHUB_ACTIONS") == "true":
                write_stdout(github_error(COULD_NOT_CHECK_PREFIX + reason))
            _append_step_summary(could_not_check_markdown(reason))
        raise


def _append_step_summary(markdown: str) -> None:
    """A summary file that cannot be written is worth a warning, not a different exit status."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return
    try:
        # appended to a regular file only, never through a link (CI's runner makes it; offcpu runs as root)
        fd = os.open(summary, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o666)
        with open(fd, "w") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise not_regular(summary)
            file.write(markdown)
    except OSError as error:
        click.echo(f"offcpu: warning: cannot append to GITHUB_STEP_SUMMARY {summary} ({error.strerror}), so the "
                   "job's summary lacks this check; its exit status is unchanged", err=True)
