"""A recording with the backend chosen for it (offcpu.recording.backends), in one lifecycle
whatever the backend: perf (offcpu.recording.session) and offcpu's BPF programs
(offcpu.recording.bpf_session) differ only in their Session's methods. Whatever happens, what
the session started is ended; once its files are complete, no signal throws the capture away."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from offcpu.capture import CaptureInfo
from offcpu.errors import OffcpuError
from offcpu.kinds import BPF, PERF
from offcpu.machine import system
from offcpu.recording import backends, targets
from offcpu.recording.bpf_session import BpfSession, Follower
from offcpu.recording.interrupts import Interrupts, signals_ignored
from offcpu.recording.request import RecordRequest
from offcpu.recording.session import PerfSession, discard, save_capture, save_kernel_files


class Session(Protocol):
    """A recording by one backend, made before the recording starts (what it needs checked)."""

    def record(self, interrupts: Interrupts) -> CaptureInfo:
        """From its start to its end, until the capture's files are complete: capture.json as known then."""

    def abandon(self) -> None:
        """No capture comes of it (an error, an interrupt): end what it started."""

    def ended(self, info: CaptureInfo) -> None:
        """Once its files are complete: how the command it ran ended."""

    def describe(self, info: CaptureInfo) -> None:
        """capture.json's counts, from what it recorded."""


# How a perf recording's perf.data is described in capture.json (its records' counts and losses,
# its switch cost, whether its stacks are cut short): reading perf.data is the next step's
# (offcpu.reading.describe.describe), which the caller hands over
DescribePerfData = Callable[[Path, CaptureInfo], None]


def record(request: RecordRequest, on_tick: Callable[[float], None], describe_perf_data: DescribePerfData,
           follower: Follower | None = None) -> CaptureInfo:
    """Record `request.target` into `request.output`; `on_tick(elapsed_s)` shows progress. When no
    capture comes of it, the files it wrote in `request.output` are removed. A `follower` follows a
    live recording (BPF's alone) instead of a capture written at its end."""
    namespace_problem = system.pid_namespace_problem()  # either backend sees the kernel's pids, not ours
    if namespace_problem:
        raise OffcpuError(namespace_problem)
    backend = backends.choose(BPF.name if follower else request.backend, perf_only_options(request))
    try:
        return _record_with(request, _session(request, backend, on_tick, describe_perf_data, follower), follower)
    except backends.BpfRefused as refused:
        if not backends.chosen_for_me(request.backend) or follower:
            raise
        backend = backends.Backend(PERF, f"the kernel refused offcpu's BPF programs ({refused.reason})")
        return _record_with(request, _session(request, backend, on_tick, describe_perf_data))


def _session(request: RecordRequest, backend: backends.Backend, on_tick: Callable[[float], None],
             describe_perf_data: DescribePerfData, follower: Follower | None = None) -> Session:
    """How `backend` records (BpfSession raises BpfRefused when the kernel refuses its programs:
    perf records instead when offcpu chose the backend)."""
    if backend.kind is PERF:
        return PerfSession(request, backend, on_tick, describe_perf_data)
    return BpfSession(request, backend, on_tick, follower)


def _record_with(request: RecordRequest, session: Session, follower: Follower | None = None) -> CaptureInfo:
    with Interrupts() as interrupts:  # before any sysctl is changed
        try:
            info = session.record(interrupts)
        except BaseException:
            interrupts.hold()
            session.abandon()
            discard(request.output)
            raise
        # Its files are complete: from here on the capture is kept, whatever arrives. SIG_IGN (not
        # only held) so that what runs now (perf, describing perf.data) inherits it.
        with signals_ignored():
            session.ended(info)
            session.describe(info)
            if follower is None:  # a live recording's records went to its follower, which keeps what it keeps
                info.process_titles |= targets.process_titles(info.target)  # as they end, those still there
                save_kernel_files(request.output)
                save_capture(request.output, info)
    return info


def perf_only_options(request: RecordRequest) -> list[str]:
    """The options given that only perf records with."""
    return [option for option, given in (
        (f"--call-graph {request.call_graph}", request.call_graph != "fp"),
        ("--mmap-pages", request.mmap_pages is not None),
        ("--enable-schedstats", request.enable_schedstats)) if given]
