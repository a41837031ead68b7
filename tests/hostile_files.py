"""What another user may plant where offcpu reads a file: a FIFO (a blocking open waits for
ever), a link to a device (/dev/zero reads without end) and a sparse file of 20 GB (no disk,
but a read of it whole takes all the memory there is)."""

from __future__ import annotations

import os
from pathlib import Path

SPARSE_BYTES = 20 << 30


def fifo(path: Path) -> None:
    os.mkfifo(path)


def device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def sparse(path: Path) -> None:
    with open(path, "wb") as file:
        file.truncate(SPARSE_BYTES)


PLANTS = (fifo, device, sparse)
