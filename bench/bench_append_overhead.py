#!/usr/bin/env python3
"""Per-append overhead (issue 20, item 3): Log.append beside an os.write loop of the same bytes.

One pre-encoded batch (``--records`` records of ``--record-size`` bytes, 200 x
100 B = 22 KB by default; 63 x 1 KiB = 64 KiB is the other row of the issue)
appended ``--appends`` times to a fresh single-partition Log, no flush. In the
same round, on the same filesystem:

* limit: ``os.write`` of the same bytes into an O_APPEND file (what any Python
  append loop pays for the write alone);
* ``Log.append`` through its C fast path (``_append_fast``, the default);
* ``Log.append`` through its Python path only (``use_fast_append(False)``: the
  orchestration in interpreted Python, what pylog did before _append_fast);
* the fast path with ``pylog.validate.records=false`` (the CRC is still
  checked; the walk over every record is not);
* fio's psync write loop of the same block size into its own file (the
  issue's 64 KiB limit; left out with ``--no-fio`` or without fio), timed by
  its writes' latencies summed, with an "x fio" ratio per round for every row.

Each round opens one file or Log per row and runs the rows in turns of
``--chunk`` appends (the order rotating every turn) until each has made its
appends, then deletes them: every row meets the same memory state and the same
minute of this VM, whose speed drifts by up to 1.5x within minutes (a row of
440 MB at a time drifted by 0.72-0.84x between rows). Each turn is timed by
the wall clock and by the thread's CPU time (which leaves out the time the
host takes the vCPU away); the per-round ratios (row / os.write in the same
round) are reported as median and range.

usage: bench/bench_append_overhead.py [--rounds 10] [--records 200] [--record-size 100]
                                      [--appends 20000] [--chunk 500] [--dir DIR] [--no-fio]
                                      [--markdown]
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


class WriteRow:
    """The limit: os.write of the batch into an O_APPEND file."""

    def __init__(self, root: str, data: bytes) -> None:
        self.path = os.path.join(root, "os-write.dat")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.data = data

    def run(self, n: int) -> None:
        write, fd, data = os.write, self.fd, self.data
        for _ in range(n):
            write(fd, data)

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


class FioRow:
    """fio's psync write loop of the same block size (the issue's 64 KiB limit),
    appending to its own file turn after turn (``--file_append``). A turn's time
    is the sum of fio's per-write latencies (ns): fio's process start and its
    loop between writes are left out, so the limit is, if anything, faster than
    fio's own bandwidth figure."""

    def __init__(self, root: str, data: bytes) -> None:
        self.path = os.path.join(root, "fio.dat")
        self.bs = len(data)

    def run(self, n: int) -> tuple[float, float]:
        r = sc.fio(["--rw=write", f"--bs={self.bs}", f"--size={n * self.bs}", "--file_append=1",
                    "--fallocate=none", "--invalidate=0", "--ioengine=psync", "--iodepth=1",
                    f"--filename={self.path}"], with_latency=True)
        assert r["io_bytes"] == n * self.bs, r
        return r["write_ns"] / 1e9, r["cpu_s"]

    def close(self) -> None:
        os.unlink(self.path)


class LogRow:
    """Log.append of the batch, by the fast path or the Python path."""

    def __init__(self, root: str, name: str, data: bytes, records: int, n: int, fast: bool,
                 validate: bool) -> None:
        self.path = os.path.join(root, f"{name}-0")
        self.log = pylog.Log(self.path, {"segment.bytes": min(2**31 - 1, n * len(data) + (1 << 20)),
                                         "pylog.validate.records": validate})
        self.data, self.fast = data, fast
        self.records = records
        self.appended = 0

    def run(self, n: int) -> None:
        self.appended += n
        log_module.use_fast_append(self.fast)
        try:
            append, data = self.log.append, self.data
            for _ in range(n):
                append(data)
        finally:
            log_module.use_fast_append(True)

    def close(self) -> None:
        assert self.log.log_end_offset == self.appended * self.records
        self.log.abandon()     # no close(): it would fsync what the no-flush loop never does
        shutil.rmtree(self.path)


