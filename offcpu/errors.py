"""The one error type: offcpu could not do what was asked."""

from __future__ import annotations

import click

from offcpu import EXIT_INTERRUPTED, INTERRUPTED_MESSAGE

TROUBLESHOOTING = "docs/troubleshooting.md"


def more_in(anchor: str) -> str:
    """Where offcpu's troubleshooting page says more, to end a message with."""
    return f" (more: {TROUBLESHOOTING}#{anchor} in offcpu's repository)"


class OffcpuError(click.ClickException):
    """A problem the user can fix. Exit code 2, so it is never mistaken for
    exit 1 ("offcpu found a problem in your program")."""

    exit_code = 2

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"offcpu: error: {self.format_message()}", err=True, file=file)


class Interrupted(OffcpuError):
    """A signal (Ctrl-C, SIGTERM, SIGHUP) stopped offcpu before it did what was asked, though
    what it did is kept: exit 130, as for any interruption."""

    exit_code = EXIT_INTERRUPTED

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"{INTERRUPTED_MESSAGE}: {self.format_message()}", err=True, file=file)
