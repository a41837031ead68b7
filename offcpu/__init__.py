"""offcpu: why are my threads not running?"""

__version__ = "0.1.0"

# How a Ctrl-C ends offcpu, whenever it comes: 128 + SIGINT, as a shell reports a program it ended.
EXIT_INTERRUPTED = 130
INTERRUPTED_MESSAGE = "offcpu: interrupted"
