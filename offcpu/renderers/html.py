"""One self-contained HTML page: the interactive flame graph, the capture's metadata
and the analysis tables. It loads nothing: no network, no files beside it."""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Iterable, Sequence
from html import escape

from offcpu.diagnosis.context import Context
from offcpu.diagnosis.findings import view_findings
from offcpu.diagnosis.locktable import lock_table
from offcpu.diagnosis.waitgraph import wait_graph
from offcpu.diagnosis.wording import counted
from offcpu.escaping import printable
from offcpu.model import Model
from offcpu.model.stackview import SEPARATOR, StackView, chosen, listed, of_threads, selected
from offcpu.model.summaries import (
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
from offcpu.renderers.flame import FlameGraphSvg, title
from offcpu.renderers.flamegraph_tool import Renderer
from offcpu.renderers.graph_svg import graph_svg
from offcpu.renderers.text import STATE_NAMES, cause_lines, ms, ms_estimate, share, waker_name
from offcpu.stacks import shorten_apart

STACK_CHARS = 110  # a stack cell shows about this much; its tooltip has every frame
LOST = {False: "Lost events", True: "Lost waits"}  # by whether BPF recorded: perf loses events, BPF waits
# The flame graph's frame runs its own script (zoom, and search, which asks for the term with
# prompt()) and nothing more: no access to the page, no navigation, no pop-ups, no forms.
FLAME_SANDBOX = "allow-scripts allow-modals"
# The browser fetches nothing for the page, and says so if asked to. The flame graph's data: frame
# inherits this policy: its own script and onclick handlers are what 'unsafe-inline' allows.
POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; frame-src data:"
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1240px; padding: 0 1em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.8em; }
.flame { overflow-x: auto; } .flame iframe { border: 1px solid #ddd; }
.note { color: #666; margin: 0; } .caveat { color: #444; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { padding: .2em .7em; text-align: left; vertical-align: top; border-bottom: 1px solid #eee; }
thead th { border-bottom: 2px solid #ccc; } .n { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #f7f7f7; }
#stacks td:last-child { font: 12px ui-monospace, monospace; }
#capture th { white-space: nowrap; } #capture td { white-space: pre-line; } .warn { color: #b00; }
.alarm { color: #fff; background: #b00; padding: .6em .8em; font-size: 1.1em; }
.finding { border-left: 4px solid #999; padding: .1em .8em; margin: .6em 0; background: #fafafa; }
.finding.critical { border-color: #c00; } .finding.warning { border-color: #e90; }
.finding h3 { font-size: 1em; margin: .3em 0; } .finding li span { font: 12px ui-monospace, monospace; }
"""

Cell = str | tuple[str, str]  # text, or (text, tooltip)


def _cell(tag: str, value: Cell, right: bool) -> str:
    """Text from the capture (symbols carry < > & and quotes, names anything), printable and
    escaped; a tooltip's lines are made of printable text already (see _lines)."""
    text, tip = (value, "") if isinstance(value, str) else value
    attributes = (' class="n"' if right else "") + (f' title="{escape(tip)}"' if tip else "")
    return f"<{tag}{attributes}>{escape(printable(text))}</{tag}>"


def _lines(texts: Iterable[str], separator: str = "\n") -> str:
    """Texts from the capture joined by a separator that is no part of any of them."""
    return separator.join(map(printable, texts))


def _table(headers: Sequence[str], align: str, rows: Iterable[Sequence[Cell]]) -> str:
    """`align` has one letter per column: 'r' for numbers, 'l' for text."""
    head = "".join(_cell("th", header, side == "r") for header, side in zip(headers, align, strict=True))
    body = "".join("<tr>" + "".join(_cell("td", value, side == "r") for value, side in zip(row, align, strict=True))
                   + "</tr>\n" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table>"


def _section(anchor: str, heading: str, note: str, body: str) -> str:
    return (f'<section id="{anchor}">\n<h2>{escape(heading)}</h2>\n<p class="note">{escape(note)}</p>\n'
            f"{body}\n</section>")


def _svg_size(svg: str) -> tuple[str, str]:
    """The width and height the renderer gave its graph, for the frame that shows it."""
    root = re.search(r"<svg\b[^>]*>", svg)
    width, height = (re.search(rf'\s{name}="([\d.]+)"', root.group() if root else "") for name in ("width", "height"))
    return width.group(1) if width else "100%", height.group(1) if height else "600"


class HtmlReport:
    def __init__(self, renderer: Renderer, view: StackView, top: int) -> None:
        self.flame = FlameGraphSvg(renderer, view)
        self.view = view
        self.top = top

    def _findings(self, model: Model) -> str:
        found = view_findings(model, self.view)
        blocks = []
        for finding in found:
            stacks = shorten_apart([(item.frames, item.kernel_frames) for item in finding.evidence], STACK_CHARS)
            evidence = "".join(f"<li>{ms_estimate(item.offcpu_us, item.variance)} ms in {counted(item.count, 'wait')} "
                               f"({escape(item.state)}): "
                               f"<span title=\"{escape(_lines(item.frames, ';'))}\">{escape(stack)}</span></li>"
                               for item, stack in zip(finding.evidence, stacks, strict=True))
            confidence = (f"<p><b>Confidence: {escape(finding.confidence)}</b>, {escape(finding.confidence_reason)}</p>"
                          if finding.confidence_reason else "")
            release_sites = finding.release_sites[:1]
            release_stacks = shorten_apart([(item.frames, item.kernel_frames) for item in release_sites], STACK_CHARS)
            released = "".join(f"<li>Let go at: <span title=\"{escape(_lines(item.frames, ';'))}\">"
                               f"{escape(stack)}</span></li>"
                               for item, stack in zip(release_sites, release_stacks, strict=True))
            causes = "".join(f"<li>{escape(printable(line))}</li>" for line in cause_lines(finding))  # name pools
            blocks.append(f'<div class="finding {escape(finding.severity)}"><h3>[{escape(finding.severity)}] '
                          f"{escape(printable(finding.title))}</h3>\n<p>{escape(printable(finding.summary))}</p>\n"
                          f"<ul>{evidence}{released}{causes}</ul>\n"
                          f"<p><b>Fix:</b> {escape(finding.remedy)}</p>{confidence}</div>")
        states = self.view.findings_note
        note = ("Worst first" if found else "Nothing stands out in this recording") + states
        said = "".join(f'<p class="{"warn" if caveat.warns else "caveat"}">{escape(caveat.text)}</p>\n'
                       for caveat in caveats(model))
        return _section("findings", "Findings", note, said + "\n".join(blocks))

    def render(self, model: Model) -> str:
        heading = title(model, self.view)
        shown = selected(model, self.view)
        sections = [self._findings(model), self._flame_graph(model), self._wait_graph(model), self._capture(model),
                    self._totals(shown),
                    self._stacks(model, totals(shown).offcpu_us), self._threads(shown), self._states(shown),
                    self._runqueue(model), self._wakers(shown), self._lifecycle(shown)]
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
                f"<title>{escape(heading)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
                f"<h1>{escape(heading)}</h1>\n{self._alarm(model)}" + "\n".join(sections) + "\n</body>\n</html>\n")

    @staticmethod
    def _alarm(model: Model) -> str:
        """Before anything else, when the numbers cannot be trusted."""
        return f'<p class="alarm"><b>Warning:</b> {escape(unreadable_note(model) or "")}</p>\n' \
            if untrusted(model) else ""

    def _flame_graph(self, model: Model) -> str:
        """The SVG as a document of its own in a data: frame, so that its script (zoom, search)
        runs as its renderer wrote it, apart from the page."""
        svg = self.flame.render(model)
        width, height = _svg_size(svg)
        source = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
        return ('<section id="flame">\n<p class="note">Click a frame to zoom in; Reset Zoom (top left) zooms out; '
                'Search (top right) highlights frames by name.</p>\n'
                f'<div class="flame"><iframe id="flamegraph" title="Off-CPU flame graph" src="{source}" '
                f'sandbox="{FLAME_SANDBOX}" width="{width}" height="{height}"></iframe></div>\n</section>')

    def _wait_graph(self, model: Model) -> str:
        svg = graph_svg(wait_graph(Context(of_threads(model, self.view), lock_table(self.view.locks))))
        note = ("Who waited for whom: an arrow from the threads that waited to what let them go, as thick as the "
                "time they waited; a loop on a pool whose threads let each other go. Hover for the figures."
                if svg else "No wait was ended by anyone within the recording.")
        return _section("waitgraph", "Who waits for whom", note, svg)

    def _capture(self, model: Model) -> str:
        capture = model.capture
        used = "\n".join(f"{event['name']}{' (with stacks)' if event['call_graph'] else ''}: {event['why']}"
                         for event in capture.events)
        skipped = "\n".join(f"{event['name']}: {event['why']}" for event in capture.events_skipped)
        ended = capture.ended_by + (" (the target exited)" if capture.target_exited
                                    and capture.ended_by != "target exited" else "")
        if capture.command_cut_short:
            ended += f"; the command was still running, and was sent {', then '.join(capture.command_cut_short)}"
        truncated = {True: "yes: most user stacks stop short of the thread's start; record with "
                           "--call-graph dwarf to see their callers",
                     False: "no", None: "no user stacks to judge"}[capture.user_stacks_truncated]
        start_s, end_s = ((ns - capture.window_start_ns) / 1e9 for ns in (model.window_start_ns,
                                                                           model.window_end_ns))
        bpf = capture.backend == "bpf"
        recorder = [("Recorded with", f"offcpu's BPF programs: {capture.backend_why}")] if bpf else [
            ("perf command", shlex.join(capture.perf_command)), ("perf version", capture.perf_version)]
        rows = [
            ("Target", capture.target.describe()),
            *recorder,
            ("Kernel", capture.kernel_release),
            ("Window", (f"{capture.started_at} to {capture.ended_at}: {capture.duration_actual_s:.2f} s recorded "
                        f"of {capture.duration_requested_s:g} s asked for; this report covers {start_s:.2f} s "
                        f"to {end_s:.2f} s of it")),
            ("Events used", used),
            ("Events not used", skipped or "none"),
            ("How it ended", ended),
            ("Recorded", f"{capture.recorded_counts}, {capture.perf_data_bytes / 1e6:.1f} MB, {capture.cpus} CPUs"),
            (LOST[bpf], f"{capture.lost_events:,}"),
            ("Call graphs", capture.call_graph),
            ("Read", f"{model.reader}: {model.reader_note}"),
            *([] if bpf else [("User stacks cut short", truncated)]),  # judged from perf's stacks only
        ]
        warn = {LOST[bpf]: capture.lost_events > 0, "User stacks cut short": bool(capture.user_stacks_truncated)}
        body = "".join(f"<tr><th>{escape(name)}</th><td{' class=warn' if warn.get(name) else ''}>"
                       f"{escape(_lines(value.split(chr(10))))}</td></tr>\n" for name, value in rows)
        return _section("capture", "Capture", "What was recorded, and how", f"<table>\n{body}</table>")

    def _totals(self, model: Model) -> str:
        whole = totals(model)
        cost = observer(model)
        perf = model.capture.backend == "perf"  # BPF's cost is not counted per thread: see numbers.md
        table = _table(("recorded", "threads", "off-CPU ms", "blocked ms", "waiting for a CPU ms",
                        *(["perf's own handling ms (on CPU)"] if perf else [])), "r" * (6 if perf else 5),
                       [(f"{whole.wall_us / 1e6:.2f} s", f"{whole.threads:,}", ms(whole.offcpu_us),
                         ms(whole.blocked_us), ms(whole.runqueue_us),
                         *([f"{ms(cost.us)} ({cost.share_of_oncpu:.1%} of on-CPU)"] if perf else []))])
        note = f"Over what is chosen: {self.view.filters}" if self.view.filtered else "Over every thread recorded"
        return _section("totals", "Totals", note, table)

    def _stacks(self, model: Model, offcpu_us: int) -> str:
        stacks = listed(chosen(model, self.view))
        top = stacks[: self.top]
        whose = self.view.by_thread or len({stack.root for stack in top}) > 1  # say whose
        short = shorten_apart([(stack.frames, stack.kernel_frames) for stack in top], STACK_CHARS)
        headers = ["off-CPU ms", "share", "state", "count", *(["thread"] if whose else []),
                   *(["woken by"] if self.view.waker else []), "stack"]
        rows: list[list[Cell]] = [
            [ms_estimate(stack.offcpu_us, stack.variance), share(stack.offcpu_us, offcpu_us), stack.state,
             f"{stack.count:,}",
             *([stack.root] if whose else []), *([stack.woken_by] if self.view.waker else []),
             (text, _lines((stack.root, *stack.frames, *((SEPARATOR, *stack.waker) if stack.waker else ()))))]
            for stack, text in zip(top, short, strict=True)]
        drawing = f" ({self.view.drawing})" if self.view.drawing else ""
        note = (f"The {len(rows):,} of {len(stacks):,} stacks{drawing} in the flame graph, by switch-out state, that "
                "held the most off-CPU time; hover over one for all its frames, root first")
        align = "rrrr" + "l" * (len(headers) - 4)
        return _section("stacks", "Top off-CPU stacks", note, _table(headers, align, rows))

    def _threads(self, model: Model) -> str:
        threads = sorted(model.threads.values(), key=lambda t: -t.offcpu_us)[: self.top]
        headers = ["tid", "pid", "comm", "off-CPU ms", "blocked ms", "run-queue ms", "on-CPU ms"]
        rows = [[str(t.tid), str(t.pid), name, ms(t.offcpu_us), ms(t.blocked_us), ms(t.runqueue_us),
                 ms(t.oncpu_us)] for t, name in zip(threads, thread_names(model, threads), strict=True)]
        if not several_processes(model):  # the pid column says which process a thread is of, when there are several
            del headers[1]
            for row in rows:
                del row[1]
        table = _table(headers, "r" * (len(headers) - 5) + "lrrrr", rows)
        return _section("threads", "Threads",
                        f"The {len(threads):,} of {len(model.threads):,} threads longest off CPU", table)

    def _states(self, model: Model) -> str:
        table = _table(("state", "meaning", "off-CPU ms", "blocked ms", "run-queue ms", "count"), "llrrrr",
                       [(s.state, STATE_NAMES.get(s.state, ""), ms(s.offcpu_us), ms(s.blocked_us),
                         ms(s.runqueue_us), f"{s.count:,}") for s in by_state(model)])
        return _section("states", "Switch-out states", "What the threads were doing when they left the CPU", table)

    def _runqueue(self, model: Model) -> str:
        percentiles = runqueue_percentiles(model)
        if not percentiles:
            return _section("runqueue", "Run-queue delay", "No wakeup was recorded with the run after it.", "")
        table = _table([("max" if p == 100 else f"p{p}") + " µs" for p in percentiles], "r" * len(percentiles),
                       [[f"{delay:,}" for delay in percentiles.values()]])
        whose = ", of every thread recorded (it is not kept per thread: the filters do not apply)" \
            if self.view.filtered else ""
        return _section("runqueue", "Run-queue delay",
                        f"From a wakeup until the thread ran again{whose}", table)

    def _wakers(self, model: Model) -> str:
        pairs = waker_pairs(model)
        rows = [(waker_name(pair), f"{pair.wakee_comm}-{pair.wakee_tid}", f"{pair.wakeups:,}", ms(pair.blocked_us),
                 ms(pair.runqueue_us)) for pair in pairs[: self.top]]
        note = f"The {len(rows):,} of {len(pairs):,} waker and wakee pairs whose wakeups ended the longest waits"
        return _section("wakers", "Who woke whom", note,
                        _table(("waker", "woke", "wakeups", "blocked ms", "then run-queue ms"), "llrrr", rows))

    def _lifecycle(self, model: Model) -> str:
        life = lifecycle(model)
        median = f"{life.median_life_us:,}" if life.median_life_us is not None else "-"
        table = _table(("created", "exited", "created per s", "median life µs"), "rrrr",
                       [(f"{life.created:,}", f"{life.exited:,}", f"{life.created_per_s:,.0f}", median)])
        return _section("lifecycle", "Thread lifecycle", "Threads created and exited while recording", table)
