"""Can offcpu record here? Each check looks at one thing the recording needs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from offcpu.errors import OffcpuError, more_in
from offcpu.machine import system
from offcpu.machine.framepointers import check_binary, libc_of
from offcpu.machine.limits import LimitsSnapshot, is_kernel_thread, not_permitted
from offcpu.recording import events
from offcpu.recording.snapshot import UNWINDER
from offcpu.renderers.flamegraph_tool import HOW_TO_GET_ONE, find_renderer
from offcpu.workers import find_program

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARN, FAIL (recording cannot work) or INFO
    detail: str


def machine_checks() -> list[Check]:
    perf = system.find_perf()
    version = system.perf_version(perf) if perf else None
    checks = [_perf_check(perf, version)]
    allowed, why = system.may_trace()
    checks.append(Check("permissions", OK if allowed else FAIL, why))
    namespace_problem = system.pid_namespace_problem()
    checks.append(Check("PID namespace", FAIL if namespace_problem else OK, namespace_problem or "the host's"))
    tracefs = _tracefs_check(checks)
    checks += _tracepoint_checks(tracefs)
    checks.append(_schedstats_check())
    readable, why = system.kernel_symbols_readable()
    unnamed = "; kernel frames will be [unknown]" + more_in("kernel-frames-are-unknown")
    checks.append(Check("kernel symbols", OK if readable else WARN, why + ("" if readable else unnamed)))
    checks.append(Check("BTF", INFO,
                        "/sys/kernel/btf/vmlinux present" if system.btf_present() else "no /sys/kernel/btf/vmlinux"))
    bpftrace = system.find_bpftrace()
    checks.append(Check("bpftrace", INFO, bpftrace or "not installed ('apt-get install bpftrace')"))
    checks.append(_renderer_check())
    checks.append(_unwinder_check())
    return checks


def _unwinder_check() -> Check:
    """What reads the user stacks of threads that do not run while recording (offcpu.recording.snapshot)."""
    found = find_program(UNWINDER)
    if found is None:
        return Check("stacks of threads that never run", WARN,
                     f"{UNWINDER} not found ('apt-get install elfutils'): their kernel stacks only")
    return Check("stacks of threads that never run", OK, f"{found}, at the end of each recording")


def _renderer_check() -> Check:
    try:
        renderer = find_renderer()
    except OffcpuError as error:  # $FLAMEGRAPH_DIR names none
        return Check("flame graph renderer", WARN, error.format_message())
    if renderer is None:
        return Check("flame graph renderer", WARN, f"none found; {HOW_TO_GET_ONE}")
    return Check("flame graph renderer", OK, f"{' '.join(renderer.command)} ({renderer.found_by})")


def _perf_check(perf: str | None, version: str | None) -> Check:
    if perf is None:
        return Check("perf", FAIL, f"not found on PATH; {system.PERF_INSTALL_HINT}")
    if version is None:
        return Check("perf", FAIL, f"{perf} does not run; {system.PERF_INSTALL_HINT}")
    return Check("perf", OK, f"{perf}, version {version}")


def _tracefs_check(checks: list[Check]) -> Path | None:
    mounted = system.tracefs_mount()
    unreadable = system.tracefs_unreadable(mounted) if mounted is not None else None
    if unreadable:
        checks.append(Check("tracefs", FAIL, unreadable))
        return None
    if mounted is not None:
        checks.append(Check("tracefs", OK, f"mounted at {mounted}"))
    elif os.geteuid() == 0:
        mounted = system.ensure_tracefs()
        checks.append(Check("tracefs", OK, f"was not mounted; offcpu mounted it at {mounted}"))
    else:
        checks.append(Check("tracefs", FAIL, "not mounted; as root run 'mount -t tracefs nodev /sys/kernel/tracing'"))
    return mounted


def _tracepoint_checks(tracefs: Path | None) -> list[Check]:
    needed = {events.SWITCH_TRACEPOINT: FAIL}
    optional = (*events.WAKING_TRACEPOINTS, *events.FORK_TRACEPOINTS, events.EXIT_TRACEPOINT)
    if tracefs is None:
        return [Check(name, INFO, "cannot tell: tracefs is not mounted or not readable (see tracefs)")
                for name in (events.SWITCH_TRACEPOINT, *optional, *events.SCHEDSTATS_TRACEPOINTS)]
    result = []
    for name in (events.SWITCH_TRACEPOINT, *optional, *events.SCHEDSTATS_TRACEPOINTS):
        present = system.tracepoint_exists(tracefs, name)
        missing = needed.get(name, WARN if name in optional else INFO)
        result.append(Check(name, OK if present else missing, "present" if present else "absent"))
    return result


def _schedstats_check() -> Check:
    state = system.schedstats_state()
    detail = {
        "absent": "kernel built without CONFIG_SCHEDSTATS: off-CPU time comes from sched_switch pairs",
        "off": "kernel.sched_schedstats=0: record --enable-schedstats turns it on while recording",
        "on": "kernel.sched_schedstats=1",
    }[state]
    return Check("schedstats", INFO, detail)


def frame_pointer_checks(pid: int | None) -> list[Check]:
    """Whether the target's binary (with --pid) and its libc keep frame pointers."""
    if pid is not None and is_kernel_thread(pid):
        return [Check("frame pointers: target binary", INFO,
                      f"pid {pid} is a kernel thread: it has no binary, and its stacks are all kernel frames")]
    binaries = []
    checks = []
    if pid is not None:
        try:
            binaries.append(("target binary", os.readlink(f"/proc/{pid}/exe")))
        except OSError as error:
            why = (not_permitted(pid, f"/proc/{pid}/exe") if isinstance(error, PermissionError)
                   else f"cannot read /proc/{pid}/exe ({error.strerror})")
            checks.append(Check("frame pointers: target binary", WARN, why))
    try:
        libc = libc_of(pid if pid is not None else "self")
    except OSError:
        libc = None  # the process is gone or not ours: said above
    if libc:
        binaries.append(("libc" if pid is not None else "system libc", libc))
    for label, path in binaries:
        result = check_binary(path)
        status = {"kept": OK, "omitted": WARN, "unknown": INFO}[result.verdict]
        advice = "; user stacks stop here with --call-graph fp, use dwarf" if result.verdict == "omitted" else ""
        checks.append(Check(f"frame pointers: {label}", status, f"{path}: {result.verdict} ({result.reason}){advice}"))
    return checks


def limit_checks(snapshot: LimitsSnapshot) -> list[Check]:
    checks = [Check("threads of the process", INFO, str(snapshot.threads))]
    for limit in snapshot.limits:
        if limit.limit is None:
            checks.append(Check(limit.name, OK, f"{limit.used:,} {limit.what}; no limit"))
            continue
        share = f"{limit.used:,} of {limit.limit:,} {limit.what} ({limit.share:.0%})"
        checks.append(Check(limit.name, WARN if limit.near else OK, share + (": near the limit" if limit.near else "")))
    return checks


def can_record(checks: list[Check]) -> bool:
    return all(check.status != FAIL for check in checks)
