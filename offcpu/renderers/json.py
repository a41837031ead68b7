"""The model as documented, versioned JSON ("schema": "offcpu/1"; docs/reports.md describes it)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from offcpu.diagnosis.findings import view_findings
from offcpu.model import Model
from offcpu.model.stackview import StackView, chosen, selected
from offcpu.model.summaries import (
    by_state,
    caveats,
    lifecycle,
    observer,
    runqueue_percentiles,
    totals,
    unreadable_note,
    untrusted,
    waker_pairs,
)

SCHEMA = "offcpu/1"


class JsonReport:
    def __init__(self, view: StackView, top: int) -> None:
        self.view = view
        self.top = top

    def render(self, model: Model) -> str:
        percentiles = runqueue_percentiles(model)
        shown = selected(model, self.view)
        report = {
            "schema": SCHEMA,
            # what makes the numbers less than whole; first, when they cannot be trusted, why
            "caveats": [*([unreadable_note(model)] if untrusted(model) else []),
                        *(caveat.text for caveat in caveats(model))],
            "capture": model.capture.to_json(),
            "window": {"start_ns": model.window_start_ns, "end_ns": model.window_end_ns,
                       "seconds": (model.window_end_ns - model.window_start_ns) / 1e9},
            "view": {option: sorted(value) if isinstance(value, frozenset) else str(value) if isinstance(value, Path)
                     else value for option, value in asdict(self.view).items()},
            "totals": asdict(totals(shown)),
            "observer": asdict(observer(shown)),
            "reader": {"name": model.reader, "note": model.reader_note, "binary_notes": model.binary_notes},
            "states": [asdict(state) for state in by_state(shown)],
            "runqueue_delay_us": {f"p{p}" if p < 100 else "max": delay for p, delay in percentiles.items()},
            "threads": sorted((asdict(thread) for thread in shown.threads.values()), key=lambda t: -t["offcpu_us"]),
            "stacks": [_estimate(asdict(stack), model.sampled) for stack in chosen(model, self.view)[: self.top]],
            "wakers": [asdict(pair) for pair in waker_pairs(shown)[: self.top]],
            "lifecycle": asdict(lifecycle(shown)),
            "findings": [_finding(asdict(finding), model.sampled) for finding in view_findings(model, self.view)],
            "counts": {"clipped_intervals": model.clipped_intervals, "unseen_wakeups": model.unseen_wakeups,
                       "unreadable_events": model.unreadable_events, "unreadable_share": model.unreadable_share},
        }
        if model.sampled:
            report["sampling"] = {"waits": model.waits, "stacked_waits": model.stacked_waits}
        return json.dumps(report, indent=2) + "\n"


def _estimate(times: dict, sampled: bool) -> dict:
    """A stack's times, with one standard error of its off-CPU time (offcpu_us_stderr) when its
    capture's stacks were sampled; as before sampling otherwise."""
    variance = times.pop("variance")
    return {**times, "offcpu_us_stderr": round(math.sqrt(variance), 1)} if sampled else times


def _finding(finding: dict, sampled: bool) -> dict:
    """A finding, its evidence's times with their standard errors when sampled (a release site's
    blocked time has no variance kept: an estimate too, said without one)."""
    release_sites = [{key: value for key, value in site.items() if key != "variance"}
                     for site in finding["release_sites"]]
    return {**finding, "evidence": [_estimate(item, sampled) for item in finding["evidence"]],
            "release_sites": release_sites}
