"""Following a live BPF recording: `offcpu top` and the flight recorder."""
