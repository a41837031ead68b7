"""offcpu record: a bounded perf recording of where threads wait."""

from __future__ import annotations

import functools
import math
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from offcpu.capture import KERNEL_SYMBOLS, CaptureInfo, Target, load_snapshot
from offcpu.commands.keeping import FLIGHT_OUTPUT, KEEP_SIZE, MAX_KEEP_S, TRIGGER, seconds
from offcpu.diagnosis.wording import counted
from offcpu.errors import OffcpuError, more_in
from offcpu.escaping import printable
from offcpu.kinds import kind_of, lost_note
from offcpu.machine import system
from offcpu.reading.describe import describe
from offcpu.recording import runtime_stacks, targets
from offcpu.recording.backends import BACKENDS, chosen_for_me
from offcpu.recording.end_watch import SIZE, SIZE_UNITS
from offcpu.recording.output_dir import output_taken
from offcpu.recording.perf_process import COMMAND_GRACE_S
from offcpu.recording.recorder import record as record_capture
from offcpu.recording.request import RecordRequest
from offcpu.recording.targets import Choice

MAX_DURATION_S = 600.0
DEFAULT_DURATION_S = 5.0
MAX_DWARF_BYTES = 65528  # perf record's largest user stack copy
CALL_GRAPH_PATTERN = re.compile(r"^(fp|dwarf(,\d+)?)$")
MAX_SIZE_BYTES = (1 << 64) - 1  # perf counts in an unsigned long
# perf.data starts with the target's threads and memory maps before any event: tens of KB,
# hundreds for the whole machine.
MIN_MAX_SIZE_MIB = 1
UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._+-]")
# Stacks per second per CPU that a BPF recording takes at most: nginx under wrk kept 0.93x
# of its throughput at 4,000 and 0.87x at 20,000 (docs/benchmarks.md)
DEFAULT_STACK_BUDGET = 5_000
# record --keep looks at its triggers every second, over the last 10 s (as top by default)
KEEP_INTERVAL_S, KEEP_WINDOW_S = 1.0, 10.0
MAX_STACK_BUDGET = 1_000_000_000  # more than any CPU switches in a second: every stack (and within the core's u32)


