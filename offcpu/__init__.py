"""offcpu: why are my threads not running?"""

__version__ = "0.1.0"
