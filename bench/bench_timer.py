#!/usr/bin/env python3
"""How late DeadlineTimer (pylog/coordinator/timer.py: group sessions, rebalances, the
broker's idle connections) fires, beside threading.Timer (one thread per deadline) as
the naive alternative. A performance figure, not a test: tests/coordinator/test_timer.py
checks the order, that nothing fires early, and that an earlier deadline wakes the
sleeping thread; how promptly it fires depends on the machine's load, so it is measured
here.

    .venv/bin/python bench/bench_timer.py                 # 200 deadlines 1-300 ms ahead
    .venv/bin/python bench/bench_timer.py -n 1000 --spread-ms 50
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

from pylog.coordinator.timer import DeadlineTimer


def lateness(schedule, deadlines: list[float]) -> list[float]:
    """Milliseconds each callback ran after its deadline."""
    late: list[float] = []
    done = threading.Semaphore(0)
    lock = threading.Lock()

    def fire(due: float) -> None:
        now = time.monotonic()
        with lock:
            late.append((now - due) * 1000)
        done.release()

    start = time.monotonic()
    for d in deadlines:
        schedule(start + d, lambda due=start + d: fire(due))
    for _ in deadlines:
        done.acquire()
    return late


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200, help="deadlines per run")
    ap.add_argument("--spread-ms", type=float, default=300.0, help="deadlines 1 ms .. this ahead")
    args = ap.parse_args()
    rng = random.Random(1)
    deadlines = [rng.uniform(0.001, args.spread_ms / 1000) for _ in range(args.n)]
    timer = DeadlineTimer("bench-timer")

    def with_threads(when: float, fn) -> None:
        t = threading.Timer(max(0.0, when - time.monotonic()), fn)
        t.start()

    print(f"{args.n} deadlines 1 ms .. {args.spread_ms:.0f} ms ahead; lateness in ms")
    print("| timer | p50 | p99 | max | early |")
    print("|---|---|---|---|---|")
    for name, schedule in (("DeadlineTimer (one thread)", timer.call_at),
                           ("threading.Timer (a thread each)", with_threads)):
        late = sorted(lateness(schedule, deadlines))
        p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
        print(f"| {name} | {statistics.median(late):.2f} | {p99:.2f} | {late[-1]:.2f} | "
              f"{sum(x < 0 for x in late)} |")


if __name__ == "__main__":
    main()