def _pid_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    """PID[,PID...], as perf takes them."""
    if value is None:
        return ()
    words = value.split(",")
    if not all(word.strip().isdecimal() and int(word) > 0 for word in words):
        raise click.BadParameter(f"give process ids separated by commas, such as 1234,1240, not {value!r}")
    return tuple(dict.fromkeys(int(word) for word in words))


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name or path: an empty one (a shell variable left unset) names nothing."""
    if value == "":
        raise click.BadParameter(f"give a {param.metavar}, not an empty one")
    return value


# How a recording's target is given, in record and check alike; the names are Choice's.
TARGET_OPTIONS = (
    click.option("--pid", "-p", "pids", metavar="PID[,PID...]", callback=_pid_list,
                 help="Record these processes, with the threads and processes they start while recorded."),
    click.option("--tree", "trees", metavar="PID[,PID...]", callback=_pid_list,
                 help="Record these processes and their descendants: those running at the start, and those they "
                      "start while recorded."),
    click.option("--comm", metavar="NAME", callback=_not_empty,
                 help="Record every process named NAME (as 'ps -e' shows it) at the start, and what they start; one "
                      "of that name that another process starts meanwhile is not recorded, and offcpu says so."),
    click.option("--exe", metavar="PATH", callback=_not_empty,
                 help="Record every process running the executable PATH at the start, and what they start (as "
                      "--comm)."),
    click.option("--tid", "-t", type=int, help="Record one thread."),
    click.option("--cgroup", "-G", metavar="PATH", callback=_not_empty,
                 help="Record every process of a cgroup v2 (a container's, a slice's) and of the cgroups below it, as "
                      "/proc/PID/cgroup names it, whatever joins it meanwhile; through perf's cgroup filter on every "
                      "CPU."),
    click.option("--unit", metavar="NAME", callback=_not_empty,
                 help="Record a systemd unit's cgroup (systemd says which)."),
    click.option("--all-cpus", "-a", is_flag=True, help="Record every thread on the machine."),
)


def target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(TARGET_OPTIONS):
        command = option(command)
    return command


@dataclass(frozen=True)
class Settings:
    """How to record, as record and check take it (RECORDING_OPTIONS, defined once here)."""

    duration_s: float | None  # None: not given (see request)
    no_limit: bool
    max_size: str
    call_graph: str
    mmap_pages: str | None
    enable_schedstats: bool
    no_snapshot: bool
    backend: str
    stack_budget: int

    def request(self, target: Target, output: Path, default_duration_s: float = DEFAULT_DURATION_S) -> RecordRequest:
        duration_s = default_duration_s if self.duration_s is None else self.duration_s
        return RecordRequest(target, output, duration_s, self.max_size, self.call_graph, self.mmap_pages,
                             self.enable_schedstats, snapshot=not self.no_snapshot, backend=self.backend,
                             stack_budget=self.stack_budget)


RECORDING_OPTIONS = (
    click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                 help="How to record: bpf times every switch and wakeup in the kernel and takes stacks under "
                      "--stack-budget (a few percent of a busy server's throughput); perf records every event with "
                      "its stack (exact stacks of every wait, and --call-graph dwarf; it can halve a busy server's "
                      "throughput); auto is bpf where the kernel allows it, else perf."),
    click.option("--stack-budget", type=click.IntRange(min=1, max=MAX_STACK_BUDGET), default=DEFAULT_STACK_BUDGET,
                 show_default=True, metavar="STACKS",
                 help="bpf: stacks to take per second on each CPU at most; above it, waits are sampled and the "
                      "time per stack is an estimate (reports say how many waits carry a stack, and the ±)."),
    click.option("--no-limit", is_flag=True, help=f"Allow --duration above {MAX_DURATION_S:.0f} s."),
    click.option("--max-size", default="512M", show_default=True,
                 help="Stop when the recording (perf.data, or BPF's records) reaches this size (B/K/M/G)."),
    click.option("--call-graph", default="fp", show_default=True,
                 help="How user stacks are walked: fp (cheap) or dwarf[,BYTES] (perf only: full user stacks through "
                      "libraries built without frame pointers; ~10x bigger captures)."),
    click.option("--mmap-pages", "-m",
                 help="perf's ring buffer size in pages (a power of two); raise it when events are lost."),
    click.option("--enable-schedstats", is_flag=True,
                 help="Turn kernel.sched_schedstats on for the recording (and back off afterwards)."),
    click.option("--no-snapshot", is_flag=True,
                 help="Do not read the stacks of threads that did not run during the recording from the live "
                      "process at its end (eu-stack stops each such process for a few milliseconds)."),
)
SETTINGS = tuple(item.name for item in fields(Settings))


def recording_options(duration_default: str = f"{DEFAULT_DURATION_S:g}") -> Callable[..., Any]:
    """RECORDING_OPTIONS and --duration (its default said as `duration_default`) on a command,
    which gets them as one `settings: Settings`, checked."""
    duration = click.option("--duration", "-d", "duration_s", type=float,
                            help=f"Seconds to record at most; more than {MAX_DURATION_S:.0f} needs --no-limit "
                                 f"[default: {duration_default}].")

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        def with_settings(**given: Any) -> Any:
            settings = Settings(**{name: given.pop(name) for name in SETTINGS})
            check_bounds(settings)
            return command(settings=settings, **given)

        functools.update_wrapper(with_settings, command)
        for option in reversed((*RECORDING_OPTIONS[:2], duration, *RECORDING_OPTIONS[2:])):
            with_settings = option(with_settings)
        return with_settings

    return decorate


def settings_given(ctx: click.Context) -> list[str]:
    """The recording options given on the command line (not left to their defaults)."""
    return ["--" + name.removesuffix("_s").replace("_", "-") for name in SETTINGS
            if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]


def _capture_directory(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A capture is a directory: it cannot go to stdout, and a directory named '-' is a mistake."""
    if value is not None and str(value) == "-":
        raise click.BadParameter("a capture is a directory of files, so it cannot go to stdout; give a directory, "
                                 "for example -o capture", param_hint="--output")
    return value


