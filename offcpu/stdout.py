"""The one way offcpu prints on stdout: a full disk or a closed stdout is an error
that says so, and a reader that went away (`| head`) ends offcpu quietly."""

from __future__ import annotations

import codecs
import io
import sys
from typing import TextIO

from offcpu.errors import OffcpuError


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
    """Print `text` now (flushed, so that a failure is seen here and not at exit)."""
    stream = _text_stdout()
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        raise ReaderGone from None
    except OSError as error:
        raise OffcpuError(f"cannot write to stdout ({error.strerror}); send it where it fits (> FILE on another "
                          "disk), or write a report with -o FILE") from None


def _text_stdout() -> TextIO:
    """sys.stdout, in UTF-8 where it was set up as ASCII (PYTHONIOENCODING=ascii): names
    in a report may be in any script."""
    stream = sys.stdout
    if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name == "ascii":
        stream.reconfigure(encoding="utf-8", errors="replace")
    return stream
