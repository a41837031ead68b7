"""Wall time and memory of a cold `offcpu report folded` against plain `perf script`, on one capture.

The capture is `perf bench sched pipe` recorded by `offcpu record --backend perf -a` until perf.data
reaches --size (default 240M: about 1.9 million records of this load, at ~128 bytes a
record; fewer than 1.5 million is warned of), or an existing one given with --capture.
Runs alternate plain `perf script -i perf.data > /dev/null` with its default fields
(the anchor) and a cold `offcpu report folded` (its saved model removed first), in
this one process; the ratio is of their medians. Memory is sampled every 20 ms over
the process tree: the largest of offcpu's own processes (VmRSS), all of them together
(PSS: the pages forked workers share count once), and the perf script processes
they start, of which only their own (anonymous) memory counts. The perf.data that perf
and offcpu's core map is page cache, shared by every reader: it counts in neither.

The split by stage is the same work in this one process, stage by stage, in CPU seconds
of all its threads (the core reads and pairs the slices in a thread each): record
headers walked, records read and paired (decoded, turned into off-CPU intervals, the
slices joined), symbolize (naming the call chains, making the model), write (the folded
lines, to /dev/null), and diagnose (the findings and the wait-for graph with its wake-up
chains, from the model).
Memory against events: cold reports of the first quarter of a window (--time) and of
all of it, on a recording of the pipe alone (`offcpu record -- perf bench sched pipe -T`,
--size / 2): the same stacks all along, so only the number of events differs (the
whole machine's stacks are not the same from one part of a window to another).
A BPF capture (issue 38): the whole machine recorded with BPF for --bpf-seconds (30 by
default) while the pipe runs, or an existing one given with --bpf-capture, and a cold
`offcpu report folded` of it: its wall time per MB of records and its peak memory, which
should not grow with the length of the recording.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    BenchError,
    Recording,
    become_subreaper,
    comm,
    descendants,
    interrupts_as_keyboard_interrupt,
    last_cpu,
    offcpu_command,
    reap_group,
)

PIPE = ("perf", "bench", "sched", "pipe", "-l", "1000000000")
WHOLE_MACHINE = ("-a",)
MIN_RECORDS = 1_500_000
DEFAULT_SIZE = "240M"
LONGEST_RECORDING_S = 120  # a loaded machine records the size more slowly; perf's --max-size ends it first
SAMPLE_EVERY_S = 0.02
PERF_COMMS = {"perf", "perf_6.1", "perf-exec"}
# issue 21's targets: frame pointers' stacks, and --call-graph dwarf's (each sample holds a stack copy to unwind)
TARGET_RATIO = {"fp": 0.1, "dwarf": 0.5}
TARGET_MB = 150
DIAGNOSIS_SHARE = 0.1
# issue 38's for a BPF capture: memory bounded whatever the recording's length, and no slower
# than the numpy reader was (~0.04 s per MB of records)
BPF_SECONDS = 30
BPF_TARGET_MB = 250
BPF_TARGET_S_PER_MB = 0.04


@dataclass
class Measured:
    seconds: float
    largest_mb: float  # the largest of offcpu's processes (VmRSS, but the perf.data it maps)
    offcpu_mb: float  # offcpu's processes together (PSS, likewise)
    perf_mb: float  # the perf processes they start (their anonymous memory)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--capture", type=Path, help="measure this capture instead of recording one")
    parser.add_argument("--size", default=DEFAULT_SIZE,
                        help=f"record until perf.data holds this much (perf's B/K/M/G) [default: {DEFAULT_SIZE}]")
    parser.add_argument("--rounds", type=int, default=2, help="anchor/offcpu pairs [default: 2]")
    parser.add_argument("--bpf-capture", type=Path, help="measure this BPF capture instead of recording one")
    parser.add_argument("--bpf-seconds", type=int, default=BPF_SECONDS,
                        help=f"record the whole machine with BPF this long [default: {BPF_SECONDS}]")


def run(args: argparse.Namespace) -> int:
    with interrupts_as_keyboard_interrupt():
        workdir = Path(tempfile.mkdtemp(prefix="offcpu-bench-"))
        try:
            become_subreaper()
            capture = args.capture or _record(workdir / "cap", args.size, WHOLE_MACHINE)
            pipe_only = args.capture or _record(workdir / "pipe", _half(args.size), ("--", *PIPE, "-T"))
            bpf = args.bpf_capture or _record(workdir / "bpf", DEFAULT_SIZE, WHOLE_MACHINE, "bpf", args.bpf_seconds)
            status = _measure(capture, pipe_only, args.rounds)
            _measure_bpf(bpf)
            return status
        except BenchError as error:
            print(f"report-speed: {error}")
            return 2
        except KeyboardInterrupt:
            print("report-speed: interrupted")
            return 130
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _record(output: Path, size: str, target: tuple[str, ...], backend: str = "perf",
            seconds: int = LONGEST_RECORDING_S) -> Path:
    """`offcpu record` of `target` until perf.data reaches `size` (perf's --max-size: a record
    count that does not depend on how fast a loaded machine lets the pipe run), or for
    `seconds`: the whole machine while a pinned `perf bench sched pipe` switches as fast as it
    can, or a command."""
    pipe = None
    if target == WHOLE_MACHINE:
        cpu = last_cpu()
        pipe = subprocess.Popen(PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    recording = Recording(offcpu_command(), backend, output, seconds, output.parent / f"{output.name}.log", size,
                          target)
    try:
        recording.wait_until_recording()
        recording.wait(seconds + 5)
        recording.finish()
    finally:
        if pipe is not None:
            os.killpg(pipe.pid, signal.SIGKILL)  # first: the recording's clean-up ends any child it finds
            pipe.wait()
            reap_group(pipe.pid)
        recording.close()
    return output


def _half(size: str) -> str:
    number, unit = (size[:-1], size[-1]) if size[-1:].isalpha() else (size, "")
    return f"{max(1, int(float(number) / 2))}{unit}"


def _measure(capture: Path, pipe_only: Path, rounds: int) -> int:
    info = json.loads((capture / "capture.json").read_text())
    records = info["samples"] + info["switch_records"]
    window_s = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    lost = info["lost_events"]
    print(f"capture: {records:,} records ({info['samples']:,} samples, {info['switch_records']:,} switch records), "
          f"{info['perf_data_bytes'] / 1e6:.0f} MB, {window_s:.1f} s window, {lost:,} events lost"
          + (" (perf could not keep up: the machine was loaded)" if lost else ""))
    if records < MIN_RECORDS:
        print(f"warning: fewer than {MIN_RECORDS:,} records; record more with --size")
    print(f"load average before: {_load()}")
    perf_data = str(capture / "perf.data")
    anchors, reports = [], []
    print(f"\n{'run':>3}  {'what':<30}  {'seconds':>7}  peak memory: largest offcpu process / all of offcpu (PSS) "
          "/ perf script's own")
    for number in range(1, rounds + 1):
        anchors.append(_show(2 * number - 1, "perf script (default fields)",
                             _timed(["perf", "script", "-i", perf_data])))
        reports.append(_show(2 * number, "offcpu report folded (cold)", _cold_report(capture)))
    print(f"load average after: {_load()}")
    anchor = statistics.median(m.seconds for m in anchors)
    report = statistics.median(m.seconds for m in reports)
    largest = max(m.largest_mb for m in reports)
    call_graph = info.get("call_graph", "fp")
    print(f"\noffcpu report folded / perf script: {report / anchor:.2f}x ({report:.2f} s / {anchor:.2f} s; "
          f"target at most {TARGET_RATIO.get(call_graph, TARGET_RATIO['fp'])} for --call-graph {call_graph})")
    stages = _stages(capture)
    print(f"per stage, CPU seconds (all of offcpu's threads): record headers {stages['headers']:.2f}, records "
          f"read and paired {stages['pair']:.2f}, symbolize {stages['symbolize']:.2f}, write {stages['write']:.2f}")
    print(f"diagnosis (the findings, the wait-for graph and the wake-up chains, which the text, json and html "
          f"reports add): {stages['diagnose']:.2f} CPU s, {stages['diagnose'] / report:.1%} of the cold report's "
          f"wall time (target at most {DIAGNOSIS_SHARE:.0%}), {stages['diagnose'] / sum(stages.values()):.1%} of "
          "all stages' CPU time")
    print(f"peak memory: {largest:.0f} MB in offcpu's largest process (target at most {TARGET_MB} MB), "
          f"{max(m.offcpu_mb for m in reports):.0f} MB in all of its processes (PSS)")
    _memory_against_events(pipe_only)
    return 0


def _memory_against_events(capture: Path) -> None:
    info = json.loads((capture / "capture.json").read_text())
    records = info["samples"] + info["switch_records"]
    window_s = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    quarter = _cold_report(capture, ("--time", f"0,{window_s / 4:.3f}"))
    whole = _cold_report(capture)
    print(f"memory against events ({capture.name}: {records:,} records): first quarter of the window "
          f"{quarter.largest_mb:.0f} MB, whole window {whole.largest_mb:.0f} MB: "
          f"{whole.largest_mb / quarter.largest_mb:.2f}x the memory for ~4x the events")


def _measure_bpf(capture: Path) -> None:
    """A cold report of a BPF capture: its time per MB of records, and its peak memory."""
    megabytes = (capture / "bpf-records.bin").stat().st_size / 1e6
    info = json.loads((capture / "capture.json").read_text())
    window_s = (info["window_end_ns"] - info["window_start_ns"]) / 1e9
    print(f"\nBPF capture: {megabytes:.1f} MB of records, {window_s:.1f} s window; load average {_load()}")
    report = _show(1, "offcpu report folded (cold)", _cold_report(capture))
    print(f"BPF report: {report.seconds / megabytes:.3f} s per MB of records (target at most "
          f"{BPF_TARGET_S_PER_MB}); peak memory {report.largest_mb:.0f} MB in offcpu's largest process, "
          f"{report.offcpu_mb:.0f} MB in all of them (PSS; target at most {BPF_TARGET_MB} MB whatever the length)")


def _cold_report(capture: Path, options: tuple[str, ...] = ()) -> Measured:
    (capture / "model.json").unlink(missing_ok=True)
    return _timed([*offcpu_command(), "report", "folded", str(capture), *options])


def _timed(argv: list[str]) -> Measured:
    """Run a command to its end with stdout discarded; its wall time and peak memory."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    peaks = [0, 0, 0]
    try:
        while process.poll() is None:
            peaks = [max(peak, now) for peak, now in zip(peaks, _tree_kb(process.pid), strict=True)]
            time.sleep(SAMPLE_EVERY_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    seconds = time.monotonic() - start
    if process.returncode != 0:
        assert process.stderr is not None  # a pipe
        raise BenchError(f"{' '.join(argv[:3])} failed: {process.stderr.read().decode().strip()[-300:]}")
    return Measured(seconds, *(kb / 1024 for kb in peaks))


def _tree_kb(root: int) -> tuple[int, int, int]:
    """Memory of a process tree, in KiB: the largest of offcpu's processes (resident), all
    of them (proportional: pages shared by forked workers count once), and perf's own
    (anonymous) memory: perf and offcpu's core map perf.data, and those pages are the page
    cache, shared by every reader, not memory either allocated."""
    largest = together = perf = 0
    for pid in [root, *descendants(root)]:
        if comm(pid) in PERF_COMMS:
            perf += _kb(_fields(f"/proc/{pid}/status"), "RssAnon")
        else:
            resident, proportional = _own_kb(pid)
            largest = max(largest, resident)
            together += proportional
    return largest, together, perf


def _own_kb(pid: int) -> tuple[int, int]:
    """A process's resident and proportional KiB, but the perf.data it maps: its mappings'
    sums, read at once (the perf.data's mapping may go between two reads)."""
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return 0, 0
    resident = proportional = 0
    counted = True
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.endswith(":"):  # a mapping's first line: its addresses, ..., its file
            counted = not rest.rstrip().endswith("/perf.data")
        elif counted and name == "Rss:":
            resident += int(rest.split()[0])
        elif counted and name == "Pss:":
            proportional += int(rest.split()[0])
    return resident, proportional


def _fields(path: str) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _kb(fields: dict[str, str], name: str) -> int:
    return int(fields.get(name, "0 kB").split()[0])


def _stages(capture: Path) -> dict[str, float]:
    """CPU seconds of each stage of a cold report, one after the other in this process."""
    from offcpu.capture import load
    from offcpu.diagnosis.context import Context
    from offcpu.diagnosis.findings import findings
    from offcpu.diagnosis.locktable import default_table
    from offcpu.diagnosis.waitgraph import wait_graph
    from offcpu.kinds import kind_of
    from offcpu.model.engine import threads_at_start, to_model
    from offcpu.model.stackview import StackView
    from offcpu.reading.readers import open_reader  # offcpu's own modules, in this process: see the docstring
    from offcpu.renderers.flame import stack_lines

    info = load(capture)
    window = (info.window_start_ns, info.window_end_ns)
    started = time.process_time()
    reader = open_reader(kind_of(info), capture, info, None).reader
    slices = reader.time_slices(*window, os.cpu_count() or 1)
    headers = time.process_time() - started
    started = time.process_time()
    paired = reader.pair(slices, window, threads_at_start(info), window, info.switch_cost_ns or 0)
    pair = time.process_time() - started
    started = time.process_time()
    model = to_model(paired, reader, info, *window)
    symbolize = time.process_time() - started
    started = time.process_time()
    with open(os.devnull, "w") as output:
        output.writelines(f"{line}\n" for line in stack_lines(model, StackView()))
    write = time.process_time() - started
    started = time.process_time()
    findings(model, table=default_table())
    wait_graph(Context(model, default_table()))
    diagnose = time.process_time() - started
    return {"headers": headers, "pair": pair, "symbolize": symbolize, "write": write,
            "diagnose": diagnose}


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _show(number: int, what: str, measured: Measured) -> Measured:
    memory = f"{measured.perf_mb:.0f} MB" if not measured.largest_mb else \
        f"{measured.largest_mb:.0f} MB / {measured.offcpu_mb:.0f} MB"
    print(f"{number:>3}  {what:<30}  {measured.seconds:>7.2f}  {memory}", flush=True)
    return measured
