"""Spark's own Iceberg reader (iceberg-spark-runtime, tools/spark-iceberg/fetch) reads the
table pylog wrote, through the same SQLite catalog, equal to the log.

Spark SQL runs in a child process: the shared SparkSession's JVM is started without the
Iceberg jars, and jars cannot be added to a running JVM. In CI a missing jar fails the
test. Iceberg publishes a runtime per Spark minor version; where none exists for the
installed Spark and the newest one is binary-incompatible with it (checked with javap on
the class the runtime fails to link), the test skips with that reason.
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
from pylog.table import convert  # noqa: E402

from .support import produce  # noqa: E402

pytestmark = pytest.mark.spark

FETCH = Path(__file__).resolve().parents[2] / "tools" / "spark-iceberg" / "fetch"

CHILD = r"""
import json, sys
from pyspark.sql import SparkSession
from pylog.spark.iceberg import iceberg_catalog_conf
path, jars = sys.argv[1], sys.argv[2]
builder = (SparkSession.builder.master("local[1]").config("spark.jars", jars)
           .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g"))
for key, value in iceberg_catalog_conf(path).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
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


def incompatibility(jars: list[str]) -> str | None:
    """Why the runtime cannot run on the installed Spark, or None. Iceberg's runtimes up to
    Spark 4.1 link org.apache.spark.sql.connector.catalog.CatalogManager as a class;
    Spark 4.2+ made it an interface (java.lang.IncompatibleClassChangeError: Found
    interface ... CatalogManager, but class was expected, at the first query)."""
    import pyspark
    runtime = next(j for j in jars if "iceberg-spark-runtime" in j)
    built_for = tuple(int(x) for x in re.search(r"runtime-(\d+)\.(\d+)_", runtime).groups())
    installed = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    if built_for == installed or not shutil.which("javap"):
        return None
    catalyst = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars",
                                      "spark-catalyst_*.jar"))
    out = subprocess.run(["javap", "-cp", ":".join(catalyst),
                          "org.apache.spark.sql.connector.catalog.CatalogManager"],
                         capture_output=True, text=True, timeout=60).stdout
    if built_for < (4, 2) and " interface " in out:
        return (f"{os.path.basename(runtime)} (built for Spark {built_for[0]}.{built_for[1]}, the "
                f"newest on Maven Central) cannot link against Spark {pyspark.__version__}: "
                "CatalogManager is an interface there, a class in the runtime's Spark "
                "(IncompatibleClassChangeError at the first query)")
    return None


def test_spark_sql_reads_the_table_pylog_wrote(tmp_path):
    if not shutil.which("java"):
        _missing("no java on PATH (Spark needs Java 17+)")
    jars = runtime_jars()
    reason = incompatibility(jars)
    if reason:
        pytest.skip(reason)
    path = str(tmp_path / "logs")
    with pylog.open(path, background=False) as store:
        store.create_topic("events", partitions=2, config={"pylog.table.enable": "true"})
    sent = produce(path, "events", 700)
    assert convert(path, "events").records == 700
    sent += produce(path, "events", 300, start=700)
    assert convert(path, "events").records == 300
    run = subprocess.run([sys.executable, "-c", CHILD, path, ",".join(jars)],
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYSPARK_PYTHON=sys.executable,
                                  SPARK_LOCAL_IP="127.0.0.1"))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = sorted(tuple(r) for r in json.loads(run.stdout.strip().splitlines()[-1]))
    assert rows == sorted((s["partition"], s["offset"], s["value"].decode(),
                           s["timestamp_ms"] // 1000) for s in sent)
