"""The entry point of the console script and of python -m offcpu.

It imports next to nothing, so that a Ctrl-C while Python loads the rest of offcpu
(click, rich and every command: the first few tenths of a second) ends it as quietly
as a Ctrl-C later does, instead of with a KeyboardInterrupt traceback.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from offcpu import EXIT_INTERRUPTED, INTERRUPTED_MESSAGE


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    print(INTERRUPTED_MESSAGE, file=sys.stderr)
    raise SystemExit(EXIT_INTERRUPTED)


# At import, not in main(): the console script runs a line of its own before main().
# Not when SIGINT was ignored when offcpu started (a shell's background job).
_CATCHING_START = signal.getsignal(signal.SIGINT) is signal.default_int_handler
if _CATCHING_START:
    signal.signal(signal.SIGINT, _interrupted_while_starting)


def main(argv: list[str] | None = None) -> int:
    """Load offcpu and run it; its exit code."""
    from offcpu.app import run  # the slow part

    try:
        if _CATCHING_START:  # from here on Ctrl-C is KeyboardInterrupt again: the commands end their work on it
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return run(argv)
    except KeyboardInterrupt:  # outside a command (click turns one inside into an exit 130 of its own)
        print(INTERRUPTED_MESSAGE, file=sys.stderr)
        return EXIT_INTERRUPTED
