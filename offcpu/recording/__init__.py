"""Recording: a bounded session on the scheduler's tracepoints, with perf or with offcpu's BPF
programs, left on disk as a capture directory (offcpu.capture). recorder chooses the backend and
runs session (perf) or bpf_session (BPF); the other modules are their parts (docs/layout.md)."""
