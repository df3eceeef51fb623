"""Spark reading and writing pylog topics, beside the ceilings of the same Spark session.

    .venv/bin/python bench/bench_spark.py [--records 5000000] [--value-size 100] [--repeat 3]

Rows: a batch read of the topic (``format("pylog")``, from the log dirs and, in remote
mode, through ``pylog serve``); Spark's JVM Kafka connector reading the same topic through
the same broker (when tools/spark-kafka/fetch can get its jars); the same query on a trivial Python
source that yields pre-built Arrow batches of the same schema (the ceiling of any Python
data source here); the same rows from Parquet (Spark's JVM reader); the C decoder alone on
one core (``decode_arrow`` of the same segments, no Spark). Writes: the pylog sink
beside Spark's Parquet writer for the same DataFrame. Streaming: the time per micro-batch
of small availableNow batches. Every read runs ``sum(length(value))`` so each value is
materialised; the first query of the session is a warm-up and not timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pylog  # noqa: E402
from pylog.spark.schema import ARROW_SCHEMA, spark_schema  # noqa: E402


def fill(path: str, records: int, value_size: int, partitions: int) -> None:
    rng = np.random.default_rng(1)
    payload = rng.integers(0, 256, size=value_size * 4096, dtype=np.uint8).tobytes()
    values = [payload[i * value_size:(i + 1) * value_size] for i in range(4096)]
    with pylog.open(path) as store:
        store.create_topic("bench", partitions=partitions)
        producer = pylog.Producer(store, acks=1, linger_ms=5)
        per_call = 4096
        for start in range(0, records, per_call):
            n = min(per_call, records - start)
            producer.send_batch("bench", values[:n], partition=(start // per_call) % partitions)
        producer.flush()
        producer.close()


def trivial_source(records: int, value_size: int, partitions: int):
    """A Python data source yielding pre-built batches: Spark's ceiling for Python sources."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):
        def __init__(self, n):
            super().__init__(n)

    class Reader(DataSourceReader):
        def partitions(self):
            return [Part(records // partitions) for _ in range(partitions)]

        def read(self, part):
            rows = 65536
            data = np.zeros(rows * value_size, dtype=np.uint8)
            offsets = np.arange(rows + 1, dtype=np.int32) * value_size
            value = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets),
                                                               pa.py_buffer(data)])
            topic = pa.array(["bench"] * rows)
            batch = pa.RecordBatch.from_arrays([
                pa.nulls(rows, pa.binary()), value, topic, pa.array(np.zeros(rows, np.int32)),
                pa.array(np.arange(rows, dtype=np.int64)),
                pa.array(np.zeros(rows, np.int64)).cast(pa.timestamp("us", tz="UTC")),
                pa.array(np.zeros(rows, np.int32))], schema=ARROW_SCHEMA)
            left = part.value
            while left > 0:
                yield batch if left >= rows else batch.slice(0, left)
                left -= rows

    class Trivial(DataSource):
        @classmethod
        def name(cls):
            return "trivial_bench"

        def schema(self):
            return spark_schema(False)

        def reader(self, schema):
            return Reader()

    return Trivial


