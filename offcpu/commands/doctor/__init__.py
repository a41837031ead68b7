"""`offcpu doctor`: the command (command.py), its checks (readiness.py) and the cost of recording
measured on this machine (selftest.py)."""
