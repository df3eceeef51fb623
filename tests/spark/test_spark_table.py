"""format("pylog") with option table=true: the topic's Iceberg table below the pinned
snapshot's watermark and the live log from it on, read as one, batch and streaming,
with Kafka's offsets: no gap, no overlap, equal to the log."""

from __future__ import annotations

import json

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402
from pylog.spark.options import OptionError, SourceOptions  # noqa: E402
from pylog.spark.source import PylogBatchReader, PylogStreamReader, read_range  # noqa: E402
from pylog.table import convert  # noqa: E402

from .support import produce  # noqa: E402

pytestmark = pytest.mark.spark

COLUMNS = "partition, offset, key, value, timestamp, timestampType, headers"


def tabled_topic(path: str, topic: str = "events", partitions: int = 2, **config) -> None:
    with pylog.open(path, background=False) as store:
        store.create_topic(topic, partitions=partitions,
                           config={"pylog.table.enable": "true", **config})


def read(spark, path, **options):
    reader = spark.read.format("pylog").option("subscribe", "events") \
        .option("includeHeaders", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(tuple(r) for r in reader.load(path).selectExpr(*COLUMNS.split(", ")).collect())


def test_batch_reads_table_and_tail_as_the_log(spark, tmp_path):
    path = str(tmp_path / "logs")
    tabled_topic(path)
    sent = produce(path, "events", 900)
    first = convert(path, "events")
    assert first.committed and first.records == 900
    sent += produce(path, "events", 400, start=900)        # the live tail, past the watermark
    tasks = PylogBatchReader(SourceOptions.parse(
        {"path": path, "subscribe": "events", "table": "true"}, streaming=False)).partitions()
    kinds = {type(t).__name__ for t in tasks}
    assert kinds == {"TablePartition", "RangePartition"}
    union = read(spark, path, table="true")
    assert union == read(spark, path)                      # every column, equal to the log
    assert sorted((r[0], r[1]) for r in union) == sorted((s["partition"], s["offset"]) for s in sent)


def test_a_commit_between_planning_and_reading_neither_repeats_nor_skips(tmp_path):
    """The tasks pin the snapshot they were planned on: a converter commit after planning
    (the log part then also lies in the table) changes nothing."""
    path = str(tmp_path / "logs")
    tabled_topic(path, partitions=3)
    sent = produce(path, "events", 600, partitions=3)
    convert(path, "events")
    sent += produce(path, "events", 500, start=600, partitions=3)
    opts = SourceOptions.parse({"path": path, "subscribe": "events", "table": "true"},
                               streaming=False)
    tasks = PylogBatchReader(opts).partitions()
    after = convert(path, "events")                        # commits the planned tail too
    assert after.committed and after.records == 500
    got = [(b.column("partition")[i].as_py(), o)
           for t in tasks for b in read_range(t) for i, o in enumerate(b.column("offset").to_pylist())]
    assert len(got) == len(set(got)) == 1100
    assert sorted(got) == sorted((s["partition"], s["offset"]) for s in sent)


def test_the_table_keeps_what_the_log_deleted(spark, tmp_path):
    """Records deleted from the log after conversion are read from the table (earliest
    reaches the table's first offset); without table=true the log alone has lost them."""
    path = str(tmp_path / "logs")
    tabled_topic(path, partitions=1)
    sent = produce(path, "events", 500, partitions=1)
    convert(path, "events")
    with pylog.open(path, background=False) as store:
        store.log("events", 0).advance_log_start_offset(300)
    sent += produce(path, "events", 100, start=500, partitions=1)
    rows = read(spark, path, table="true")
    assert [r[1] for r in rows] == list(range(600))
    assert {r[3] for r in rows} == {s["value"] for s in sent}
    assert [r[1] for r in read(spark, path)] == list(range(300, 600))


def test_filters_prune_the_table_part_too(spark, tmp_path):
    path = str(tmp_path / "logs")
    tabled_topic(path)
    sent = produce(path, "events", 800)
    convert(path, "events")
    sent += produce(path, "events", 200, start=800)
    df = (spark.read.format("pylog").option("subscribe", "events").option("table", "true")
          .option("filterPushdown", "true").load(path)
          .where("partition = 1 and offset >= 100 and offset < 450"))
    with_pushdown = spark.conf.get("spark.sql.python.filterPushdown.enabled", "false")
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        offsets = sorted(r.offset for r in df.select("offset").collect())
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", with_pushdown)
    # Keyless records go to a sticky partition: partition 1's size varies from run to run.
    assert offsets == sorted(s["offset"] for s in sent
                             if s["partition"] == 1 and 100 <= s["offset"] < 450)
    assert len(offsets) > 100


def run_stream(spark, path, checkpoint, out, **options):
    stream = spark.readStream.format("pylog").option("subscribe", "events") \
        .option("table", "true")
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (stream.load(path).selectExpr("partition", "offset", "value")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(240)
    progress = query.recentProgress
    query.stop()
    return progress


def test_streaming_reads_table_then_tail_and_restarts_exactly(spark, tmp_path):
    path, ckpt, out = str(tmp_path / "logs"), str(tmp_path / "ckpt"), str(tmp_path / "out")
    tabled_topic(path)
    sent = produce(path, "events", 1000)
    convert(path, "events")
    sent += produce(path, "events", 300, start=1000)
    progress = run_stream(spark, path, ckpt, out, startingOffsets="earliest",
                          maxOffsetsPerTrigger="600")
    end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert end == {"events": {str(p): sum(s["partition"] == p for s in sent) for p in (0, 1)}}
    # The converter catches up on part of what the stream read from the log, more arrives,
    # and the restarted query goes on from its checkpoint's Kafka offsets.
    convert(path, "events")
    sent += produce(path, "events", 500, start=1300)
    convert(path, "events")
    sent += produce(path, "events", 200, start=1800)
    run_stream(spark, path, ckpt, out)
    rows = [(r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect()]
    assert len(rows) == len({(p, o) for p, o, _ in rows}) == 2000
    assert sorted((p, o) for p, o, _ in rows) == sorted((s["partition"], s["offset"]) for s in sent)
    assert {v for _, _, v in rows} == {s["value"] for s in sent}


def test_streaming_plans_table_tasks_below_the_watermark(tmp_path):
    path = str(tmp_path / "logs")
    tabled_topic(path, partitions=1)
    produce(path, "events", 300, partitions=1)
    convert(path, "events")
    produce(path, "events", 50, start=300, partitions=1)
    reader = PylogStreamReader(SourceOptions.parse(
        {"path": path, "subscribe": "events", "table": "true", "startingOffsets": "earliest"},
        streaming=True))
    start = reader.initialOffset()
    tasks = reader.partitions(start, reader.latestOffset(start, None))
    spans = sorted((type(t).__name__, t.value[1].ranges if type(t).__name__ == "TablePartition"
                    else (t.value[0].start, t.value[0].end)) for t in tasks)
    assert spans == [("RangePartition", (300, 350)), ("TablePartition", ((0, 0, 300),))]


def test_table_option_errors_name_the_problem():
    with pytest.raises(OptionError, match="option 'table' must be true or false"):
        SourceOptions.parse({"path": "/x", "subscribe": "t", "table": "yes"}, streaming=False)
    with pytest.raises(OptionError, match="option 'table'.*path"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                             "table": "true"}, streaming=False)


def test_a_topic_without_a_table_reads_the_log(spark, tmp_path):
    path = str(tmp_path / "logs")
    produce(path, "events", 100)
    assert len(read(spark, path, table="true")) == 100
    assert not (tmp_path / "logs" / "__tables").exists()      # a reader creates nothing


def produce_json(path: str, start: int, n: int) -> None:
    """JSON values, every fourth one not parsing against TYPED_SCHEMA (a dead letter),
    every seventh a tombstone (a dead letter too); keys, headers and timestamps vary."""
    with pylog.open(path) as store, pylog.Producer(store) as producer:
        for i in range(start, start + n):
            value = (None if i % 7 == 0 else b"not json %d" % i if i % 4 == 0
                     else json.dumps({"id": i, "name": "n%d" % i}).encode())
            producer.send("events", value=value, key=None if i % 3 == 0 else b"k%d" % (i % 5),
                          headers=[] if i % 2 else [("h", b"%d" % i)],
                          timestamp=1_700_000_000_000 + i, partition=i % 2)


TYPED_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"},
                                                 "name": {"type": "string"}},
                "required": ["id"]}


