"""A recording with the backend chosen for it (offcpu.recording.backends): perf
(offcpu.recording.session) or offcpu's BPF programs (offcpu.recording.bpf_session)."""

from __future__ import annotations

from collections.abc import Callable

from offcpu.capture import CaptureInfo
from offcpu.errors import OffcpuError
from offcpu.kinds import BPF, PERF, CaptureKind
from offcpu.machine import system
from offcpu.recording import backends
from offcpu.recording.bpf_session import record_bpf
from offcpu.recording.request import RecordRequest
from offcpu.recording.session import record as record_perf

# How each kind records (BpfRefused: the kernel refused BPF's programs, and perf records instead when
# the backend was not asked for)
RECORD_WITH: dict[CaptureKind, Callable[[RecordRequest, backends.Backend, Callable[[float], None]], CaptureInfo]] = {
    PERF: record_perf, BPF: record_bpf}


def record(request: RecordRequest, on_tick: Callable[[float], None]) -> CaptureInfo:
    """Record `request.target` into `request.output`; `on_tick(elapsed_s)` shows progress."""
    namespace_problem = system.pid_namespace_problem()  # either backend sees the kernel's pids, not ours
    if namespace_problem:
        raise OffcpuError(namespace_problem)
    backend = backends.choose(request.backend, perf_only_options(request))
    try:
        return RECORD_WITH[backend.kind](request, backend, on_tick)
    except backends.BpfRefused as refused:
        if not backends.chosen_for_me(request.backend):
            raise
        return record_perf(request, backends.Backend(PERF, f"the kernel refused offcpu's BPF programs "
                                                           f"({refused.reason})"), on_tick)


def perf_only_options(request: RecordRequest) -> list[str]:
    """The options given that only perf records with."""
    return [option for option, given in (
        (f"--call-graph {request.call_graph}", request.call_graph != "fp"),
        ("--mmap-pages", request.mmap_pages is not None),
        ("--enable-schedstats", request.enable_schedstats)) if given]
