"""spark.read.format("pylog"): the Kafka source's schema, options and errors, over real
log dirs written by pylog's Producer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from dir_listing import age, changes, listing

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402
from pylog.spark import PylogDataSource, register

from .support import produce

pytestmark = pytest.mark.spark


def rows_of(df):
    return sorted((r.asDict() for r in df.collect()), key=lambda r: (r["partition"], r["offset"]))


def expected_rows(sent, topic, with_headers=True):
    out = []
    for s in sent:
        row = {"key": s["key"], "value": s["value"], "topic": topic, "partition": s["partition"],
               "offset": s["offset"], "timestampType": 0}
        if with_headers:
            # Spark's Kafka source: null (not []) for a record without headers.
            row["headers"] = [{"key": k, "value": v} for k, v in s["headers"]] or None
        out.append(row)
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_batch_read_equals_what_the_producer_wrote(spark, tmp_path, codec):
    sent = produce(str(tmp_path), "events", 1500, compression=codec)
    df = (spark.read.format("pylog").option("subscribe", "events")
          .option("includeHeaders", "true").load(str(tmp_path)))
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers"]
    got = rows_of(df)
    stamps = {(r["partition"], r["offset"]): r.pop("timestamp") for r in got}
    for r in got:
        r["key"] = None if r["key"] is None else bytes(r["key"])
        r["value"] = bytes(r["value"])
        r["headers"] = None if r["headers"] is None else [
            {"key": h["key"], "value": None if h["value"] is None else bytes(h["value"])}
            for h in r["headers"]]
    assert got == expected_rows(sent, "events")
    for s in sent:    # timestamps are the records' CreateTime, to the millisecond, in UTC
        ts = stamps[(s["partition"], s["offset"])]
        assert round(ts.timestamp() * 1000) == s["timestamp_ms"]


def test_schema_without_headers_is_the_kafka_sources(spark, tmp_path):
    produce(str(tmp_path), "t", 10)
    df = spark.read.format("pylog").option("subscribe", "t").load(str(tmp_path))
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,"
                                        "partition:int,offset:bigint,timestamp:timestamp,"
                                        "timestampType:int>")
    assert df.count() == 10


def test_an_empty_topic_reads_as_no_rows(spark, tmp_path):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("empty", partitions=2)
    assert spark.read.format("pylog").option("subscribe", "empty").load(str(tmp_path)).count() == 0


def test_register_and_case_insensitive_name(spark, tmp_path):
    produce(str(tmp_path), "t", 10)
    register(spark)
    assert PylogDataSource.name() == "pylog"
    assert spark.read.format("PyLog").option("subscribe", "t").load(str(tmp_path)).count() == 10


def test_discovery_without_register_in_a_fresh_session(tmp_path):
    """A new Spark application (its own JVM) finds format("pylog") by itself."""
    produce(str(tmp_path), "t", 7)
    if not os.environ.get("CI") and not __import__("shutil").which("java"):
        pytest.skip("no java")
    code = textwrap.dedent(f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        from pyspark.sql import SparkSession
        s = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())
        print("COUNT", s.read.format("pylog").option("subscribe", "t").load({str(tmp_path)!r}).count())
        s.stop()
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "COUNT 7" in run.stdout, run.stderr[-3000:]


def test_offset_ranges_json_and_ends(spark, tmp_path):
    sent = produce(str(tmp_path), "t", 400)
    df = (spark.read.format("pylog").option("subscribe", "t")
          .option("startingOffsets", json.dumps({"t": {"0": 10, "1": -2}}))
          .option("endingOffsets", json.dumps({"t": {"0": 50, "1": -1}})).load(str(tmp_path)))
    got = {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}
    want = {(s["partition"], s["offset"]) for s in sent
            if (s["partition"] == 0 and 10 <= s["offset"] < 50) or s["partition"] == 1}
    assert got == want


def headed_batches(path: str, topic: str, batches: int, per_batch: int = 10) -> list:
    """One partition of `batches` batches whose first 4 records have no headers; returns
    each offset's headers as Spark's Kafka source gives them (None for none)."""
    with pylog.open(path) as store:
        store.create_topic(topic, partitions=1)
        log = store.log(topic, 0)
        want = []
        for b in range(batches):
            headers = [[] if i < 4 else [("h", b"%d" % (b * per_batch + i))]
                       for i in range(per_batch)]
            log.append_records([b"v%d" % (b * per_batch + i) for i in range(per_batch)],
                               headers=headers)
            want += [[{"key": k, "value": v} for k, v in h] or None for h in headers]
    return want


def test_headers_of_reads_that_start_inside_a_batch(tmp_path):
    """Every start inside a batch whose first records have no headers (the C decoder
    hands a sliced headers column): the Kafka source's headers column, no Arrow error."""
    from pylog.spark.schema import to_spark_batch
    want = headed_batches(str(tmp_path), "h", 2)
    reader = pylog.storage.LogDirsReader(str(tmp_path)).partition("h", 0)
    for start in range(20):
        got = []
        for rows in reader.read_arrow(start, 20):
            got += to_spark_batch(rows, "h", 0, True).column("headers").to_pylist()
        assert got == want[start:], start