def one_round(rows: dict, n: int, chunk: int) -> dict[str, tuple[float, float]]:
    """Every row's n appends in turns of `chunk`; each row's (wall, cpu) seconds."""
    names = list(rows)
    wall = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    done = 0
    turn = 0
    while done < n:
        k = min(chunk, n - done)
        for j in range(len(names)):
            name = names[(turn + j) % len(names)]
            w0, c0 = time.perf_counter(), time.thread_time()
            own = rows[name].run(k)         # (wall, cpu) of a row timed by its tool
            c1, w1 = time.thread_time(), time.perf_counter()
            cpu[name] += own[1] if own else c1 - c0
            wall[name] += own[0] if own else w1 - w0
        done += k
        turn += 1
    return {name: (wall[name], cpu[name]) for name in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--records", type=int, default=200, help="records per batch")
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--appends", type=int, default=None, help="appends per row (default ~440 MB)")
    ap.add_argument("--chunk", type=int, default=500, help="appends per turn")
    ap.add_argument("--dir", help="filesystem under test (default /tmp)")
    ap.add_argument("--no-fio", dest="fio", action="store_false",
                    help="leave out the fio row (it runs when fio is installed)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rng = random.Random(1)
    data = encode_batch([rng.randbytes(args.record_size) for _ in range(args.records)],
                        timestamps=TIMESTAMP)
    n = args.appends or max(1000, 440_000_000 // len(data))
    root = tempfile.mkdtemp(prefix="pylog-bench-overhead-", dir=args.dir or "/tmp")
    makers = {
        "os.write loop (limit)": lambda: WriteRow(root, data),
        "Log.append, C fast path": lambda: LogRow(root, "fast", data, args.records, n, True, True),
        "Log.append, Python path (naive)": lambda: LogRow(root, "python", data, args.records, n, False, True),
        "Log.append, fast path, validate.records=false":
            lambda: LogRow(root, "novalidate", data, args.records, n, True, False),
    }
    if args.fio and sc.fio_version():
        makers["fio psync, same block size"] = lambda: FioRow(root, data)
    try:
        for line in sc.setup_block(root, {
                "batch": f"{args.records} records x {args.record_size} B = {len(data):,} B",
                "appends per row": f"{n:,} ({n * len(data) / 1e6:,.0f} MB) a round, no flush",
                "rounds": f"{args.rounds}, rows taking turns of {args.chunk} appends"}):
            print(line)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in makers}
        for r in range(args.rounds):
            rows = {name: make() for name, make in makers.items()}
            try:
                for name, t in one_round(rows, n, args.chunk).items():
                    times[name].append(t)
            finally:
                for row in rows.values():
                    row.close()
            sc.log(f"  round {r + 1}: " + ", ".join(
                f"{name.split(',')[-1].strip()} {t[-1][0] / n * 1e6:.1f} us" for name, t in times.items()))
        limit = times["os.write loop (limit)"]
        fio = times.get("fio psync, same block size")

        def ratios(ref, t, k):
            r = sorted(a[k] / b[k] for a, b in zip(ref, t))
            return f"{statistics.median(r):.2f}", f"{r[0]:.2f}-{r[-1]:.2f}"

        table = []
        for name, t in times.items():
            cells = [name]
            for k in (0, 1):            # wall, cpu
                med = statistics.median(x[k] for x in t)
                cells += [f"{med / n * 1e6:.2f}", *ratios(limit, t, k)]
            cells.insert(2, f"{len(data) * n / statistics.median(x[0] for x in t) / 1e6:,.0f}")
            if fio:
                cells += [*ratios(fio, t, 0)]
            table.append(cells)
        print()
        print(sc.table(["path", "us per append (wall, median)", "MB/s (wall)",
                        "x os.write (wall, median of rounds)", "x os.write (wall, range)",
                        "us per append (thread CPU)", "x os.write (CPU, median)",
                        "x os.write (CPU, range)"] +
                       (["x fio (wall, median)", "x fio (wall, range)"] if fio else []),
                       table, args.markdown))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
