"""The kernel.sched_schedstats sysctl, turned on for a recording when asked
(--enable-schedstats) and put back on every way out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.machine import system
from offcpu.recording.interrupts import signals_ignored

SYSCTL = Path("/proc/sys/kernel/sched_schedstats")


@contextmanager
def schedstats_enabled(wanted: bool) -> Iterator[str]:
    """Yield the schedstats state while recording; turn it on for the
    recording only when asked, and put it back on every way out."""
    state = system.schedstats_state()
    if not wanted or state != "off":
        yield state
        return
    try:
        try:
            SYSCTL.write_text("1")
        except OSError as error:
            raise OffcpuError(f"cannot enable kernel.sched_schedstats ({error.strerror}); run as root") from None
        yield "on"
    finally:  # also when writing "1" failed part way: "0" is what it was
        with signals_ignored():
            _schedstats_off()


def _schedstats_off() -> None:
    try:
        SYSCTL.write_text("0")
    except OSError as error:
        if system.schedstats_state() == "on":
            raise OffcpuError(f"could not turn kernel.sched_schedstats back off ({error.strerror}); "
                              "run 'sysctl kernel.sched_schedstats=0'") from None
