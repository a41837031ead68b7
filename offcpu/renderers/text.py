"""The report for the terminal: rich tables, worst first, as wide as the terminal (or
COLUMNS) and no wider; plain and stable when not a terminal."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from offcpu.diagnosis.evidence import Evidence
from offcpu.diagnosis.findings import Finding, view_findings
from offcpu.diagnosis.wording import counted, pct, us_text
from offcpu.escaping import printable
from offcpu.model import Model
from offcpu.model.stackview import StackView, chosen, listed, selected
from offcpu.model.summaries import (
    WakerPair,
    by_state,
    caveats,
    lifecycle,
    observer,
    runqueue_percentiles,
    several_processes,
    thread_names,
    totals,
    unreadable_note,
    untrusted,
    waker_pairs,
)
from offcpu.model.wakeups import cause_name
from offcpu.renderers.console import Column, fitted_table, printed, short_names
from offcpu.stacks import shorten_apart

STATE_NAMES = {"S": "sleeping", "D": "uninterruptible (locks, I/O)", "R": "preempted while runnable",
               "I": "idle kernel thread", "?": "since before the recording", "T": "stopped", "t": "traced"}
EVIDENCE_STACK = 30  # the fewest characters an evidence stack gets; narrower, it goes on a line of its own


def waker_name(pair: WakerPair) -> str:
    """Who woke: a thread as comm-tid, else what ended the waits: "[timer]", "[device]", "[network]",
    "[interrupt]"."""
    return f"{pair.waker_comm}-{pair.waker_tid}" if pair.waker_kind == "thread" else cause_name(pair.ended_by)


def ms(microseconds: int) -> str:
    return f"{microseconds / 1000:,.1f}"


def ms_estimate(microseconds: int, variance: int) -> str:
    """ms(), with ± one standard error when the time is an estimate (its stacks were sampled)."""
    return f"{ms(microseconds)} ± {ms(round(math.sqrt(variance)))}" if variance else ms(microseconds)


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def cause_lines(finding: Finding) -> list[str]:
    """Who let a finding's waits go, what they did meanwhile, what that came down to, and (of a
    recording of the whole machine) which cgroups its threads were in."""
    lines = []
    if finding.wakers:
        lines.append("Let go by: " + "; ".join(f"{share.who} ({counted(share.wakeups, 'wakeup')})"
                                               for share in finding.wakers))
    if finding.chain:
        lines.append("Meanwhile the threads that let them go: " + ", ".join(f"{step.what} {pct(step.share)}"
                                                                           for step in finding.chain))
    if finding.roots:
        lines.append("At the root: " + ", ".join(f"{root.what} {pct(root.share)}" for root in finding.roots))
    if finding.cgroups:
        lines.append("In cgroups: " + ", ".join(f"{share.path} ({counted(share.threads, 'thread')})"
                                                for share in finding.cgroups))
    return lines


class TextReport:
    def __init__(self, view: StackView, top: int, width: int, color: bool) -> None:
        self.view = view
        self.top = top
        self.width = width
        self.color = color

    def render(self, model: Model) -> str:
        return printed(self._parts(model), self.width, self.color, gap=True)

    def _table(self, title: str, *columns: Column) -> Table:
        return fitted_table(title, columns, self.width, self.color)

    def _parts(self, model: Model) -> list[Text | Table | Group]:
        shown = selected(model, self.view)
        whole = totals(shown)
        capture = model.capture
        only = f"Only {self.view.filters}\n" if self.view.filters else ""
        threads = f"{whole.threads:,} {'thread was' if whole.threads == 1 else 'threads were'}"
        cost = observer(shown)
        header = (f"Off-CPU time of {capture.target.describe()}, {model.wall_us / 1e6:.2f} s recorded "
                  f"({capture.call_graph} stacks{'; ' + model.reader_note if model.reader_note else ''})\n"
                  f"{only}{threads} off CPU for {ms(whole.offcpu_us)} ms: "
                  f"blocked {ms(whole.blocked_us)} ms, waiting for a CPU {ms(whole.runqueue_us)} ms"
                  + (f"\nperf's own handling of their switches: {cost.said}" if capture.backend == "perf" else ""))
        said = Text(header)
        for caveat in caveats(model):  # in red only what changes a number the reader would act on
            said.append(f"\n{'Warning' if caveat.warns else 'Note'}: {caveat.text}",
                        style="red" if caveat.warns and self.color else "")
        alarm = [Text(f"WARNING: {unreadable_note(model)}", style="bold red" if self.color else "")] \
            if untrusted(model) else []
        return [*alarm, said, *self._findings(model), self._stacks(model, whole.offcpu_us),
                self._threads(shown), self._states(shown), self._runqueue(model), self._wakers(shown),
                self._lifecycle(shown)]

    def _findings(self, model: Model) -> list[Text | Group]:
        """Worst first, each readable on its own: what, how much, the proof, the fix."""
        found = view_findings(model, self.view)
        states = self.view.findings_note
        if not found:
            return [Text(f"Findings: nothing stands out in this recording{states}.")]
        return [Text(f"Findings, worst first{states}", style="bold" if self.color else ""),
                *(self._finding(finding) for finding in found)]

    def _finding(self, finding: Finding) -> Group:
        style = {"critical": "bold red", "warning": "yellow"}.get(finding.severity, "") if self.color else ""
        lines = [finding.summary,
                 *self._stacks_said(finding.evidence, lambda e: f"{ms_estimate(e.offcpu_us, e.variance)} ms in "
                                                                f"{counted(e.count, 'wait')} ({e.state}): "),
                 *self._stacks_said(finding.release_sites[:1], lambda e: "Let go at: "),
                 *cause_lines(finding),
                 f"Fix: {finding.remedy}"]
        if finding.confidence_reason:
            lines.append(f"Confidence: {finding.confidence}, {finding.confidence_reason}")
        return Group(Text(f"[{finding.severity}] {printable(finding.title)}", style=style),
                     *(Padding(Text(printable(line)), (0, 0, 0, 2)) for line in lines))  # they name pools

    def _stacks_said(self, stacks: tuple[Evidence, ...], words: Callable[[Evidence], str]) -> list[str]:
        """Each stack after what is said of it, shortened to the room left, or below it."""
        said = [words(stack) for stack in stacks]
        room = self.width - 2 - max(map(len, said), default=0)
        shown = shorten_apart([(stack.frames, stack.kernel_frames) for stack in stacks],
                              room if room >= EVIDENCE_STACK else self.width - 4)
        return [text + stack for text, stack in zip(said, shown, strict=True)]

    def _stacks(self, model: Model, offcpu_us: int) -> Table:
        stacks = listed(chosen(model, self.view))
        top = stacks[: self.top]
        title = f"Top {len(top):,} of {len(stacks):,} off-CPU stacks" if len(stacks) > len(top) \
            else f"The {len(top):,} off-CPU stack{'s' if len(top) != 1 else ''}"
        columns = [Column("off-CPU ms", [ms_estimate(stack.offcpu_us, stack.variance) for stack in top]),
                   Column("share %", [share(stack.offcpu_us, offcpu_us) for stack in top], drop=3),
                   Column("state", [stack.state for stack in top], drop=1),
                   Column("count", [f"{stack.count:,}" for stack in top], drop=2)]
        if self.view.by_thread or len({stack.root for stack in top}) > 1:  # say whose
            columns.append(Column("thread", short_names([stack.root for stack in top]), least=10))
        frames = [(stack.frames, stack.kernel_frames) for stack in top]
        columns.append(Column("stack", lambda width: shorten_apart(frames, width), least=30, ample=40))
        if self.view.waker:
            columns.append(Column("woken by", short_names([stack.woken_by for stack in top]), least=10))
        return self._table(title + (f" ({self.view.drawing})" if self.view.drawing else ""), *columns)

    def _threads(self, model: Model) -> Table:
        threads = sorted(model.threads.values(), key=lambda t: -t.offcpu_us)[: self.top]
        process = [Column("pid", [str(t.pid) for t in threads], drop=4)] if several_processes(model) else []
        return self._table("Threads",
                           Column("tid", [str(t.tid) for t in threads]),
                           *process,
                           Column("comm", short_names(thread_names(model, threads)), least=15),
                           Column("off-CPU ms", [ms(t.offcpu_us) for t in threads]),
                           Column("blocked ms", [ms(t.blocked_us) for t in threads], drop=2),
                           Column("run-queue ms", [ms(t.runqueue_us) for t in threads], drop=1),
                           Column("on-CPU ms", [ms(t.oncpu_us) for t in threads], drop=3))

    def _states(self, model: Model) -> Table:
        states = by_state(model)
        return self._table("Switch-out states",
                           Column("state", [s.state for s in states]),
                           Column("meaning", short_names([STATE_NAMES.get(s.state, "") for s in states])),
                           Column("off-CPU ms", [ms(s.offcpu_us) for s in states]),
                           Column("count", [f"{s.count:,}" for s in states], drop=1))

    def _runqueue(self, model: Model) -> Text:
        percentiles = runqueue_percentiles(model)
        if not percentiles:
            return Text("Run-queue delay: no wakeup was recorded with the run after it.")
        shown = ", ".join(f"{'max' if p == 100 else f'p{p}'} {delay:,} µs" for p, delay in percentiles.items())
        whose = ", of every thread recorded (it is not kept per thread: the filters do not apply)" \
            if self.view.filtered else ""
        return Text(f"Run-queue delay (from a wakeup to running again){whose}: {shown}")

    def _wakers(self, model: Model) -> Table | Text:
        pairs = waker_pairs(model)[: self.top]
        if not pairs:
            return Text("Who woke whom: no wakeup of these threads was recorded.")
        return self._table("Who woke whom",
                           Column("waker", short_names([waker_name(pair) for pair in pairs])),
                           Column("woke", short_names([f"{pair.wakee_comm}-{pair.wakee_tid}" for pair in pairs])),
                           Column("wakeups", [f"{pair.wakeups:,}" for pair in pairs], drop=1),
                           Column("blocked ms", [ms(pair.blocked_us) for pair in pairs]),
                           Column("then run-queue ms", [ms(pair.runqueue_us) for pair in pairs], drop=2))

    def _lifecycle(self, model: Model) -> Text:
        life = lifecycle(model)
        if not life.created and not life.exited:
            return Text("Threads: none created or exited while recording.")
        median = f", median life {us_text(life.median_life_us)}" if life.median_life_us is not None else ""
        return Text(f"Threads: {life.created:,} created ({life.created_per_s:,.0f}/s) and {life.exited:,} exited "
                    f"while recording{median}")
