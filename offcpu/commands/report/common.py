"""What the report formats share: the capture argument, the view options, loading with progress."""

from __future__ import annotations

import math
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from offcpu import _core
from offcpu.capture import METADATA, is_file_of
from offcpu.errors import OffcpuError
from offcpu.files import invoking_uid, not_regular, open_directory, write_whole
from offcpu.model import Model
from offcpu.model.loading import READERS, build, cached_model
from offcpu.model.stackview import StackView
from offcpu.model.summaries import unreadable_note, untrusted
from offcpu.stdout import ReaderGone, write_stdout

# Not click's readable check: loading the capture says what cannot be read, and how to read it.
capture_argument = click.argument("capture", type=click.Path(path_type=Path, readable=False))
# The states perf prints as prev_state ('?': waiting since before the recording, state unknown).
TASK_STATES = (*_core.STATE_LETTERS, "?")
renderer_option = click.option(
    "--flamegraph", "flamegraph_path", metavar="PATH",
    help="Draw with this flamegraph.pl or inferno-flamegraph, or the one in this directory "
         "[default: see 'svg --help'].")


# What an output that is not a file is, said in a refusal.
_NOT_FILES = {stat.S_IFBLK: "a block device (a disk)", stat.S_IFSOCK: "a socket",
              stat.S_IFCHR: "a device other than a terminal or /dev/null",
              stat.S_IFIFO: "a pipe (FIFO) another user owns"}
TERMINAL_MAJORS = frozenset({4, 5, *range(136, 144)})  # /dev/tty*, /dev/tty and /dev/console, /dev/pts/*
_STREAM = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def output_options(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """-o and --force; `default` says where the report goes without -o."""
    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        function = click.option("--force", is_flag=True, help="Replace the output file if it exists.")(function)
        return click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
                            help=f"Write the report to this file [default: {default}].")(function)
    return decorate


@dataclass(frozen=True)
class ReportFile:
    """A file a report or a verdict goes to, checked before any work (see checked_output)."""

    path: Path
    option: str  # how it was given: -o, --json, --junit
    reading: tuple[Path, ...]  # what it is made from: captures, baselines, folded files
    force: bool  # an existing file may be replaced
    directory: int | None  # a descriptor of the directory it goes to, opened when checked; None for a stream

    def write(self, content: str | bytes) -> None:
        """Write whole or not at all, then say where. A new file is made in the directory that was
        checked and renamed over the name, so that a symbolic link there is replaced, never
        written through, and a file that appeared since the check is replaced only with --force;
        it is no more readable than what it was made from (a capture is its owner's alone). A
        stream (see _stream_kind) is written to."""
        try:
            if self.directory is None:
                self._write_stream(content)
            else:
                write_whole(self.path, content, mode=_permissions_of(self.reading), replace=self.force,
                            directory=self.directory)
        except FileExistsError:
            raise OffcpuError(f"{self.path} appeared while the report was made; pass --force to replace it or "
                              f"choose another file with {self.option}") from None
        except OSError as error:
            raise OffcpuError(f"cannot write {self.path} ({error.strerror}); choose another place with "
                              f"{self.option}") from None
        click.echo(f"Wrote {self.path}", err=True)

    def _write_stream(self, content: str | bytes) -> None:
        """Through offcpu's own descriptor when the path leads to one (so that `-o /dev/stdout >
        FILE` writes where the shell set it up, and never truncates), else opened anew."""
        descriptor = _own_descriptor(self.path)
        fd = os.dup(descriptor) if descriptor is not None else os.open(self.path, _STREAM)
        data = content.encode() if isinstance(content, str) else content
        try:
            with open(fd, "wb") as stream:
                if descriptor is None and stat.S_IFMT(os.fstat(fd).st_mode) != _stream_kind(self.path):
                    raise not_regular(self.path)  # swapped for a file since the check: never written into
                stream.write(data)
        except BrokenPipeError:
            raise ReaderGone from None  # `-o /dev/stdout | head`: ends as `| head` always does


def output_path(capture: Path, output: Path | None, suffix: str, force: bool,
                reading: tuple[Path, ...] = ()) -> ReportFile:
    """Where a report file made from `capture` (and `reading`) goes: -o, or CAPTURE.suffix beside
    the capture directory (resolved first: '.' and '..' have no name to add the suffix to)."""
    if output is None:
        resolved = capture.resolve()
        output = resolved.with_name(resolved.name + suffix)
    return checked_output(output, force, (capture, *reading))


