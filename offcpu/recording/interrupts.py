"""SIGINT, SIGTERM and SIGHUP while offcpu records: the first ends the recording, and
nothing cuts short what must follow (ending perf, putting sysctls back, finishing
the capture)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: end the recording as Ctrl-C would."""

    def __init__(self, signal_name: str = "SIGTERM") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class Interrupts:
    """SIGINT, SIGTERM and SIGHUP while offcpu records. The first one raises
    (KeyboardInterrupt; Terminated for SIGTERM and SIGHUP): it ends the
    recording, or stops offcpu before perf records. Any later one, and any
    after hold(), is ignored, so that ending perf, putting sysctls back and
    finishing the capture are never cut short. SIGTERM or SIGHUP ignored when
    offcpu started (nohup) stays ignored; SIGINT ends a recording however
    offcpu was started, as it ends perf: a shell starts a background job
    (`offcpu record ... &`) with SIGINT ignored, and a script that later
    sends it one means it."""

    def __init__(self) -> None:
        self.raising = True
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def __enter__(self) -> Interrupts:
        for sig in INTERRUPTS:
            if sig == signal.SIGINT or signal.getsignal(sig) != signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def hold(self) -> None:
        """From now on, ignore them."""
        self.raising = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.raising:
            return
        self.raising = False
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signal.Signals(signum).name)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Work that no signal may cut short; processes started meanwhile inherit SIG_IGN."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
