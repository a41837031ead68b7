"""The one way offcpu prints on stdout: a full disk or a closed stdout is an error
that says so, and a reader that went away (`| head`) ends offcpu quietly."""

from __future__ import annotations

import codecs
import io
import sys
from typing import TextIO

from offcpu.errors import OffcpuError

# Python's buffered stdout takes a write larger than its buffer (8 KiB) as done once part of it
# is in the pipe, and drops the rest without a word when the reader leaves meanwhile; a piece
# that fits in it is flushed whole, or fails. 1,024 characters are at most 4 KiB of UTF-8.
PIECE = 1024


class ReaderGone(Exception):
    """stdout is a pipe nobody reads any more: there is no one left to tell anything."""


class ClosedStdout(io.TextIOBase):
    """sys.stdout when offcpu started with stdout closed ('>&-'): not a terminal, and
    printing on it is an error (Python would leave sys.stdout None, and fail on it)."""

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        raise OffcpuError("stdout is closed, so there is nowhere to print; give it a file (> FILE), or write "
                          "a report with -o FILE")


def write_stdout(text: str) -> None:
    """Print `text` now, all of it (flushed piece by piece, so that a failure is seen here and
    not at exit, and a reader that leaves midway is told from one that read it all)."""
    stream = _text_stdout()
    try:
        for start in range(0, len(text), PIECE):
            stream.write(text[start:start + PIECE])
            stream.flush()
    except BrokenPipeError:
        raise ReaderGone from None
    except OSError as error:
        raise OffcpuError(f"cannot write to stdout ({error.strerror}); send it where it fits (> FILE on another "
                          "disk), or write a report with -o FILE") from None


def _text_stdout() -> TextIO:
    """sys.stdout, in UTF-8 where it was set up as ASCII (PYTHONIOENCODING=ascii): names
    in a report may be in any script. In another encoding (latin-1, cp1252), what it cannot
    hold (…, µ, names in other scripts) is printed as '?' rather than failing."""
    stream = sys.stdout
    if isinstance(stream, io.TextIOWrapper):
        encoding = codecs.lookup(stream.encoding).name
        if encoding == "ascii":
            stream.reconfigure(encoding="utf-8", errors="replace")
        elif encoding != "utf-8":
            stream.reconfigure(errors="replace")
    return stream
