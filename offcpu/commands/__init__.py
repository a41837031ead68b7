"""The subcommands, listed once, each imported only when it runs (or --help lists it): a
report need not load the recording's modules, nor numpy."""

from __future__ import annotations

import click


class LazyGroup(click.Group):
    """A group of commands named by where they are (`module:attribute`)."""

    def __init__(self, *args: object, commands: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.lazy.get(cmd_name)
        if where is None:
            return None
        module, attribute = where.split(":")
        # __import__, as an import statement does: importlib.import_module takes another path,
        # which -X importtime does not report
        command: click.Command = getattr(__import__(module, fromlist=[attribute]), attribute)
        return command


COMMANDS = {
    "record": "offcpu.commands.record:record",
    "doctor": "offcpu.commands.doctor.command:doctor",
    "report": "offcpu.commands.report:report",
    "check": "offcpu.commands.check:check",
    "top": "offcpu.commands.top:top",
}
