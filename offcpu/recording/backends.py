"""Which recording backend a recording uses, and why: BPF (every wait timed in the
kernel, stacks under a cost budget) where the kernel, its BTF and the permissions
allow it, perf otherwise, or whichever was asked for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offcpu.errors import OffcpuError
from offcpu.machine import system

BACKENDS = ("auto", "bpf", "perf")
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
# sched_switch passes prev_state to its probes since Linux 5.18; the BPF program reads it there.
BPF_KERNEL = (5, 18)
CAP_BPF = 39


@dataclass(frozen=True)
class Backend:
    name: str  # "bpf" or "perf"
    why: str  # in words, for the summary, the report header and doctor


def choose(asked: str, perf_only_options: list[str]) -> Backend:
    """The backend for `asked` ("auto", "bpf", "perf"); `perf_only_options` are the options
    given that only perf records (--call-graph dwarf, ...). An asked-for BPF that cannot
    work here is an error that says why."""
    if asked == "perf":
        return Backend("perf", "asked for (--backend perf)")
    if perf_only_options:
        listed = ", ".join(perf_only_options)
        one = len(perf_only_options) == 1
        if asked == "bpf":
            raise OffcpuError(f"{listed} {'needs' if one else 'need'} perf: leave out --backend bpf, or leave "
                              f"{'it' if one else 'them'} out")
        return Backend("perf", f"{listed} {'needs' if one else 'need'} perf")
    problem = bpf_problem()
    if problem is None:
        allowed = "the default where the kernel allows it, as it does here: every switch timed in the kernel, at a " \
                  "fraction of perf's cost"
        return Backend("bpf", "asked for (--backend bpf)" if asked == "bpf" else allowed)
    if asked == "bpf":
        raise OffcpuError(f"cannot record with BPF here: {problem}; --backend perf records with perf instead")
    return Backend("perf", f"BPF cannot record here ({problem})")


class BpfRefused(OffcpuError):
    """The kernel refused the BPF programs when they were loaded or attached: `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the kernel refused offcpu's BPF programs ({reason}); --backend perf records with perf "
                         "instead")
        self.reason = reason


def bpf_problem() -> str | None:
    """Why BPF cannot record here, or None when it can (as far as can be told before loading)."""
    release = system.kernel_release()
    version = tuple(int(part) for part in release.split("-")[0].split(".")[:2] if part.isdecimal())
    if len(version) == 2 and version < BPF_KERNEL:
        return f"Linux {release} is older than {BPF_KERNEL[0]}.{BPF_KERNEL[1]}"
    if not KERNEL_BTF.exists():
        return f"the kernel has no BTF ({KERNEL_BTF}: CONFIG_DEBUG_INFO_BTF)"
    capabilities = system.effective_capabilities()
    if not capabilities & (1 << system.CAP_SYS_ADMIN | 1 << CAP_BPF):
        return "loading BPF programs needs root, or CAP_BPF and CAP_PERFMON"
    try:
        from offcpu import _core  # noqa: F401  (the compiled core: absent from a broken install)
    except ImportError as error:
        return f"offcpu's compiled core does not load ({error}): reinstall offcpu"
    return None
