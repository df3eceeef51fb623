"""spark.readStream.format("pylog"): Kafka JSON offsets in the checkpoint, admission
control, availableNow, restarts with no duplicates and no gaps."""

from __future__ import annotations

import json

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402

from .support import produce

pytestmark = pytest.mark.spark


def run_available_now(spark, path, checkpoint, out, **options):
    stream = spark.readStream.format("pylog").option("subscribe", "events")
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (stream.load(path).selectExpr("partition", "offset", "cast(value as string) as value")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(240)
    progress = query.recentProgress
    query.stop()
    return progress


def output(spark, out):
    return [(r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect()]


def test_restart_resumes_from_the_checkpoint_exactly_once(spark, tmp_path):
    path, ckpt, out = str(tmp_path / "logs"), str(tmp_path / "ckpt"), str(tmp_path / "out")
    sent = produce(path, "events", 1200)
    progress = run_available_now(spark, path, ckpt, out, startingOffsets="earliest",
                                 maxOffsetsPerTrigger="500")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes == [500, 500, 200]           # admission control under availableNow
    end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert end == {"events": {"0": sum(s["partition"] == 0 for s in sent),
                              "1": sum(s["partition"] == 1 for s in sent)}}
    sent += produce(path, "events", 700, start=1200)
    run_available_now(spark, path, ckpt, out)            # restart: only the new records
    rows = output(spark, out)
    assert len(rows) == len(set(rows)) == 1900
    assert sorted((p, o) for p, o, _ in rows) == sorted((s["partition"], s["offset"]) for s in sent)
    assert {v for _, _, v in rows} == {s["value"].decode() for s in sent}


def test_a_crash_mid_batch_is_replayed_without_duplicates(spark, tmp_path):
    """A batch whose sink fails is planned again with the same offsets on restart."""
    path, ckpt, out = str(tmp_path / "logs"), str(tmp_path / "ckpt"), str(tmp_path / "out")
    sent = produce(path, "events", 900)
    crash = {"armed": True}

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")   # idempotent per batch
        if batch_id == 1 and crash["armed"]:
            crash["armed"] = False
            raise RuntimeError("simulated crash after writing batch 1")

    def start():
        return (spark.readStream.format("pylog").option("subscribe", "events")
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400")
                .load(path).select("partition", "offset").writeStream.foreachBatch(sink)
                .option("checkpointLocation", ckpt).trigger(availableNow=True).start())

    query = start()
    with pytest.raises(Exception, match="simulated crash"):
        query.awaitTermination(240)
    query = start()
    query.awaitTermination(240)
    rows = [(r.partition, r.offset) for r in spark.read.parquet(out).collect()]
    assert len(rows) == len(set(rows)) == 900
    assert sorted(rows) == sorted((s["partition"], s["offset"]) for s in sent)


def test_new_partitions_and_latest_start(spark, tmp_path):
    path, ckpt, out = str(tmp_path / "logs"), str(tmp_path / "ckpt"), str(tmp_path / "out")
    produce(path, "events", 300)
    run_available_now(spark, path, ckpt, out)       # startingOffsets=latest: nothing yet
    with pylog.open(path) as store:
        store.create_partitions("events", 3)
    sent = produce(path, "events", 600, partitions=3, start=300)
    run_available_now(spark, path, ckpt, out)
    rows = output(spark, out)
    assert sorted((p, o) for p, o, _ in rows) == sorted((s["partition"], s["offset"]) for s in sent)
    assert {p for p, _, _ in rows} == {0, 1, 2}


def test_streaming_options_are_checked(spark, tmp_path):
    produce(str(tmp_path), "events", 5)
    with pytest.raises(Exception, match="'endingOffsets' is for batch queries"):
        (spark.readStream.format("pylog").option("subscribe", "events")
         .option("endingOffsets", "latest").load(str(tmp_path)).writeStream.format("noop")
         .start().awaitTermination(60))
