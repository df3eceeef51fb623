"""Topics as tables (pylog.table): conversion throughput, produce-to-queryable latency and
Spark query time, each beside its naive alternative in the same run.

    PYTHONPATH=src python bench/bench_tables.py [--records 1000000] [--value-size 200]
        [--repeat 3] [--rate 20000] [--seconds 20] [--interval-ms 1000] [--no-spark] [--json]

Rows (MB = 10^6 bytes of the topic's segment files, the same denominator for each):

1. **conversion**: ``pylog.table.rebuild`` of the topic from its log dirs (decode in C,
   Parquet zstd, one Iceberg commit), beside writing the same Arrow table, already decoded
   in memory, with ``pyarrow.parquet.write_table`` alone (same codec: the ceiling of any
   converter built on pyarrow; target >= 0.8x), and beside a Spark Structured Streaming job
   doing the same conversion (``readStream.format("pylog")`` -> ``writeStream.format
   ("parquet")``, availableNow; the pipeline users write today; target pylog >= 3x).
2. **produce-to-queryable**: a producer at ``--rate`` records/s for ``--seconds`` into a
   store whose TableService commits every ``--interval-ms``; for each record, the time from
   its append (CreateTime) to the commit of the snapshot that holds it (the snapshot's
   timestamp; ``pylog.offsets`` says which offsets each commit holds). p50/p99/max.
3. **Spark query**: ``count(*) WHERE key = <one key>`` over the table (Spark's JVM Parquet
   reader on the current snapshot's files: what Spark's Iceberg reader would scan; the
   Iceberg runtime itself cannot run on Spark 4.3, docs/TABLES.md), over the union source
   (``format("pylog")``, table=true) and over the raw topic (``format("pylog")``). A key
   filter on an untyped topic: no statistics to prune by. The issue's target (the table
   >= 5x faster for a column filter) is measured on a typed topic's value columns by
   ``bench/bench_table_query.py``.

Correctness is checked before each figure: the table's row count equals the log's, the
Spark conversion's too, and the three queries return the same count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pylog  # noqa: E402
from pylog.storage import LogDirsReader  # noqa: E402
from pylog.table import TableConverter, rebuild, watermarks  # noqa: E402
from pylog.table.columns import ARROW_SCHEMA, to_table_batch  # noqa: E402
from storage_common import setup_block  # noqa: E402

TOPIC = "bench"
KEYS = 1000


def fill(path: str, records: int, value_size: int, partitions: int) -> None:
    """Seeded values, half random bytes and half a repeated pattern (compressible), keyed
    by one of KEYS keys."""
    rng = np.random.default_rng(7)
    noise = rng.integers(0, 256, size=value_size * 4096, dtype=np.uint8).tobytes()
    half = value_size // 2
    values = [noise[i * value_size:i * value_size + half] + b"pylog-" * (half // 6 + 1)
              for i in range(4096)]
    values = [v[:value_size] for v in values]
    keys = [b"user-%d" % (i % KEYS) for i in range(4096)]
    with pylog.open(path, background=False) as store:
        store.create_topic(TOPIC, partitions=partitions, config={"pylog.table.enable": "true"})
        producer = pylog.Producer(store, acks=1, linger_ms=5)
        for start in range(0, records, 4096):
            n = min(4096, records - start)
            producer.send_batch(TOPIC, values[:n], keys=keys[:n],
                                partition=(start // 4096) % partitions)
        producer.flush()
        producer.close()


def log_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path)
               for f in fs if f.endswith(".log") and "__tables" not in d)


def decoded(path: str) -> pa.Table:
    reader = LogDirsReader(path)
    batches = []
    for p in range(reader.topics()[TOPIC]):
        pr = reader.partition(TOPIC, p)
        for rows in pr.read_arrow(0, pr.log_end_offset(), timestamp_type=True):
            batches.append(to_table_batch(rows, TOPIC, p))
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def conversion(path: str, scratch: str, repeat: int, spark) -> dict:
    size = log_bytes(path)
    table = decoded(path)
    records = table.num_rows
    pylog_s, arrow_s, spark_s = [], [], []
    rebuild(path, TOPIC)        # warm-up: the first use imports pyiceberg, sqlalchemy (seconds)
    for turn in range(repeat):
        t0 = time.perf_counter()
        result = rebuild(path, TOPIC)
        pylog_s.append(time.perf_counter() - t0)
        assert result.records == records, (result.records, records)
        out = os.path.join(scratch, f"alone-{turn}.parquet")
        t0 = time.perf_counter()
        pq.write_table(table, out, compression="zstd")
        arrow_s.append(time.perf_counter() - t0)
        os.remove(out)
    if spark is not None:
        for turn in range(-1, max(1, repeat - 1)):     # turn -1: warm-up, not timed
            out, ckpt = os.path.join(scratch, f"spark-{turn}"), os.path.join(scratch, f"ckpt-{turn}")
            t0 = time.perf_counter()
            query = (spark.readStream.format("pylog").option("subscribe", TOPIC)
                     .option("startingOffsets", "earliest").option("includeHeaders", "true")
                     .load(path).writeStream.format("parquet").option("path", out)
                     .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
            query.awaitTermination()
            if turn >= 0:
                spark_s.append(time.perf_counter() - t0)
            assert spark.read.parquet(out).count() == records
            shutil.rmtree(out)
            shutil.rmtree(ckpt)
    best = min(pylog_s)
    row = {"records": records, "log_mb": size / 1e6, "pylog_s": best,
           "pylog_mb_s": size / 1e6 / best, "arrow_alone_mb_s": size / 1e6 / min(arrow_s),
           "x_arrow_alone": min(arrow_s) / best}
    if spark_s:
        row.update(spark_mb_s=size / 1e6 / min(spark_s), x_spark=min(spark_s) / best)
    return row


def latency(root: str, rate: int, seconds: float, interval_ms: int, value_size: int) -> dict:
    """Records appended at `rate`/s; each one's append time to its commit's time."""
    path = os.path.join(root, "latency")
    value = b"v" * value_size
    with pylog.open(path) as store:
        store.create_topic("live", 2, {"pylog.table.enable": "true",
                                       "pylog.table.commit.interval.ms": str(interval_ms)})
        producer = pylog.Producer(store, acks=1, linger_ms=5)
        stop = time.monotonic() + seconds
        sent, tick = 0, 0.01
        next_at = time.monotonic()
        while time.monotonic() < stop:
            n = max(1, int(rate * tick))
            producer.send_batch("live", [value] * n, partition=sent % 2)
            sent += n
            next_at += tick
            pause = next_at - time.monotonic()
            if pause > 0:
                threading.Event().wait(pause)
        producer.flush()
        producer.close()
        end = {p: store.log("live", p).log_end_offset for p in range(2)}
        deadline = time.monotonic() + 30 + 3 * interval_ms / 1000
        while time.monotonic() < deadline:           # the last records' commit
            table = TableConverter(store, "live").table()
            if all(watermarks(table).get(p, 0) >= end[p] for p in end):
                break
            threading.Event().wait(0.1)
        table = TableConverter(store, "live").table()
    rows = table.scan(selected_fields=("partition", "offset", "timestamp")).to_arrow()
    append_ms = {(p, o): t for p, o, t in zip(
        rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
        pa.compute.divide(rows.column("timestamp").cast(pa.int64()), 1000).to_pylist())}
    lat = []
    commits = 0
    for snap in table.snapshots():
        extra = snap.summary.additional_properties
        if "pylog.offsets" not in extra:
            continue
        commits += 1
        for p, (a, b) in json.loads(extra["pylog.offsets"]).items():
            lat += [snap.timestamp_ms - append_ms[(int(p), o)] for o in range(a, b)]
    assert len(lat) == sum(end.values()) == len(append_ms)
    lat.sort()
    return {"records": len(lat), "rate": rate, "seconds": seconds, "interval_ms": interval_ms,
            "commits": commits, "p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)],
            "max_ms": lat[-1]}


def queries(spark, path: str, repeat: int) -> dict:
    table = TableConverter(path, TOPIC).table()
    files = [t.file.file_path for t in table.scan().plan_files()]
    key = "user-7"
    variants = {
        "table (Spark's Parquet reader, snapshot files)": lambda: spark.read.parquet(*files),
        "union (format pylog, table=true)": lambda: spark.read.format("pylog")
        .option("subscribe", TOPIC).option("table", "true").load(path),
        "raw topic (format pylog)": lambda: spark.read.format("pylog")
        .option("subscribe", TOPIC).load(path),
    }
    out = {}
    for name, make in variants.items():
        make().where(f"key = cast('{key}' as binary)").count()       # warm-up
        times, counts = [], set()
        for _ in range(repeat):
            t0 = time.perf_counter()
            counts.add(make().where(f"key = cast('{key}' as binary)").count())
            times.append(time.perf_counter() - t0)
        out[name] = {"s": min(times), "count": counts.pop()}
    assert len({v["count"] for v in out.values()}) == 1, out
    raw = out["raw topic (format pylog)"]["s"]
    for v in out.values():
        v["x_raw"] = raw / v["s"]
    return out


def start_spark():
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("bench-tables")
             .config("spark.driver.memory", "2g").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", type=int, default=20_000, help="records/s for the latency row")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--interval-ms", type=int, default=1000, help="pylog.table.commit.interval.ms")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-tables-", dir=args.dir)
    try:
        path = os.path.join(root, "logs")
        scratch = os.path.join(root, "scratch")
        os.makedirs(scratch)
        fill(path, args.records, args.value_size, args.partitions)
        load = os.getloadavg()[0]
        spark = None if args.no_spark else start_spark()
        if spark is not None:
            spark.read.format("pylog").option("subscribe", TOPIC).load(path).limit(1).collect()
        conv = conversion(path, scratch, args.repeat, spark)
        lat = latency(root, args.rate, args.seconds, args.interval_ms, args.value_size)
        q = queries(spark, path, args.repeat) if spark is not None else {}
        load_after = os.getloadavg()[0]
        result = {"conversion": conv, "latency": lat, "queries": q,
                  "load_average": [load, load_after]}
        if args.json:
            print(json.dumps(result, indent=1))
            return
        print("\n".join(setup_block(root, {
            "topic": f"{args.records:,} records of {args.value_size} B, {args.partitions} "
                     f"partitions, {conv['log_mb']:.1f} MB of segments",
            "load average (1 min)": f"{load:.1f} before, {load_after:.1f} after"})))
        print()
        print("| row | pylog | the alternative (same run) | x |")
        print("|---|---|---|---|")
        print(f"| conversion log -> Parquet + Iceberg commit | {conv['pylog_mb_s']:.1f} MB/s "
              f"({conv['pylog_s']:.2f} s) | pyarrow.parquet.write_table alone, pre-decoded: "
              f"{conv['arrow_alone_mb_s']:.1f} MB/s | {conv['x_arrow_alone']:.2f}x |")
        if "spark_mb_s" in conv:
            print(f"| conversion | {conv['pylog_mb_s']:.1f} MB/s | Spark Structured Streaming "
                  f"format(pylog) -> parquet: {conv['spark_mb_s']:.1f} MB/s | "
                  f"{conv['x_spark']:.2f}x |")
        print(f"| produce-to-queryable, {lat['rate']:,} rec/s for {lat['seconds']:.0f} s, "
              f"commit every {lat['interval_ms']} ms | p50 {lat['p50_ms']} ms, p99 "
              f"{lat['p99_ms']} ms, max {lat['max_ms']} ms ({lat['commits']} commits) | the "
              f"commit interval: {lat['interval_ms']} ms | - |")
        for name, v in q.items():
            print(f"| Spark count(*) where key = one of {KEYS} ({v['count']:,} rows) | {name}: "
                  f"{v['s']:.2f} s | raw topic: {q['raw topic (format pylog)']['s']:.2f} s | "
                  f"{v['x_raw']:.2f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
