"""What this machine offers for recording: perf, tracefs, tracepoints, sysctls.

Every probe reads the machine directly (files under /proc and /sys, `perf
--version`); nothing here changes it except `ensure_tracefs`, which mounts
tracefs the way perf itself would.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import struct
import subprocess
from pathlib import Path

from offcpu.errors import OffcpuError, more_in
from offcpu.workers import child_environment, find_program

TRACEFS_MOUNT_POINTS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
TRACEFS_ANCHOR = "tracefs-is-not-mounted-or-not-readable"  # in docs/troubleshooting.md
CAP_IPC_LOCK = 14
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
DEFAULT_MAX_PAGE_ORDER = 10  # the kernel's default on x86 and arm64, when /proc/buddyinfo cannot say

PERF_INSTALL_HINT = (
    "install perf: Debian 'apt-get install linux-perf', "
    "Ubuntu 'apt-get install linux-tools-$(uname -r)', Fedora 'dnf install perf'"
)


def find_perf() -> str | None:
    return find_program("perf")


def require_perf() -> str:
    perf = find_perf()
    if perf is None:
        raise OffcpuError(f"perf was not found on PATH; {PERF_INSTALL_HINT}")
    return perf


def perf_version(perf: str) -> str | None:
    """'6.1.187' from 'perf version 6.1.187', or None when perf cannot run
    (Ubuntu's wrapper fails this way when the kernel's tools are missing)."""
    try:
        done = subprocess.run([perf, "--version"], capture_output=True, text=True, timeout=10,
                              env=child_environment())
    except OSError:
        return None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 3:
        return None
    return words[2]


def proc_text(path: str | Path) -> str:
    """A /proc file's text. The names in it (a thread's, a file's) may be any bytes: one that
    is not UTF-8 (a name cut mid-character) is read with U+FFFD in its place."""
    return Path(path).read_bytes().decode(errors="replace")


def kernel_release() -> str:
    return platform.release()


BUILD_ID_MMAP_SINCE = (5, 12)  # perf's --buildid-mmap, and the kernel's build ids in MMAP2 records


def records_build_ids_in_mmaps(perf_version: str) -> bool:
    """Whether this perf and this kernel can put each mapped file's build id in its MMAP2 record."""
    return all(_major_minor(release) >= BUILD_ID_MMAP_SINCE for release in (perf_version, kernel_release()))


def _major_minor(release: str) -> tuple[int, int]:
    numbers = re.match(r"(\d+)\.(\d+)", release)
    return (int(numbers[1]), int(numbers[2])) if numbers else (0, 0)


def read_sysctl(name: str) -> str | None:
    """The value of a sysctl such as 'kernel.pid_max', or None when the kernel has none."""
    path = Path("/proc/sys") / name.replace(".", "/")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_int_sysctl(name: str) -> int | None:
    value = read_sysctl(name)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def tracefs_mount() -> Path | None:
    """Where tracefs is mounted, if it is."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "tracefs":
            return Path(fields[1])
    return None


def ensure_tracefs() -> Path:
    """tracefs's mount point, mounting it first when root and it is not mounted."""
    mounted = tracefs_mount()
    if mounted is not None:
        unreadable = tracefs_unreadable(mounted)
        if unreadable:
            raise OffcpuError(unreadable)
        return mounted
    target = TRACEFS_MOUNT_POINTS[0]
    how = f"mount -t tracefs nodev {target}"
    if os.geteuid() != 0:
        raise OffcpuError(f"tracefs is not mounted and only root can mount it; run '{how}' as root"
                          + more_in(TRACEFS_ANCHOR))
    done = subprocess.run(how.split(), capture_output=True, text=True, env=child_environment())
    if done.returncode != 0:
        raise OffcpuError(f"tracefs is not mounted and '{how}' failed: {done.stderr.strip()}" + more_in(TRACEFS_ANCHOR))
    return target


def tracefs_unreadable(tracefs: Path) -> str | None:
    """Why this user cannot list tracefs's tracepoints (perf reads their ids there), or None."""
    if os.access(tracefs / "events", os.R_OK | os.X_OK):
        return None
    return (f"{tracefs} is not readable by this user, and perf reads the tracepoints' ids there: run offcpu as "
            f"root (sudo), or make it readable with 'chmod a+rx {tracefs}' (or mount tracefs with mode=755)"
            + more_in(TRACEFS_ANCHOR))


def tracepoint_exists(tracefs: Path | None, event: str) -> bool:
    """Whether a tracepoint like 'sched:sched_switch' exists on this kernel (False when tracefs cannot be read)."""
    if tracefs is None:
        return False
    system, name = event.split(":")
    try:
        return (tracefs / "events" / system / name).is_dir()
    except PermissionError:
        return False


def schedstats_state() -> str:
    """'absent' (kernel built without CONFIG_SCHEDSTATS), 'off' or 'on'."""
    value = read_sysctl("kernel.sched_schedstats")
    if value is None:
        return "absent"
    return "on" if value == "1" else "off"


