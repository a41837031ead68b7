"""`offcpu top` on a terminal: a full screen (rich Live) redrawn every interval, and keys.

Keys: o overview, s wait sites, t threads, w who wakes whom; j/k (or the arrows) choose a
finding, e shows its evidence; r changes the threads' order; p (or space) pauses; d writes
the flight record; q quits. The terminal is put back however it ends (q, Ctrl-C, SIGTERM):
its mode when an exception unwinds, the main screen when rich's Live leaves; a signal that ends
it waits until a drawing is written whole (`whole_drawing`)."""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from offcpu.diagnosis.evidence import Evidence
from offcpu.diagnosis.locktable import LockTable
from offcpu.escaping import printable
from offcpu.live.follow import Follow, Frame
from offcpu.live.view import ThreadRate, thread_rates, wait_sites, wakeups
from offcpu.recording.interrupts import INTERRUPTS
from offcpu.stacks import shorten

VIEWS = {"o": "overview", "s": "wait sites", "t": "threads", "w": "wakeups", "e": "evidence"}
ORDERS: dict[str, str] = {"off CPU": "offcpu_ms_per_s", "blocked": "blocked_ms_per_s",
                          "run queue": "runqueue_ms_per_s", "on CPU": "oncpu_ms_per_s"}
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}
TREND = {"rising": "↑", "falling": "↓", "steady": "="}
KEYS_HELP = "o s t w views · j k e finding, evidence · r order · p pause · d flight record · q"
UP, DOWN = "\x1b[A", "\x1b[B"
ARROW_OR_KEY = re.compile(r"\x1b\[[A-D]|.", re.DOTALL)


class Quit(KeyboardInterrupt):
    """q: the recording ends as on Ctrl-C."""


