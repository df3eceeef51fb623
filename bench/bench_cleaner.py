#!/usr/bin/env python3
"""Log cleaner benchmark (issue 21): how fast does compaction go, beside the floors?

A compacted topic of one partition gets N records of 100 B values over K distinct keys
(keys uniformly random, 1,000 records a batch, 64 MiB segments, seeded), rolled, then:

* **clean**: one ``LogManager.clean_once()`` (several passes if the offset map is full,
  each pass timed into the total), reported as MB/s read and distinct keys/s;
* **scan** (the machine's floor for reading the log the cleaner's way): ``decode_arrow``
  of every segment, memory-mapped, best of two (the first also pays for fresh memory);
* **rewrite** (the floor for writing): copying every segment file once with
  ``os.copy_file_range`` plus an fsync, i.e. what rewriting the whole log costs without
  looking at a record (best of two).

It prints each figure and the cleaning's ratio to the floors, and the offset map's
memory: ``log.cleaner.dedupe.buffer.size`` against the peak RSS growth of the cleaning
(Arrow's hash table holds the keys themselves, not 24-byte slots).

Usage:
    bench/bench_cleaner.py                                   # 10 M records, 100 k and 5 M keys
    bench/bench_cleaner.py --records 1000000 --keys 10000,500000   # quicker
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import mmap
import platform
import resource
import shutil
import sys
import tempfile
import time

import numpy as np

import pylog
from pylog.record import decode_arrow, encode_batch

BATCH = 1000


def build(path: str, records: int, keys: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    with pylog.Store(path, background=False) as store:
        store.create_topic("c", 1, config={"cleanup.policy": "compact",
                                           "segment.bytes": str(64 << 20)})
        lg = store.log("c", 0)
        value = b"v" * 100
        for start in range(0, records, BATCH):
            n = min(BATCH, records - start)
            ks = [b"key-%09d" % k for k in rng.integers(0, keys, n)]
            lg.append(encode_batch([value] * n, ks, int(time.time() * 1000)), origin="producer")
        lg.roll()


def segment_files(path: str) -> list[str]:
    d = os.path.join(path, "c-0")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log"))


def scan(path: str) -> tuple[float, int]:
    started, total = time.perf_counter(), 0
    for name in segment_files(path):
        size = os.path.getsize(name)
        if not size:
            continue
        with open(name, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
            view = memoryview(m)
            decode_arrow(view)
            view.release()
        total += size
    return time.perf_counter() - started, total


def rewrite(path: str) -> tuple[float, int]:
    started, total = time.perf_counter(), 0
    for name in segment_files(path):
        size = os.path.getsize(name)
        with open(name, "rb") as src, open(name + ".copy", "wb") as dst:
            done = 0
            while done < size:
                done += os.copy_file_range(src.fileno(), dst.fileno(), size - done)
            os.fsync(dst.fileno())
        os.remove(name + ".copy")
        total += size
    return time.perf_counter() - started, total


def clean(path: str, buffer: int) -> tuple[float, int, int, int]:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pylog.Store(path, {"log.cleaner.dedupe.buffer.size": buffer},
                          background=False) as store:
        started, read, passes = time.perf_counter(), 0, 0
        while (stats := store.clean_once()) is not None:
            read += stats.bytes_read
            passes += 1
        seconds = time.perf_counter() - started
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return seconds, read, passes, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", default="100000,5000000")
    ap.add_argument("--buffer", type=int, default=128 << 20, help="log.cleaner.dedupe.buffer.size")
    ap.add_argument("--dir", default=None, help="where to build the log (default: a temp dir)")
    args = ap.parse_args()
    print(f"# bench_cleaner: {platform.node()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, pylog {pylog.__version__}, {args.records:,} records of "
          f"100 B, dedupe buffer {args.buffer >> 20} MiB")
    print("| keys | log MB | scan MB/s (floor) | rewrite MB/s (floor) | clean MB/s | x scan | "
          "x rewrite | keys/s | passes | RSS growth MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for keys in (int(k) for k in args.keys.split(",")):
        base = tempfile.mkdtemp(prefix="pylog-bench-cleaner-", dir=args.dir)
        try:
            build(base, args.records, keys)
            scan_s, nbytes = min(scan(base) for _ in range(2))        # best of 2: warm memory
            rewrite_s, _ = min(rewrite(base) for _ in range(2))
            clean_s, read, passes, rss = clean(base, args.buffer)
            mb = nbytes / 1e6
            print(f"| {keys:,} | {mb:.0f} | {mb / scan_s:.0f} | {mb / rewrite_s:.0f} | "
                  f"{read / 1e6 / clean_s:.0f} | {scan_s / clean_s * read / nbytes:.2f} | "
                  f"{rewrite_s / clean_s * read / nbytes:.2f} | {keys / clean_s:,.0f} | {passes} | "
                  f"{rss / 2**20:.0f} |", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
