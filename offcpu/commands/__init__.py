"""The subcommands, listed once."""

from offcpu.commands.doctor import doctor
from offcpu.commands.record import record

COMMANDS = [record, doctor]
