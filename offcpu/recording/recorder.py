"""A recording with the backend chosen for it (offcpu.recording.backends): perf
(offcpu.recording.session) or offcpu's BPF programs (offcpu.recording.bpf_session)."""

from __future__ import annotations

from collections.abc import Callable

from offcpu.capture import CaptureInfo
from offcpu.errors import OffcpuError
from offcpu.machine import system
from offcpu.recording import backends
from offcpu.recording.bpf_session import Follower, record_bpf
from offcpu.recording.request import RecordRequest
from offcpu.recording.session import record as record_perf


def record(request: RecordRequest, on_tick: Callable[[float], None], follower: Follower | None = None) -> CaptureInfo:
    """Record `request.target` into `request.output`; `on_tick(elapsed_s)` shows progress. A
    `follower` follows a live recording (BPF's alone) instead of a capture written at its end."""
    namespace_problem = system.pid_namespace_problem()  # either backend sees the kernel's pids, not ours
    if namespace_problem:
        raise OffcpuError(namespace_problem)
    backend = backends.choose("bpf" if follower else request.backend, perf_only_options(request))
    if backend.name == "bpf":
        try:
            return record_bpf(request, backend, on_tick, follower)
        except backends.BpfRefused as refused:
            if request.backend != "auto" or follower:
                raise
            backend = backends.Backend("perf", f"the kernel refused offcpu's BPF programs ({refused.reason})")
    return record_perf(request, backend, on_tick)


def perf_only_options(request: RecordRequest) -> list[str]:
    """The options given that only perf records with."""
    return [option for option, given in (
        (f"--call-graph {request.call_graph}", request.call_graph != "fp"),
        ("--mmap-pages", request.mmap_pages is not None),
        ("--enable-schedstats", request.enable_schedstats)) if given]
