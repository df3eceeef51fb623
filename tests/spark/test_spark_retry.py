"""Task retries (``local[2,3]``: three attempts per task) in their own Spark application:
a sink task that fails mid-write is retried, and the topic holds every row once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]      # slow: handed out first (conftest)

APP = textwrap.dedent("""
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark import TaskContext
    from pyspark.sql import SparkSession, functions as F
    from pyspark.sql.types import StringType
    spark = (SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
             .getOrCreate())

    @F.udf(StringType())
    def value(i):
        ctx = TaskContext.get()
        # Task 0's first attempt dies after some rows went to the writer.
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i == 700:
            raise RuntimeError("injected failure")
        return f"row {i}"

    (spark.range(0, 2000, 1, 2).select(value("id").alias("value"))
     .write.format("pylog").mode("append").option("topic", "t").save(sys.argv[1]))
    print("WROTE", flush=True)
    spark.stop()
""")


def test_a_retried_sink_task_writes_each_row_once(tmp_path):
    path = str(tmp_path / "logs")
    with pylog.open(path) as store:
        store.create_topic("t", partitions=2)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", APP, path], capture_output=True, text=True,
                         timeout=300, env=env)
    assert "WROTE" in run.stdout, run.stderr[-4000:]
    assert "injected failure" in run.stderr           # the first attempt did fail
    values = []
    with pylog.open(path) as store:
        consumer = pylog.Consumer(store, auto_offset_reset="earliest")
        consumer.assign([pylog.TopicPartition("t", p) for p in range(2)])
        while got := consumer.poll(0.5):
            values += [r.value for r in got]
        consumer.close()
    assert sorted(values) == sorted(f"row {i}".encode() for i in range(2000))
    staging = os.path.join(path, "pylog-spark", "staging")
    assert not os.path.exists(staging) or os.listdir(staging) == []
