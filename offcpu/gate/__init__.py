"""`offcpu check`'s gate: the policy file (policy), and a run's measurements held against it
and against a baseline (verdict)."""
