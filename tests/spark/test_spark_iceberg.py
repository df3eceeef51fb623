"""Spark's own Iceberg reader (iceberg-spark-runtime, tools/spark-iceberg/fetch) reads the
table pylog wrote, through the same SQLite catalog, equal to the log.

Spark SQL runs in a child process: the shared SparkSession's JVM is started without the
Iceberg jars, and jars cannot be added to a running JVM. Iceberg publishes a runtime per
Spark minor version; where the venv's Spark is newer than the newest runtime (Spark 4.2+
made the CatalogManager class the runtimes link against an interface), the child runs the
PySpark release the runtime was built for (tools/spark-iceberg/pyspark installs it into
the cache, beside the venv's). In CI a missing jar or PySpark fails the test.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402
from pylog.spark.iceberg import iceberg_catalog_conf  # noqa: E402
from pylog.table import convert  # noqa: E402

from .support import produce  # noqa: E402

pytestmark = pytest.mark.spark

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "spark-iceberg"
FETCH, PYSPARK = TOOLS / "fetch", TOOLS / "pyspark"

CHILD = r"""
import json, sys
from pyspark.sql import SparkSession
jars, conf = sys.argv[1], json.loads(sys.argv[2])
builder = (SparkSession.builder.master("local[1]").config("spark.jars", jars)
           .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g"))
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
print("spark", spark.version, file=sys.stderr)
rows = spark.sql("SELECT partition, offset, cast(value as string) AS value, "
                 "cast(timestamp as long) AS ts FROM pylog.pylog.events").collect()
print(json.dumps([list(r) for r in rows]))
"""


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run Spark's Iceberg reader: {reason}")
    pytest.skip(reason)


def runtime_jars() -> list[str]:
    try:
        run = subprocess.run([str(FETCH)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _missing(f"tools/spark-iceberg/fetch did not run: {exc}")
    if run.returncode != 0:
        _missing(f"tools/spark-iceberg/fetch failed: {run.stderr.strip()[-400:]}")
    jars = sorted(glob.glob(os.path.join(run.stdout.strip(), "*.jar")))
    if not any("iceberg-spark-runtime" in j for j in jars):
        _missing(f"no iceberg-spark-runtime jar in {run.stdout.strip()}")
    return jars


def spark_for(jars: list[str]) -> tuple[str, str]:
    """(PYTHONPATH, Spark version) of a PySpark the runtime can run on: the venv's when it
    is the Spark minor the runtime was built for, else tools/spark-iceberg/pyspark's."""
    import pyspark
    runtime = next(j for j in jars if "iceberg-spark-runtime" in j)
    built_for = re.search(r"runtime-(\d+\.\d+)_", runtime).group(1)
    if pyspark.__version__.startswith(built_for + "."):
        return "", pyspark.__version__
    try:
        run = subprocess.run([str(PYSPARK)], capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _missing(f"tools/spark-iceberg/pyspark did not run: {exc}")
    if run.returncode != 0:
        _missing(f"tools/spark-iceberg/pyspark failed: {run.stderr.strip()[-400:]}")
    return run.stdout.strip(), built_for


def test_spark_sql_reads_the_table_pylog_wrote(tmp_path):
    if not shutil.which("java"):
        _missing("no java on PATH (Spark needs Java 17+)")
    jars = runtime_jars()
    pythonpath, spark_version = spark_for(jars)
    path = str(tmp_path / "logs")
    with pylog.open(path, background=False) as store:
        store.create_topic("events", partitions=2, config={"pylog.table.enable": "true"})
    sent = produce(path, "events", 700)
    assert convert(path, "events").records == 700
    sent += produce(path, "events", 300, start=700)
    assert convert(path, "events").records == 300
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH")}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    run = subprocess.run([sys.executable, "-c", CHILD, ",".join(jars),
                          json.dumps(iceberg_catalog_conf(path))],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"spark {spark_version}" in run.stderr
    rows = sorted(tuple(r) for r in json.loads(run.stdout.strip().splitlines()[-1]))
    assert rows == sorted((s["partition"], s["offset"], s["value"].decode(),
                           s["timestamp_ms"] // 1000) for s in sent)