def test_headers_with_a_mid_batch_start_and_split_tasks(spark, tmp_path):
    want = headed_batches(str(tmp_path), "h", 6)
    df = (spark.read.format("pylog").option("subscribe", "h").option("includeHeaders", "true")
          .option("startingOffsets", json.dumps({"h": {"0": 2}}))
          .option("minPartitions", "4").load(str(tmp_path)))
    got = sorted((r.offset, r.headers) for r in df.select("offset", "headers").collect())
    assert [o for o, _ in got] == list(range(2, 60))
    assert [None if h is None else [{"key": x.key, "value": bytes(x.value)} for x in h]
            for _, h in got] == want[2:]


def test_assign_and_subscribe_pattern(spark, tmp_path):
    produce(str(tmp_path), "alpha", 30)
    produce(str(tmp_path), "beta", 20)
    produce(str(tmp_path), "gamma", 10)
    path = str(tmp_path)

    def read():
        return spark.read.format("pylog")
    assert read().option("subscribePattern", "(alpha|beta)").load(path).count() == 50
    assigned = read().option("assign", json.dumps({"alpha": [1]})).load(path)
    assert {r.partition for r in assigned.select("partition").collect()} == {1}
    assert read().option("subscribe", "beta,gamma").load(path).count() == 30


def test_timestamps_select_ranges(spark, tmp_path):
    base = 1_700_000_000_000
    produce(str(tmp_path), "t", 300, timestamp=lambda i: base + i * 1000)
    path = str(tmp_path)
    df = (spark.read.format("pylog").option("subscribe", "t")
          .option("startingTimestamp", str(base + 100_000))
          .option("endingTimestamp", str(base + 200_000)).load(path))
    stamps = [round(r.timestamp.timestamp() * 1000) for r in df.select("timestamp").collect()]
    assert len(stamps) == 100 and min(stamps) == base + 100_000 and max(stamps) == base + 199_000
    by_partition = (spark.read.format("pylog").option("subscribe", "t")
                    .option("startingOffsetsByTimestamp",
                            json.dumps({"t": {"0": base + 290_000, "1": base + 10**9}}))
                    .option("startingOffsetsByTimestampStrategy", "latest").load(path))
    stamps = sorted(round(r.timestamp.timestamp() * 1000) for r in by_partition.collect())
    assert stamps and min(stamps) >= base + 290_000 and len(stamps) <= 10


