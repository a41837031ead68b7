"""Text for the terminal, made the same way by every renderer: a rich console
writing into a string, coloured and as wide as the terminal on one, plain and
stable (COLUMNS or 100 wide) in pipes, files and CI logs."""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Iterable

from rich.console import Console, RenderableType

PLAIN_WIDTH = 100


def stdout_layout(to_file: bool = False) -> tuple[int, bool]:
    """(width, colour) for text bound for stdout, or for a file with `to_file`. NO_COLOR is respected."""
    terminal = not to_file and sys.stdout.isatty()
    width = shutil.get_terminal_size((PLAIN_WIDTH, 24)).columns if terminal else _columns()
    return width, terminal and "NO_COLOR" not in os.environ


def _columns() -> int:
    """COLUMNS when it is a positive number; PLAIN_WIDTH when it is unset, empty or anything else."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdecimal() and int(columns) > 0 else PLAIN_WIDTH


def printed(parts: Iterable[RenderableType], width: int, color: bool, gap: bool = False) -> str:
    """`parts` as text, a blank line after each with `gap`."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, no_color=not color, highlight=False,
                      soft_wrap=False, emoji=False)
    for part in parts:
        console.print(part)
        if gap:
            console.print()
    # rich pads titles to the table's width: trailing blanks would make the text unstable to diff
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").split("\n")) + "\n"