def checked_output(path: Path, force: bool, reading: tuple[Path, ...], option: str = "-o") -> ReportFile:
    """Checked before any work: never one of the files it is made from (`reading`); an existing
    file or symbolic link is replaced only with --force, and a stream (see _stream_kind) is
    written to; anything else there, and any file in /dev or /proc, is refused. `option` names
    where the path was given."""
    refuse_to_overwrite(path, reading, option)
    if _own_descriptor(path) is not None or _stream_kind(path) is not None:
        return ReportFile(path, option, reading, force, None)
    try:
        kind: int | None = stat.S_IFMT(path.lstat().st_mode)
    except OSError:
        kind = None  # nothing there yet, or said when written
    if kind == stat.S_IFDIR:
        raise OffcpuError(f"{path} is a directory; give a file name with {option}")
    if kind not in (None, stat.S_IFREG, stat.S_IFLNK):
        raise OffcpuError(f"{path} is {_NOT_FILES.get(kind, 'not a regular file')}, which offcpu never writes "
                          f"to; give a file name with {option}")
    if Path(os.path.realpath(path.parent)).parts[1:2] in (("dev",), ("proc",)):
        raise OffcpuError(f"{path} is no stream offcpu can write to (a closed descriptor?), and offcpu makes no file "
                          f"in /dev or /proc; give a file name with {option}")
    if kind is not None and not force:
        raise OffcpuError(f"{path} exists; pass --force to replace it or choose another file with {option}")
    try:
        return ReportFile(path, option, reading, force, open_directory(path))
    except OSError as error:
        raise OffcpuError(f"cannot write {path} ({error.strerror}); choose another place with {option}") from None


def refuse_to_overwrite(output: Path, reading: tuple[Path, ...], option: str) -> None:
    """What a command writes is never what it reads, with or without --force: not a file or
    directory it reads, nor a file of a capture it reads (C/perf.data, C/capture.json)."""
    for given in reading:
        if same_file(output, given):
            raise OffcpuError(f"{output} is {given}, which this command reads and would destroy; choose another "
                              f"with {option}")
        if given.is_dir() and is_file_of(output, given):
            raise OffcpuError(f"{output} is a file of the capture {given}, which this command reads and would "
                              f"leave unreadable; choose a file outside it with {option}")


def _own_descriptor(path: Path) -> int | None:
    """The descriptor of offcpu's that `path`, a symbolic link, leads to: /dev/stdout, /dev/fd/3,
    a shell's >(command)."""
    if not path.is_symlink():
        return None
    try:
        target = path.stat()
    except OSError:
        return None  # a closed descriptor, or a link to nothing
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.path.samestat(target, os.fstat(int(name))):
                return int(name)
        except OSError:
            continue  # the directory's own descriptor, closed by now
    return None


def _stream_kind(path: Path) -> int | None:
    """stat.S_IFIFO or S_IFCHR if `path` is a stream to write to rather than a file to replace:
    a pipe that root or the user running offcpu owns (another user's FIFO is no place for a
    report of root's), or /dev/null or a terminal (not any device: opening one may do something)."""
    try:
        status = path.lstat()
    except OSError:
        return None
    if stat.S_ISFIFO(status.st_mode) and status.st_uid in (0, os.getuid(), invoking_uid()):
        return stat.S_IFIFO
    if stat.S_ISCHR(status.st_mode) and (status.st_rdev == os.stat(os.devnull).st_rdev
                                         or os.major(status.st_rdev) in TERMINAL_MAJORS):
        return stat.S_IFCHR
    return None


def _permissions_of(reading: tuple[Path, ...]) -> int:
    """The permissions all of `reading` share: a capture's are its capture.json's (the owner's
    alone, as recorded), a file's its own."""
    permissions = 0o666
    for given in reading:
        try:
            permissions &= stat.S_IMODE((given / METADATA if given.is_dir() else given).stat().st_mode)
        except OSError:
            pass  # gone, or not recorded yet: nothing to match
    return permissions


def same_file(first: Path, second: Path) -> bool:
    """Whether two paths name one file: spelt alike or not, through symbolic or hard links."""
    if first.resolve() == second.resolve():
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet): different files
        return False


def print_or_write(text: str, output: ReportFile | None) -> None:
    """Reports for the terminal and for scripts go to stdout unless -o names a file."""
    if output is None:
        write_stdout(text)
    else:
        output.write(text)


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()] if value else []


def _integers(value: str | None, option: str) -> frozenset[int]:
    try:
        return frozenset(int(item) for item in _split(value))
    except ValueError:
        raise click.BadParameter("give numbers separated by commas", param_hint=option) from None