def test_a_big_partition_is_split_into_tasks_read_exactly_once(spark, tmp_path):
    sent = produce(str(tmp_path), "big", 20000, partitions=1, segment_bytes=1 << 20)
    segments = pylog.storage.LogDirsReader(str(tmp_path)).partition("big", 0).segment_bases()
    assert len(segments) >= 2
    df = (spark.read.format("pylog").option("subscribe", "big").option("minPartitions", "6")
          .load(str(tmp_path)))
    assert df.rdd.getNumPartitions() == 6
    offsets = [r.offset for r in df.select("offset").collect()]
    assert sorted(offsets) == [s["offset"] for s in sent] == list(range(20000))
    capped = (spark.read.format("pylog").option("subscribe", "big")
              .option("maxRecordsPerPartition", "3000").load(str(tmp_path)))
    assert capped.rdd.getNumPartitions() == 7
    assert capped.count() == 20000 and capped.select("offset").distinct().count() == 20000


def test_fail_on_data_loss_after_retention(spark, tmp_path):
    produce(str(tmp_path), "t", 30000, partitions=1, segment_bytes=1 << 20)
    with pylog.open(str(tmp_path)) as store:
        log = store.log("t", 0)
        second = log.segments[1].base_offset
        assert log.delete_segments_before(second) >= 1
        store.checkpoint()
    start = json.dumps({"t": {"0": 0}})
    read = (spark.read.format("pylog").option("subscribe", "t").option("startingOffsets", start))
    with pytest.raises(Exception, match="failOnDataLoss"):
        read.load(str(tmp_path)).count()
    lenient = read.option("failOnDataLoss", "false").load(str(tmp_path))
    offsets = [r.offset for r in lenient.select("offset").collect()]
    assert min(offsets) == second and len(offsets) == 30000 - second
    # A range retention deleted whole: nothing to read, no error.
    gone = read.option("failOnDataLoss", "false").option("endingOffsets", json.dumps({"t": {"0": 5}}))
    assert gone.load(str(tmp_path)).count() == 0


@pytest.mark.parametrize("options, message", [
    ({"subscrib": "t"}, "unknown option 'subscrib'.*did you mean 'subscribe'"),
    ({"subscribe": "nope"}, "topic 'nope' does not exist"),
    ({"subscribe": "t", "startingOffsets": "{bad"}, "option 'startingOffsets' is not valid JSON"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":1}}'}, "must specify all topic partitions"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "cannot be latest for a batch query"),
    ({"subscribe": "t", "minPartitions": "many"}, "'minPartitions' must be an integer"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of"),
    ({"subscribe": "t", "includeHeaders": "yes"}, "'includeHeaders' must be true or false"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":50,"1":0}}'},
     r"The resolved start offset 50 is greater than the resolved end offset \d for topic t "
     "partition 0"),
])
def test_bad_options_name_the_problem_at_planning(spark, tmp_path, options, message):
    produce(str(tmp_path), "t", 5)
    read = spark.read.format("pylog")
    for k, v in options.items():
        read = read.option(k, v)
    with pytest.raises(Exception, match=message) as info:
        read.load(str(tmp_path)).count()
    assert "PYTHON_DATA_SOURCE" in str(info.value) or "AnalysisException" in type(info.value).__name__ \
        or "Analysis" in str(type(info.value))


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": '{"t":{"0":3,"1":-2}}', "endingOffsets": '{"t":{"0":1,"1":-1}}'},
     "The specified start offset 3 is greater than the end offset 1 for topic t partition 0"),
    ({"startingOffsetsByTimestamp": '{"t":{"0":1,"1":2000}}',
      "endingOffsetsByTimestamp": '{"t":{"0":1,"1":1000}}'},
     "The specified start timestamp 2000 is greater than the end timestamp 1000 for topic t "
     "partition 1"),
])
def test_a_specified_start_past_the_end_is_refused_before_resolving(options, message):
    from pylog.spark.options import OptionError, SourceOptions
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse({"path": "/nowhere", "subscribe": "t", **options}, streaming=False)
    # -1 (latest) and -2 (earliest) are resolved later, as in Spark.
    SourceOptions.parse({"path": "/nowhere", "subscribe": "t", "startingOffsets": '{"t":{"0":-2}}',
                         "endingOffsets": '{"t":{"0":-1}}'}, streaming=False)


