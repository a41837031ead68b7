"""The limits a thread-per-request service runs into, read from /proc.

`Threads` and memory maps are compared with the kernel and resource limits
that make thread creation fail with EAGAIN (RLIMIT_NPROC, kernel.threads-max,
kernel.pid_max, vm.max_map_count).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from offcpu.errors import OffcpuError, more_in
from offcpu.machine.system import CAP_SYS_PTRACE, effective_capabilities, proc_text, read_int_sysctl

WARN_FROM = 0.8
PF_KTHREAD = 0x00200000  # in the flags of /proc/PID/stat: a kernel thread


@dataclass(frozen=True)
class Limit:
    name: str
    used: int
    limit: int | None  # None: unlimited
    what: str  # what `used` counts

    @property
    def share(self) -> float | None:
        return self.used / self.limit if self.limit else None

    @property
    def near(self) -> bool:
        return self.share is not None and self.share >= WARN_FROM


@dataclass(frozen=True)
class LimitsSnapshot:
    pid: int
    threads: int
    limits: tuple[Limit, ...]

    def highest_share(self) -> float:
        return max((limit.share for limit in self.limits if limit.share is not None), default=0.0)

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "threads": self.threads,
            "limits": [asdict(limit) | {"share": limit.share, "near": limit.near} for limit in self.limits],
        }


def process_exists(pid: int) -> bool:
    """A live task: an exited one its parent has not reaped yet (a zombie) is gone."""
    if pid <= 0:
        return False
    try:
        return _status_fields(pid)["State"][0] not in "ZX"
    except (OSError, KeyError, IndexError):
        return False


def _status_fields(pid: int) -> dict[str, str]:
    fields = {}
    for line in proc_text(f"/proc/{pid}/status").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def thread_group_of(tid: int) -> int:
    """The process (tgid) a thread belongs to."""
    return int(_status_fields(tid)["Tgid"])


def command_name(pid: int) -> str:
    """The process's name as its main thread set it (the kernel ends it with a newline)."""
    return proc_text(f"/proc/{pid}/comm").removesuffix("\n")


def _stat_fields(stat: str) -> tuple[str, list[str]]:
    """comm and the fields after it, from the text of /proc/PID/stat. comm is
    in parentheses and may itself hold spaces and parentheses."""
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()


def read_stat(path: str) -> tuple[str, list[str]]:
    """comm and the fields after it of a /proc/PID/stat (the first is the state, then the parent's pid)."""
    return _stat_fields(proc_text(path))


def is_kernel_thread(pid: int) -> bool:
    """Whether `pid` is a kernel thread (it has no binary and no user memory)."""
    try:
        _, fields = read_stat(f"/proc/{pid}/stat")
        return bool(int(fields[6]) & PF_KTHREAD)  # field 9 of stat: flags
    except (OSError, ValueError, IndexError):
        return False


def thread_states(pid: int, tids: list[int] | None = None) -> dict[str, list]:
    """{tid: [comm, state letter]} for the threads of process `pid` (or only
    `tids` of them), read now from /proc/PID/task/TID/stat. Keys are strings
    (as in JSON); a thread that exits while it is read is left out."""
    if tids is None:
        try:
            tids = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            return {}
    states: dict[str, list] = {}
    for tid in tids:
        try:
            comm, fields = read_stat(f"/proc/{pid}/task/{tid}/stat")
        except (OSError, ValueError):
            continue
        if fields:
            states[str(tid)] = [comm, fields[0]]
    return states


def _soft_rlimit_nproc(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max processes"):
            soft = line.split()[2]
            return None if soft == "unlimited" else int(soft)
    return None


def _threads_by_user() -> dict[str, int]:
    """All threads by the real uid that owns them: what RLIMIT_NPROC counts."""
    totals: dict[str, int] = defaultdict(int)
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = proc_text(status).split("\n")
        except OSError:
            continue  # the process exited while we looked
        entries = dict(line.split(":", 1) for line in fields if ":" in line)
        uid = entries.get("Uid", "").split()[:1]
        if uid:
            totals[uid[0]] += int(entries.get("Threads", "1"))
    return totals


def _threads_on_system() -> int:
    # The 4th field of /proc/loadavg is "runnable/total scheduling entities".
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])


def not_permitted(pid: int, path: str) -> str:
    """Why offcpu may not read `path` of process `pid` (the kernel's ptrace access check), and the fix."""
    if os.geteuid() != 0:
        return f"not permitted to read {path}: run offcpu as the process's user or as root"
    if not effective_capabilities() & (1 << CAP_SYS_PTRACE):
        return (f"not permitted to read {path}: offcpu runs as root but without CAP_SYS_PTRACE (a container that "
                "drops it?), which reading another process's memory maps takes; grant it"
                + more_in("recording-inside-a-container"))
    return (f"not permitted to read {path} even as root: a Linux security module denies it (Landlock does when "
            f"offcpu runs in a sandbox that process {pid} is outside of; SELinux or AppArmor can too), and perf needs "
            "the process's memory maps; record a process started inside that sandbox, or run offcpu outside it")


def snapshot(pid: int) -> LimitsSnapshot:
    """The process's threads and maps against each limit, read now."""
    found = nearest([pid])
    if found is None:
        raise OffcpuError(f"no such process: {pid} (check the pid with 'ps -p {pid}')")
    return found


def nearest(pids: Iterable[int]) -> LimitsSnapshot | None:
    """Of the processes' snapshots read now, the one nearest its limits (several
    processes share the user's and the system's); None when all of them are gone."""
    system_threads = _threads_on_system()
    by_user: dict[str, int] | None = None  # counted once, when a process is found
    found: LimitsSnapshot | None = None
    for pid in pids:
        try:
            status = _status_fields(pid)
            maps = sum(1 for _ in Path(f"/proc/{pid}/maps").open())
            nproc = _soft_rlimit_nproc(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited (before its files were opened, or while they were read)
        except PermissionError:
            raise OffcpuError(not_permitted(pid, f"/proc/{pid}/maps")) from None
        by_user = by_user if by_user is not None else _threads_by_user()
        uid = status["Uid"].split()[0]
        nproc_what = "threads of the process's user" + (" (not enforced for root)" if uid == "0" else "")
        limits = (
            Limit("RLIMIT_NPROC", by_user.get(uid, 0), nproc, nproc_what),
            Limit("kernel.threads-max", system_threads, read_int_sysctl("kernel.threads-max"),
                  "threads on the system"),
            Limit("kernel.pid_max", system_threads, read_int_sysctl("kernel.pid_max"), "pids in use on the system"),
            Limit("vm.max_map_count", maps, read_int_sysctl("vm.max_map_count"), "memory maps of the process"),
        )
        now = LimitsSnapshot(pid=pid, threads=int(status["Threads"]), limits=limits)
        if found is None or now.highest_share() > found.highest_share():
            found = now
    return found
