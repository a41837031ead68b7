#!/usr/bin/python3
"""python_deadlock - two Python threads that take two threading.Locks in opposite orders.

Thread left takes lock one, sleeps a while (so that the other takes its first lock meanwhile)
and takes lock two; right takes lock two, sleeps, and takes lock one. Each then holds the
lock the other waits for: both sleep in the second acquire for good, each in a POSIX semaphore
(CPython's threading.Lock), and the program never ends (stop it with a signal).

Fixed twin: -o, both take the locks in one order (one, then two): one waits for the other
to let go, then goes on, and the program ends after its rounds.

usage: python_deadlock [-u SLEEP_US] [-r ROUNDS] [-o]
"""

import argparse
import sys
import threading
import time


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python_deadlock")
    parser.add_argument("-u", type=int, default=100_000, dest="sleep_us",
                        help="the sleep between the two acquires, µs, 1..1000000 (default 100000)")
    parser.add_argument("-r", type=int, default=20, dest="rounds", help="rounds of each thread, 1..100000 (default 20)")
    parser.add_argument("-o", action="store_true", dest="ordered", help="take the locks in one order (fixed)")
    options = parser.parse_args(args)
    if not (1 <= options.sleep_us <= 1_000_000 and 1 <= options.rounds <= 100_000):
        parser.error("a value is out of range")
    return options


def left(one: threading.Lock, two: threading.Lock, sleep_s: float, rounds: int) -> None:
    for _ in range(rounds):
        with one:
            time.sleep(sleep_s)  # right takes two meanwhile
            with two:  # the bug, with right's: each holds the lock the other waits for
                pass


def right(one: threading.Lock, two: threading.Lock, sleep_s: float, rounds: int, ordered: bool) -> None:
    first, second = (one, two) if ordered else (two, one)
    for _ in range(rounds):
        with first:
            time.sleep(sleep_s)  # left takes one meanwhile
            with second:  # the bug, with left's (-o takes them in left's order)
                pass


def main() -> None:
    options = parse(sys.argv[1:])
    one, two = threading.Lock(), threading.Lock()
    sleep_s = options.sleep_us / 1e6
    threads = [threading.Thread(target=left, args=(one, two, sleep_s, options.rounds)),
               threading.Thread(target=right, args=(one, two, sleep_s, options.rounds, options.ordered))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"python_deadlock: rounds={options.rounds} ordered={int(options.ordered)}")


if __name__ == "__main__":
    main()
