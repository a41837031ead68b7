"""Text for the terminal, made the same way by every renderer: a rich console
writing into a string, coloured and as wide as the terminal on one, plain and
stable (COLUMNS or 100 wide) in pipes, files and CI logs."""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from offcpu.escaping import printable

PLAIN_WIDTH = 100
MIN_WIDTH = 40  # narrower than this, numbers would not fit beside the names and stacks: drawn this wide
# Wider than any terminal; laying out a table costs time and memory in its width (COLUMNS=100000000
# took 20 s and 5 GB to print 10 KB), and stacks this long are whole anyway.
MAX_WIDTH = 1000
UNLIMITED = sys.maxsize  # the width a cell takes when nothing constrains it


def stdout_layout(to_file: bool = False) -> tuple[int, bool]:
    """(width, colour) for text bound for stdout, or for a file with `to_file`: from MIN_WIDTH to
    MAX_WIDTH wide. NO_COLOR is respected."""
    terminal = not to_file and sys.stdout.isatty()
    width = shutil.get_terminal_size((PLAIN_WIDTH, 24)).columns if terminal else _columns()
    return min(max(width, MIN_WIDTH), MAX_WIDTH), terminal and "NO_COLOR" not in os.environ


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


@dataclass(frozen=True)
class Column:
    """A column of a table that fits its width. Numbers are never cut (their header wraps
    instead); text is shortened to the width the numbers leave it: its cells come from a
    function of that width, each cell at most that long."""

    header: str
    cells: Sequence[str] | Callable[[int], Sequence[str]]
    drop: int = 0  # 0: always shown; otherwise left out, highest first, before text gets under `least`
    least: int = 12  # text: the fewest characters it gets while a column can be left out instead
    ample: int = UNLIMITED  # text: what it gets before number headers get their whole width

    @property
    def text(self) -> bool:
        return callable(self.cells)

    def shown(self, width: int) -> Sequence[str]:
        return self.cells(width) if callable(self.cells) else self.cells

    @property
    def whole(self) -> int:
        """The width it takes with nothing cut or wrapped."""
        return max([len(cell) for cell in self.shown(UNLIMITED)] + [len(self.header)])

    @property
    def narrowest(self) -> int:
        """The width it takes with its text at `least` or its header wrapped."""
        if self.text:
            return min(self.least, self.whole)
        return max([len(cell) for cell in self.shown(UNLIMITED)] + [len(word) for word in self.header.split()])


def fitted_table(title: str, columns: Sequence[Column], width: int, color: bool) -> Table:
    """A table no wider than `width` whenever its numbers fit in it: text columns get what
    the numbers leave them, evenly; columns are left out (and the caption says so) before
    text gets narrower than its `least`; number headers wrap when they must."""
    shown = list(columns)

    def room() -> int:  # for the cells: each column has a blank either side and a rule after it, plus the first rule
        return width - 3 * len(shown) - 1

    for column in sorted((column for column in columns if column.drop), key=lambda column: -column.drop):
        if sum(column.narrowest for column in shown) <= room():
            break
        shown.remove(column)
    widths = [column.narrowest for column in shown]
    spare = room() - sum(widths)
    texts = [i for i, column in enumerate(shown) if column.text]
    numbers = [i for i, column in enumerate(shown) if not column.text]
    for wants in ({i: min(shown[i].ample, shown[i].whole) for i in texts}, {i: shown[i].whole for i in numbers},
                  {i: shown[i].whole for i in texts}):
        spare = _widen(widths, wants, spare)
    while spare < 0 and any(widths[i] > 1 for i in texts):  # numbers too wide for `least`: text gives way
        widest = max(texts, key=lambda i: widths[i])
        widths[widest] -= 1
        spare += 1
    left_out = [column.header for column in columns if column not in shown]
    table = Table(title=title, title_justify="left", title_style="bold" if color else "",
                  box=box.SIMPLE_HEAD if color else box.ASCII2, caption_justify="left",
                  caption=f"Left out, for want of width: {', '.join(left_out)}" if left_out else None)
    for column, cell_width in zip(shown, widths, strict=True):
        table.add_column(column.header, justify="left" if column.text else "right", width=cell_width)
    cells = [column.shown(cell_width) for column, cell_width in zip(shown, widths, strict=True)]
    for row in zip(*cells, strict=True):
        table.add_row(*(Text(cell) for cell in row))  # names may hold '[', which rich would read as markup
    return table


def _widen(widths: list[int], wants: dict[int, int], spare: int) -> int:
    """Widen the columns in `wants` towards what they want, the narrowest first, out of
    `spare`; what is left of it."""
    while spare > 0:
        short = [i for i, want in wants.items() if widths[i] < want]
        if not short:
            break
        widths[min(short, key=lambda i: widths[i])] += 1
        spare -= 1
    return spare


def short_names(names: Sequence[str]) -> Callable[[int], list[str]]:
    """A text column's cells: names (of threads, mostly) as short_name() cuts them to its width."""
    return lambda width: [short_name(name, width) for name in names]


def short_name(name: str, limit: int) -> str:
    """A thread's name in at most `limit` characters, printable (see escaping.printable): cut in
    the middle so that a trailing '-tid' stays whole (which thread it is), '…' where it was cut."""
    name = printable(name)
    if len(name) <= limit:
        return name
    _, dash, tid = name.rpartition("-")
    suffix = f"-{tid}" if dash and tid.isdigit() and len(tid) + 2 <= limit else ""
    return name[:max(limit - len(suffix) - 1, 0)] + "…" + suffix
