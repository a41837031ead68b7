"""A Python, a Java and a Ruby server's throughput recorded with BPF, with and without runtime frames; what reading
them costs.

The servers, on a free loopback port, each loaded by `wrk -t1 -c16` for
--seconds a run (after a run that warms them up, not counted):
- python: the examples' python_http, CPython's own http.server (a
  ThreadingHTTPServer, a thread a connection) on Debian's /usr/bin/python3,
  answering with a small page;
- java: the examples' java_http, the JDK's com.sun.net.httpserver with a pool
  of 4 threads, answering with a small page;
- ruby: the examples' ruby_http, WEBrick (a thread a connection) on Debian's
  MRI 3.1, answering with a small page.

Kinds of run, alternated in this one process as record-overhead's are, each
compared with the mean of the unrecorded runs either side of it:
- anchor: unrecorded;
- bpf: `offcpu record --backend bpf --pid SERVER`, which reads the server's
  runtime stacks while it records (py-spy every 200 ms; a HotSpot thread dump
  through the attach socket every second; a Ruby process's memory every 200 ms);
- bpf-hidden (python only): the same recording of a twin server, the same
  program run by a copy of the interpreter under another name, in which offcpu
  finds no CPython: a BPF recording as it was before runtime frames;
- sampler: no recording; offcpu's RuntimeSampler alone, in this process,
  reading the server as a recording would: the reads' own cost.

It prints offcpu's CPU time over each recorded run (its own threads, and the
py-spy processes it ran), and over each sampler run the CPU of the sampler's
thread, of its py-spy processes and, in a JVM, of the thread that answers the
attach socket (in a Ruby process, the reads' wall time): each as a share of one CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import (
    BenchError,
    Recording,
    offcpu_command,
    run_guarded,
)
from benchmarks.record_overhead import REQUESTS_PER_S, Run, _ratios
from offcpu.capture import RUNTIME_STACKS
from offcpu.recording.runtime_stacks import RuntimeSampler

SERVERS = ("python", "java", "ruby")
PYTHON = "/usr/bin/python3"
RUBY = "/usr/bin/ruby"
JAVA_THREADS = 4
DEFAULT_SECONDS = 3
DEFAULT_ROUNDS = 2
# A first wrk run, not counted: the JVM compiles the server's code meanwhile (its throughput still
# doubled over the runs that followed a 5 s one)
WARM_UP_S = {"python": 3, "java": 10, "ruby": 3}
DURATION_S = 60  # the bound of each recording, ended as soon as its run is done
TICKS = os.sysconf("SC_CLK_TCK")
ATTACH_THREAD = "Attach Listener"  # the JVM's thread that answers its attach socket


@dataclass
class Measured:
    """A run and what it cost, in CPU seconds over the run."""
    run: Run
    cpu: dict[str, float] = field(default_factory=dict)
    samples: int | None = None  # runtime stacks kept


@dataclass
class Server:
    name: str
    pid: int
    port: int
    twin_pid: int | None = None  # python: the copy its runtime is not detected in
    twin_port: int | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", choices=SERVERS, action="append",
                        help=f"one server (again for another) [default: {', '.join(SERVERS)}]")
    parser.add_argument("--rounds", "-r", type=int, default=DEFAULT_ROUNDS,
                        help=f"runs of each kind, each between two anchors [default: {DEFAULT_ROUNDS}]")
    parser.add_argument("--seconds", "-s", type=int, default=DEFAULT_SECONDS,
                        help=f"seconds of each wrk run [default: {DEFAULT_SECONDS}]")


def run(args: argparse.Namespace) -> int:
    return run_guarded("runtime-frames", lambda: _measure(args),
                       "offcpu, the servers and wrk stopped, captures removed")


def _measure(args: argparse.Namespace) -> int:
    if args.rounds <= 0 or args.seconds <= 0:
        raise BenchError("--rounds and --seconds must be more than 0")
    from tests.programs import MissingProgram, WorkloadError, need
    try:
        wrk = need("wrk", "wrk")
    except MissingProgram as error:
        raise BenchError(str(error)) from None
    status = 0
    workdir = Path(tempfile.mkdtemp(prefix="offcpu-bench-"))
    try:
        for name in args.server or SERVERS:
            try:
                with _server(name) as server:
                    status = max(status, _alternate(server, wrk, args, workdir))
            except (MissingProgram, WorkloadError) as error:
                raise BenchError(str(error)) from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


@contextmanager
def _server(name: str) -> Iterator[Server]:
    from tests.programs import accepts, free_port, need_example, process_groups, wait_until, workspace
    with workspace() as directory, process_groups(directory) as groups:
        port = free_port()
        if name == "java":
            process = groups.start("java_http", [str(need_example("java_http")), "-p", str(port),
                                                 "-t", str(JAVA_THREADS)])
            wait_until(f"java_http accepting on port {port}", lambda: accepts(port), groups)
            yield Server(name, process.pid, port)
            return
        if name == "ruby":
            if not os.access(RUBY, os.X_OK):
                raise BenchError(f"{RUBY} is not installed")
            process = groups.start("ruby_http", [RUBY, str(need_example("ruby_http")), "-p", str(port)])
            wait_until(f"ruby_http accepting on port {port}", lambda: accepts(port), groups)
            yield Server(name, process.pid, port)
            return
        if not os.access(PYTHON, os.X_OK):
            raise BenchError(f"{PYTHON} is not installed")
        script = str(need_example("python_http"))
        # The twin: the same interpreter copied under a name that is not python's (Debian's has its
        # libpython linked in), so that offcpu finds no CPython in it and reads no Python stack
        shutil.copy(PYTHON, directory / "httpserve")
        twin_port = free_port()
        server = groups.start("python_http", [PYTHON, script, "-p", str(port)])
        twin = groups.start("twin", [str(directory / "httpserve"), script, "-p", str(twin_port)])
        wait_until(f"python_http accepting on ports {port} and {twin_port}",
                   lambda: accepts(port) and accepts(twin_port), groups)
        yield Server(name, server.pid, port, twin.pid, twin_port)


def _alternate(server: Server, wrk: str, args: argparse.Namespace, workdir: Path) -> int:
    kinds = ["sampler", "bpf"] + (["bpf-hidden"] if server.twin_pid is not None else [])
    print(f"== {server.name} server (pid {server.pid}) under wrk -t1 -c16 -d{args.seconds}s; {args.rounds} rounds of "
          f"{', '.join(kinds)}\n", flush=True)
    _wrk(wrk, server.port, WARM_UP_S[server.name], "warm-up")
    if server.twin_port is not None:
        _wrk(wrk, server.twin_port, WARM_UP_S[server.name], "warm-up")
    print(f"{'run':>3}  {'kind':<10}  {'requests/s':>10}  CPU, share of one CPU over the run", flush=True)
    runs = [_show(1, _anchor(wrk, server.port, args.seconds))]
    for round_number in range(1, args.rounds + 1):
        for kind in kinds:
            if kind == "sampler":
                measured = _sampled(server, wrk, args.seconds, workdir)
            else:
                pid, port = (server.pid, server.port) if kind == "bpf" else (server.twin_pid, server.twin_port)
                assert pid is not None and port is not None
                output = workdir / f"{server.name}-{kind}-{round_number}"
                measured = _recorded(kind, pid, port, wrk, args.seconds, output, server.name == "python")
            runs.append(_show(len(runs) + 1, measured))
            runs.append(_show(len(runs) + 1, _anchor(wrk, server.port, args.seconds)))
    return _summarize(server, kinds, runs)


def _wrk(wrk: str, port: int, seconds: int, kind: str) -> tuple[Run, float]:
    """One wrk run: the requests a second it served, and wrk's own CPU seconds."""
    start = time.monotonic_ns()
    process = subprocess.Popen([wrk, "-t1", "-c16", f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    out = process.stdout.read()
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)  # (instead of Popen's wait: for wrk's own CPU time)
    process.returncode = os.waitstatus_to_exitcode(status)
    end = time.monotonic_ns()
    match = REQUESTS_PER_S.search(out)
    if process.returncode != 0 or match is None:
        raise BenchError(f"wrk failed (status {process.returncode}): {out.strip()[-200:]}")
    return Run(kind, float(match[1]), (end - start) / 1e9, start, end), usage.ru_utime + usage.ru_stime


def _anchor(wrk: str, port: int, seconds: int) -> Measured:
    return Measured(_wrk(wrk, port, seconds, "anchor")[0])


def _cpu_s(stat_path: str, children: bool = False) -> float:
    """The CPU seconds of a process or thread (its /proc stat), and of its waited-for children if told."""
    fields = Path(stat_path).read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / TICKS


def _recorded(kind: str, pid: int, port: int, wrk: str, seconds: int, output: Path, python: bool) -> Measured:
    """One run while offcpu records the server; its CPU over the run, the runtime stacks it kept."""
    recording = Recording(offcpu_command(), "bpf", output, DURATION_S, output.parent / f"{output.name}.log",
                          target=("--pid", str(pid)))
    try:
        recording.wait_until_recording()
        assert recording.process is not None
        stat = f"/proc/{recording.process.pid}/stat"
        own, everything = _cpu_s(stat), _cpu_s(stat, children=True)
        result, _ = _wrk(wrk, port, seconds, kind)
        own, everything = _cpu_s(stat) - own, _cpu_s(stat, children=True) - everything
        result.capture = recording.finish()
        stacks = output / RUNTIME_STACKS
        samples = len(json.loads(stacks.read_text())["samples"]) if stacks.exists() else 0
        cpu = {"offcpu": own} | ({"its py-spy": everything - own} if python else {})
        return Measured(result, cpu, samples)
    finally:
        recording.close()
        shutil.rmtree(output, ignore_errors=True)


def _sampled(server: Server, wrk: str, seconds: int, workdir: Path) -> Measured:
    """One run while offcpu's RuntimeSampler alone reads the server, from a thread of this process."""
    sampler = RuntimeSampler(workdir)
    sampler.offer([server.pid])
    attach = _thread_named(server.pid, ATTACH_THREAD)
    attach_before = _cpu_s(f"/proc/{server.pid}/task/{attach}/stat") if attach else 0.0
    children_before = _children_cpu_s()
    sampler.start()
    thread = f"/proc/self/task/{_native_id(sampler)}/stat"
    result, wrk_cpu = _wrk(wrk, server.port, seconds, "sampler")
    sampler_cpu = _cpu_s(thread)
    sampler.stop(write=False)
    cpu = {"sampler": sampler_cpu}
    if server.name == "python":
        cpu["its py-spy"] = max(_children_cpu_s() - children_before - wrk_cpu, 0.0)  # wrk is a child too
    elif server.name == "java":
        attach = attach or _thread_named(server.pid, ATTACH_THREAD)  # started by the first attach
        if attach:
            cpu["JVM's attach thread"] = _cpu_s(f"/proc/{server.pid}/task/{attach}/stat") - attach_before
        # the JVM's time answering: its thread dumps, each at a safepoint (all its threads stopped)
        cpu["JVM's dumps, wall time"] = sampler.found.get(server.pid, {}).get("read_ms", 0.0) / 1000
    else:  # the Ruby process is read from its memory, never stopped: the sampler's CPU is all of it
        cpu["its reads, wall time"] = sampler.found.get(server.pid, {}).get("read_ms", 0.0) / 1000
    return Measured(result, cpu, len(sampler.samples))


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _native_id(sampler: RuntimeSampler) -> int:
    """The kernel's id of the sampler's thread (started)."""
    thread: threading.Thread = sampler._thread
    assert thread.native_id is not None
    return thread.native_id


def _thread_named(pid: int, name: str) -> int | None:
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip() == name:
                return int(task.name)
        except OSError:
            continue
    return None


def _show(number: int, measured: Measured) -> Measured:
    """One row as soon as its run is done."""
    run = measured.run
    cpu = ", ".join(f"{what} {seconds / run.seconds:.1%}" for what, seconds in measured.cpu.items())
    if measured.samples is not None:
        cpu += f"; {measured.samples} runtime stacks kept"
    if not run.covered:
        cpu += "  [the recording's window did not hold the whole run: left out]"
    print(f"{number:>3}  {run.kind:<10}  {run.rate:>10,.0f}  {cpu}".rstrip(), flush=True)
    return measured


def _summarize(server: Server, kinds: list[str], runs: list[Measured]) -> int:
    ratios = _ratios([measured.run for measured in runs], tuple(kinds))
    print(f"\n{server.name}: median of the rounds, throughput / unrecorded (per round), and CPU, share of one CPU:")
    for kind in kinds:
        figures = " ".join(f"{ratio:.2f}x" for ratio in ratios[kind])
        median = f"{statistics.median(ratios[kind]):.2f}x" if ratios[kind] else "-"
        of_kind = [measured for measured in runs if measured.run.kind == kind]
        kept = dict.fromkeys(what for measured in of_kind for what in measured.cpu)
        cpu = ", ".join(f"{what} {statistics.median(m.cpu.get(what, 0.0) / m.run.seconds for m in of_kind):.1%}"
                        for what in kept)
        print(f"  {kind:<10} {median} ({figures}); {cpu}")
    print(flush=True)
    return 1 if not all(ratios.values()) else 0
