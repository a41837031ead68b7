"""`offcpu record`'s recording, in the modules it goes through:

- output_dir: the capture directory, made or cleared, locked and marked;
- session: record(), the flow from the checks up front to capture.json;
- schedstats: kernel.sched_schedstats, on for the recording when asked;
- perf_command: perf record's argv, and what perf's complaints mean;
- perf_process: the perf process, started, switched on and off, ended;
- end_watch: waiting for the duration, or the target's or its command's exit;
- interrupts: SIGINT, SIGTERM and SIGHUP, which end a recording but never cut
  short putting things back.

The events it asks perf for are offcpu.events'; what perf.data says afterwards
is offcpu.describe's.
"""
