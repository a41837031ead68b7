"""What a recording covers, resolved from what the user named: processes (by pid, as a
tree, by name or by executable, read from /proc), a thread, a cgroup v2 (a systemd unit's,
asked of systemd), every CPU, or a command; and, while it records, which processes that
is and whether it is over.

perf records a list of processes (`--pid`) from the moment it starts, with the threads and
processes they start afterwards (its events are inherited); it cannot add a process to a
recording, so a process of the name or executable asked for that something else starts
meanwhile is not recorded: offcpu notices it and says so. A cgroup is recorded through
perf's cgroup filter on every CPU (`-a -G`), so whatever joins the cgroup is recorded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from offcpu.capture import Target
from offcpu.errors import OffcpuError
from offcpu.machine import limits
from offcpu.machine.cgroups import MOUNTS, V2, cgroup_mounts, process_cgroups
from offcpu.machine.system import proc_text
from offcpu.workers import child_environment, find_program

COMM_LENGTH = 15  # the kernel keeps this many bytes of a process's name
MAX_ARGUMENT_BYTES = 128 * 1024  # the kernel's longest single argument (MAX_ARG_STRLEN): perf's --pid list
SYSTEMD_RUNNING = Path("/run/systemd/system")  # as sd_booted() tells


@dataclass(frozen=True)
class Choice:
    """A target as given on the command line, not yet checked."""

    pids: tuple[int, ...] = ()  # --pid
    trees: tuple[int, ...] = ()  # --tree: these and their descendants
    comm: str | None = None  # --comm
    exe: str | None = None  # --exe
    tid: int | None = None
    cgroup: str | None = None
    unit: str | None = None
    all_cpus: bool = False
    command: tuple[str, ...] = ()  # alone, the target; with any of the others, run while they are recorded


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    comm: str


def resolve(choice: Choice) -> Target:
    """The target `choice` names, as it is now; OffcpuError saying what does not exist."""
    command = choice.command
    if choice.tid is not None:
        process = _process_of_thread(choice.tid)
        return Target("tid", limits.command_name(process), pid=process, tid=choice.tid, command=command,
                      pids=(process,))
    if choice.unit is not None:
        cgroup = unit_cgroup(choice.unit)
        return replace(_cgroup_target(cgroup, command), comm=choice.unit, unit=choice.unit)
    if choice.cgroup is not None:
        return _cgroup_target(choice.cgroup, command)
    if choice.all_cpus:
        return Target("all", "all", command=command)
    if choice.pids or choice.trees or choice.comm is not None or choice.exe is not None:
        return processes_target(Target("pid", "", command=command, by_pid=choice.pids, by_tree=choice.trees,
                                       by_comm=choice.comm or "", by_exe=choice.exe or ""))
    return Target("command", Path(command[0]).name, command=command)


def processes_target(asked: Target) -> Target:
    """A "pid" target with the processes its by_* fields name, read from /proc now."""
    given = _given(asked.by_pid)
    table = process_table()
    pids = [*given, *_trees(asked.by_tree, table)]
    if asked.by_comm:
        pids += _named(asked.by_comm, table)
    if asked.by_exe:
        pids += _running(asked.by_exe, table)
    unique = tuple(dict.fromkeys(pids))
    if len(",".join(map(str, unique))) >= MAX_ARGUMENT_BYTES:
        raise OffcpuError(f"{len(unique):,} processes are more than perf takes in one list (its argument may hold "
                          f"{MAX_ARGUMENT_BYTES // 1024} KiB): record the cgroup that holds them (--cgroup) instead")
    first = table.get(unique[0])  # gone already when it is not there: perf will say so
    return replace(asked, comm=first.comm if first else "?", pid=unique[0], pids=unique,
                   cgroup=cgroup_of_only(unique) if len(unique) > 1 else "")


def cgroup_of_only(pids: tuple[int, ...]) -> str:
    """The cgroup v2 that holds these processes and no other ("" when none does): perf 6.1
    spins once one of several processes it records by --pid exits, and does not when it
    records them through their cgroup (-a -G)."""
    paths = set()
    for pid in pids:
        try:
            text = proc_text(f"/proc/{pid}/cgroup")
        except OSError:
            return ""  # gone: perf will say so
        paths.add(process_cgroups(text).get(V2, "").strip("/") or None)
    path = paths.pop() if len(paths) == 1 else None
    if not path:  # several, none (no cgroup v2), or the root, which holds every process
        return ""
    try:
        mount = cgroup2_mount()
    except OffcpuError:
        return ""
    return path if set(cgroup_processes(mount / path)) == set(pids) else ""


def _given(pids: tuple[int, ...]) -> list[int]:
    for pid in pids:
        _check_process(pid, "--pid")
    return list(pids)


def _trees(roots: tuple[int, ...], table: dict[int, Process]) -> list[int]:
    found = []
    for root in roots:
        _check_process(root, "--tree")
        found += [root, *descendants(root, table)]
    return found


def _named(comm: str, table: dict[int, Process]) -> list[int]:
    if len(comm.encode()) > COMM_LENGTH:
        raise OffcpuError(f"no process can be named {comm!r}: the kernel keeps the first {COMM_LENGTH} bytes of a "
                          f"name; give --comm {comm.encode()[:COMM_LENGTH].decode(errors='ignore')!r}, or --exe PATH")
    found = [pid for pid, process in table.items() if process.comm == comm and pid != os.getpid()]
    if not found:
        raise OffcpuError(f"no process is named {comm!r} (names as 'ps -e' shows them); check it with "
                          f"'pgrep -l {comm}', or give --exe PATH or --pid PID")
    return found


def _running(exe: str, table: dict[int, Process]) -> list[int]:
    wanted = _file_identity(exe)
    found = [pid for pid in table if pid != os.getpid() and _executable_identity(pid) == wanted]
    if not found:
        raise OffcpuError(f"no process runs {exe}; check it with 'pidof {exe}', or give --comm NAME or --pid PID")
    return found


def _file_identity(exe: str) -> tuple[int, int]:
    """The file `exe` names (a path, or a program on PATH), as the kernel knows it."""
    path = exe if "/" in exe else shutil.which(exe)
    if path is None:
        raise OffcpuError(f"--exe {exe}: no such program on PATH; give the path of the executable")
    try:
        found = os.stat(path)
    except OSError as error:
        why = (error.strerror or str(error)).lower()
        raise OffcpuError(f"--exe {exe}: {why}; give the path of the executable") from None
    return found.st_dev, found.st_ino


def _executable_identity(pid: int) -> tuple[int, int] | None:
    try:
        found = os.stat(f"/proc/{pid}/exe")
    except OSError:  # a kernel thread, gone, or out of reach
        return None
    return found.st_dev, found.st_ino


def _check_process(pid: int, option: str) -> None:
    if not limits.process_exists(pid):
        raise OffcpuError(f"no such process: {pid} (check it with 'ps -eLf')")
    process = limits.thread_group_of(pid)
    if process != pid:
        raise OffcpuError(f"{pid} is a thread of process {process}; use --tid {pid} or {option} {process}")


def _process_of_thread(tid: int) -> int:
    if not limits.process_exists(tid):
        raise OffcpuError(f"no such thread: {tid} (check it with 'ps -eLf')")
    return limits.thread_group_of(tid)


def process_table() -> dict[int, Process]:
    """Every live process now (zombies left out), from /proc/PID/stat."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm, fields = limits.read_stat(f"/proc/{entry.name}/stat")
        except (OSError, ValueError):
            continue  # gone while the table was read
        if fields[0] not in "ZX":
            table[int(entry.name)] = Process(int(entry.name), int(fields[1]), comm)
    return table


