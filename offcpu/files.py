"""Files written whole: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PARTIAL = ".partial"  # the suffix of a file being written, renamed to its name once whole
PRIVATE = 0o600  # readable by its owner only, as everything in a capture


def write_whole(path: Path, text: str | bytes, mode: int = 0o666) -> None:
    """Write `text` (or bytes) to PATH.partial, then rename it over `path`. The file has at
    most the permissions of `mode` (less what the umask takes away). OSError as raised; the
    partial file is removed."""
    partial = path.with_name(path.name + PARTIAL)
    try:
        # O_NOFOLLOW: a link planted at the partial name (in /tmp, say) is not written through.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        with open(fd, "wb" if isinstance(text, bytes) else "w") as file:
            # a partial file left by an earlier run keeps its own mode otherwise
            os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & mode)
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
