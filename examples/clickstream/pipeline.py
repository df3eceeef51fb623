"""The clickstream pipeline, end to end, with one command:

    python examples/clickstream/pipeline.py [--events 20000] [--rate 5000] [--dir DIR]

1. ``generator.py`` (a separate process, owning ``DIR/ingest``) produces page views into
   the ``pageviews`` topic at a fixed rate;
2. meanwhile a Structured Streaming job reads the topic (``format("pylog")``, beside the
   live writer), counts views per page in 5-second event-time windows with a watermark,
   and writes the closed windows to Parquet (``DIR/windows``) and, as JSON records, to the
   ``pageview-counts`` topic of a second store (``DIR/results``);
3. when the generator is done and the stream has caught up, a batch job reads the Parquet
   and prints a report (views per page, busiest window), and checks it against the topic
   and against the number of events generated (every event lands in a closed window).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WINDOW = "5 seconds"


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("clickstream")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_stream(spark, work: str):
    from pyspark.sql import functions as F
    events = (spark.readStream.format("pylog").option("subscribe", "pageviews")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 50000)
              .load(os.path.join(work, "ingest"))
              .select(F.from_json(F.col("value").cast("string"),
                                  "user string, page string, ts long").alias("e"))
              .select("e.page", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")))
    counts = (events.withWatermark("event_time", "2 seconds")
              .groupBy(F.window("event_time", WINDOW), "page").count()
              .select(F.col("window.start").alias("window_start"), "page", "count"))
    to_parquet = (counts.writeStream.format("parquet").outputMode("append")
                  .option("path", os.path.join(work, "windows"))
                  .option("checkpointLocation", os.path.join(work, "checkpoints", "parquet"))
                  .trigger(processingTime="1 second").start())
    to_topic = (counts.select(F.col("page").cast("binary").alias("key"),
                              F.to_json(F.struct("window_start", "page", "count")).alias("value"))
                .writeStream.format("pylog").outputMode("append")
                .option("path", os.path.join(work, "results")).option("topic", "pageview-counts")
                .option("checkpointLocation", os.path.join(work, "checkpoints", "topic"))
                .trigger(processingTime="1 second").start())
    return [to_parquet, to_topic]


def caught_up(queries, end: dict) -> bool:
    """Every query's last batch ended at the log's end offsets (nothing left to read)."""
    import json
    for q in queries:
        progress = q.lastProgress
        if not progress or not progress["sources"] or not progress["sources"][0]["endOffset"]:
            return False
        if json.loads(progress["sources"][0]["endOffset"]).get("pageviews") != end:
            return False
    return True


def report(spark, work: str) -> dict:
    from pyspark.sql import functions as F
    windows = spark.read.parquet(os.path.join(work, "windows"))
    per_page = windows.groupBy("page").agg(F.sum("count").alias("views")).orderBy(F.desc("views"))
    rows = per_page.collect()
    busiest = windows.groupBy("window_start").agg(F.sum("count").alias("views")) \
        .orderBy(F.desc("views")).first()
    print("\nviews per page (closed windows):")
    for r in rows:
        print(f"  {r.page:<10} {r.views:>8}")
    if busiest:
        print(f"busiest {WINDOW} window: {busiest.window_start} with {busiest.views} views")
    topic = (spark.read.format("pylog").option("subscribe", "pageview-counts")
             .load(os.path.join(work, "results"))
             .select(F.from_json(F.col("value").cast("string"),
                                 "window_start string, page string, count long").alias("c"))
             .agg(F.sum("c.count").alias("views"), F.count("*").alias("windows")).first())
    total = sum(r.views for r in rows)
    print(f"{total} views in {windows.count()} (window, page) rows; the pageview-counts topic "
          f"holds {topic.windows} rows with {topic.views} views")
    return {"views": total, "rows": windows.count(), "topic_views": topic.views,
            "topic_rows": topic.windows, "pages": {r.page: r.views for r in rows}}


def run(work: str, events: int, rate: float, spark=None) -> dict:
    import pylog
    sys.path.insert(0, HERE)
    from generator import generate
    os.makedirs(work, exist_ok=True)
    with pylog.open(os.path.join(work, "results")) as store:
        if "pageview-counts" not in store.list_topics():
            store.create_topic("pageview-counts", partitions=1)
    generate(os.path.join(work, "ingest"), 1, rate=1000)   # creates the topic (one event)
    spark = spark or session()
    queries = start_stream(spark, work)
    generator = subprocess.Popen([sys.executable, os.path.join(HERE, "generator.py"),
                                  os.path.join(work, "ingest"), "--events", str(events - 1),
                                  "--rate", str(rate)])
    try:
        if generator.wait(timeout=600) != 0:
            raise RuntimeError("the generator failed")
        # A marker event two windows later moves the watermark past every window of the
        # run (as the next real events would); its own window stays open.
        generate(os.path.join(work, "ingest"), 1, rate=1000, seed=99, shift_ms=10_000)
        reader = pylog.storage.LogDirsReader(os.path.join(work, "ingest"))
        end = {str(p): reader.partition("pageviews", p).log_end_offset() for p in range(4)}
        deadline = time.time() + 300
        while not caught_up(queries, end) and time.time() < deadline:
            time.sleep(0.5)
        time.sleep(2.5)        # the batch after the last data closes the windows
    finally:
        for q in queries:
            q.stop()
        if generator.poll() is None:
            generator.kill()
    return report(spark, work)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=5000, help="events per second")
    ap.add_argument("--dir", default=None, help="work dir (default: a new temp dir)")
    args = ap.parse_args(argv)
    work = args.dir or tempfile.mkdtemp(prefix="pylog-clickstream-")
    print(f"work dir: {work}")
    result = run(work, args.events, args.rate)
    ok = result["views"] == result["topic_views"] == args.events and \
        result["rows"] == result["topic_rows"]
    print(f"parquet, topic and the {args.events} events generated agree" if ok else
          "MISMATCH between the parquet, the topic and the events generated")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
