"""A live recording from start to end, as `offcpu top` and `offcpu record --keep` run it: the
target recorded as `offcpu record` records it (offcpu.recording.recorder, with a Follower),
into a private directory of its own that goes with it (or, when SIGKILL left no chance, with the
next live recording's start); SIGUSR1 writes the flight record."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from offcpu.capture import CaptureInfo, Target
from offcpu.live.follow import Follow, Frame, LiveOptions
from offcpu.reading.describe import describe
from offcpu.recording.recorder import record
from offcpu.recording.request import RecordRequest

LIVE_PREFIX = "offcpu-live-"
# offcpu-live-PID-RANDOM: the live directory of the offcpu process PID
LIVE_DIRECTORY = re.compile(rf"^{LIVE_PREFIX}(\d+)-[A-Za-z0-9_]+$")


def run_live(target: Target, options: LiveOptions, stack_budget: int, on_frame: Callable[[Frame], None] | None,
             on_tick: Callable[[Follow], None] | None = None,
             on_flight: Callable[[Path], None] | None = None) -> tuple[CaptureInfo, Follow]:
    """Follow `target` until it ends (or the command does), or SIGINT, SIGTERM, SIGHUP;
    `on_frame` gets each interval's frame (None: no view), `on_tick` the follower at each tick (a
    screen's keys), `on_flight` each flight record written."""
    with _live_directory() as directory:
        follow = Follow(directory, options, on_frame, on_flight)
        request = RecordRequest(target, directory, duration_s=math.inf, max_size="0B", call_graph="fp",
                                mmap_pages=None, enable_schedstats=False, snapshot=False, backend="bpf",
                                stack_budget=stack_budget)
        with _flight_on_sigusr1(follow):
            info = record(request, on_tick=lambda elapsed: on_tick(follow) if on_tick else None,
                          describe_perf_data=describe, follower=follow)
    return info, follow


@contextmanager
def _live_directory() -> Iterator[Path]:
    """A directory only offcpu can read (the processes' maps, the stack table), removed at the end;
    those that killed live recordings left are removed first."""
    remove_stale(Path(tempfile.gettempdir()))
    directory = Path(tempfile.mkdtemp(prefix=f"{LIVE_PREFIX}{os.getpid()}-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def remove_stale(temporary: Path) -> list[Path]:
    """Remove the live directories in `temporary` of offcpu processes that are gone (killed, as
    SIGKILL kills, before they could remove their own): only directories (not links), owned by
    this user and private as offcpu makes them. Returns those removed."""
    removed = []
    for path in temporary.glob(f"{LIVE_PREFIX}*"):
        named = LIVE_DIRECTORY.match(path.name)
        with contextlib.suppress(OSError):
            status = path.lstat()
            if not named or not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid() \
                    or stat.S_IMODE(status.st_mode) != 0o700 or Path(f"/proc/{named[1]}").exists():
                continue
            shutil.rmtree(path)
            removed.append(path)
    return removed


@contextmanager
def _flight_on_sigusr1(follow: Follow) -> Iterator[None]:
    def asked(signum: int, frame: object) -> None:
        follow.flight_asked = follow.flight_asked or "SIGUSR1"

    previous = signal.signal(signal.SIGUSR1, asked)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)
