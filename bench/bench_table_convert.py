"""Topic-to-table conversion throughput, beside writing the same Arrow rows with pyarrow alone.

    PYTHONPATH=src python bench/bench_table_convert.py [--records 500000] [--value-size 100]
                                                       [--partitions 1] [--repeat 3] [--naive]

Rows, all in one run over the same segments:

- pylog: ``TableConverter(log_dirs, topic).run_once()`` into an empty local-catalog table
  (loading the table, read_committed read of the segments, the C decoder into Arrow, Parquet, one Iceberg
  commit), MB/s of log bytes converted;
- the limit: ``pyarrow.parquet.write_table`` of the same Arrow table (the converter's own
  columns, already in memory) with the table's Parquet settings (zstd), nothing else;
- the limit with the converter's own choice of encodings (``offset`` without a dictionary,
  as pylog.table.writer writes it), for reading how much of the ratio that choice makes;
- the naive alternative (``--naive``): a per-record Python loop building the rows as
  dicts from the decoded records, ``pa.Table.from_pylist`` and ``write_table``.

Every timed run converts into a fresh, empty table (the previous one dropped and the new
one created first, untimed); best of ``--repeat`` after one warm-up, in wall-clock seconds
and in CPU seconds of the process (all its threads): on a shared machine the CPU figures
are the steadier ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import pylog
from pylog.storage import LogDirsReader
from pylog.table import TableConverter
from pylog.table.columns import ARROW_SCHEMA, to_table_batch

try:
    from pylog.table.writer import UNIQUE_COLUMNS
except ImportError:             # (an older tree: its writer made no such choice)
    UNIQUE_COLUMNS = frozenset()

TOPIC = "bench"


def fill(path: str, records: int, value_size: int, partitions: int) -> None:
    rng = np.random.default_rng(1)
    payload = rng.integers(0, 256, size=value_size * 4096, dtype=np.uint8).tobytes()
    values = [payload[i * value_size:(i + 1) * value_size] for i in range(4096)]
    with pylog.open(path) as store:
        store.create_topic(TOPIC, partitions=partitions, config={"pylog.table.enable": "true"})
        producer = pylog.Producer(store, acks=1, linger_ms=5)
        for start in range(0, records, 4096):
            n = min(4096, records - start)
            producer.send_batch(TOPIC, values[:n], partition=(start // 4096) % partitions)
        producer.flush()
        producer.close()


def log_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path)
               for f in fs if f.endswith(".log") and "__tables" not in d)


def arrow_rows(path: str, partitions: int) -> pa.Table:
    dirs = LogDirsReader([path])
    batches = []
    for p in range(partitions):
        reader = dirs.partition(TOPIC, p)
        for rows in reader.read_arrow(0, reader.last_stable_offset(), 8 << 20,
                                      isolation_level="read_committed", timestamp_type=True):
            batches.append(to_table_batch(rows, TOPIC, p))
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def time_convert(converter: TableConverter) -> float:
    converter.drop()        # (the catalog stays open, as in a store's converter thread)
    converter.table()       # created untimed: a commit into a table that exists, as all but the first
    t, c = time.perf_counter(), time.process_time()
    result = converter.run_once()
    elapsed = time.perf_counter() - t, time.process_time() - c
    assert result.committed and not result.more, result
    return elapsed


def time_pyarrow(rows: pa.Table, out: str) -> float:
    t, c = time.perf_counter(), time.process_time()
    pq.write_table(rows, out, compression="zstd")
    elapsed = time.perf_counter() - t, time.process_time() - c
    os.unlink(out)
    return elapsed


def time_pyarrow_own_encodings(rows: pa.Table, out: str) -> float:
    t, c = time.perf_counter(), time.process_time()
    pq.write_table(rows, out, compression="zstd",
                   use_dictionary=[n for n in rows.column_names if n not in UNIQUE_COLUMNS])
    elapsed = time.perf_counter() - t, time.process_time() - c
    os.unlink(out)
    return elapsed


def time_naive(path: str, partitions: int, out: str) -> float:
    dirs = LogDirsReader([path])
    t, c = time.perf_counter(), time.process_time()
    dicts = []
    for p in range(partitions):
        reader = dirs.partition(TOPIC, p)
        for rows in reader.read_arrow(0, reader.last_stable_offset(), 8 << 20,
                                      isolation_level="read_committed", timestamp_type=True):
            for r in rows.to_pylist():
                dicts.append({"key": r["key"], "value": r["value"], "topic": TOPIC, "partition": p,
                              "offset": r["offset"], "timestamp": r["timestamp"],
                              "timestampType": r["timestamp_type"],
                              "headers": [{"key": k, "value": v} for k, v in r["headers"]] or None})
    table = pa.Table.from_pylist(dicts, schema=ARROW_SCHEMA)
    pq.write_table(table, out, compression="zstd")
    elapsed = time.perf_counter() - t, time.process_time() - c
    os.unlink(out)
    return elapsed


def best(fn, repeat: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process) of ``repeat`` runs after a warm-up."""
    fn()
    runs = [fn() for _ in range(repeat)]
    return min(w for w, _ in runs), min(c for _, c in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive", action="store_true", help="also time the per-record Python loop")
    ap.add_argument("--dir", help="keep the topic here (filled once, reused)")
    args = ap.parse_args()

    path = args.dir or tempfile.mkdtemp(prefix="pylog-bench-table-")
    try:
        if not os.path.exists(os.path.join(path, "meta.properties")) and not any(
                d.startswith(TOPIC + "-") for d in (os.listdir(path) if os.path.isdir(path) else [])):
            fill(path, args.records, args.value_size, args.partitions)
        size = log_bytes(path)
        rows = arrow_rows(path, args.partitions)
        out = os.path.join(path, "alone.parquet")
        load = os.getloadavg()
        converter = TableConverter(path, TOPIC)
        t_pylog = best(lambda: time_convert(converter), args.repeat)
        t_arrow = best(lambda: time_pyarrow(rows, out), args.repeat)
        t_own = best(lambda: time_pyarrow_own_encodings(rows, out), args.repeat)
        t_naive = time_naive(path, args.partitions, out) if args.naive else None
        load_after = os.getloadavg()
        mb = size / 1e6
        print(f"pylog {pylog.__version__}, pyarrow {pa.__version__}, python {sys.version.split()[0]}; "
              f"{rows.num_rows:,} records, {mb:.1f} MB of log, {args.partitions} partition(s); "
              f"load average {load[0]:.1f} -> {load_after[0]:.1f}")
        print("| row | pylog | the limit (same run) | x limit | the naive alternative | x naive |")
        print("|---|---|---|---|---|---|")
        for i, what in ((0, "wall"), (1, "CPU")):
            naive = (f"{mb / t_naive[i]:,.1f} MB/s ({t_naive[i]:.2f} s, per-record loop + from_pylist)"
                     if t_naive else "not run")
            x_naive = f"{t_naive[i] / t_pylog[i]:.1f}x" if t_naive else "-"
            print(f"| log -> Parquet + Iceberg commit, {what} s | {mb / t_pylog[i]:,.1f} MB/s "
                  f"({t_pylog[i]:.3f} s) | {mb / t_arrow[i]:,.1f} MB/s ({t_arrow[i]:.3f} s, "
                  f"pq.write_table zstd) | {t_arrow[i] / t_pylog[i]:.2f}x | {naive} | {x_naive} |")
        for i, what in ((0, "wall"), (1, "CPU")):
            print(f"| the limit with the converter's encodings ({', '.join(sorted(UNIQUE_COLUMNS)) or 'none'} "
                  f"without a dictionary), {what} s | | {mb / t_own[i]:,.1f} MB/s ({t_own[i]:.3f} s) | "
                  f"{t_own[i] / t_pylog[i]:.2f}x | | |")
    finally:
        if not args.dir:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