def descendants(root: int, table: dict[int, Process]) -> list[int]:
    """The processes below `root` in `table`, parents before their children."""
    children = defaultdict(list)
    for process in table.values():
        children[process.ppid].append(process.pid)
    found, below = [], sorted(children[root])
    while below:
        pid = below.pop(0)
        found.append(pid)
        below += sorted(children[pid])
    return found


# -- cgroups --------------------------------------------------------------------


def cgroup2_mount() -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified
    beside v1 controllers), as perf finds it: OffcpuError when perf would not filter by it."""
    mounts = cgroup_mounts(proc_text(MOUNTS))
    v1 = next((mount.point for mount in mounts if not mount.v2 and "perf_event" in mount.options), None)
    if v1 is not None:
        raise OffcpuError(f"perf_event is a cgroup v1 controller here (mounted at {v1}), so perf filters by its v1 "
                          "groups, not by cgroup v2 paths; record the service's processes with --tree PID or "
                          "--comm NAME instead")
    v2 = next((mount.point for mount in mounts if mount.v2), None)
    if v2 is None:
        raise OffcpuError("no cgroup v2 hierarchy is mounted here (only cgroup v1, if any), and perf's cgroup "
                          "filter needs one; record the service's processes with --tree PID or --comm NAME instead")
    return v2


def _cgroup_target(given: str, command: tuple[str, ...]) -> Target:
    mount = cgroup2_mount()
    path = cgroup_path(given, mount)
    directory = mount / path
    if not directory.resolve().is_relative_to(mount.resolve()) or not directory.is_dir():
        raise OffcpuError(f"no cgroup {given} under the cgroup v2 hierarchy at {mount}: give a path as "
                          f"/proc/PID/cgroup shows it (after '0::'), or one under {mount}")
    if not cgroup_processes(directory):
        raise OffcpuError(f"cgroup /{path} holds no process now: record it while its service runs")
    return Target("cgroup", Path(path).name or "root", command=command, cgroup=path)


def cgroup_path(given: str, mount: Path) -> str:
    """perf's -G takes a cgroup relative to the v2 mount: /system.slice/x.service as
    /proc/PID/cgroup shows it, or a path under the mount, give system.slice/x.service."""
    path = Path(given)
    if path.is_relative_to(mount):
        path = path.relative_to(mount)
    return str(path).strip("/")


def cgroup_processes(directory: Path) -> tuple[int, ...]:
    """The processes in a cgroup and the cgroups below it now (perf records them all)."""
    found: list[int] = []
    for below, _, _ in os.walk(directory):
        try:
            found += (int(pid) for pid in Path(below, "cgroup.procs").read_text().split())
        except OSError:
            continue  # removed while it was read
    return tuple(found)


def cgroup_directory(target: Target) -> Path:
    return cgroup2_mount() / target.cgroup


def unit_cgroup(unit: str) -> str:
    """The cgroup of a running systemd unit, as systemd gives it."""
    if not SYSTEMD_RUNNING.is_dir():
        raise OffcpuError(f"--unit {unit} needs systemd, which does not run on this machine (no {SYSTEMD_RUNNING}); "
                          "give the service's cgroup with --cgroup PATH, or its processes with --tree PID")
    systemctl = find_program("systemctl")
    if systemctl is None:
        raise OffcpuError(f"--unit {unit} asks systemd through systemctl, which is not on PATH; give the service's "
                          "cgroup with --cgroup PATH")
    done = subprocess.run([systemctl, "show", "--property=LoadState,ControlGroup", "--", unit], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=child_environment())
    properties = dict(line.partition("=")[::2] for line in done.stdout.splitlines())
    if done.returncode != 0 or properties.get("LoadState") in (None, "not-found"):
        raise OffcpuError(f"systemd has no unit {unit}; see 'systemctl list-units --type=service'")
    if not properties.get("ControlGroup"):
        raise OffcpuError(f"unit {unit} is not running, so it has no cgroup; start it, then record it")
    return properties["ControlGroup"]


# -- while recording ----------------------------------------------------------------


def processes_now(target: Target) -> tuple[int, ...]:
    """The target's processes to read threads and limits of: those it started with that
    still run, a cgroup's now, the command's; none for the whole machine."""
    if target.kind == "cgroup":
        return cgroup_processes(cgroup_directory(target))
    if target.kind == "pid":
        return tuple(pid for pid in target.pids if limits.process_exists(pid))
    return (target.pid,) if target.pid is not None else ()


def has_ended(target: Target) -> bool:
    """Whether every process (or the thread) the target is of has exited; never for the
    whole machine or a command alone, which end with their command."""
    if target.kind == "tid":
        return not limits.process_exists(target.tid or 0)
    return target.kind in ("pid", "cgroup") and not processes_now(target)


@dataclass(frozen=True)
class Threads:
    """A target's threads as read from /proc; none for the whole machine."""

    states: dict[str, list]  # {tid: [comm, state letter]}
    processes: dict[str, int]  # {tid: the pid of its process}


