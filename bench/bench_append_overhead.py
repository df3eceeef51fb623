#!/usr/bin/env python3
"""Per-append overhead (issue 20, item 3): Log.append beside an os.write loop of the same bytes.

One pre-encoded batch (``--records`` records of ``--record-size`` bytes, 200 x
100 B = 22 KB by default; 63 x 1 KiB = 64 KiB is the other row of the issue)
appended ``--appends`` times to a fresh single-partition Log, no flush, timed
around the loop only. In the same round, on the same filesystem:

* limit: ``os.write`` of the same bytes into an O_APPEND file (what any Python
  append loop pays for the write alone);
* ``Log.append`` through its C fast path (``_append_fast``, the default);
* ``Log.append`` through its Python path only (``FAST_APPEND`` off: the
  orchestration in interpreted Python, what pylog did before _append_fast);
* the fast path with ``pylog.validate.records=false`` (the CRC is still
  checked; the walk over every record is not).

The rows alternate within each round and each round deletes its files before
the next, so every row meets the same memory state; this VM's speed drifts
from minute to minute, so the per-round ratios (row / os.write in the same
round) are reported as median and range, beside the median times.

usage: bench/bench_append_overhead.py [--rounds 10] [--records 200] [--record-size 100]
                                      [--appends 20000] [--dir DIR] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storage_common as sc  # noqa: E402

import pylog  # noqa: E402
import pylog.storage.log as log_module  # noqa: E402
from pylog.record import encode_batch  # noqa: E402

TIMESTAMP = 1_763_856_000_000


def write_loop(root: str, data: bytes, n: int) -> float:
    path = os.path.join(root, "os-write.dat")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    write = os.write
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            write(fd, data)
        return time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)


def log_loop(root: str, data: bytes, n: int, fast: bool, validate: bool, records: int) -> float:
    path = os.path.join(root, "bench-0")
    log_module.FAST_APPEND = fast
    log = pylog.Log(path, {"segment.bytes": min(2**31 - 1, n * len(data) + (1 << 20)),
                           "pylog.validate.records": validate})
    try:
        append = log.append
        t0 = time.perf_counter()
        for _ in range(n):
            append(data)
        dt = time.perf_counter() - t0
        assert log.log_end_offset == n * records
        return dt
    finally:
        log_module.FAST_APPEND = True
        log.abandon()          # no close(): it would fsync what the no-flush loop never does
        shutil.rmtree(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--records", type=int, default=200, help="records per batch")
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--appends", type=int, default=None, help="appends per row (default ~440 MB)")
    ap.add_argument("--dir", help="filesystem under test (default /tmp)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rng = random.Random(1)
    data = encode_batch([rng.randbytes(args.record_size) for _ in range(args.records)],
                        timestamps=TIMESTAMP)
    n = args.appends or max(1000, 440_000_000 // len(data))
    root = tempfile.mkdtemp(prefix="pylog-bench-overhead-", dir=args.dir or "/tmp")
    rows = {
        "os.write loop (limit)": lambda: write_loop(root, data, n),
        "Log.append, C fast path": lambda: log_loop(root, data, n, True, True, args.records),
        "Log.append, Python path (naive)": lambda: log_loop(root, data, n, False, True, args.records),
        "Log.append, fast path, validate.records=false":
            lambda: log_loop(root, data, n, True, False, args.records),
    }
    try:
        for line in sc.setup_block(root, {
                "batch": f"{args.records} records x {args.record_size} B = {len(data):,} B",
                "appends per row": f"{n:,} ({n * len(data) / 1e6:,.0f} MB), no flush",
                "rounds": f"{args.rounds}, rows alternating within each"}):
            print(line)
        times: dict[str, list[float]] = {name: [] for name in rows}
        for r in range(args.rounds):
            for name, fn in rows.items():
                times[name].append(fn())
            sc.log(f"  round {r + 1}: " + ", ".join(
                f"{name.split(',')[-1].strip()} {t[-1] / n * 1e6:.1f} us" for name, t in times.items()))
        limit = times["os.write loop (limit)"]
        table = []
        for name, t in times.items():
            ratios = sorted(a / b for a, b in zip(limit, t))
            med = statistics.median(t)
            table.append([name, f"{med / n * 1e6:.2f}", f"{len(data) * n / med / 1e6:,.0f}",
                          f"{statistics.median(ratios):.2f}", f"{ratios[0]:.2f}-{ratios[-1]:.2f}"])
        print()
        print(sc.table(["path", "us per append (median)", "MB/s (median)",
                        "x os.write (median of rounds)", "x os.write (range)"], table, args.markdown))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
