"""Real programs to record, for tests and scripts: the contended programs of
examples/ on Debian's Ruby, OpenJDK, RocksDB and SQLite with their uncontended
twins, the lock_chain example, and Debian's memcached and nginx under load from
memcaslap and wrk.

Each workload is a context manager: it starts the program (and its server and
load generator) in a temporary directory, returns once it is running and
loaded (its worker threads exist; a server answers and counts requests), yields
a `Running`, and kills every process it started on the way out, whatever
happens in between, and removes the directory.

    with programs.WORKLOADS["sqlite_writers"]() as sqlite:
        run_offcpu("record", *sqlite.record_target, "-d", "1", "-o", str(capture))

`record` does that in one call, and `record_run` records an example program's
whole run as a command, with its summary line (lock_chain's own clock).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import EXAMPLES, missing, run_offcpu

READY_TIMEOUT_S = 30.0  # a JVM on a busy 2-core machine takes seconds to start
LOADED_REQUESTS = 1000  # a server is loaded once it has served this many more requests
RUN_SECONDS = 120  # programs and load generators stop by themselves after this, should the harness die


class MissingProgram(Exception):
    """A program a workload needs is not installed (scripts/setup installs it)."""


class WorkloadError(Exception):
    """A workload did not start, or did not get loaded, in time."""


@dataclass(frozen=True)
class Running:
    """A workload that runs and is loaded. `pid` is the process to record with
    --pid; `record_target` is how to record the whole service (a server whose
    processes are several, and whose clients wake it, is recorded with -a)."""

    name: str
    pid: int
    service_pids: tuple[int, ...]  # the program, or the server's processes (nginx: master first)
    load_pid: int | None  # the load generator, a process outside the service
    worker_tids: tuple[int, ...]  # the threads that do the work (a server's: those that serve requests)
    directory: Path
    record_target: tuple[str, ...]
    requests: Callable[[], int] | None = field(default=None, compare=False)  # a server's count so far
    # a server's load generator as a command that runs for the seconds given (to run as offcpu's command)
    load_command: Callable[[int], tuple[str, ...]] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Recording:
    """A workload recorded through the installed offcpu command."""

    capture: Path
    running: Running
    result: subprocess.CompletedProcess[str]


@dataclass(frozen=True)
class RunRecording:
    """An example program's whole run recorded as a command, and what it printed."""

    capture: Path
    summary: dict[str, str]  # its summary line's key=value fields
    result: subprocess.CompletedProcess[str]


# -- facts from /proc ---------------------------------------------------------


def thread_names(pid: int) -> dict[int, str]:
    """tid -> name of every thread of a process (empty once it is gone)."""
    names = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return {}
    for tid in tids:
        try:
            names[int(tid)] = Path(f"/proc/{pid}/task/{tid}/comm").read_text(errors="replace").strip()
        except FileNotFoundError:
            continue
    return names


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # as bytes: other processes' names need not be UTF-8
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


def process_exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in (b"Z", b"X")


@dataclass(frozen=True)
class ThreadTimes:
    """A thread's counters in the kernel: /proc/PID/task/TID/schedstat and status."""

    oncpu_ns: int
    runqueue_ns: int
    voluntary_switches: int
    involuntary_switches: int


def thread_times(pid: int) -> dict[int, ThreadTimes]:
    """tid -> the kernel's counters of every thread of a process."""
    times = {}
    for tid in thread_names(pid):
        task = Path(f"/proc/{pid}/task/{tid}")
        try:
            oncpu, runqueue, _ = (int(value) for value in (task / "schedstat").read_text().split())
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text(errors="replace").splitlines())
        except (FileNotFoundError, ProcessLookupError):
            continue
        times[tid] = ThreadTimes(oncpu, runqueue, int(status["voluntary_ctxt_switches"]),
                                 int(status["nonvoluntary_ctxt_switches"]))
    return times


