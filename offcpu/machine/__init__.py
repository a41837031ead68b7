"""What offcpu learns about the machine and its processes: perf and the kernel's settings, the
limits on a process, whether a binary keeps frame pointers, and what `offcpu doctor` checks and
measures with them."""
