"""The union reader (option table=true) and records deleted from the log before the
converter took them (``pylog.skipped``): they are in neither the table nor the log, so a
read that covers them fails with failOnDataLoss=true (Spark's Kafka source default),
naming the topic-partition and the offsets, and reads without them with
failOnDataLoss=false."""

from __future__ import annotations

import json

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402
from pylog.spark.options import SourceOptions  # noqa: E402
from pylog.spark.source import PylogBatchReader  # noqa: E402
from pylog.table import convert  # noqa: E402
from pylog.table.maintenance import expire_snapshots  # noqa: E402

pytestmark = pytest.mark.spark

LOST = "events-0: offsets 10..14 were deleted from the log"


def append(path: str, first: int, n: int, partition: int = 0) -> None:
    with pylog.open(path, background=False) as store:
        store.log("events", partition).append_records([b"r%d" % i for i in range(first, first + n)])


def skipped_in_the_middle(path: str) -> None:
    """Partition 0: offsets 0..9 and 15..19 in the table, 10..14 skipped (deleted before
    conversion), 20..24 only in the log."""
    with pylog.open(path, background=False) as store:
        store.create_topic("events", partitions=1, config={"pylog.table.enable": "true"})
    append(path, 0, 10)
    convert(path, "events")
    append(path, 10, 10)
    with pylog.open(path, background=False) as store:
        store.log("events", 0).advance_log_start_offset(15)        # DeleteRecords
    assert convert(path, "events").skipped == {0: (10, 15)}
    append(path, 20, 5)


def batch(spark, path, **options):
    reader = spark.read.format("pylog").option("subscribe", "events").option("table", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def offsets_of(df) -> list[int]:
    return sorted(r.offset for r in df.select("offset").collect())


def test_a_batch_read_over_skipped_offsets_fails_or_skips_them(spark, tmp_path):
    path = str(tmp_path / "logs")
    skipped_in_the_middle(path)
    with pytest.raises(Exception, match=LOST) as raised:
        batch(spark, path).count()
    assert "failOnDataLoss" in str(raised.value)
    lenient = batch(spark, path, failOnDataLoss="false")
    assert offsets_of(lenient) == list(range(10)) + list(range(15, 25))
    assert sorted(r.value for r in lenient.select("value").collect()) == sorted(
        b"r%d" % i for i in list(range(10)) + list(range(15, 25)))
    # Ranges that do not reach the skip read as usual, failOnDataLoss=true or not.
    before = json.dumps({"events": {"0": 10}})
    assert offsets_of(batch(spark, path, endingOffsets=before)) == list(range(10))
    after = json.dumps({"events": {"0": 15}})
    assert offsets_of(batch(spark, path, startingOffsets=after)) == list(range(15, 25))


def test_the_error_is_raised_when_planning_and_names_the_range(tmp_path):
    path = str(tmp_path / "logs")
    skipped_in_the_middle(path)
    opts = {"path": path, "subscribe": "events", "table": "true",
            "startingOffsets": json.dumps({"events": {"0": 12}})}
    with pytest.raises(pylog.errors.OffsetOutOfRangeError,
                       match="events-0: offsets 12..14 were deleted") as raised:
        PylogBatchReader(SourceOptions.parse(opts, streaming=False)).partitions()
    assert raised.value.topic_partition == ("events", 0) and raised.value.offset == 12
    tasks = PylogBatchReader(SourceOptions.parse({**opts, "failOnDataLoss": "false"},
                                                 streaming=False)).partitions()
    assert tasks


def test_a_stream_over_skipped_offsets_fails_or_skips_them(spark, tmp_path):
    path = str(tmp_path / "logs")
    skipped_in_the_middle(path)

    def stream(fail_on_data_loss: str, name: str):
        return (spark.readStream.format("pylog").option("subscribe", "events")
                .option("table", "true").option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail_on_data_loss).load(path)
                .selectExpr("offset").writeStream.format("parquet")
                .option("path", str(tmp_path / name))
                .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint"))
                .trigger(availableNow=True).start())

    strict = stream("true", "strict")
    with pytest.raises(Exception, match=LOST):
        strict.awaitTermination()
    lenient = stream("false", "lenient")
    lenient.awaitTermination()
    assert offsets_of(spark.read.parquet(str(tmp_path / "lenient"))) == \
        list(range(10)) + list(range(15, 25))


def test_earliest_starts_past_a_skip_before_everything_the_table_holds(spark, tmp_path):
    """Partition 0's first 10 records were deleted before the first conversion; partition
    1's were not. The data file holding both has offset 0 as its lower bound, yet earliest
    on partition 0 is 10 (nothing is lost, as Kafka's earliest is the log start); an
    explicit start at 0 asks for deleted records."""
    path = str(tmp_path / "logs")
    with pylog.open(path, background=False) as store:
        store.create_topic("events", partitions=2, config={"pylog.table.enable": "true"})
    append(path, 0, 20, partition=0)
    append(path, 0, 20, partition=1)
    with pylog.open(path, background=False) as store:
        store.log("events", 0).advance_log_start_offset(10)
    assert convert(path, "events").skipped == {0: (0, 10)}
    rows = batch(spark, path).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == \
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(20)]
    explicit = json.dumps({"events": {"0": 0, "1": 0}})
    with pytest.raises(Exception, match="events-0: offsets 0..9 were deleted"):
        batch(spark, path, startingOffsets=explicit).count()


def test_snapshot_expiry_keeps_the_skips(spark, tmp_path):
    """The skip's snapshot expired: the table property pylog.skipped.ranges still says."""
    path = str(tmp_path / "logs")
    skipped_in_the_middle(path)
    append(path, 25, 5)
    convert(path, "events")                           # a newer snapshot, without a skip
    assert expire_snapshots(path, "events", older_than_ms=2**62, retain_last=1)["expired"] >= 1
    with pytest.raises(Exception, match=LOST):
        batch(spark, path).count()
    assert offsets_of(batch(spark, path, failOnDataLoss="false")) == \
        list(range(10)) + list(range(15, 30))