def parse_time(value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        start, end = (float(item) for item in value.split(","))
    except ValueError:
        raise click.BadParameter("give START,END in seconds from the start of the recording, e.g. 1.5,3",
                                 param_hint="--time") from None
    if not (math.isfinite(start) and math.isfinite(end)):  # nan, inf, and what overflows to it (1e400)
        raise OffcpuError(f"--time {value}: give START and END as finite numbers of seconds from the start of the "
                          "recording, e.g. 1.5,3 (an END past the recording's end means its end)")
    return start, end


def view_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options that choose and draw stacks; the command receives them as `view`."""
    options = [
        click.option("--by-thread", is_flag=True, help="Root each stack at its thread (comm-tid), not its comm."),
        click.option("--state", help="Only these switch-out states, e.g. D or S,D (R: preempted while runnable)."),
        click.option("--min-us", type=click.IntRange(min=0), default=0, help="Leave out stacks under N microseconds."),
        click.option("--user-only", is_flag=True, help="Only user-space frames."),
        click.option("--kernel-only", is_flag=True, help="Only kernel frames."),
        click.option("--waker", is_flag=True,
                     help="Append '--' and the waker's stack (leaf first) above each blocked stack."),
        click.option("--pid", help="Only these processes (comma-separated pids)."),
        click.option("--tid", help="Only these threads (comma-separated tids)."),
        click.option("--comm", help="Only threads with these names (comma-separated)."),
        click.option("--time", "time_range", metavar="START,END",
                     help="Only this part of the recording, in seconds from its start."),
        click.option("--locks", type=click.Path(path_type=Path, dir_okay=False),
                     help="A TOML file of [[lock]] entries (name, kind, wait = [frame globs], ...) that name your "
                          "program's own wait sites, tried before offcpu's lock table; a check's policy file will "
                          "do. The keys: docs/locks.md in offcpu's repository."),
        click.option("--reader", type=click.Choice(READERS),
                     help="Read perf.data directly (native) or through perf script [default: native, or perf "
                          "script where only it can: --call-graph dwarf captures]."),
    ]
    for option in reversed(options):
        function = option(function)

    def with_view(by_thread: bool, state: str | None, min_us: int, user_only: bool, kernel_only: bool,
                  waker: bool, pid: str | None, tid: str | None, comm: str | None, time_range: str | None,
                  locks: Path | None, reader: str | None, **rest: Any) -> Any:
        if user_only and kernel_only:
            raise click.UsageError("--user-only and --kernel-only exclude each other")
        unknown = [given for given in _split(state) if given.rstrip("+") not in TASK_STATES]
        if unknown:
            raise click.BadParameter(f"{', '.join(unknown)} is not a task state; give letters among "
                                     f"{', '.join(TASK_STATES)}", param_hint="--state")
        view = StackView(
            time=parse_time(time_range), states=frozenset(state.rstrip("+") for state in _split(state)),
            pids=_integers(pid, "--pid"), tids=_integers(tid, "--tid"), comms=frozenset(_split(comm)),
            by_thread=by_thread, user_only=user_only, kernel_only=kernel_only, waker=waker, min_us=min_us,
            reader=reader, locks=locks,
        )
        if locks is not None:
            from offcpu.diagnosis.locktable import lock_table  # only then: the reports without findings need none

            lock_table(locks)  # a wrong file is said before any work
        return function(view=view, **rest)

    with_view.__doc__ = function.__doc__
    with_view.__name__ = function.__name__
    with_view.__click_params__ = getattr(function, "__click_params__", [])  # type: ignore[attr-defined]
    function.__click_params__ = []  # type: ignore[attr-defined]
    return with_view


def load_with_progress(capture: Path, time: tuple[float, float] | None, reader: str | None = None) -> Model:
    """The capture's model (see read_with_progress), and a warning on stderr when part of
    perf.data could not be read; an error when what it could not read left no wait at all
    (one line, not the warning and then "no off-CPU intervals")."""
    model = read_with_progress(capture, time, reader)
    unread = unreadable_note(model)
    if unread and untrusted(model) and not any(row.offcpu_us for row in model.rows):
        raise OffcpuError(unread)
    warn_if_unread(model)
    return model


def read_with_progress(capture: Path, time: tuple[float, float] | None, reader: str | None = None) -> Model:
    """The capture's model, with a transient progress line on a terminal while its recording is
    read (not when the saved model is used: that takes no time worth showing)."""
    model = cached_model(capture, time, reader)
    if model is None and sys.stderr.isatty():
        from rich.console import Console  # only where progress is drawn: 40 ms of a report's start

        with Console(stderr=True).status("Reading the recording...") as status:
            def show(done: int, total: int) -> None:
                status.update(f"Reading the recording: {done} of {total} time slices done...")

            model = build(capture, time, reader, show)
    elif model is None:
        model = build(capture, time, reader)
    return model


def warn_if_unread(model: Model) -> None:
    """A warning on stderr when part of perf.data could not be read (see summaries.unreadable_note)."""
    unread = unreadable_note(model)
    if unread:
        click.echo(f"offcpu: warning: {unread}", err=True)