def output_option(help_text: str) -> Callable[..., Any]:
    return click.option("--output", "-o", type=click.Path(path_type=Path), callback=_capture_directory,
                        help=f"{help_text} [default: offcpu-COMM-PID-TIME].")


@click.command()
@target_options
@recording_options()
@output_option("Capture directory")
@click.option("--force", is_flag=True, help="Replace an existing capture at --output.")
@click.option("--keep", "keep_s", type=float, callback=lambda ctx, param, value: None if value is None else
              seconds(ctx, param, value), metavar="SECONDS",
              help="A flight recorder: record until stopped (or the target ends), keep the last SECONDS in memory, "
                   "and write them as a capture on SIGUSR1 or when a --trigger holds (BPF only; no --output).")
@KEEP_SIZE
@TRIGGER
@FLIGHT_OUTPUT
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS]...]")
def record(settings: Settings, output: Path | None, force: bool, keep_s: float | None, keep_bytes: int,
           triggers: tuple[Any, ...], flight_output: Path, command: tuple[str, ...], **chosen: Any) -> None:
    """Record where threads wait while they are off CPU.

    Times every switch and wakeup of the target's threads at the
    scheduler's tracepoints, with their call stacks, for --duration seconds
    at most, and writes a capture directory: capture.json and the
    recording, BPF's wait records and stacks (bpf-records.bin,
    bpf-stacks.bin) or perf's perf.data (see --backend).
    Ctrl-C ends the recording early and still leaves a complete capture.
    Threads that never run while it records (deadlocked, stuck on a lock,
    idle) leave no event: their stacks are read from the live process at the
    end (the kernel's from /proc, the user's with elfutils' eu-stack).

    \b
    Choose a target (processes may be named several ways at once):
      offcpu record --pid 1234                 a running process
      offcpu record --pid 1234,1240            several
      offcpu record --tree 1234                a process and its descendants (a server's workers)
      offcpu record --comm memcached           every process of a name
      offcpu record --exe /usr/sbin/nginx      every process of an executable
      offcpu record --tid 1240                 one thread
      offcpu record --cgroup /system.slice/nginx.service   a cgroup v2
      offcpu record --unit nginx.service       a systemd unit
      offcpu record -a --duration 2            the whole machine
      offcpu record -- ./server --port 8080    a command, until it exits

    \b
    Any target with a command records the target while the command runs:
      offcpu record --tree 1234 -- wrk -d 10s http://127.0.0.1:8080/
    """
    target = resolve_target(Choice(command=command, **chosen))
    if keep_s is not None:
        _keep(target, settings, keep_s, keep_bytes, triggers, flight_output, output)
        return
    record_into(settings.request(target, output or default_output(target)), force)


def _keep(target: Target, settings: Settings, keep_s: float, keep_bytes: int, triggers: tuple[Any, ...],
          flight_output: Path, output: Path | None) -> None:
    """record --keep: a live recording with no view, its flight records said on stderr as they are written."""
    from offcpu.live.follow import LiveOptions
    from offcpu.live.session import run_live

    given = [name for name in settings_given(click.get_current_context()) if name != "--stack-budget"]
    if given or output is not None:
        raise click.UsageError(f"{', '.join(given or ['--output'])} cannot go with --keep: a flight recorder "
                               "records with BPF until it is stopped, and writes its captures in --flight-output")
    if keep_s > MAX_KEEP_S:
        raise click.BadParameter(f"at most {MAX_KEEP_S:.0f} s", param_hint="--keep")
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"Watching {target.describe()}: the last {keep_s:g} s kept; SIGUSR1 writes them"
                  + "".join(f", and --trigger {trigger.text}" for trigger in triggers) + ". Ctrl-C ends.",
                  markup=False)
    options = LiveOptions(KEEP_INTERVAL_S, min(KEEP_WINDOW_S, keep_s), keep_s, keep_bytes, triggers, flight_output,
                          "record --keep")
    # No view: the window's model is built only for the triggers, each second
    run_live(target, options, settings.stack_budget, None,
             on_flight=lambda path: console.print(f"flight record: {printable(str(path))}", markup=False))


