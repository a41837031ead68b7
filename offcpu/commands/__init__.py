"""The subcommands, listed once."""

from offcpu.commands.check import check
from offcpu.commands.doctor import doctor
from offcpu.commands.record import record
from offcpu.commands.report import report

COMMANDS = [record, doctor, report, check]
