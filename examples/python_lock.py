#!/usr/bin/python3
"""python_lock - Python threads that sleep while holding one threading.Lock.

Each worker takes the lock, makes a blocking call holding it (a sleep standing
for a disk write or a network round trip) and lets it go. The others queue on
the lock meanwhile: however many threads there are, one at a time makes
progress, and each waits most of its time for the lock, while the holder
waits for the timer. CPython's threading.Lock is a POSIX semaphore:

  futex_wait <- __new_sem_wait_slow64 <- PyThread_acquire_lock_timed

(glibc and libpython have no frame pointers: with frame-pointer stacks the
user stack stops at glibc's futex wrapper), and the holder lets the next one
go from sem_post.

Fixed twin: -o, the same sleep made outside the lock, which then guards only
the counter it exists for.

usage: python_lock [-t THREADS] [-s SECONDS] [-u SLEEP_US] [-o]
"""

import argparse
import sys
import threading
import time

MAX_THREADS = 256


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python_lock")
    parser.add_argument("-t", type=int, default=4, dest="threads", help="worker threads, 1..256 (default 4)")
    parser.add_argument("-s", type=float, default=5.0, dest="seconds", help="run time, >0 and <=3600 (default 5)")
    parser.add_argument("-u", type=int, default=10_000, dest="sleep_us",
                        help="the blocking call's length, µs, 1..1000000 (default 10000)")
    parser.add_argument("-o", action="store_true", dest="outside", help="make the call outside the lock (fixed)")
    options = parser.parse_args(args)
    if not (1 <= options.threads <= MAX_THREADS and 0 < options.seconds <= 3600 and
            1 <= options.sleep_us <= 1_000_000):
        parser.error("a value is out of range")
    return options


def main() -> None:
    options = parse(sys.argv[1:])
    lock = threading.Lock()
    ops = [0]
    stop = time.monotonic() + options.seconds

    def work() -> None:
        while time.monotonic() < stop:
            if options.outside:
                time.sleep(options.sleep_us / 1e6)
                with lock:
                    ops[0] += 1
            else:
                with lock:
                    time.sleep(options.sleep_us / 1e6)  # the bug: a blocking call holding the lock
                    ops[0] += 1

    workers = [threading.Thread(target=work, name=f"worker-{index}") for index in range(options.threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"python_lock: threads={options.threads} seconds={options.seconds:.2f} outside={int(options.outside)} "
          f"ops={ops[0]}")


if __name__ == "__main__":
    main()
