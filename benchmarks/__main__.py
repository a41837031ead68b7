"""Entry point of `scripts/bench`: one subcommand per benchmark, listed once in BENCHMARKS.

A benchmark is a module with a docstring (its first line is the help),
`configure(parser)` to add its options and `run(args) -> int` (the exit status).
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from benchmarks import record_overhead, report_speed, runtime_frames, top_cost

BENCHMARKS: dict[str, ModuleType] = {
    "record-overhead": record_overhead,
    "report-speed": report_speed,
    "runtime-frames": runtime_frames,
    "top-cost": top_cost,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description="Measure what offcpu costs: run one "
                                     "benchmark, or without BENCHMARK each of them in turn.")
    subparsers = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK",
                                       help="one benchmark [default: each of them in turn, with its defaults]")
    for name, module in BENCHMARKS.items():
        doc = (module.__doc__ or "").strip()
        summary = doc.splitlines()[0] if doc else name
        sub = subparsers.add_parser(name, help=summary, description=doc,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(sub)
    args = parser.parse_args(argv)
    if args.benchmark is not None:
        return int(BENCHMARKS[args.benchmark].run(args))
    worst = 0
    for name, module in BENCHMARKS.items():
        print(f"== {name}", flush=True)
        status = int(module.run(parser.parse_args([name])))
        if status == 130:
            return status
        worst = max(worst, status)
    return worst


if __name__ == "__main__":
    sys.exit(main())
