"""The command group, and the one place errors become exit codes (offcpu.cli starts it)."""

from __future__ import annotations

import os
import signal
import sys

import click

from offcpu import EXIT_INTERRUPTED, INTERRUPTED_MESSAGE, __version__
from offcpu.commands import COMMANDS, LazyGroup
from offcpu.stdout import ClosedStdout, ReaderGone


class _Group(LazyGroup):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # stderr's reader went away (stdout's is told by write_stdout)
            raise ReaderGone from None


@click.group(cls=_Group, commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="offcpu")
def cli() -> None:
    """Why are my threads not running?

    offcpu records a process's switches and wakeups at the scheduler's
    tracepoints for a bounded time (with BPF, or perf), works out where its
    threads wait while they are off CPU, and names the contention it finds.

    \b
    Typical use:
      offcpu doctor --pid 1234        can recording work here?
      offcpu record --pid 1234        record 5 seconds of one process
      offcpu report text CAPTURE      where its threads waited, and why
      offcpu check -- ./bench         a CI gate: exit 1 on contention
    """


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (usage errors are 2, as in click)."""
    if sys.stdout is None:
        sys.stdout = ClosedStdout()
    try:
        # Without standalone mode, click returns ctx.exit()'s code instead of exiting.
        code = cli.main(args=argv, prog_name="offcpu", standalone_mode=False)
    except click.UsageError as error:
        command = error.ctx.command_path if error.ctx else "offcpu"
        click.echo(f"offcpu: error: {error.format_message()} (see '{command} --help')", err=True)
        return error.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        click.echo(INTERRUPTED_MESSAGE, err=True)
        return EXIT_INTERRUPTED
    except ReaderGone:
        _discard_output()
        return 128 + signal.SIGPIPE  # what a shell shows for a program SIGPIPE ended, as it ends cat or grep
    except Exception as error:  # a bug: one line and 2, never 1, which `check` means as a finding
        click.echo(f"offcpu: error: offcpu failed ({_where(error)}: {type(error).__name__}: {error}); this is a bug "
                   "in offcpu: please report it with the command that led to it", err=True)
        return 2
    return code if isinstance(code, int) else 0


def _where(error: Exception) -> str:
    """The file and line of offcpu's where `error` was raised, for the report of a bug."""
    import traceback  # for a bug only: with linecache and tokenize, 3 ms of every start

    frames = traceback.extract_tb(error.__traceback__)
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "unknown"


def _discard_output() -> None:
    """What is still buffered for stdout or stderr goes nowhere, instead of failing again as Python
    exits: there is nothing more to say, and nobody to say it to."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