def effective_capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def may_trace() -> tuple[bool, str]:
    """Whether this user may record scheduler tracepoints, and why."""
    # The kernel asks for the capabilities, not for uid 0: root in a container that drops them is refused.
    paranoid = read_int_sysctl("kernel.perf_event_paranoid")
    if effective_capabilities() & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN):
        return True, "running as root" if os.geteuid() == 0 else "has CAP_PERFMON or CAP_SYS_ADMIN"
    if paranoid is not None and paranoid <= -1:
        return True, f"kernel.perf_event_paranoid={paranoid}"
    return False, permission_hint(paranoid)


def permission_hint(paranoid: int | None) -> str:
    if os.geteuid() == 0 and not effective_capabilities() & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN):
        return (f"offcpu runs as root but without CAP_PERFMON or CAP_SYS_ADMIN (a container that drops them?), "
                f"and kernel.perf_event_paranoid is {paranoid}, not -1: grant CAP_PERFMON (docker run "
                "--cap-add PERFMON), or set kernel.perf_event_paranoid=-1 on the host"
                + more_in("recording-inside-a-container"))
    return (
        f"tracepoint recording needs root, CAP_PERFMON, or kernel.perf_event_paranoid=-1 "
        f"(it is {paranoid}): run offcpu with sudo, or 'sysctl kernel.perf_event_paranoid=-1'"
        + more_in("recording-is-not-permitted")
    )


def mmap_pages_limit() -> tuple[int, str]:
    """The most ring buffer pages a CPU (perf's --mmap-pages, a power of two) perf can
    map here, and why no more."""
    page = os.sysconf("SC_PAGE_SIZE")
    # The kernel keeps a buffer's page pointers in one allocation of at most 2^MAX_PAGE_ORDER
    # pages (rb_alloc), with its header: 262144 pages (1 GiB) with 4 KiB pages and order 10.
    # perf 6.1 takes more without complaint, from 1048576 on, and then records nothing.
    most = _power_of_two_at_most((page << _max_page_order()) // struct.calcsize("P") - 1)
    why = f"the kernel maps at most that many {page >> 10} KiB pages ({most * page >> 20:,} MiB) for each CPU"
    if not _locked_memory_is_bounded():
        return most, why
    cpus = os.cpu_count() or 1
    mlock_kb = read_int_sysctl("kernel.perf_event_mlock_kb") or 0
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    if memlock == resource.RLIM_INFINITY:
        return most, why
    # Every CPU's buffer is one page more (its header); all of them together may lock
    # perf_event_mlock_kb for each CPU, and RLIMIT_MEMLOCK beyond that.
    per_cpu = (cpus * mlock_kb * 1024 + memlock) // page // cpus - 1
    allowed = _power_of_two_at_most(max(per_cpu, 1))
    if allowed >= most:
        return most, why
    return allowed, (f"this user may lock no more on {cpus} CPUs (kernel.perf_event_mlock_kb is {mlock_kb} KiB, "
                     f"ulimit -l {memlock >> 10} KiB): raise kernel.perf_event_mlock_kb, or run offcpu as root")


def _power_of_two_at_most(number: int) -> int:
    return 1 << (number.bit_length() - 1)


def _max_page_order() -> int:
    """The kernel's MAX_PAGE_ORDER: /proc/buddyinfo has a column for each order from 0 to it."""
    try:
        fields = Path("/proc/buddyinfo").read_text().split("\n", 1)[0].split()
    except OSError:
        return DEFAULT_MAX_PAGE_ORDER
    return len(fields) - 5 if len(fields) > 5 else DEFAULT_MAX_PAGE_ORDER  # "Node 0, zone NAME" come first


def _locked_memory_is_bounded() -> bool:
    """Whether perf's buffers count against kernel.perf_event_mlock_kb: not with
    CAP_IPC_LOCK (root has it), nor with kernel.perf_event_paranoid at -1."""
    paranoid = read_int_sysctl("kernel.perf_event_paranoid")
    return not effective_capabilities() & (1 << CAP_IPC_LOCK) and (paranoid is None or paranoid > -1)


INIT_PID_NAMESPACE = "pid:[4026531836]"  # the kernel's first PID namespace (PROC_PID_INIT_INO)


def pid_namespace_problem() -> str | None:
    """Why recording from this PID namespace would count every thread twice, or None (the
    host's namespace). The scheduler's tracepoints name threads by the host's pids, perf's
    records by the namespace's."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    if namespace == INIT_PID_NAMESPACE:
        return None
    return ("offcpu runs in a PID namespace of its own (a container's?), where the scheduler's tracepoints "
            "name threads by the host's pids and perf by this namespace's, so every thread would be counted "
            "twice: record from the host, with --cgroup or --unit for the container"
            + more_in("recording-inside-a-container"))


def kernel_symbols_readable() -> tuple[bool, str]:
    """Whether kernel frames will have names (kernel.kptr_restrict and who we are)."""
    restrict = read_int_sysctl("kernel.kptr_restrict")
    if restrict == 2:
        return False, "kernel.kptr_restrict=2 hides kernel addresses from everyone"
    if restrict == 1 and os.geteuid() != 0:
        return False, "kernel.kptr_restrict=1 hides kernel addresses from non-root users"
    return True, f"kernel.kptr_restrict={restrict}"


def btf_present() -> bool:
    return Path("/sys/kernel/btf/vmlinux").exists()


def find_bpftrace() -> str | None:
    return find_program("bpftrace")