def null_sink():
    """A Python Arrow writer that only iterates its batches: the ceiling of any Python sink."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        WriterCommitMessage,
    )

    class Writer(DataSourceArrowWriter):
        def write(self, batches):
            for _ in batches:
                pass
            return WriterCommitMessage()

    class NullSink(DataSource):
        @classmethod
        def name(cls):
            return "null_sink_bench"

        def writer(self, schema, overwrite):
            return Writer()

    return NullSink


def connector_jars() -> list[str]:
    """Spark's Kafka connector jars (tools/spark-kafka/fetch), or [] without them."""
    import glob
    import subprocess
    fetch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "spark-kafka",
                         "fetch")
    try:
        run = subprocess.run([fetch], capture_output=True, text=True, timeout=600)
    except OSError:
        return []
    return sorted(glob.glob(os.path.join(run.stdout.strip(), "*.jar"))) if run.returncode == 0 else []


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--dir", default=None, help="work dir (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    work = args.dir or tempfile.mkdtemp(prefix="pylog-bench-spark-")
    logs, parquet = os.path.join(work, "logs"), os.path.join(work, "parquet")
    n, size = args.records, args.value_size
    try:
        t0 = time.perf_counter()
        fill(logs, n, size, args.partitions)
        print(f"# filled {n:,} records of {size} B in {time.perf_counter() - t0:.1f} s", flush=True)

        # The C decoder alone, one core: every segment of the topic.
        reader = pylog.storage.LogDirsReader(logs)
        t0 = time.perf_counter()
        decoded = 0
        for p in range(args.partitions):
            pr = reader.partition("bench", p)
            for rows in pr.read_arrow(0, pr.log_end_offset()):
                decoded += rows.num_rows
        decode_s = time.perf_counter() - t0
        assert decoded == n

        store = pylog.open(logs)              # served while Spark reads (path mode reads beside it)
        broker = pylog.Broker(store, listen="127.0.0.1:0").start()
        jars = connector_jars()
        from pyspark.sql import SparkSession
        builder = SparkSession.builder.config("spark.jars", ",".join(jars)) if jars else \
            SparkSession.builder
        spark = (builder.master(f"local[{os.cpu_count()}]").appName("bench-spark")
                 .config("spark.driver.memory", args.driver_memory)
                 .config("spark.sql.shuffle.partitions", str(os.cpu_count()))
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(trivial_source(n, size, args.partitions))
        spark.dataSource.register(null_sink())

        def pylog_df():
            return (spark.read.format("pylog").option("subscribe", "bench")
                    .option("minPartitions", str(os.cpu_count())).load(logs))

        query = "sum(length(value)) as bytes"
        pylog_df().selectExpr(query).collect()                    # warm-ups (JIT, workers)
        spark.read.format("trivial_bench").load().selectExpr(query).collect()
        pylog_df().write.mode("overwrite").parquet(parquet)
        got = pylog_df().selectExpr(query, "count(*) as n").collect()[0]
        assert got.n == n and got.bytes == n * size, got

        def remote_df(fmt):
            return (spark.read.format(fmt).option("kafka.bootstrap.servers",
                                                  broker.bootstrap_servers)
                    .option("subscribe", "bench").option("minPartitions", str(os.cpu_count()))
                    .load())

        remote_df("pylog").selectExpr(query).collect()             # warm-ups
        if jars:
            remote_df("kafka").selectExpr(query).collect()
        reads = {
            "pylog source": lambda: pylog_df().selectExpr(query).collect(),
            "pylog source, remote (through pylog serve)":
                lambda: remote_df("pylog").selectExpr(query).collect(),
            "trivial Arrow source (ceiling)": lambda: spark.read.format("trivial_bench").load()
            .selectExpr(query).collect(),
            "Parquet (Spark's JVM reader)": lambda: spark.read.parquet(parquet).selectExpr(query)
            .collect(),
        }
        if jars:
            reads["Spark's JVM Kafka connector (through pylog serve)"] = \
                lambda: remote_df("kafka").selectExpr(query).collect()
        times = {name: min(timed(fn, args.repeat)) for name, fn in reads.items()}
        broker.shutdown()
        store.close()

        out_logs = os.path.join(work, "sink-logs")
        with pylog.open(out_logs) as store:
            store.create_topic("sink", partitions=args.partitions)
        source = spark.read.parquet(parquet).select("key", "value").cache()
        source.count()

        def write_pylog():
            source.write.format("pylog").mode("append").option("topic", "sink").save(out_logs)

        def write_parquet():
            source.write.mode("overwrite").parquet(os.path.join(work, "sink-parquet"))

        source.limit(1000).write.format("pylog").mode("append").option("topic", "sink") \
            .save(out_logs)                                        # warm-up
        sink_pylog = min(timed(write_pylog, args.repeat))
        sink_parquet = min(timed(write_parquet, args.repeat))

        def write_null():
            source.write.format("null_sink_bench").mode("append").save()

        write_null()                                               # warm-up
        sink_null = min(timed(write_null, args.repeat))

        ckpt = os.path.join(work, "ckpt")
        q = (spark.readStream.format("pylog").option("subscribe", "bench")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
             .load(logs).writeStream.format("noop").option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        # Ten small batches: stop after them (availableNow would read everything).
        deadline = time.time() + 300
        while len(q.recentProgress) < 12 and time.time() < deadline and q.isActive:
            time.sleep(0.2)
        q.stop()
        batch_ms = [p["durationMs"]["triggerExecution"] for p in q.recentProgress[2:12]]
        spark.stop()

        mb = n * size / 1e6
        ceiling = times["trivial Arrow source (ceiling)"]
        print(f"\n{n:,} records of {size} B, {args.partitions} partitions, local[{os.cpu_count()}], "
              f"best of {args.repeat}\n")
        print("| read | s | M rows/s | MB/s | x ceiling |")
        print("|---|---|---|---|---|")
        for name, s in times.items():
            print(f"| {name} | {s:.2f} | {n / s / 1e6:.2f} | {mb / s:.0f} | {ceiling / s:.2f} |")
        print(f"| C decoder alone, 1 core, no Spark | {decode_s:.2f} | {n / decode_s / 1e6:.2f} | "
              f"{mb / decode_s:.0f} | - |")
        print("\n| write | s | M rows/s | x Parquet |")
        print("|---|---|---|---|")
        print(f"| pylog sink | {sink_pylog:.2f} | {n / sink_pylog / 1e6:.2f} | "
              f"{sink_parquet / sink_pylog:.2f} |")
        print(f"| Parquet writer | {sink_parquet:.2f} | {n / sink_parquet / 1e6:.2f} | 1.00 |")
        print(f"| Python Arrow writer that drops its input (ceiling) | {sink_null:.2f} | "
              f"{n / sink_null / 1e6:.2f} | {sink_parquet / sink_null:.2f} |")
        if batch_ms:
            print(f"\nstreaming micro-batch of 1,000 records: median {statistics.median(batch_ms):.0f} ms, "
                  f"max {max(batch_ms):.0f} ms over {len(batch_ms)} batches (noop sink)")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
