"""Spark query time over a typed topic's Iceberg table vs over the raw topic, for a filter
on a value column (issue 46's benchmark: target the table >= 5x faster).

    PYTHONPATH=src python bench/bench_table_query.py [--records 1000000] [--commits 10]
        [--repeat 3] [--json]

The topic is typed (``pylog.table.schema.type=json``): each value is a JSON order
(order_id increasing with the offset, user, country, amount, page, items, agent; about
170 B), so the table has typed columns. It is converted in ``--commits`` commits (the
background converter commits each interval: a table is many files), then each filter
is counted, best of ``--repeat`` after a warm-up:

- **table**: what Spark's Iceberg reader does, with Spark's JVM Parquet reader (the
  Iceberg runtime does not link against the venv's Spark 4.3, and pylog's source does not
  load on the PySpark 4.1 the runtime needs: no ``pyspark.sql.streaming.datasource``
  there): load the table from the catalog, plan its files with the filter (pyiceberg:
  manifest statistics prune files), ``spark.read.schema(<the table's typed columns>)
  .parquet(files).where(filter).count()`` (Parquet row-group statistics skip row groups;
  only the filter's columns are read). All of it is timed.
- **raw topic**: ``format("pylog")`` and ``from_json(cast(value as string), schema)``:
  the query a user without the table writes.

Filters: ``order_id`` in a range of 0.1% of the records (clustered: a file's and a row
group's min/max prune), and ``user = <one of 100,000>`` (not clustered: nothing to prune;
the table wins by reading one typed column instead of parsing every value).
Correctness: every variant returns the count numpy computes from the generated data.
Spark's floor (``spark.range(1).count()``) is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pylog  # noqa: E402
from pylog.table import TableConverter, convert  # noqa: E402
from storage_common import setup_block  # noqa: E402

TOPIC = "orders"
USERS = 100_000
COUNTRIES = ["US", "DE", "FR", "GB", "NZ", "JP", "BR", "IN", "CA", "AU", "ES", "IT", "NL",
             "SE", "NO", "PL", "MX", "KR", "ZA", "AR"]
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/%d.0" % v for v in range(100, 110)]
SCHEMA = {"type": "object", "required": ["order_id", "user"], "properties": {
    "order_id": {"type": "integer"}, "user": {"type": "integer"},
    "country": {"type": "string"}, "amount": {"type": "number"},
    "page": {"type": "string"}, "items": {"type": "integer"}, "agent": {"type": "string"}}}
SPARK_SCHEMA = ("order_id BIGINT, user BIGINT, country STRING, amount DOUBLE, page STRING, "
                "items BIGINT, agent STRING")


def columns(records: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(46)
    return {"order_id": np.arange(records, dtype=np.int64),
            "user": rng.integers(0, USERS, records), "country": rng.integers(0, len(COUNTRIES), records),
            "amount": rng.integers(0, 100_000, records), "page": rng.integers(0, 500, records),
            "items": rng.integers(1, 10, records), "agent": rng.integers(0, len(AGENTS), records)}


def fill(path: str, schema_file: str, cols: dict[str, np.ndarray], commits: int,
         partitions: int) -> tuple[float, int]:
    """Produces the orders and converts them in `commits` commits; returns the conversion
    seconds and the bytes of the values."""
    records = len(cols["order_id"])
    with pylog.open(path, background=False) as store:
        store.create_topic(TOPIC, partitions=partitions, config={
            "pylog.table.enable": "true", "pylog.table.schema.type": "json",
            "pylog.table.schema.file": schema_file})
    convert_s, value_bytes = 0.0, 0
    step = -(-records // commits)
    for first in range(0, records, step):
        values = [json.dumps({"order_id": int(o), "user": int(u), "country": COUNTRIES[c],
                              "amount": a / 100, "page": "/shop/item/%d" % p, "items": int(i),
                              "agent": AGENTS[g]}, separators=(",", ":")).encode()
                  for o, u, c, a, p, i, g in zip(*(cols[k][first:first + step] for k in (
                      "order_id", "user", "country", "amount", "page", "items", "agent")))]
        value_bytes += sum(map(len, values))
        with pylog.open(path, background=False) as store:
            producer = pylog.Producer(store, acks=1, linger_ms=5)
            for at in range(0, len(values), 4096):
                producer.send_batch(TOPIC, values[at:at + 4096],
                                    partition=(first + at) // 4096 % partitions)
            producer.flush()
            producer.close()
        t0 = time.perf_counter()
        result = convert(path, TOPIC)
        convert_s += time.perf_counter() - t0
        assert result.records == len(values), (result.records, len(values))
    return convert_s, value_bytes


def table_layout(path: str) -> dict:
    """Files, row groups, and whether the typed columns carry statistics."""
    import pyarrow.parquet as pq
    table = TableConverter(path, TOPIC).table()
    tasks = list(table.scan().plan_files())
    order_id = table.schema().find_field("order_id").field_id
    row_groups, stats = 0, True
    for t in tasks:
        meta = pq.ParquetFile(t.file.file_path.removeprefix("file://")).metadata
        row_groups += meta.num_row_groups
        col = meta.schema.names.index("order_id")
        stats &= all(meta.row_group(i).column(col).statistics is not None
                     and meta.row_group(i).column(col).statistics.has_min_max
                     for i in range(meta.num_row_groups))
        stats &= order_id in (t.file.lower_bounds or {})
    return {"files": len(tasks), "row_groups": row_groups, "typed_column_stats": stats,
            "table_bytes": sum(t.file.file_size_in_bytes for t in tasks)}


def filters(records: int):
    low = records // 2
    high = low + max(1, records // 1000)
    user = 4242
    return {
        f"order_id in [{low}, {high}) (0.1%, clustered)": (
            f"order_id >= {low} AND order_id < {high}",
            lambda E: E.And(E.GreaterThanOrEqual("order_id", low), E.LessThan("order_id", high)),
            lambda c: int(((c["order_id"] >= low) & (c["order_id"] < high)).sum())),
        f"user = {user} (one of {USERS:,}, not clustered)": (
            f"user = {user}", lambda E: E.EqualTo("user", user),
            lambda c: int((c["user"] == user).sum())),
    }


def best(run, repeat: int) -> tuple[float, int]:
    run()                                   # warm-up
    times, counts = [], set()
    for _ in range(repeat):
        t0 = time.perf_counter()
        counts.add(run())
        times.append(time.perf_counter() - t0)
    assert len(counts) == 1, counts
    return min(times), counts.pop()


def queries(spark, path: str, cols, repeat: int) -> dict:
    import pyiceberg.expressions as E
    from pyspark.sql.functions import col, from_json

    from pylog.table import open_catalog, table_identifier
    config = {"pylog.table.enable": "true"}
    catalog = open_catalog(path, config)            # the session's catalog, opened once
    out = {}
    for name, (where, iceberg_filter, truth) in filters(len(cols["order_id"])).items():
        def table_query(where=where, iceberg_filter=iceberg_filter):
            # As Spark's Iceberg reader: the table's current metadata from the catalog, the
            # files the manifests' statistics cannot rule out, the schema from the table
            # (no footer read to infer it), Parquet row groups skipped by their statistics.
            table = catalog.load_table(table_identifier(TOPIC, config))
            files = [t.file.file_path for t in table.scan(row_filter=iceberg_filter(E)).plan_files()]
            if not files:
                return 0
            return spark.read.schema(SPARK_SCHEMA).parquet(*files).where(where).count()

        def raw_query(where=where):
            return (spark.read.format("pylog").option("subscribe", TOPIC).load(path)
                    .select(from_json(col("value").cast("string"), SPARK_SCHEMA).alias("v"))
                    .select("v.*").where(where).count())

        row = {"expected": truth(cols)}
        variants = {"table": table_query, "raw": raw_query}
        for key, run in variants.items():
            s, count = best(run, repeat)
            assert count == row["expected"], (name, key, count, row["expected"])
            row[f"{key}_s"] = s
        row["files_planned"] = len(list(TableConverter(path, TOPIC).table().scan(
            row_filter=iceberg_filter(E)).plan_files()))
        for key in variants:
            row[f"x_{key}"] = row["raw_s"] / row[f"{key}_s"]
        out[name] = row
    return out


def start_spark():
    from pyspark.sql import SparkSession

    from pylog.spark import PylogDataSource
    builder = (SparkSession.builder.master("local[2]").appName("bench-table-query")
               .config("spark.driver.memory", "2g").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PylogDataSource)
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-table-query-", dir=args.dir)
    try:
        path = os.path.join(root, "logs")
        schema_file = os.path.join(root, "orders.schema.json")
        with open(schema_file, "w") as f:
            json.dump(SCHEMA, f)
        cols = columns(args.records)
        load = os.getloadavg()[0]
        convert_s, value_bytes = fill(path, schema_file, cols, args.commits, args.partitions)
        layout = table_layout(path)
        spark = start_spark()
        floor, _ = best(lambda: spark.range(1).count(), args.repeat)
        q = queries(spark, path, cols, args.repeat)
        load_after = os.getloadavg()[0]
        result = {"records": args.records, "value_mb": value_bytes / 1e6, "commits": args.commits,
                  "convert_s": convert_s, "layout": layout, "spark": spark.version,
                  "spark_floor_s": floor, "queries": q, "load_average": [load, load_after]}
        if args.json:
            print(json.dumps(result, indent=1))
            return
        print("\n".join(setup_block(root, {
            "topic": f"{args.records:,} JSON orders ({value_bytes / 1e6:.1f} MB of values), "
                     f"{args.partitions} partitions, {args.commits} commits -> "
                     f"{layout['files']} files, {layout['row_groups']} row groups, "
                     f"{layout['table_bytes'] / 1e6:.1f} MB of Parquet; typed column "
                     f"statistics: {layout['typed_column_stats']}",
            "Spark": f"{spark.version}, local[2]; spark.range(1).count(): {floor:.2f} s",
            "load average (1 min)": f"{load:.1f} before, {load_after:.1f} after"})))
        print()
        print("| filter (count(*)) | rows | table (plan + Spark Parquet) | raw topic, from_json "
              "| x table |")
        print("|---|---|---|---|---|")
        for name, v in q.items():
            print(f"| {name} | {v['expected']:,} | {v['table_s']:.2f} s ({v['files_planned']} "
                  f"of {layout['files']} files) | {v['raw_s']:.2f} s | {v['x_table']:.1f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
