"""Produces page-view events into a pylog topic at a fixed rate.

    python generator.py LOG_DIR --events 20000 --rate 5000

Each event is JSON, keyed by user: {"user": "u17", "page": "/cart", "ts": <ms>}; ``ts``
(event time) is also the record's timestamp. Pages follow a skewed popularity so the
report has a shape. The store is opened (and owned) by this process while it runs;
Spark reads it beside it.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import pylog

PAGES = ["/home", "/search", "/product", "/cart", "/checkout", "/help"]
WEIGHTS = [40, 25, 20, 8, 5, 2]


def generate(log_dir: str, events: int, rate: float, topic: str = "pageviews",
             partitions: int = 4, seed: int = 7, shift_ms: int = 0) -> int:
    """Sends `events` events at `rate` a second; their event time is now + shift_ms."""
    rng = random.Random(seed)
    with pylog.open(log_dir) as store:
        if topic not in store.list_topics():
            store.create_topic(topic, partitions=partitions)
        producer = pylog.Producer(store, linger_ms=5)
        start = time.monotonic()
        chunk = max(1, int(rate / 20))            # 20 sends of send_batch a second
        sent = 0
        while sent < events:
            n = min(chunk, events - sent)
            now = int(time.time() * 1000) + shift_ms
            users = [f"u{rng.randrange(500)}" for _ in range(n)]
            pages = rng.choices(PAGES, WEIGHTS, k=n)
            values = [json.dumps({"user": u, "page": p, "ts": now}).encode() for u, p in zip(users, pages)]
            producer.send_batch(topic, values, keys=[u.encode() for u in users], timestamps=[now] * n)
            sent += n
            delay = start + sent / rate - time.monotonic()   # hold the rate
            if delay > 0:
                time.sleep(delay)
        producer.flush()
        producer.close()
    return sent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log_dir")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=5000, help="events per second")
    args = ap.parse_args(argv)
    print(f"generated {generate(args.log_dir, args.events, args.rate)} events", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