def test_a_path_that_is_not_a_log_dir(spark, tmp_path):
    with pytest.raises(Exception, match="is not a log dir"):
        spark.read.format("pylog").option("subscribe", "t").load(str(tmp_path)).count()
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("pylog").option("subscribe", "t").load(str(tmp_path / "x")).count()


WRITER = textwrap.dedent("""
    import sys, time, pylog
    path, topic = sys.argv[1], sys.argv[2]
    with pylog.open(path, **{"log.segment.bytes": 1 << 20}) as store:
        producer = pylog.Producer(store, linger_ms=1)
        i = 0
        print("ready", flush=True)
        deadline = time.time() + float(sys.argv[3])
        while time.time() < deadline:
            producer.send_batch(topic, [b"%d:" % j + b"y" * 200 for j in range(i, i + 500)])
            producer.flush()
            i += 500
            time.sleep(0.01)
        producer.close()
""")


def test_reads_beside_a_live_writer(spark, tmp_path):
    """A producer process owns the dir and rolls segments; Spark reads it meanwhile:
    every read is a dense prefix of the log with every value in place."""
    path = str(tmp_path)
    with pylog.open(path) as store:
        store.create_topic("live", partitions=1, config={"segment.bytes": 1 << 20})
    writer = subprocess.Popen([sys.executable, "-c", WRITER, path, "live", "60"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        seen = []
        deadline = time.time() + 4
        while time.time() < deadline or len(seen) < 3:
            df = spark.read.format("pylog").option("subscribe", "live").load(path)
            stats = df.selectExpr(
                "count(*) as n", "min(offset) as lo", "max(offset) as hi",
                "sum(cast(split(cast(value as string), ':')[0] != cast(offset as string) as int))"
                " as wrong").collect()[0]
            if stats.n:
                assert (stats.lo, stats.hi, stats.wrong) == (0, stats.n - 1, 0)
            seen.append(stats.n)
        assert len(seen) >= 2 and seen[-1] > seen[0] > 0
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    segments = pylog.storage.LogDirsReader(path).partition("live", 0).segment_bases()
    assert len(segments) >= 2     # the writer rolled segments under the reads


def test_reading_by_path_writes_nothing_in_the_store(spark, tmp_path):
    """The source in path mode reads the segment files read-only (issue 42, item 16):
    every file and dir of the store keeps its inode, size, mtime and bytes."""
    path = str(tmp_path / "store")
    sent = produce(path, "events", 600, segment_bytes=8000)
    before = age(tmp_path)
    df = spark.read.format("pylog").option("subscribe", "events").load(path)
    assert df.count() == len(sent)
    ranged = (spark.read.format("pylog").option("subscribe", "events")
              .option("startingOffsets", "earliest").option("endingOffsets", "latest")
              .option("minPartitions", "6").load(path).where("offset >= 100"))
    assert ranged.count() == sum(1 for s in sent if s["offset"] >= 100)
    assert changes(before, listing(tmp_path)) == []


def test_filter_pushdown_prunes_partitions_offsets_and_timestamps(spark, tmp_path):
    base = 1_700_000_000_000
    sent = produce(str(tmp_path), "t", 3000, partitions=3, timestamp=lambda i: base + i)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        def read():
            return (spark.read.format("pylog").option("subscribe", "t")
                    .option("filterPushdown", "true").load(str(tmp_path)))
        one = read().where("partition = 1")
        assert one.rdd.getNumPartitions() == 1          # the other partitions are not read
        assert one.count() == sum(s["partition"] == 1 for s in sent)
        ranged = read().where("partition IN (0, 2) AND offset >= 100 AND offset < 150")
        got = sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect())
        assert got == [(p, o) for p in (0, 2) for o in range(100, 150)]
        since = read().where(f"timestamp >= timestamp_millis({base + 2500})")
        assert sorted(r.offset for r in since.select("offset").collect()) == sorted(
            s["offset"] for s in sent if s["timestamp_ms"] >= base + 2500)
        assert read().where("offset > 1000000").count() == 0
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
