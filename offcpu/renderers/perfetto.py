"""The longest waits on a timeline, as Chrome trace-event JSON (which Perfetto's UI
and chrome://tracing load): a track per thread with a slice for the run before
each wait, the wait until its wakeup (named by where it waited) and the wait for
a CPU after it, and a flow arrow from each waker to the thread it woke.

The model keeps the times of its longest waits only (engine.TIMELINE_WAITS):
the trace shows those of the threads with most off-CPU time, longest first,
within the bounds given, and says how many waits and threads it leaves out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from offcpu.diagnosis.locktable import lock_table
from offcpu.model import PREEMPTED, Model, Thread, TimedWait
from offcpu.model.stackview import StackView, selected, woken_by
from offcpu.model.summaries import sampling_note
from offcpu.stacks import drawn_alone, shorten

SITE_CHARS = 80  # a blocked slice's name: the lock it waits for, or its stack shortened to this
RUNNING, BLOCKED, RUNQUEUE, WAKEUP = "running", "blocked", "waiting for a CPU", "wakeup"


@dataclass(frozen=True)
class Bounds:
    threads: int  # the threads with most off-CPU time, at most
    waits: int  # their longest waits, at most


class PerfettoTrace:
    def __init__(self, view: StackView, bounds: Bounds) -> None:
        self.view = view
        self.bounds = bounds
        self.left_out = ""  # what the last render left out, in words ('' when it showed every wait)

    def render(self, model: Model) -> str:
        shown = selected(model, self.view)
        threads = sorted((thread for thread in shown.threads.values() if thread.offcpu_us),
                         key=lambda thread: (-thread.offcpu_us, thread.tid))
        chosen = {thread.tid for thread in threads[: self.bounds.threads]}
        kept = {index for index, row in enumerate(model.rows) if self.view.keeps(model, row)}
        candidates = [wait for wait in model.timeline if wait.tid in chosen and wait.row in kept]
        waits = sorted(candidates, key=lambda wait: (wait.since_ns - wait.back_ns, wait.since_ns))[: self.bounds.waits]
        events = Events(model, self.view)
        for wait in sorted(waits):
            events.wait(wait)
        all_waits = sum(row.count for index, row in enumerate(model.rows) if index in kept)
        self.left_out = _left_out(all_waits, len(waits), len(threads), len(chosen), len(candidates),
                                 len(model.timeline))
        other = {"title": f"Off-CPU waits of {model.capture.target.describe()}", "left_out": self.left_out,
                 "time_zero": "the start of the recording"}
        note = sampling_note(model)
        if note:
            other["sampling"] = f"{note}; only waits that carry a stack are on the timeline"
        document = {"traceEvents": events.tracks() + events.slices, "displayTimeUnit": "ms", "otherData": other}
        return json.dumps(document, separators=(",", ":")) + "\n"



def _left_out(all_waits: int, shown: int, threads: int, chosen: int, candidates: int, timed: int) -> str:
    """What the trace does not show, in words ('' when it shows every wait)."""
    if shown == all_waits:
        return ""
    parts = [f"{all_waits - shown:,} of {all_waits:,} waits"]
    if threads > chosen:
        parts.append(f"those of the {threads - chosen:,} threads after the {chosen:,} with most off-CPU time "
                     "(--threads)")
    if candidates > shown:
        parts.append(f"{candidates - shown:,} shorter than the {shown:,} shown (--waits)")
    if all_waits > timed:
        parts.append(f"the capture keeps the times of its {timed:,} longest waits only")
    return ": ".join(parts[:1]) + ("; ".join([""] + parts[1:]) if len(parts) > 1 else "")


class Events:
    """The trace's events: slices and flows in the order made, and the tracks they are on."""

    def __init__(self, model: Model, view: StackView) -> None:
        self.model = model
        self.table = lock_table(view.locks)
        self.slices: list[dict] = []
        self.wakers: dict[int, tuple[int, str]] = {}  # tid -> pid, comm of wakers that are not among the threads
        self.flows = 0

    def ts(self, ns: int) -> float:
        """Microseconds from the start of the window, to the nanosecond."""
        return round((max(ns, self.model.window_start_ns) - self.model.window_start_ns) / 1000, 3)

    def slice(self, thread: tuple[int, int], name: str, category: str, from_ns: int, to_ns: int,
              args: dict | None = None) -> dict:
        pid, tid = thread
        event = {"ph": "X", "name": name, "cat": category, "ts": self.ts(from_ns),
                 "dur": round(self.ts(to_ns) - self.ts(from_ns), 3), "pid": pid, "tid": tid}
        if args:
            event["args"] = args
        self.slices.append(event)
        return event

    def wait(self, wait: TimedWait) -> None:
        model = self.model
        row = model.rows[wait.row]
        thread = model.threads[wait.tid]
        track = (thread.pid, thread.tid)
        if wait.ran_ns is not None:
            self.slice(track, RUNNING, RUNNING, wait.ran_ns, wait.since_ns)
        woken_ns = wait.back_ns if wait.woken_ns is None else min(max(wait.woken_ns, wait.since_ns), wait.back_ns)
        if row.state == PREEMPTED:
            woken_ns = wait.since_ns
        args = {"state": row.state, "stack": self.stack(row.stack), "woken by": woken_by(model, row),
                "off CPU ms": (wait.back_ns - wait.since_ns) / 1e6}
        if woken_ns > wait.since_ns:
            self.slice(track, self.site(row.stack), BLOCKED, wait.since_ns, woken_ns, args)
        ready = self.slice(track, RUNQUEUE, RUNQUEUE, woken_ns, wait.back_ns, args)
        waker = model.wakers[row.waker] if row.waker is not None else None
        if waker is not None and waker.kind == "thread" and wait.woken_ns is not None:
            self.flow(waker.pid, waker.tid, waker.comm, thread, wait.woken_ns, ready)

    def flow(self, pid: int, tid: int, comm: str, woken: Thread, woken_ns: int, ready: dict) -> None:
        """An arrow from the waker's wakeup (a slice of no length on its track) to the wait for a
        CPU that began there."""
        if tid not in self.model.threads:
            self.wakers[tid] = (pid, comm)
        self.flows += 1
        self.slice((pid, tid), f"wakes {woken.comm}-{woken.tid}", WAKEUP, woken_ns, woken_ns)
        common = {"name": WAKEUP, "cat": WAKEUP, "id": self.flows}
        self.slices.append({**common, "ph": "s", "ts": self.ts(woken_ns), "pid": pid, "tid": tid})
        self.slices.append({**common, "ph": "f", "ts": ready["ts"], "pid": ready["pid"], "tid": ready["tid"]})

    def tracks(self) -> list[dict]:
        """A process and thread name for each track the slices are on."""
        used = {(event["pid"], event["tid"]) for event in self.slices}
        names = {tid: thread.comm for tid, thread in self.model.threads.items()} | {
            tid: comm for tid, (_, comm) in self.wakers.items()}
        events = []
        for pid in sorted({pid for pid, _ in used}):
            process = names.get(pid) or next(names.get(tid, "?") for owner, tid in used if owner == pid)
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{process} ({pid})"}})
        for pid, tid in sorted(used):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": f"{names.get(tid, '?')}-{tid}"}})
        return events

    @cache  # noqa: B019 (one Events per render)
    def stack(self, index: int) -> str:
        return ";".join(drawn_alone(self.model.stacks[index])[0])

    @cache  # noqa: B019 (one Events per render)
    def site(self, index: int) -> str:
        """Where a wait waited: the lock table's name for it, else its stack shortened."""
        stack = self.model.stacks[index]
        site = self.table.site(stack)
        frames, kernel = drawn_alone(stack)
        return f"{site.lock.name} ({site.frame})" if site is not None else shorten(frames, kernel, SITE_CHARS)
