"""Reading a capture: its scheduler events decoded (perf.data in the compiled core, perf
script's text, or a BPF recording's records), paired by the core's engine (pairing), and its
stacks named (symbols); with what a perf.data says about itself (describe, plain_perf_data)."""
