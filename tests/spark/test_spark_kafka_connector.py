"""Spark's own JVM Kafka connector (spark-sql-kafka-0-10) against ``pylog serve``: it
reads what pylog stores, byte for byte what format("pylog") reads (path and remote
mode), and what it writes through the broker pylog reads back (issue 17, item 5)."""

from __future__ import annotations

import os

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402

from .support import produce  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture
def connector(spark):
    if not getattr(spark, "pylog_kafka_connector", False):
        reason = "Spark's Kafka connector jars are missing (tools/spark-kafka/fetch needs mvn)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the connector test: {reason}")
        pytest.skip(reason)
    return spark


def rows(df, with_headers=False):
    out = []
    for r in df.collect():
        row = (r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key),
               bytes(r.value), r.timestamp, r.timestampType)
        if with_headers:
            row += (None if r.headers is None else
                    tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers),)
        out.append(row)
    return sorted(out, key=lambda t: (t[1], t[2]))


def test_sparks_kafka_connector_reads_pylog_serve_like_format_pylog(connector, tmp_path):
    spark = connector
    path = str(tmp_path)
    produce(path, "events", 3000, compression="zstd")
    store = pylog.open(path)
    try:
        with pylog.Broker(store, listen="127.0.0.1:0") as broker:
            kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers",
                                                       broker.bootstrap_servers)
                     .option("subscribe", "events").option("includeHeaders", "true").load())
            remote = (spark.read.format("pylog").option("kafka.bootstrap.servers",
                                                         broker.bootstrap_servers)
                      .option("subscribe", "events").option("includeHeaders", "true").load())
            assert kafka.schema == remote.schema
            want = rows(kafka, True)
            assert len(want) == 3000
            assert rows(remote, True) == want
            # Path mode reads the same files the broker serves (read-only, beside it).
            local = (spark.read.format("pylog").option("subscribe", "events")
                     .option("includeHeaders", "true").load(path))
            assert rows(local, True) == want

            data = spark.createDataFrame([(f"k{i}", f"from spark's kafka sink {i}")
                                          for i in range(200)], "key string, value string")
            (data.write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap_servers)
             .option("topic", "events").save())
            after = (spark.read.format("pylog").option("kafka.bootstrap.servers",
                                                        broker.bootstrap_servers)
                     .option("subscribe", "events").load())
            written = sorted(bytes(r.value) for r in after.where("offset >= 0").collect()
                             if bytes(r.value).startswith(b"from spark's"))
            assert written == sorted(f"from spark's kafka sink {i}".encode() for i in range(200))
    finally:
        store.close()


def test_sparks_kafka_connector_streams_through_pylog_serve(connector, tmp_path):
    """readStream/writeStream format("kafka") at pylog serve: checkpointed, restarted,
    exactly once into Parquet; a Kafka-sink stream writes into pylog."""
    spark = connector
    path = str(tmp_path / "logs")
    sent = produce(path, "events", 1000)
    store = pylog.open(path)
    try:
        store.create_topic("copy", partitions=2)
        with pylog.Broker(store, listen="127.0.0.1:0") as broker:
            def run():
                q = (spark.readStream.format("kafka")
                     .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                     .option("subscribe", "events").option("startingOffsets", "earliest")
                     .option("maxOffsetsPerTrigger", "400").load()
                     .selectExpr("partition", "offset", "value").writeStream.format("parquet")
                     .option("path", str(tmp_path / "out"))
                     .option("checkpointLocation", str(tmp_path / "ckpt"))
                     .trigger(availableNow=True).start())
                q.awaitTermination(240)
                q.stop()
            run()
            producer = pylog.Producer(store)
            producer.send_batch("events", [b"late %d" % i for i in range(300)], partition=0)
            producer.close()
            run()                                   # restart from the checkpoint
            out = spark.read.parquet(str(tmp_path / "out"))
            got = [(r.partition, r.offset) for r in out.select("partition", "offset").collect()]
            assert len(got) == len(set(got)) == len(sent) + 300

            q = (spark.readStream.format("parquet").schema(out.schema).load(str(tmp_path / "out"))
                 .selectExpr("cast(offset as string) as key", "value").writeStream.format("kafka")
                 .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                 .option("topic", "copy").option("checkpointLocation", str(tmp_path / "ckpt2"))
                 .trigger(availableNow=True).start())
            q.awaitTermination(240)
            q.stop()
            copied = (spark.read.format("pylog").option("subscribe", "copy").load(path)
                      .where("true"))
            assert copied.count() == len(sent) + 300
    finally:
        store.close()
