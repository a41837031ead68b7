"""The report for the terminal: rich tables, worst first; plain and stable when not a terminal."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from offcpu.findings import Finding, findings
from offcpu.model import Model
from offcpu.renderers.console import printed
from offcpu.stackview import StackView
from offcpu.stacks import shorten
from offcpu.summaries import by_state, lifecycle, runqueue_percentiles, top_stacks, totals, waker_pairs

STATE_NAMES = {"S": "sleeping", "D": "uninterruptible (locks, I/O)", "R": "preempted while runnable",
               "I": "idle kernel thread", "?": "since before the recording", "T": "stopped", "t": "traced"}


def _ms(microseconds: int) -> str:
    return f"{microseconds / 1000:,.1f}"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


class TextReport:
    def __init__(self, view: StackView, top: int, width: int, color: bool) -> None:
        self.view = view
        self.top = top
        self.width = width
        self.color = color

    def render(self, model: Model) -> str:
        return printed(self._parts(model), self.width, self.color, gap=True)

    def _table(self, title: str, *columns: str) -> Table:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if self.color else box.ASCII2,
                      expand=False, title_style="bold" if self.color else "")
        for column in columns:
            numeric = column.endswith(("ms", "%", "count", "wakeups", "µs", "tid", "state"))
            table.add_column(column, justify="right" if numeric else "left", no_wrap=True,
                             min_width=len(column) if numeric else None, overflow="ellipsis")
        return table

    @staticmethod
    def _row(table: Table, *cells: str) -> None:
        """Cells are plain text: symbol and thread names may hold '[' that rich would read as markup."""
        table.add_row(*(Text(cell) for cell in cells))

    def _parts(self, model: Model) -> list[Text | Table | Group]:
        whole = totals(model)
        capture = model.capture
        header = (f"Off-CPU time of {capture.target.describe()}, {model.wall_us / 1e6:.2f} s recorded "
                  f"({capture.call_graph} stacks)\n"
                  f"{whole.threads} threads were off CPU for {_ms(whole.offcpu_us)} ms: blocked {_ms(whole.blocked_us)} "
                  f"ms, waiting for a CPU {_ms(whole.runqueue_us)} ms")
        return [Text(header), *self._findings(model), self._stacks(model, whole.offcpu_us), self._threads(model), self._states(model),
                self._runqueue(model), self._wakers(model), self._lifecycle(model)]

    def _findings(self, model: Model) -> list[Text | Group]:
        """Worst first, each readable on its own: what, how much, the proof, the fix."""
        found = findings(model)
        if not found:
            return [Text("Findings: nothing stands out in this recording.")]
        return [Text("Findings, worst first", style="bold" if self.color else ""),
                *(self._finding(finding) for finding in found)]

    def _finding(self, finding: Finding) -> Group:
        style = {"critical": "bold red", "warning": "yellow"}.get(finding.severity, "") if self.color else ""
        stack_width = max(30, self.width - 30)
        lines = [finding.summary]
        lines += [f"{_ms(evidence.offcpu_us)} ms in {evidence.count:,} waits ({evidence.state}): "
                  f"{shorten(tuple(reversed(evidence.frames)), evidence.kernel_frames, stack_width)}"
                  for evidence in finding.evidence]
        lines.append(f"Fix: {finding.remedy}")
        if finding.confidence == "low":
            lines.append(f"Confidence: low, {finding.confidence_reason}")
        return Group(Text(f"[{finding.severity}] {finding.title}", style=style),
                     *(Padding(Text(line), (0, 0, 0, 2)) for line in lines))

    def _stacks(self, model: Model, offcpu_us: int) -> Table:
        stack_width = max(30, self.width - 50)  # what the four number columns and the borders leave
        table = self._table(f"Top {self.top} off-CPU stacks", "off-CPU ms", "share %", "state", "count", "stack")
        table.columns[-1].max_width = stack_width
        for stack in top_stacks(model, self.view, self.top):
            self._row(table, _ms(stack.offcpu_us), _share(stack.offcpu_us, offcpu_us), stack.state, f"{stack.count:,}",
                          shorten(stack.frames, stack.kernel_frames, stack_width))
        return table

    def _threads(self, model: Model) -> Table:
        table = self._table("Threads", "tid", "comm", "off-CPU ms", "blocked ms", "run-queue ms", "on-CPU ms")
        for thread in sorted(model.threads.values(), key=lambda t: -t.offcpu_us)[: self.top]:
            self._row(table, str(thread.tid), thread.comm, _ms(thread.offcpu_us), _ms(thread.blocked_us),
                          _ms(thread.runqueue_us), _ms(thread.oncpu_us))
        return table

    def _states(self, model: Model) -> Table:
        table = self._table("Switch-out states", "state", "meaning", "off-CPU ms", "count")
        for state in by_state(model):
            self._row(table, state.state, STATE_NAMES.get(state.state, ""), _ms(state.offcpu_us), f"{state.count:,}")
        return table

    def _runqueue(self, model: Model) -> Text:
        percentiles = runqueue_percentiles(model)
        if not percentiles:
            return Text("Run-queue delay: no wakeup or preemption was recorded whole.")
        shown = ", ".join(f"{'max' if p == 100 else f'p{p}'} {delay:,} µs" for p, delay in percentiles.items())
        return Text(f"Run-queue delay (wakeup or preemption to running again): {shown}")

    def _wakers(self, model: Model) -> Table:
        table = self._table("Who woke whom", "waker", "woke", "wakeups", "blocked ms", "then run-queue ms")
        for pair in waker_pairs(model)[: self.top]:
            waker = pair.waker_comm if pair.waker_kind == "thread" else f"[{pair.waker_kind}] {pair.waker_comm}"
            self._row(table, f"{waker}-{pair.waker_tid}", f"{pair.wakee_comm}-{pair.wakee_tid}", f"{pair.wakeups:,}",
                          _ms(pair.blocked_us), _ms(pair.runqueue_us))
        return table

    def _lifecycle(self, model: Model) -> Text:
        life = lifecycle(model)
        if not life.created and not life.exited:
            return Text("Threads: none created or exited while recording.")
        median = f", median life {life.median_life_us:,} µs" if life.median_life_us is not None else ""
        return Text(f"Threads: {life.created:,} created ({life.created_per_s:,.0f}/s) and {life.exited:,} exited "
                    f"while recording{median}")
