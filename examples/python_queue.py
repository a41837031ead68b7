#!/usr/bin/python3
"""python_queue - Python workers that wait in queue.Queue.get() for work a producer puts now and then.

The main thread puts an item every 50 ms (-u); each worker takes one, works 1 ms and waits for
the next. A Queue's get waits in a threading.Condition (a semaphore, as threading.Lock is), so
its stacks look like a lock's but for the Python frame Condition.wait: the workers wait for work,
not for each other, and nothing here should read as contention.

usage: python_queue [-t THREADS] [-s SECONDS] [-u INTERVAL_US]
"""

import argparse
import queue
import sys
import threading
import time


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python_queue")
    parser.add_argument("-t", type=int, default=4, dest="threads", help="workers, 1..256 (default 4)")
    parser.add_argument("-s", type=float, default=5.0, dest="seconds", help="run time, >0 and <=3600 (default 5)")
    parser.add_argument("-u", type=int, default=50_000, dest="interval_us",
                        help="time between two items, µs, 1..1000000 (default 50000)")
    options = parser.parse_args(args)
    if not (1 <= options.threads <= 256 and 0 < options.seconds <= 3600 and 1 <= options.interval_us <= 1_000_000):
        parser.error("a value is out of range")
    return options


def main() -> None:
    options = parse(sys.argv[1:])
    items: queue.Queue[int | None] = queue.Queue()
    done = [0]

    def work() -> None:
        while items.get() is not None:
            time.sleep(0.001)  # the work an item takes
            done[0] += 1

    workers = [threading.Thread(target=work) for _ in range(options.threads)]
    for worker in workers:
        worker.start()
    stop = time.monotonic() + options.seconds
    while time.monotonic() < stop:
        time.sleep(options.interval_us / 1e6)
        items.put(1)
    for _ in workers:
        items.put(None)
    for worker in workers:
        worker.join()
    print(f"python_queue: threads={options.threads} seconds={options.seconds:.2f} done={done[0]}")


if __name__ == "__main__":
    main()
