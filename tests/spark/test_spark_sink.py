"""df.write.format("pylog") and writeStream.format("pylog"): Spark's Kafka sink columns,
Kafka's partitioning, and a streaming sink that never writes a batch twice."""

from __future__ import annotations

import json
import os

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402
from pylog.client.partitioner import key_partition

pytestmark = pytest.mark.spark


def log_rows(path, topic):
    out = []
    with pylog.open(path) as store:
        consumer = pylog.Consumer(store, auto_offset_reset="earliest")
        partitions = len(store.describe_topic(topic).partitions)
        consumer.assign([pylog.TopicPartition(topic, p) for p in range(partitions)])
        while True:
            records = consumer.poll(0.2)
            if not records:
                break
            out += [(r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records]
        consumer.close()
    return sorted(out)


def test_write_round_trip_with_kafkas_partitioning(spark, tmp_path):
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("out", partitions=4)
    data = [(f"k{i % 11}" if i % 4 else None, f"value {i}") for i in range(3000)]
    df = spark.createDataFrame(data, "key string, value string").repartition(3)
    df.write.format("pylog").mode("append").option("topic", "out").save(path)
    rows = log_rows(path, "out")
    assert sorted(v for _, _, _, v, _ in rows) == sorted(v.encode() for _, v in data)
    for partition, _, key, _, _ in rows:
        if key is not None:       # the partition Kafka's Java client would pick
            assert partition == key_partition(key, 4)
    by_partition = {}
    for partition, offset, *_ in rows:
        by_partition.setdefault(partition, []).append(offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    # Read back through the source: the same records.
    back = spark.read.format("pylog").option("subscribe", "out").load(path)
    assert back.count() == 3000


def test_topic_partition_and_headers_columns(spark, tmp_path):
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("a", partitions=2)
        store.create_topic("b", partitions=3)
    rows = [("a", 1, b"x", b"v1", [("h", b"1")]), ("b", 2, None, b"v2", []),
            ("b", None, b"key", b"v3", [("h1", None), ("h2", b"2")])]
    df = spark.createDataFrame(rows, "topic string, partition int, key binary, value binary, "
                                     "headers array<struct<key:string,value:binary>>")
    df.write.format("pylog").mode("append").save(path)
    assert log_rows(path, "a") == [(1, 0, b"x", b"v1", [("h", b"1")])]
    assert sorted(log_rows(path, "b")) == sorted([
        (2, 0, None, b"v2", []),
        (key_partition(b"key", 3), 0 if key_partition(b"key", 3) != 2 else 1, b"key", b"v3",
         [("h1", None), ("h2", b"2")])])


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_write_compressed(spark, tmp_path, codec):
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("c", partitions=1)
    spark.range(5000).selectExpr("cast(id as string) as value").write.format("pylog") \
        .mode("append").option("topic", "c").option("kafka.compression.type", codec).save(path)
    batches = list(pylog.storage.LogDirsReader(path).partition("c", 0).read_arrow(0, 5000))
    assert sum(b.num_rows for b in batches) == 5000
    from pylog.record import iter_batches
    seg = os.path.join(path, "c-0", "00000000000000000000.log")
    with open(seg, "rb") as f:
        assert {b.compression for b in iter_batches(f.read())} == {codec}


@pytest.mark.parametrize("mode, message", [
    ("overwrite", "save mode overwrite is not supported"),
    ("error", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
])
def test_save_modes(spark, tmp_path, mode, message):
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("t", partitions=1)
    with pytest.raises(Exception, match=message):
        spark.range(3).selectExpr("cast(id as string) as value").write.format("pylog") \
            .mode(mode).option("topic", "t").save(path)


@pytest.mark.parametrize("schema, options, message", [
    ("key string", {"topic": "t"}, "needs a 'value' column"),
    ("value string", {}, "no topic to write to"),
    ("value string", {"topic": "nope"}, "topic 'nope' does not exist"),
    ("value string, partition string", {"topic": "t"}, "column 'partition' must be an int"),
    ("value string", {"topic": "t", "kafka.compression.type": "brotli"}, "must be none, gzip"),
    ("value string", {"topic": "t", "topik": "x"}, "unknown option 'topik'"),
])
def test_bad_sink_input_names_the_problem(spark, tmp_path, schema, options, message):
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("t", partitions=1)
    df = spark.createDataFrame([], schema)
    writer = df.write.format("pylog").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=message):
        writer.save(path)
    assert log_rows(path, "t") == []


def test_a_failed_job_appends_nothing(spark, tmp_path):
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("t", partitions=2)
    df = spark.createDataFrame([(0, "a"), (1, "b"), (5, "c")], "partition int, value string")
    with pytest.raises(Exception, match="partition 5 of topic 't' does not exist"):
        df.repartition(3).write.format("pylog").mode("append").option("topic", "t").save(path)
    assert log_rows(path, "t") == []
    staging = os.path.join(path, "pylog-spark", "staging")
    assert not os.path.exists(staging) or os.listdir(staging) == []


def test_streaming_sink_exactly_once_across_restarts(spark, tmp_path):
    path, src, ckpt = str(tmp_path / "logs"), str(tmp_path / "src"), str(tmp_path / "ckpt")
    with pylog.open(path) as store:
        store.create_topic("s", partitions=2)

    def run():
        q = (spark.readStream.format("parquet").schema("value string").load(src)
             .writeStream.format("pylog").option("topic", "s").option("path", path)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        q.awaitTermination(240)
        q.stop()

    spark.createDataFrame([(f"a{i}",) for i in range(500)], "value string").write.mode("append").parquet(src)
    run()
    spark.createDataFrame([(f"b{i}",) for i in range(300)], "value string").write.mode("append").parquet(src)
    run()
    run()
    values = sorted(v for _, _, _, v, _ in log_rows(path, "s"))
    assert values == sorted([f"a{i}".encode() for i in range(500)] + [f"b{i}".encode() for i in range(300)])
    sinks = os.listdir(os.path.join(path, "pylog-spark", "sinks"))
    assert len(sinks) == 1
    with open(os.path.join(path, "pylog-spark", "sinks", sinks[0])) as f:
        state = json.load(f)
    assert state["done"] and state["batch"] >= 1
    # Each committed micro-batch's staging dir is gone (a new writer commits each one).
    staging = os.path.join(path, "pylog-spark", "staging")
    assert not os.path.exists(staging) or os.listdir(staging) == [], list(os.walk(staging))