@dataclass
class Screen:
    target: str
    table: LockTable
    console: Console
    view: str = "overview"
    order: str = "off CPU"
    paused: bool = False
    chosen: int = 0  # the finding whose evidence `e` shows
    frame: Frame | None = None  # the frame shown (kept while paused)
    note: str = ""  # what the last key did

    def take(self, frame: Frame) -> None:
        if not self.paused:
            self.frame = frame

    def key(self, key: str, follow: Follow) -> None:
        findings = self.frame.findings if self.frame else []
        if key == "q":
            raise Quit
        if key in VIEWS:
            self.view = VIEWS[key]
        elif key in ("j", DOWN):
            self.chosen = min(self.chosen + 1, max(len(findings) - 1, 0))
        elif key in ("k", UP):
            self.chosen = max(self.chosen - 1, 0)
        elif key == "r":
            names = list(ORDERS)
            self.order = names[(names.index(self.order) + 1) % len(names)]
        elif key in ("p", " "):
            self.paused = not self.paused
        elif key == "d":
            follow.flight_asked = follow.flight_asked or "key"
            self.note = "writing the flight record…"

    def render(self) -> RenderableType:
        width = self.console.width
        frame = self.frame
        if frame is None:
            return Group(Text(f"offcpu top: {printable(self.target)}: recording; the first refresh is coming"),
                         Text(KEYS_HELP, style="dim"))
        head = Text(f"offcpu top: {printable(self.target)}: {frame.elapsed_s:.0f} s · window {frame.window_s:.0f} s · "
                    f"{frame.waits:,} waits · p99 {'-' if frame.p99_wait_ms is None else f'{frame.p99_wait_ms:.1f} ms'}"
                    f" · kept {frame.kept_s:.0f} s ({frame.kept_bytes / 1e6:.1f} MB)", style="bold")
        if self.paused:
            head.append("  PAUSED", style="reverse")
        parts: list[RenderableType] = [head]
        if frame.flight_records:
            self.note = ""
            parts.append(Text(f"flight record: {printable(str(frame.flight_records[-1]))}", style="green"))
        elif self.note:
            parts.append(Text(self.note))
        if frame.model is None:
            parts.append(Text("no wait recorded in the window yet"))
        elif self.view == "overview":
            parts += [self._findings(), self._sites(width, 5), self._threads(5), self._wakeups(5)]
        elif self.view == "wait sites":
            parts.append(self._sites(width, 40))
        elif self.view == "threads":
            parts.append(self._threads(40))
        elif self.view == "wakeups":
            parts.append(self._wakeups(40))
        else:
            parts.append(self._evidence(width))
        parts.append(Text(KEYS_HELP if width >= len(KEYS_HELP) else "o s t w · j k e · r · p · d · q", style="dim"))
        return Group(*parts)

    def _findings(self) -> RenderableType:
        findings = self.frame.findings if self.frame else []
        if not findings:
            return Text("findings: none in the window")
        table = _table("", "", "severity", "*finding", "of wall")
        for number, finding in enumerate(findings):
            table.add_row(">" if number == self.chosen else "", Text(finding.severity,
                          style=SEVERITY_STYLE.get(finding.severity, "")), Text(printable(finding.title)),
                          f"{finding.share_of_wall:.0%}")
        return table

    def _sites(self, width: int, rows: int) -> RenderableType:
        assert self.frame is not None and self.frame.model is not None
        table = _table("wait sites: ms/s over the window, over its last tenth, trend", "ms/s", "last", "", "*wait site")
        for site in wait_sites(self.frame.model, self.table, max(width - 26, 20))[:rows]:
            table.add_row(f"{site.ms_per_s:.1f}", f"{site.last_ms_per_s:.1f}", TREND[site.trend],
                          Text(printable(site.name), overflow="ellipsis", no_wrap=True))
        return table

    def _threads(self, rows: int) -> RenderableType:
        assert self.frame is not None and self.frame.model is not None
        table = _table(f"threads, ms/s, by {self.order} (r)", "*thread", "tid", "off CPU", "blocked", "run queue",
                       "on CPU")
        field = ORDERS[self.order]
        ordered: list[ThreadRate] = sorted(thread_rates(self.frame.model), key=lambda rate: -getattr(rate, field))
        for rate in ordered[:rows]:
            table.add_row(Text(printable(rate.comm), overflow="ellipsis", no_wrap=True), str(rate.tid),
                          f"{rate.offcpu_ms_per_s:.1f}", f"{rate.blocked_ms_per_s:.1f}",
                          f"{rate.runqueue_ms_per_s:.1f}", f"{rate.oncpu_ms_per_s:.1f}")
        return table

    def _wakeups(self, rows: int) -> RenderableType:
        assert self.frame is not None and self.frame.model is not None
        table = _table("who wakes whom", "*waker", "*wakee", "per s", "waited ms/s")
        for pair in wakeups(self.frame.model)[:rows]:
            table.add_row(Text(printable(pair.waker), overflow="ellipsis", no_wrap=True),
                          Text(printable(pair.wakee), overflow="ellipsis", no_wrap=True), f"{pair.per_s:.1f}",
                          f"{pair.blocked_ms_per_s:.1f}")
        return table

    def _evidence(self, width: int) -> RenderableType:
        findings = self.frame.findings if self.frame else []
        if not findings:
            return Text("no finding in the window: its evidence shows here (j/k choose, e shows)")
        finding = findings[min(self.chosen, len(findings) - 1)]
        lines = [Text(printable(finding.title), style=SEVERITY_STYLE.get(finding.severity, "")),
                 Text(printable(finding.summary)), Text("where it waited:", style="bold")]
        lines += _stack_lines(finding.evidence[:8], width)
        if finding.release_sites:
            lines.append(Text("where it was let go:", style="bold"))
            lines += _stack_lines(finding.release_sites[:4], width)
        lines.append(Text(printable(finding.remedy), style="dim"))
        return Group(*lines)


def _table(title: str, *columns: str) -> Table:
    """A table as wide as the screen, the room beyond the numbers going to the columns of names (marked *)."""
    table = Table(box=box.SIMPLE_HEAD, expand=True, pad_edge=False, title=title or None, title_justify="left")
    for column in columns:
        named = column.startswith("*")
        table.add_column(column.lstrip("*"), ratio=1 if named else None, justify="left" if named else "right",
                         no_wrap=True)
    return table


def _stack_lines(items: tuple[Evidence, ...], width: int) -> list[Text]:
    return [Text(f"  {item.offcpu_us / 1e3:9.1f} ms  {printable(shorten(item.frames, item.kernel_frames, width - 16))}",
                 no_wrap=True, overflow="ellipsis") for item in items]


def read_keys(fd: int) -> list[str]:
    """The keys pressed since the last look (an arrow's escape sequence as one), without waiting."""
    if not select.select([fd], [], [], 0)[0]:
        return []
    return ARROW_OR_KEY.findall(os.read(fd, 64).decode(errors="replace"))


@contextmanager
def whole_drawing() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held until what is drawn meanwhile is written whole: raised out
    of a write to a terminal slow to read (a blocked write that the signal interrupts), the
    exception that ends top would drop the rest of the frame, an escape sequence cut short, and
    the terminal would take the bytes that leave the alternate screen for the rest of it."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def keys_and_screen(screen: Screen) -> Iterator[Live]:
    """Keys read one at a time, unechoed, and the screen drawn; both put back at the end."""
    fd = sys.stdin.fileno()
    mode = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        with Live(screen.render(), console=screen.console, screen=True, auto_refresh=False) as live:
            yield live
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, mode)