def record_into(request: RecordRequest, force: bool, suggest_report: bool = True) -> CaptureInfo:
    """Record into request.output (replacing a capture there only with `force`),
    with a countdown on a terminal, and print the summary (with the report to run
    next, unless the caller goes on by itself)."""
    with output_taken(request.output, force) as directory:
        info = _record_with_progress(replace(request, output=directory))
    _print_summary(info, request, suggest_report)
    return info


def targets_given(choice: Choice) -> list[str]:
    """The kinds of target `choice` names, but for a command."""
    return [name for name, given in (
        ("processes (--pid, --tree, --comm, --exe)",
         bool(choice.pids or choice.trees) or choice.comm is not None or choice.exe is not None),
        ("--tid", choice.tid is not None), ("--cgroup", choice.cgroup is not None),
        ("--unit", choice.unit is not None), ("-a", choice.all_cpus)) if given]


def resolve_target(choice: Choice) -> Target:
    """The target `choice` names, checked against the machine."""
    given = targets_given(choice)
    if len(given) > 1:
        raise click.UsageError(f"more than one target ({', '.join(given)}): give processes (--pid, --tree, --comm, "
                               "--exe, together if need be) or one of --tid, --cgroup, --unit, -a; any of them may "
                               "come with -- COMMAND")
    if not given and not choice.command:
        raise click.UsageError("no target: give --pid, --tree, --comm, --exe, --tid, --cgroup, --unit, -a, "
                               "or -- COMMAND")
    if choice.command:
        _check_runnable(choice.command[0])
    return targets.resolve(choice)


def _check_runnable(program: str) -> None:
    """A program that perf can start: on PATH, or a path to an executable file."""
    if shutil.which(program) is not None:
        return
    if "/" not in program:  # looked up on PATH, as perf will
        raise OffcpuError(f"command not found: {program} (give a path or a program on PATH)")
    path = Path(program)
    if path.is_dir():
        raise OffcpuError(f"{program} is a directory, not a program; give the program to run after --")
    if path.exists():
        raise OffcpuError(f"{program} is not executable: make it so (chmod +x {program}), or run it through its "
                          f"interpreter (-- sh {program})")
    raise OffcpuError(f"{program}: no such file; check the path of the program to run after --")


def check_bounds(settings: Settings) -> None:
    if settings.duration_s is not None:  # the defaults are within bounds
        _check_duration(settings.duration_s, settings.no_limit)
    _check_max_size(settings.max_size)
    call_graph, mmap_pages = settings.call_graph, settings.mmap_pages
    shape = CALL_GRAPH_PATTERN.match(call_graph)
    if not shape:
        raise click.BadParameter("give fp, dwarf or dwarf,BYTES (for example dwarf,16384)", param_hint="--call-graph")
    if shape[2] and not 0 < int(shape[2][1:]) <= MAX_DWARF_BYTES:
        raise click.BadParameter(f"perf copies 1 to {MAX_DWARF_BYTES} bytes of stack (default 8192); give for "
                                 "example dwarf,16384", param_hint="--call-graph")
    if mmap_pages is not None:
        _check_mmap_pages(mmap_pages)


def _check_duration(duration: float, no_limit: bool) -> None:
    if not math.isfinite(duration):
        raise click.BadParameter(f"give a number of seconds, not {duration}", param_hint="--duration")
    if duration <= 0:
        raise click.BadParameter("must be more than 0 seconds", param_hint="--duration")
    if duration > MAX_DURATION_S and not no_limit:
        # as given: 600.0001 is not "600"
        raise click.BadParameter(f"{repr(duration).removesuffix('.0')} s is more than {MAX_DURATION_S:.0f} s; add "
                                 "--no-limit if you mean it", param_hint="--duration")