def threads_now(target: Target) -> Threads:
    """The target's threads now, each with its process: a thread that blocks throughout has
    no event in perf.data to say which process it is of."""
    if target.kind == "tid" and target.pid is not None and target.tid is not None:
        by_process = {target.pid: limits.thread_states(target.pid, [target.tid])}
    else:
        by_process = {pid: limits.thread_states(pid) for pid in processes_now(target)}
    return Threads({tid: state for states in by_process.values() for tid, state in states.items()},
                   {tid: pid for pid, states in by_process.items() for tid in states})


class Strays:
    """Processes of the name or executable a target asked for that were not running when
    its recording began and that perf does not record, as no recorded process started
    them (perf records what the processes it started with start, and cannot add any
    other). Looked for now and then: one that lives less long than the gap is not seen."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.found: dict[int, str] = {}  # pid -> comm
        self._recorded = set(target.pids)
        self._before = set(process_table()) - self._recorded  # running, and not recorded
        self._identity = _executable_identity_of(target.by_exe) if target.by_exe else None

    def look(self) -> None:
        table = process_table()
        for pid, process in table.items():
            if pid in self._recorded or pid in self.found or pid in self._before or not self._matches(process):
                continue
            if self._started_by_recorded(pid, table):
                self._recorded.add(pid)
            else:
                self.found[pid] = process.comm

    def _matches(self, process: Process) -> bool:
        return (process.comm == self.target.by_comm or
                (self._identity is not None and _executable_identity(process.pid) == self._identity))

    def _started_by_recorded(self, pid: int, table: dict[int, Process]) -> bool:
        """Whether a recorded process started `pid`, or started a process that did, and so
        on (processes that are new since the start: perf records them by inheritance)."""
        while pid in table and pid not in self._before:
            pid = table[pid].ppid
            if pid in self._recorded:
                return True
        return False


def _executable_identity_of(exe: str) -> tuple[int, int] | None:
    try:
        return _file_identity(exe)
    except OffcpuError:
        return None  # gone since the recording began: nothing can run it anew


TITLE_CHARS = 200  # of a process's command line: what tells it apart, without its every argument


def process_titles(target: Target) -> dict[str, str]:
    """{pid: command line} of the target's processes (and what they started) whose name another
    of them shares, as /proc shows it now: a process title (PostgreSQL's `postgres: bench bench
    [local] UPDATE`) or the arguments that tell namesakes apart."""
    table = process_table()
    pids = set(table) if target.kind == "all" else \
        {pid for root in processes_now(target) for pid in (root, *descendants(root, table)) if pid in table}
    names = Counter(table[pid].comm for pid in pids)
    titles = {str(pid): _command_line(pid) for pid in sorted(pids) if names[table[pid].comm] > 1}
    return {pid: title for pid, title in titles.items() if title}


def _command_line(pid: int) -> str:
    """/proc/PID/cmdline as words, cut to TITLE_CHARS; '' for a kernel thread, or one gone."""
    try:
        words = proc_text(f"/proc/{pid}/cmdline").split("\0")
    except OSError:
        return ""
    return " ".join(word for word in words if word)[:TITLE_CHARS]
