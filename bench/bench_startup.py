#!/usr/bin/env python3
"""pylog startup benchmark (issue 4): opening a store of 1,000 partitions /
20,000 segments after a clean and after an unclean shutdown.

The store is built once with a small ``segment.bytes`` (seeded values, a
mix of random and compressible payloads), closed cleanly, and then opened
several ways:

* **clean**: the clean-shutdown marker is present, nothing is scanned; every
  segment is still opened (3 files, 2 mmaps), its indexes sanity-checked and, if it
  is inactive, closed again (its files reopen when a read needs them);
* **unclean, checkpointed**: the marker is removed; recovery starts at the
  checkpointed recovery points, so only the segments after them are scanned
  (after a close that is the active segment of each partition);
* **unclean, no checkpoint**: the marker and the recovery-point checkpoint are
  removed: every batch of every segment is read, CRC-checked and re-indexed.

Each case runs with 1 and with N recovery threads per log dir
(``num.recovery.threads.per.data.dir``). Timing is wall time of
``LogManager(...)`` (the summary line's seconds), best of ``--repeat``; the
close that follows (trim, flush, checkpoints, marker) is timed too. The page
cache is warm (the data was just written or read); ``--drop-caches`` (root)
drops it before every open, which affects the whole machine.

Kafka's published figure (KAFKA-3163, apache/kafka#1215): 14-17 s to load
40K segments with one recovery thread.

Usage:
    bench/bench_startup.py                       # 1,000 partitions x 20 segments
    bench/bench_startup.py --partitions 100 --segments 10 --repeat 1   # quick
    bench/bench_startup.py --dir /mnt/xfs/bench  # on a chosen filesystem
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import logging
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

import pylog
from pylog import records

RECORDS_PER_BATCH = 10
RECORD_SIZE = 100


def setup_block(path: str) -> str:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    fs = run("findmnt", "-n", "-o", "FSTYPE,OPTIONS", "-T", path)
    sha = run("git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD")
    return "\n".join([
        f"pylog {pylog.__version__} ({sha}), {time.strftime('%Y-%m-%d %H:%M')}",
        f"CPU: {cpu} x {os.cpu_count()}; kernel {platform.release()}; Python {platform.python_version()}",
        f"filesystem: {fs} at {path}",
        f"I/O engine: {pylog.io_engine()}",
    ])


def build(dirs: list[str], partitions: int, segments: int, seed: int) -> tuple[int, int, float]:
    """Writes `partitions` partitions of `segments` segments each; returns
    (segments, bytes, seconds)."""
    rng = random.Random(seed)
    payloads = [rng.randbytes(RECORD_SIZE) if i % 2 else bytes([i % 7]) * RECORD_SIZE
                for i in range(RECORDS_PER_BATCH)]
    batch = records.encode_batch(payloads, timestamps=[1_700_000_000_000] * RECORDS_PER_BATCH)
    batches_per_segment = 4
    segment_bytes = len(batch) * batches_per_segment + 1
    started = time.perf_counter()
    with pylog.open(dirs, log_segment_bytes=segment_bytes,
                    log_index_size_max_bytes=64 * 1024) as store:
        store.create_topic("bench", partitions)
        for p in range(partitions):
            log = store.log("bench", p)
            for _ in range(segments * batches_per_segment - 1):
                log.append(batch)
        total_segments = sum(len(store.log("bench", p).segments) for p in range(partitions))
        total_bytes = sum(store.log("bench", p).size for p in range(partitions))
    return total_segments, total_bytes, time.perf_counter() - started


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def open_once(dirs: list[str], threads: int, case: str, drop: bool) -> dict:
    for d in dirs:
        marker = os.path.join(d, ".kafka_cleanshutdown")
        if case != "clean" and os.path.exists(marker):
            os.remove(marker)
        if case == "unclean, no checkpoint":
            checkpoint = os.path.join(d, "recovery-point-offset-checkpoint")
            if os.path.exists(checkpoint):
                os.remove(checkpoint)
    if drop:
        drop_caches()
    started = time.perf_counter()
    store = pylog.Store(dirs, {"num.recovery.threads.per.data.dir": threads}, background=False)
    opened = time.perf_counter() - started
    report = store.startup
    started = time.perf_counter()
    store.close()
    closed = time.perf_counter() - started
    return {"case": case, "threads": threads, "open_s": opened, "close_s": closed,
            "partitions": report.partitions, "segments": report.segments,
            "segments_recovered": report.segments_recovered,
            "bytes_scanned": report.bytes_scanned, "summary": report.summary()}


def file_limit(want: int | None) -> str:
    """The open-files limit of this run: inactive segments open their files on demand
    and close them beyond a quarter of the soft limit, so the default limit (1,024 on
    most distributions) is enough; ``--nofile N`` sets the soft limit to N."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if want is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return f"open files limit {want} (was {soft}; hard {hard})"
    return f"open files limit {soft} (hard {hard})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--segments", type=int, default=20, help="segments per partition")
    ap.add_argument("--dirs", type=int, default=1, help="log dirs (under --dir)")
    ap.add_argument("--threads", type=int, default=4, help="the N of the N-thread rows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temp dir)")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before each open (root)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    ap.add_argument("--nofile", type=int, default=1024,
                    help="soft open-files limit for the run (default 1024, the common default)")
    args = ap.parse_args()
    logging.getLogger("pylog.manager").setLevel(logging.ERROR)   # one warning per open otherwise

    root = tempfile.mkdtemp(prefix="pylog-bench-startup-", dir=args.dir)
    dirs = [os.path.join(root, f"disk{i}") for i in range(args.dirs)]
    try:
        print(setup_block(root))
        print(file_limit(args.nofile))
        segments, size, seconds = build(dirs, args.partitions, args.segments, args.seed)
        print(f"store: {args.partitions} partitions, {segments} segments, {size / 2**20:.0f} MiB "
              f"in {args.dirs} log dir(s); built in {seconds:.1f}s\n")
        rows = []
        for case in ("clean", "unclean, checkpointed", "unclean, no checkpoint"):
            for threads in sorted({1, args.threads}):
                runs = [open_once(dirs, threads, case, args.drop_caches) for _ in range(args.repeat)]
                best = min(runs, key=lambda r: r["open_s"])
                best["close_s"] = min(r["close_s"] for r in runs)
                rows.append(best)
                if args.json:
                    print(json.dumps(best))
        if not args.json:
            base = rows[0]["open_s"]
            print("| shutdown before open | threads/dir | open (s) | vs. clean | segments scanned "
                  "| MiB scanned | close (s) |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                print(f"| {r['case']} | {r['threads']} | {r['open_s']:.2f} | {r['open_s'] / base:.1f}x "
                      f"| {r['segments_recovered']} | {r['bytes_scanned'] / 2**20:.0f} | {r['close_s']:.2f} |")
            print(f"\n(best of {args.repeat}; page cache {'dropped' if args.drop_caches else 'warm'}; "
                  f"Kafka: 14-17 s for 40K segments, 1 thread, KAFKA-3163)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
