"""`offcpu top` where there is no terminal: a plain block of text per interval, or with --json
one JSON object per line (schema offcpu-top/1) for scripts."""

from __future__ import annotations

import json

from offcpu.diagnosis.locktable import LockTable
from offcpu.escaping import printable
from offcpu.live.follow import Frame
from offcpu.live.view import thread_rates, wait_sites, wakeups

SCHEMA = "offcpu-top/1"
WIDTH = 80
ROWS = 5  # of each table in a block


def block(frame: Frame, target: str, table: LockTable) -> str:
    """The frame as lines of at most WIDTH characters (but the first, which names the target)."""
    lines = [f"offcpu top: {printable(target)}, {frame.elapsed_s:.0f} s",
             f"  window {frame.window_s:.1f} s: {frame.waits:,} waits, p99 {_ms(frame.p99_wait_ms)}; "
             f"kept {frame.kept_s:.0f} s ({frame.kept_bytes / 1e6:.1f} MB)"]
    if frame.kept_dropped:
        lines.append(f"  note: {frame.kept_dropped:,} records let go to stay within --keep-size")
    lines += [f"  flight record: {printable(str(path))}" for path in frame.flight_records[-1:]]
    if frame.model is None:
        return "\n".join([*lines, "  no wait recorded in the window yet", ""])
    lines.append("findings:" if frame.findings else "findings: none")
    lines += [f"  {finding.severity:<8} {finding.share_of_wall:6.1%}  {printable(finding.title)[:60]}"
              for finding in frame.findings]
    lines.append("wait sites (ms/s: the window, its last tenth; trend):")
    lines += [f"  {site.ms_per_s:8.1f} {site.last_ms_per_s:8.1f} {site.trend:<8} {printable(site.name)}"
              for site in wait_sites(frame.model, table, WIDTH - 30)[:ROWS]]
    lines.append("threads (ms/s: off CPU, blocked, run queue, on CPU):")
    lines += [f"  {rate.offcpu_ms_per_s:7.1f} {rate.blocked_ms_per_s:7.1f} {rate.runqueue_ms_per_s:7.1f} "
              f"{rate.oncpu_ms_per_s:7.1f}  {printable(rate.comm)} {rate.tid}"
              for rate in thread_rates(frame.model)[:ROWS]]
    lines.append("wakeups (per s, ms/s the wakee waited):")
    lines += [f"  {pair.per_s:8.1f} {pair.blocked_ms_per_s:8.1f}  {printable(pair.waker)[:30]} -> "
              f"{printable(pair.wakee)[:30]}" for pair in wakeups(frame.model)[:ROWS]]
    return "\n".join([*lines, ""])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def json_line(frame: Frame, target: str, table: LockTable) -> str:
    """The frame as one line of JSON (every site, thread and wakeup pair)."""
    model = frame.model
    return json.dumps({
        "schema": SCHEMA, "target": target, "elapsed_s": round(frame.elapsed_s, 3),
        "window_s": round(frame.window_s, 3), "waits": frame.waits, "p99_wait_ms": frame.p99_wait_ms,
        "kept": {"seconds": round(frame.kept_s, 3), "bytes": frame.kept_bytes, "dropped_records": frame.kept_dropped},
        "flight_records": [str(path) for path in frame.flight_records],
        "findings": [{"id": finding.id, "severity": finding.severity, "title": finding.title,
                      "subject": finding.subject, "share_of_wall": round(finding.share_of_wall, 4),
                      "offcpu_ms": finding.offcpu_us / 1e3, "threads": finding.threads} for finding in frame.findings],
        "wait_sites": [] if model is None else [
            {"site": site.name, "ms_per_s": round(site.ms_per_s, 3), "last_ms_per_s": round(site.last_ms_per_s, 3),
             "trend": site.trend, "threads": site.threads, "waits": site.waits}
            for site in wait_sites(model, table, 500)],
        "threads": [] if model is None else [
            {"tid": rate.tid, "pid": rate.pid, "comm": rate.comm, "offcpu_ms_per_s": round(rate.offcpu_ms_per_s, 3),
             "blocked_ms_per_s": round(rate.blocked_ms_per_s, 3),
             "runqueue_ms_per_s": round(rate.runqueue_ms_per_s, 3), "oncpu_ms_per_s": round(rate.oncpu_ms_per_s, 3)}
            for rate in thread_rates(model)],
        "wakeups": [] if model is None else [
            {"waker": pair.waker, "wakee": pair.wakee, "per_s": round(pair.per_s, 3),
             "blocked_ms_per_s": round(pair.blocked_ms_per_s, 3)} for pair in wakeups(model)],
    })