def _check_max_size(max_size: str) -> None:
    size = SIZE.match(max_size)
    if not size:
        raise click.BadParameter(f"{max_size!r} is not a size perf takes: give a number and one of B, K, M or G "
                                 "(in capitals), such as 512M or 2G", param_hint="--max-size")
    unit = SIZE_UNITS[size[2]]
    if int(size[1]) > MAX_SIZE_BYTES // unit:
        raise click.BadParameter(f"perf counts sizes up to {MAX_SIZE_BYTES // unit:,}{size[2]}; give at most that, "
                                 "such as 512M or 2G", param_hint="--max-size")
    if int(size[1]) * unit < MIN_MAX_SIZE_MIB << 20:
        raise click.BadParameter(f"{max_size} is too small to hold anything: perf.data starts with the target's "
                                 "threads and memory maps (hundreds of KB for the whole machine) before any event; "
                                 f"give at least {MIN_MAX_SIZE_MIB}M", param_hint="--max-size")


def _check_mmap_pages(mmap_pages: str) -> None:
    """A power of two perf can map here: perf takes more, records nothing, and says nothing."""
    most, why = system.mmap_pages_limit()
    pages = int(mmap_pages) if mmap_pages.isdigit() else 0
    if not 1 <= pages <= most or pages & (pages - 1):
        raise click.BadParameter(f"give a power of two from 1 to {most:,}, for example {min(1024, most)}: {why}",
                                 param_hint="--mmap-pages")


def default_output(target: Target) -> Path:
    """offcpu-COMM-PID-TIME; a thread may name itself anything, so only the
    characters that keep it one plain word of a path are kept."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    pid = f"-{target.pid}" if target.pid is not None else ""
    comm = UNSAFE_IN_NAME.sub("_", target.comm)
    return Path(f"offcpu-{comm}{pid}-{stamp}")


def _record_with_progress(request: RecordRequest) -> CaptureInfo:
    console = Console(stderr=True)
    if not console.is_terminal:
        return record_capture(request, on_tick=lambda elapsed: None, describe_perf_data=describe)
    # the target's name goes in as the task's description: neither markup nor a format string
    columns = (TextColumn("Recording {task.description}", markup=False), BarColumn(),
               TextColumn("{task.fields[left]:.1f} s left"))
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(request.target.describe(), total=request.duration_s, left=request.duration_s)

        def show(elapsed: float) -> None:
            progress.update(task, completed=elapsed, left=request.duration_s - elapsed)

        return record_capture(request, on_tick=show, describe_perf_data=describe)


def _print_summary(info: CaptureInfo, request: RecordRequest, suggest_report: bool) -> None:
    """One line (what was recorded, where, what to run next), then a note for each thing to know."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    ended = "" if info.ended_by == "duration" else f", ended by {info.ended_by}"
    if info.command_cut_short:
        ended = f", ended by {info.ended_by} while the command still ran"
    where = printable(shlex.quote(str(request.output)))
    following = f" Next: offcpu report text {where} (or report svg, html, json, folded)" if suggest_report else ""
    console.print(
        f"Recorded {info.target.describe()} with {info.backend} for {info.duration_actual_s:.1f} s{ended}: "
        f"{kind_of(info).recorded_counts(info)}, {info.perf_data_bytes / 1e6:.1f} MB, {info.lost_events:,} lost, "
        f"in {where}/."
        f"{following}", markup=False)
    for note in _notes(info, request):
        console.print(f"  note: {note}", markup=False)