def typed_topic(tmp_path) -> str:
    path, schema = str(tmp_path / "logs"), tmp_path / "events.json"
    schema.write_text(json.dumps(TYPED_SCHEMA))
    tabled_topic(path, **{"pylog.table.schema.type": "json",
                          "pylog.table.schema.file": str(schema)})
    produce_json(path, 0, 400)
    first = convert(path, "events")
    assert first.committed
    produce_json(path, 400, 100)                            # the live tail
    return path


def test_a_typed_topic_reads_its_dead_letters_in_the_union(spark, tmp_path):
    """The records whose value did not parse are in the dead-letter table, not the table:
    the union reads both below the watermark, so it is still exactly the log."""
    path = typed_topic(tmp_path)
    tasks = PylogBatchReader(SourceOptions.parse(
        {"path": path, "subscribe": "events", "table": "true"}, streaming=False)).partitions()
    assert any(type(t).__name__ == "TablePartition" and t.value[1].dead_letters for t in tasks)
    log = read(spark, path)
    assert len(log) == 500
    assert read(spark, path, table="true") == log           # dead letters included
    assert read(spark, path, table="true", startingOffsets="earliest") == log


def test_a_typed_topic_streams_its_dead_letters_in_the_union(spark, tmp_path):
    path, ckpt, out = typed_topic(tmp_path), str(tmp_path / "ckpt"), str(tmp_path / "out")
    query = (spark.readStream.format("pylog").option("subscribe", "events")
             .option("table", "true").option("includeHeaders", "true")
             .option("startingOffsets", "earliest").load(path)
             .selectExpr(*COLUMNS.split(", "))
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    query.awaitTermination(240)
    query.stop()
    rows = sorted(tuple(r) for r in spark.read.parquet(out).selectExpr(
        *COLUMNS.split(", ")).collect())
    assert rows == read(spark, path)
