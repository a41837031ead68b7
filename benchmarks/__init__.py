"""Benchmarks of offcpu's cost, run with `scripts/bench BENCHMARK` (listed in __main__.py).

They are measurements, not tests: they print numbers and assert nothing about them.
"""