def _runtimes_left_native(info: CaptureInfo) -> list[str]:
    """What perf's recording leaves native: the recorded processes, still running, that run a
    runtime whose own frames only a BPF recording reads (offcpu.recording.runtime_stacks)."""
    target = info.target
    pids = sorted({*info.processes_at_start.values(), *target.pids, *([target.pid] if target.pid else [])})
    found = [f"{pid} ({runtime})" for pid in pids if (runtime := runtime_stacks.runtime_of(pid)) is not None]
    if not found:
        return []
    more = f" and {len(found) - 5:,} more" if len(found) > 5 else ""
    return [f"the program's own frames (functions, files and lines) of process{'es' * (len(found) > 1)} "
            f"{', '.join(found[:5])}{more} are read only when offcpu records with BPF (the default where the "
            "kernel allows it): this recording shows their native frames alone"]


def cut_short_fix(info: CaptureInfo) -> str:
    """What to do so that a command the recording cut short is recorded to its end."""
    if info.ended_by == "duration":
        return "to record all of it, raise --duration (-d) past the command's run, or shorten the command"
    if info.ended_by == "max size":
        return "to record all of it, raise --max-size, or shorten the command"
    return "record it again, to its end"


def _notes(info: CaptureInfo, request: RecordRequest) -> list[str]:
    notes = [f"recorded with {info.backend}: {info.backend_why}"] if chosen_for_me(request.backend) else []
    if info.cut_short_note:
        notes.append(f"{info.cut_short_note}; {cut_short_fix(info)}")
    if info.command_exit_status:
        status = info.command_exit_status
        notes.append(f"the command exited with status {status}"
                     + (f" (killed by signal {-status})" if status < 0 else ""))
    if info.command_killed:
        notes.append(f"the command (or what it started) did not end within {COMMAND_GRACE_S:.0f} s of the SIGTERM "
                     "that ends it with the recording, so it was killed (SIGKILL)")
    if info.unrecorded_processes:
        strays = info.unrecorded_processes
        listed = ", ".join(f"{pid} ({printable(comm)})" for pid, comm in list(strays.items())[:5])
        more = f" and {len(strays) - 5:,} more" if len(strays) > 5 else ""
        notes.append(f"{len(strays):,} process{'es' * (len(strays) > 1)} of the name or executable given started "
                     "while recording, not by a recorded "
                     f"process, so {'they were' if len(strays) > 1 else 'it was'} not recorded: {listed}{more}; "
                     "a recording follows the processes it records and what they start, not names: record the "
                     "cgroup that holds them all (--cgroup) instead")
    asleep = load_snapshot(request.output)
    if asleep.threads:
        notes.append(f"{counted(len(asleep.threads), 'thread')} did not run during the recording: the stacks "
                     f"{'they' if len(asleep.threads) > 1 else 'it'} slept in were read from the live process at its "
                     f"end ({asleep.user_stacks})")
    elif info.samples == 0:
        notes.append("perf recorded no scheduler event of the target: none of its threads ran during the recording "
                     "(idle, stopped or deadlocked?); reports can only show them off CPU all along, with no stack")
    if lost := lost_note(info):
        notes.append(lost)
    if not kind_of(info).reads_runtimes:
        notes += _runtimes_left_native(info)
    if info.spin_note:
        notes.append(info.spin_note)
    if info.user_stacks_truncated:
        fix = ("give perf a bigger stack copy, for example --call-graph dwarf,32768"
               if request.call_graph.startswith("dwarf") else "record with --call-graph dwarf to see the callers")
        notes.append(f"user stacks stop short of the thread's start (a library without frame pointers, usually "
                     f"libc): {fix}")
    if request.enable_schedstats and info.schedstats == "absent":
        notes.append("--enable-schedstats had nothing to turn on: this kernel is built without CONFIG_SCHEDSTATS")
    if not (request.output / KERNEL_SYMBOLS).exists():
        notes.append("the kernel's symbols could not be saved with the capture (kernel.kptr_restrict hides them): "
                     "its kernel frames are named only on this machine while it runs this kernel, [unknown] elsewhere"
                     + more_in("kernel-frames-are-unknown"))
    return notes
