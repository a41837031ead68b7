"""The off-CPU model: everything reports and findings read, built once per capture.

Times are integer microseconds, rounded once per off-CPU interval, so every
sum (per stack, per thread, per state, in total) adds up exactly. A capture
whose stacks were taken for a sample of its waits (sampled) keeps its threads'
times exact, and its rows' times are estimates of them, each with its variance.

The model is defined here; the package's modules make it (loading: from model.json or by the
engine, from what a reader paired) and read it (summaries, stackview, diffing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from offcpu import _core
from offcpu.capture import CaptureInfo
from offcpu.stacks import Stack

SCHEMA = "offcpu-model/12"  # a new engine or reader reads perf.data again
WHOLE_WINDOW = 0.99  # a wait of this share of the window or more lasted all of it
WAKER_KINDS = ("thread", "interrupt", "idle", "unrecorded")
# A row's off-CPU time is also kept in this many equal parts of the window, so that a
# finding's share can be measured in each and its spread over time be known (the engine's).
SUB_WINDOWS = _core.SUB_WINDOWS
PREEMPTED = "R"  # switched out while runnable: all of the gap is run-queue delay


def _integers(*values: object, or_none: bool = False) -> bool:
    """Whether each value is an integer (JSON's true is none), or None where `or_none`."""
    return all((isinstance(value, int) and not isinstance(value, bool)) or (or_none and value is None)
               for value in values)


@dataclass(frozen=True)
class Waker:
    """Who ended a wait: a thread (with its stack at the wakeup), an interrupt, the idle task, or
    something that was not recorded."""

    kind: str  # one of WAKER_KINDS
    pid: int
    tid: int
    comm: str
    stack: int  # index into Model.stacks


@dataclass(slots=True)
class WaitTimes:
    """The off-CPU time of some waits: all of it, the part until their wakeups (blocked),
    the part then spent waiting for a CPU (run queue), how many waits, and the variance
    of offcpu_us (µs²; 0 unless sampled: see Row.variance)."""

    offcpu_us: int = 0
    blocked_us: int = 0
    runqueue_us: int = 0
    count: int = 0
    variance: int = 0

    def add_times(self, other: WaitTimes | Row) -> None:
        self.offcpu_us += other.offcpu_us
        self.blocked_us += other.blocked_us
        self.runqueue_us += other.runqueue_us
        self.count += other.count
        self.variance += other.variance  # (rows of one stratum are not independent: an upper bound)


@dataclass
class Row:
    """Off-CPU time of one thread in one stack and state, woken by one waker."""

    tid: int
    stack: int  # index into Model.stacks
    state: str  # prev_state as perf printed it, '+' dropped ("S", "D", "R", ...)
    waker: int | None  # index into Model.wakers; None when preempted, new, or not back in the window
    offcpu_us: int = 0
    blocked_us: int = 0
    runqueue_us: int = 0
    count: int = 0
    # offcpu_us in each of SUB_WINDOWS equal parts of the window, in order (empty: not known)
    windows: list[int] = field(default_factory=list)
    # The variance of offcpu_us as an estimate (µs²), when its waits' stacks were sampled
    # (offcpu.model.sampling: of its share of its stratum); 0 when all were taken
    variance: int = 0


@dataclass
class Link:
    """A wait that another thread ended, and that thread's own earlier wait: how long the
    first thread waited while its waker was itself off CPU in the second row (so that a
    wait can be followed to what its waker waited for, and on, to the root)."""

    waiter_row: int  # index into Model.rows: a wait ended by a thread
    waker_row: int  # index into Model.rows: a wait of that thread, overlapping it
    overlap_us: int  # of the waiter's blocked time, while the waker was off CPU in its row
    count: int  # waits of the waiter that overlapped one of the waker's


@dataclass(frozen=True, order=True)
class TimedWait:
    """One of the longest waits (TIMELINE_WAITS in core/src/engine/events.rs), with its times
    (perf.data's clock, ns, as far as the window holds it): the model keeps sums, and times
    only of these."""

    tid: int
    row: int  # index into Model.rows: its stack, state and waker
    since_ns: int  # off CPU
    woken_ns: int | None  # its wakeup (None: not woken, preempted, or not in the window)
    back_ns: int  # on CPU again (or the end of the window)
    ran_ns: int | None  # when the thread had come on CPU before it left (None: not in the window)


@dataclass
class Thread:
    tid: int
    pid: int
    comm: str
    oncpu_us: int = 0
    offcpu_us: int = 0
    blocked_us: int = 0
    runqueue_us: int = 0
    created_ns: int | None = None  # inside the window
    exited_ns: int | None = None
    # Of oncpu_us, the time perf's own handling of its switches took, as the kernel charges
    # it: from the switch to the thread (its sched_switch) to perf's record of it being in.
    observer_us: int = 0


@dataclass
class Model:
    capture: CaptureInfo
    window_start_ns: int
    window_end_ns: int
    stacks: list[Stack]
    wakers: list[Waker]
    rows: list[Row]
    threads: dict[int, Thread]
    runqueue_delays_us: Counter[int]  # delay from a wakeup to running -> wakeups that waited that long
    links: list[Link] = field(default_factory=list)
    clipped_intervals: int = 0  # cut by the start or end of the window
    unseen_wakeups: int = 0  # blocked intervals whose wakeup was not recorded (a waker outside the target)
    unreadable_events: int = 0  # events of perf.data its reader could not decode, left out
    # Switch-ins from a thread outside the recording (idle, another process), whose start
    # is perf's record of it less the capture's measured switch cost (the others start at
    # the recorded switch)
    estimated_switch_ins: int = 0
    # Switches of which perf lost one record (the sched_switch or the record of being in),
    # placed by the other
    half_recorded_switches: int = 0
    perf_data: dict = field(default_factory=dict)  # the perf.data it was built from (its kind's identity: offcpu.kinds)
    reader: str = ""  # which read perf.data: "native" or "perf-script"
    reader_note: str = ""  # why that one
    binary_notes: list[str] = field(default_factory=list)  # what the reader says of the mapped files (Symbolizer.notes)
    # Threads that never ran in the window, whose stacks the snapshot at its end gave (asleep.py),
    # and of those waiting for a mutex, who glibc says holds it: {waiter tid: owner tid}; and of
    # Java threads whose last dump read while recording said they wait to lock a monitor, its owner
    asleep_threads: int = 0
    mutex_owners: dict[int, int] = field(default_factory=dict)
    timeline: list[TimedWait] = field(default_factory=list)  # the longest waits, by their start
    # What the recording lacks that a capture has, in sentences: a perf.data recorded by perf
    # alone (offcpu.reading.plain_perf_data.lacks), a capture whose snapshot of the threads
    # asleep failed (offcpu.model.asleep); empty for a whole capture
    lacks: list[str] = field(default_factory=list)
    # How many waits the window holds, and how many of them carry a stack: all of them, unless
    # the stacks were sampled (then the rows' times and counts are estimates, weighted)
    waits: int = 0
    stacked_waits: int = 0
    sampled: bool = False  # some wait weighed other than 1 (see sched_events.Events.weights)
    schema: str = SCHEMA

    @property
    def wall_us(self) -> int:
        return round((self.window_end_ns - self.window_start_ns) / 1000)

    @property
    def recorded_events(self) -> int:
        """What perf counted in perf.data (capture.json): samples and switch records."""
        return self.capture.samples + self.capture.switch_records

    @property
    def unreadable_share(self) -> float:
        """The share of the events perf recorded that could not be read (0-1)."""
        return self.unreadable_events / max(self.recorded_events, self.unreadable_events, 1)

    def to_json(self) -> dict:
        return {
            "schema": self.schema,
            "perf_data": self.perf_data,
            "capture": self.capture.to_json(),
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "stacks": [[list(stack.frames), stack.kernel_frames] for stack in self.stacks],
            "wakers": [asdict(waker) for waker in self.wakers],
            "rows": [[row.tid, row.stack, row.state, row.waker, row.offcpu_us, row.blocked_us, row.runqueue_us,
                      row.count, row.windows, row.variance] for row in self.rows],
            "threads": [asdict(thread) for thread in self.threads.values()],
            "links": [[link.waiter_row, link.waker_row, link.overlap_us, link.count] for link in self.links],
            "runqueue_delays_us": sorted(self.runqueue_delays_us.items()),
            "clipped_intervals": self.clipped_intervals,
            "unseen_wakeups": self.unseen_wakeups,
            "unreadable_events": self.unreadable_events,
            "estimated_switch_ins": self.estimated_switch_ins,
            "half_recorded_switches": self.half_recorded_switches,
            "reader": self.reader,
            "reader_note": self.reader_note,
            "binary_notes": self.binary_notes,
            "asleep_threads": self.asleep_threads,
            "mutex_owners": sorted(self.mutex_owners.items()),
            # field by field: dataclasses.astuple copies each value deeply, 0.1 s for 4,096 waits
            "timeline": [[wait.tid, wait.row, wait.since_ns, wait.woken_ns, wait.back_ns, wait.ran_ns]
                         for wait in self.timeline],
            "lacks": self.lacks,
            "waits": self.waits,
            "stacked_waits": self.stacked_waits,
            "sampled": self.sampled,
        }

    @classmethod
    def from_json(cls, data: dict) -> Model:
        """The model model.json holds. ValueError, KeyError or TypeError (mostly) when it
        is not one: from another version of offcpu, or damaged; offcpu.model.loading builds it again."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"model schema {schema!r} is not {SCHEMA!r}")
        if not isinstance(data["capture"], dict) or not isinstance(data["perf_data"], dict):
            raise TypeError("capture and perf_data are not objects")
        model = cls(
            capture=CaptureInfo.from_json(data["capture"]),
            window_start_ns=data["window_start_ns"],
            window_end_ns=data["window_end_ns"],
            stacks=[Stack(tuple(frames), kernel) for frames, kernel in data["stacks"]],
            wakers=[Waker(**waker) for waker in data["wakers"]],
            rows=[Row(*row) for row in data["rows"]],
            threads={thread["tid"]: Thread(**thread) for thread in data["threads"]},
            links=[Link(*link) for link in data["links"]],
            runqueue_delays_us=Counter({delay: count for delay, count in data["runqueue_delays_us"]}),
            clipped_intervals=data["clipped_intervals"],
            unseen_wakeups=data["unseen_wakeups"],
            unreadable_events=data["unreadable_events"],
            estimated_switch_ins=data["estimated_switch_ins"],
            half_recorded_switches=data["half_recorded_switches"],
            perf_data=data["perf_data"],
            reader=data["reader"],
            reader_note=data["reader_note"],
            binary_notes=data["binary_notes"],
            asleep_threads=data["asleep_threads"],
            mutex_owners={int(waiter): int(owner) for waiter, owner in data["mutex_owners"]},
            timeline=[TimedWait(*wait) for wait in data["timeline"]],
            lacks=data["lacks"],
            waits=data["waits"],
            stacked_waits=data["stacked_waits"],
            sampled=data["sampled"],
        )
        model.check()
        return model

    def check(self) -> None:
        """ValueError unless every tid and index in the rows and wakers names something and
        the fields reports read have their types, so that a damaged model.json is built
        again instead of failing a report later."""
        def index(value: object, length: int, what: str) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < length:
                raise ValueError(f"{what} {value!r} is not one of the model's {length}")

        self._check_counts()
        for tid, thread in self.threads.items():
            if not isinstance(thread.comm, str) or not _integers(
                    thread.pid, thread.oncpu_us, thread.offcpu_us, thread.blocked_us, thread.runqueue_us,
                    thread.observer_us) or not _integers(thread.created_ns, thread.exited_ns, or_none=True):
                raise ValueError(f"thread {tid} has no comm, pid or times")
        for stack in self.stacks:
            if not all(isinstance(frame, str) for frame in stack.frames) or not isinstance(stack.kernel_frames, int):
                raise ValueError(f"stack {stack!r} is not frames and a count of kernel frames")
        for waker in self.wakers:
            index(waker.stack, len(self.stacks), "waker stack")
            if not isinstance(waker.comm, str) or waker.kind not in WAKER_KINDS:
                raise ValueError(f"waker {waker!r} has no comm or kind")
        for row in self.rows:
            if row.tid not in self.threads:
                raise ValueError(f"row of thread {row.tid!r}, which is not among the model's threads")
            index(row.stack, len(self.stacks), "row stack")
            if row.waker is not None:
                index(row.waker, len(self.wakers), "row waker")
            if not isinstance(row.state, str) or not all(isinstance(value, int) for value in (
                    row.offcpu_us, row.blocked_us, row.runqueue_us, row.count, row.variance)):
                raise ValueError(f"row {row!r} has no state or times")
            if not isinstance(row.windows, list) or len(row.windows) not in (0, SUB_WINDOWS) or \
                    not all(isinstance(value, int) for value in row.windows):
                raise ValueError(f"row {row!r} has no times by sub-window")
        if not all(isinstance(sentence, str) for sentence in self.lacks):
            raise ValueError("lacks holds something other than sentences")
        if not isinstance(self.waits, int) or not isinstance(self.stacked_waits, int) or \
                not isinstance(self.sampled, bool):
            raise ValueError("the counts of waits and of those with a stack, or whether they were sampled, are missing")
        for wait in self.timeline:
            index(wait.row, len(self.rows), "timed wait's row")
            if self.rows[wait.row].tid != wait.tid or not _integers(wait.since_ns, wait.back_ns) or \
                    not _integers(wait.woken_ns, wait.ran_ns, or_none=True):
                raise ValueError(f"timed wait {wait!r} is not of its row's thread or has no times")
        for link in self.links:
            index(link.waiter_row, len(self.rows), "link waiter row")
            index(link.waker_row, len(self.rows), "link waker row")
            if not _integers(link.overlap_us, link.count):
                raise ValueError(f"link {link!r} has no overlap or count")

    def _check_counts(self) -> None:
        """ValueError unless the model's own counts and words have their types."""
        if not _integers(self.window_start_ns, self.window_end_ns, self.clipped_intervals, self.unseen_wakeups,
                         self.unreadable_events, self.estimated_switch_ins, self.half_recorded_switches,
                         self.asleep_threads, *self.runqueue_delays_us.keys(), *self.runqueue_delays_us.values()):
            raise ValueError("the model's window, counts or run-queue delays are not integers")
        if not all(isinstance(words, str) for words in (self.reader, self.reader_note, *self.binary_notes)):
            raise ValueError("the model's reader or notes on the mapped files are not words")