@dataclass(frozen=True)
class Usage:
    """What some threads did over a window, by the kernel's counters."""

    seconds: float
    threads: int
    oncpu_s: float
    runqueue_s: float
    voluntary_switches: int
    involuntary_switches: int

    @property
    def cpus(self) -> float:
        """CPUs the threads used together."""
        return self.oncpu_s / self.seconds

    @property
    def oncpu_share(self) -> float:
        """Share of the threads' time on CPU."""
        return self.oncpu_s / (self.threads * self.seconds)

    @property
    def runqueue_share(self) -> float:
        """Share of the threads' time runnable, waiting for a CPU."""
        return self.runqueue_s / (self.threads * self.seconds)

    @property
    def blocked_share(self) -> float:
        """Share of the threads' time off CPU and not runnable: blocked, waiting."""
        return 1 - self.oncpu_share - self.runqueue_share


def snapshot(pids: tuple[int, ...]) -> dict[int, ThreadTimes]:
    """tid -> the kernel's counters of every thread of these processes."""
    return {tid: times for pid in pids for tid, times in thread_times(pid).items()}


def usage_between(before: dict[int, ThreadTimes], after: dict[int, ThreadTimes], seconds: float,
                  tids: Iterable[int] | None = None) -> Usage:
    """What the threads (or `tids` among them) alive in both snapshots did between them."""
    both = before.keys() & after.keys() & (set(tids) if tids is not None else after.keys())
    return Usage(seconds=seconds, threads=len(both),
                 oncpu_s=sum(after[t].oncpu_ns - before[t].oncpu_ns for t in both) / 1e9,
                 runqueue_s=sum(after[t].runqueue_ns - before[t].runqueue_ns for t in both) / 1e9,
                 voluntary_switches=sum(after[t].voluntary_switches - before[t].voluntary_switches for t in both),
                 involuntary_switches=sum(after[t].involuntary_switches - before[t].involuntary_switches
                                          for t in both))


def usage(pids: tuple[int, ...], seconds: float, tids: Iterable[int] | None = None) -> Usage:
    """What the processes' threads (or `tids` among them) do over the next `seconds`."""
    before, start = snapshot(pids), time.monotonic()
    time.sleep(seconds)
    after = snapshot(pids)
    return usage_between(before, after, time.monotonic() - start, tids)


# -- starting and stopping ---------------------------------------------------


def need(program: str, package: str) -> str:
    """The path of an installed program; MissingProgram names the package otherwise."""
    found = shutil.which(program)
    if found is None:
        raise MissingProgram(f"{program} is not installed: scripts/setup installs Debian's {package}")
    return found


def need_example(name: str) -> Path:
    path = EXAMPLES / name
    if not path.exists():
        raise MissingProgram(f"{path} is missing: run 'make -C examples' (scripts/setup does)")
    return path


def on_tmpfs(path: Path) -> bool:
    """Whether `path` lives on tmpfs, where fsync never reaches a disk."""
    best, fstype = "", ""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        mount_point, kind = line.split()[1:3]
        inside = str(path) == mount_point or str(path).startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, fstype = mount_point, kind
    return fstype == "tmpfs"


@contextmanager
def workspace() -> Iterator[Path]:
    """A temporary directory on a disk (the repository's when /tmp is tmpfs), removed afterwards."""
    base = Path(tempfile.gettempdir()).resolve()
    if on_tmpfs(base):
        base = EXAMPLES.parent.parent
    directory = Path(tempfile.mkdtemp(prefix="offcpu-programs-", dir=base))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


PR_SET_PDEATHSIG = 1


