#!/usr/bin/python3
"""python_gil - CPU-bound Python threads that take turns at CPython's interpreter lock (the GIL).

Each worker counts in pure Python, never blocking: with threads, only the one holding the GIL
runs, and the others wait for it in take_gil (a condition variable's timed wait: glibc's
futex wrapper under pthread_cond_timedwait; frame-pointer stacks stop there), however many CPUs
there are. The holder lets it go every 5 ms (sys.getswitchinterval()) when another asks for it.

Fixed twin: -p, the same workers as processes, one interpreter (and GIL) each, which run on
as many CPUs as there are.

usage: python_gil [-t WORKERS] [-s SECONDS] [-p]
"""

import argparse
import multiprocessing
import sys
import threading
import time

MAX_WORKERS = 64


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python_gil")
    parser.add_argument("-t", type=int, default=4, dest="workers", help="workers, 1..64 (default 4)")
    parser.add_argument("-s", type=float, default=5.0, dest="seconds", help="run time, >0 and <=3600 (default 5)")
    parser.add_argument("-p", action="store_true", dest="processes", help="processes instead of threads (fixed)")
    options = parser.parse_args(args)
    if not (1 <= options.workers <= MAX_WORKERS and 0 < options.seconds <= 3600):
        parser.error("a value is out of range")
    return options


def spin(stop: float) -> int:
    """Count until `stop` (time.monotonic()), in Python: every step needs the GIL."""
    count = 0
    while time.monotonic() < stop:
        for _ in range(1000):
            count += 1
    return count


def main() -> None:
    options = parse(sys.argv[1:])
    stop = time.monotonic() + options.seconds
    if options.processes:
        with multiprocessing.Pool(options.workers) as pool:
            counts = pool.map(spin, [stop] * options.workers)
    else:
        counts = [0] * options.workers

        def work(index: int) -> None:
            counts[index] = spin(stop)

        workers = [threading.Thread(target=work, args=(index,)) for index in range(options.workers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    print(f"python_gil: workers={options.workers} seconds={options.seconds:.2f} processes={int(options.processes)} "
          f"count={sum(counts)}")


if __name__ == "__main__":
    main()
