"""Files written whole: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PARTIAL = ".partial"  # the suffix of a file being written, renamed to its name once whole


def write_whole(path: Path, text: str | bytes, private: bool = False) -> None:
    """Write `text` (or bytes) to PATH.partial, then rename it over `path`; with `private`, the file
    is readable by its owner only (0600). OSError as raised; the partial file is removed."""
    partial = path.with_name(path.name + PARTIAL)
    try:
        # O_NOFOLLOW: a link planted at the partial name (in /tmp, say) is not written through.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600 if private else 0o666)
        with open(fd, "wb" if isinstance(text, bytes) else "w") as file:
            if private:
                os.fchmod(fd, 0o600)  # a partial file left by an earlier run keeps its mode otherwise
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