def terminate_with_parent() -> None:
    """In a child, before it runs its program: SIGTERM when the process that started it
    dies, even by SIGKILL (a server would run on: nginx's master then stops its workers)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ProcessGroups:
    """Processes started each in a session of its own, so that all they start
    (nginx's workers) can be killed with them, and ended by the kernel should the
    harness die before it kills them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Run `argv` in the workspace; its stderr goes to NAME.stderr there."""
        with open(self.directory / f"{name}.stderr", "wb") as stderr:
            process = subprocess.Popen(argv, cwd=self.directory, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                                       preexec_fn=terminate_with_parent)
        self.started[name] = process
        return process

    def check_alive(self) -> None:
        """WorkloadError, with its stderr, when a started process has exited."""
        for name, process in self.started.items():
            if process.poll() is not None:
                stderr = (self.directory / f"{name}.stderr").read_text(errors="replace").strip()
                raise WorkloadError(f"{name} exited with status {process.returncode}: {stderr or 'no message'}")

    def kill_all(self) -> None:
        for process in reversed(self.started.values()):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            wait_group_gone(process.pid)


def wait_group_gone(pgid: int, timeout_s: float = 10.0) -> None:
    """Until no process of the group is left: killed children (nginx's workers) exit
    a moment after their parent, and their new parent reaps them (this process, when
    it is a subreaper, as the benchmarks are)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            pass  # none of them is a child of this process
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise WorkloadError(f"processes of group {pgid} still there {timeout_s:.0f} s after SIGKILL")


@contextmanager
def process_groups(directory: Path) -> Iterator[ProcessGroups]:
    groups = ProcessGroups(directory)
    try:
        yield groups
    finally:
        groups.kill_all()


def wait_until(what: str, check: Callable[[], bool], groups: ProcessGroups,
               timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll `check` until it holds; WorkloadError if a process exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not check():
        groups.check_alive()
        if time.monotonic() > deadline:
            raise WorkloadError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(0.02)


def named_threads(pid: int, prefix: str) -> tuple[int, ...]:
    return tuple(sorted(tid for tid, name in thread_names(pid).items() if name.startswith(prefix)))


# -- the example programs ----------------------------------------------------


@contextmanager
def example_program(name: str, *args: str, workers: int, prefix: str,
                    needs: tuple[str, str] | None = None) -> Iterator[Running]:
    """An example program, ready once `workers` threads named PREFIX... run."""
    if needs is not None:
        need(*needs)
    binary = need_example(name)
    with workspace() as directory, process_groups(directory) as groups:
        process = groups.start(name, [str(binary), *args, "-s", str(RUN_SECONDS)])
        wait_until(f"{name} starting {workers} threads named {prefix}*",
                   lambda: len(named_threads(process.pid, prefix)) >= workers, groups)
        yield Running(name=name, pid=process.pid, service_pids=(process.pid,), load_pid=None,
                      worker_tids=named_threads(process.pid, prefix), directory=directory,
                      record_target=("--pid", str(process.pid)))


def ruby_gvl(threads: int) -> AbstractContextManager[Running]:
    return example_program("ruby_gvl", "-t", str(threads), workers=threads, prefix="worker-",
                           needs=("ruby", "ruby"))


def java_monitor(threads: int, fixed: bool = False) -> AbstractContextManager[Running]:
    return example_program("java_monitor_fixed" if fixed else "java_monitor", "-t", str(threads),
                           workers=threads, prefix="worker-", needs=("java", "default-jdk-headless"))


def rocksdb_writers(threads: int, *args: str) -> AbstractContextManager[Running]:
    return example_program("rocksdb_writers", "-t", str(threads), *args, workers=threads, prefix="writer-")


def sqlite_writers(threads: int, *args: str) -> AbstractContextManager[Running]:
    return example_program("sqlite_writers", "-t", str(threads), *args, workers=threads, prefix="writer-")


def lock_chain(threads: int, sleep_us: int | None = None, fixed: bool = False) -> AbstractContextManager[Running]:
    sleep = ("-u", str(sleep_us)) if sleep_us is not None else ()
    return example_program("lock_chain_fixed" if fixed else "lock_chain", "-t", str(threads), *sleep,
                           workers=threads, prefix="worker-")


# -- servers under load ------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def memcached_requests(port: int) -> int:
    """Gets and sets memcached has served, from its own `stats`."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(b"stats\r\n")
        reply = b""
        while not reply.endswith(b"END\r\n"):
            chunk = connection.recv(65536)
            if not chunk:
                break
            reply += chunk
    stats = dict(re.findall(r"STAT (\w+) (\d+)", reply.decode()))
    return int(stats["cmd_get"]) + int(stats["cmd_set"])


def nginx_requests(port: int) -> int:
    """Requests nginx has served, from its stub_status page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as page:
        text = page.read().decode()
    # "server accepts handled requests\n 12 12 3456 \n": the third number
    return int(text.splitlines()[2].split()[2])


def wait_loaded(what: str, requests: Callable[[], int], groups: ProcessGroups) -> None:
    """Until the server has served LOADED_REQUESTS more requests than now."""
    start = requests()
    wait_until(f"{what} serving {LOADED_REQUESTS} requests", lambda: requests() - start >= LOADED_REQUESTS, groups)


MEMCACHED_THREADS = 4
MEMCASLAP_THREADS = 1
MEMCASLAP_CONCURRENCY = 16


@contextmanager
def memcached_under_memcaslap() -> Iterator[Running]:
    """memcached with several worker threads on a free loopback port, loaded by memcaslap."""
    memcached = need("memcached", "memcached")
    memcaslap = need("memcaslap", "libmemcached-tools")
    port = free_port()
    # memcached runs as root only when told to; as another user it would lose its parent-death signal
    as_root = ["-u", "root"] if os.geteuid() == 0 else []
    with workspace() as directory, process_groups(directory) as groups:
        server = groups.start("memcached", [memcached, "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                                            "-t", str(MEMCACHED_THREADS), "-m", "64", *as_root])
        wait_until(f"memcached accepting on port {port}", lambda: accepts(port), groups)
        load = groups.start("memcaslap", [memcaslap, "-s", f"127.0.0.1:{port}", "-T", str(MEMCASLAP_THREADS),
                                          "-c", str(MEMCASLAP_CONCURRENCY), "-t", f"{RUN_SECONDS}s"])
        requests = functools.partial(memcached_requests, port)
        wait_loaded("memcached", requests, groups)
        yield Running(name="memcached", pid=server.pid, service_pids=(server.pid,), load_pid=load.pid,
                      worker_tids=named_threads(server.pid, "mc-worker"), directory=directory,
                      record_target=("-a",), requests=requests)


NGINX_WORKERS = 3
WRK_THREADS = 1
WRK_CONNECTIONS = 16

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
pid nginx.pid;
error_log error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    server {{
        listen 127.0.0.1:{port};
        root www;
        location = /status {{ stub_status; }}
    }}
}}
"""


def wrk_command(port: int, seconds: int) -> tuple[str, ...]:
    """wrk loading nginx's small file for `seconds`."""
    return (need("wrk", "wrk"), "-t", str(WRK_THREADS), "-c", str(WRK_CONNECTIONS), "-d", f"{seconds}s",
            f"http://127.0.0.1:{port}/index.html")


@contextmanager
def nginx_under_wrk(loaded: bool = True, workers: int = NGINX_WORKERS) -> Iterator[Running]:
    """nginx (a master and `workers` workers) serving a small file on a free loopback port, loaded
    by wrk (unless not `loaded`: then it waits for a load generator, such as its load_command)."""
    nginx = need("nginx", "nginx")
    port = free_port()
    with workspace() as directory, process_groups(directory) as groups:
        directory.chmod(0o755)  # nginx's workers run as nobody: they must reach www/
        (directory / "www").mkdir()
        (directory / "www" / "index.html").write_text("<p>" + "offcpu " * 128 + "</p>\n")
        (directory / "nginx.conf").write_text(NGINX_CONF.format(workers=workers, port=port))
        master = groups.start("nginx", [nginx, "-p", str(directory), "-c", "nginx.conf", "-e", "error.log"])
        wait_until(f"nginx accepting on port {port} with {workers} workers",
                   lambda: len(children(master.pid)) == workers and accepts(port), groups)
        load = groups.start("wrk", list(wrk_command(port, RUN_SECONDS))) if loaded else None
        requests = functools.partial(nginx_requests, port)
        if loaded:
            wait_loaded("nginx", requests, groups)
        worker_pids = tuple(children(master.pid))
        yield Running(name="nginx", pid=master.pid, service_pids=(master.pid, *worker_pids),
                      load_pid=load.pid if load else None,
                      worker_tids=tuple(sorted(tid for pid in worker_pids for tid in thread_names(pid))),
                      directory=directory, record_target=("-a",), requests=requests,
                      load_command=functools.partial(wrk_command, port))


def _cgroup_mounts() -> list[list[str]]:
    """The cgroup file systems' lines of /proc/mounts, split: point, type, options..."""
    return [fields[1:] for fields in (line.split() for line in Path("/proc/mounts").read_text().splitlines())
            if fields[2] in ("cgroup", "cgroup2")]


def cgroup() -> AbstractContextManager[Path]:
    """A new cgroup v2, found where /proc/mounts says the v2 hierarchy is (beside v1 controllers, or
    alone), with a name of its own; whatever is still in it afterwards goes back to the root, and it is
    removed."""
    return _new_cgroup(next(Path(point) for point, kind, *_ in _cgroup_mounts() if kind == "cgroup2"))


@contextmanager
def _new_cgroup(root: Path) -> Iterator[Path]:
    """A new cgroup under the hierarchy mounted at `root`, as cgroup() says."""
    directory = Path(tempfile.mkdtemp(prefix="offcpu-test-", dir=root))  # mkdir makes a cgroup there
    try:
        yield directory
    finally:
        for pid in (directory / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(pid)
            except ProcessLookupError:
                pass  # exited meanwhile
        directory.rmdir()


QUOTA_PERIOD_US = 100_000  # the kernel's default CFS period


@contextmanager
def cpu_quota(quota_us: int) -> Iterator[Path]:
    """A new cgroup whose processes may run `quota_us` of CPU time per 100 ms period, all CPUs
    together (what a Kubernetes CPU limit sets): under the v1 cpu controller where /proc/mounts
    names one, else in the v2 hierarchy when its root hands its cgroups the cpu controller
    (WorkloadError otherwise). Removed as cgroup() says."""
    mounts = _cgroup_mounts()
    v1 = next((Path(point) for point, kind, options, *_ in mounts
               if kind == "cgroup" and "cpu" in options.split(",")), None)
    if v1 is not None:
        with _new_cgroup(v1) as directory:
            (directory / "cpu.cfs_period_us").write_text(str(QUOTA_PERIOD_US))
            (directory / "cpu.cfs_quota_us").write_text(str(quota_us))
            yield directory
        return
    v2 = next(Path(point) for point, kind, *_ in mounts if kind == "cgroup2")
    if "cpu" not in (v2 / "cgroup.subtree_control").read_text().split():
        raise WorkloadError(f"no cgroup v1 cpu controller, and the cgroup v2 root {v2} does not hand its cgroups "
                            "the cpu controller (cgroup.subtree_control)")
    with _new_cgroup(v2) as directory:
        (directory / "cpu.max").write_text(f"{quota_us} {QUOTA_PERIOD_US}")
        yield directory


@dataclass(frozen=True)
class Throttled:
    """A CPU-bound program running in a cgroup of its own under a CPU quota."""

    pid: int
    cgroup: Path

    def cpu_stat(self) -> dict[str, int]:
        """The cgroup's cpu.stat now, as numbers (nr_periods, nr_throttled, and throttled_time in ns
        under v1 or throttled_usec under v2)."""
        return {name: int(value) for name, value in
                (line.split() for line in (self.cgroup / "cpu.stat").read_text().splitlines())}


@contextmanager
def busy_under_cpu_quota(quota_us: int) -> Iterator[Throttled]:
    """sha256sum of an endless /dev/zero (one thread, always on CPU when it may be) in a cgroup
    whose CPU quota is `quota_us` per 100 ms period (cpu_quota): the quota throttles it however
    idle the CPUs are. Returns once it is in the cgroup."""
    with cpu_quota(quota_us) as directory, workspace() as work, process_groups(work) as groups:
        process = groups.start("sha256sum", [need("sha256sum", "coreutils"), "/dev/zero"])
        (directory / "cgroup.procs").write_text(str(process.pid))
        yield Throttled(process.pid, directory)


# -- the named workloads -----------------------------------------------------

# A database twin writes once every this many µs: the load one writer takes without
# waiting for anyone, mostly waiting for work.
TWIN_PAUSE_US = 50_000

# Each contended program with its uncontended twin, the chain example and its
# fixed twin, and the two servers: the configurations the tests and fixtures use.
WORKLOADS: dict[str, Callable[[], AbstractContextManager[Running]]] = {
    "ruby_gvl": functools.partial(ruby_gvl, 8),
    "ruby_gvl_twin": functools.partial(ruby_gvl, 1),
    "java_monitor": functools.partial(java_monitor, 8),
    "java_monitor_twin": functools.partial(java_monitor, 1, fixed=True),
    "rocksdb_writers": functools.partial(rocksdb_writers, 4),
    "rocksdb_writers_twin": functools.partial(rocksdb_writers, 1, "-p", str(TWIN_PAUSE_US)),
    "sqlite_writers": functools.partial(sqlite_writers, 4),
    "sqlite_writers_twin": functools.partial(sqlite_writers, 1, "-p", str(TWIN_PAUSE_US)),
    "lock_chain": functools.partial(lock_chain, 4),
    "lock_chain_sleep": functools.partial(lock_chain, 4, sleep_us=1000),
    "lock_chain_fixed": functools.partial(lock_chain, 4, fixed=True),
    "memcached": memcached_under_memcaslap,
    "nginx": nginx_under_wrk,
}


def record(name: str, capture: Path, seconds: float, *offcpu_args: str) -> Recording:
    """Start the named workload, record it through offcpu for `seconds` (its
    record_target, plus `offcpu_args`), and stop it."""
    with WORKLOADS[name]() as running:
        result = run_offcpu("record", *running.record_target, "-d", str(seconds), "-o", str(capture), *offcpu_args,
                            timeout=seconds + 120)
    return Recording(capture=capture, running=running, result=result)


def parse_summary(line: str) -> dict[str, str]:
    """An example's summary line, "name: key=value ...", as its fields."""
    return dict(re.findall(r"(\w+)=(\S+)", line))


def record_run(name: str, capture: Path, seconds: float, *program_args: str,
               offcpu_args: tuple[str, ...] = ()) -> RunRecording:
    """Record an example program's whole run of `seconds` as offcpu's command
    (its threads from their start, the window its own clock measures), in a
    workspace on a disk."""
    binary = need_example(name)
    with workspace() as directory:
        result = run_offcpu("record", "-d", str(seconds + 60), "-o", str(capture), *offcpu_args,
                            "--", str(binary), *program_args, "-s", str(seconds), cwd=directory, timeout=seconds + 180)
    lines = [line for line in result.stdout.splitlines() if line.startswith(f"{name}: ")]
    return RunRecording(capture=capture, summary=parse_summary(lines[-1]) if lines else {}, result=result)


@contextmanager
def started(name: str, **options: bool) -> Iterator[Running]:
    """The named workload, running; a missing package is missing()."""
    try:
        with WORKLOADS[name](**options) as running:
            yield running
    except MissingProgram as absent:
        missing(str(absent))
