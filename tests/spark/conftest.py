"""One SparkSession for every Spark test (starting one costs 5-8 s).

The session never calls ``register``: every test that reads or writes
``format("pylog")`` also proves Spark finds pylog's source by itself (the
``pyspark_pylog`` module). Where Java or pyspark is missing the tests skip
with the reason; in CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FETCH_CONNECTOR = Path(__file__).resolve().parents[2] / "tools" / "spark-kafka" / "fetch"


def kafka_connector_jars() -> list[str]:
    """Spark's JVM Kafka connector (tools/spark-kafka/fetch), or [] where it cannot be had."""
    try:
        run = subprocess.run([str(FETCH_CONNECTOR)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if run.returncode != 0:
        return []
    return sorted(glob.glob(os.path.join(run.stdout.strip(), "*.jar")))


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Spark tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        _missing(f"pyspark is not installed ({exc}): pip install -e '.[spark]'")
    if not shutil.which("java"):
        _missing("no java on PATH (Spark needs Java 17+)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    builder = SparkSession.builder
    jars = kafka_connector_jars()
    if jars:        # format("kafka") in the same session: the reference beside format("pylog")
        builder = builder.config("spark.jars", ",".join(jars))
    session = (builder.master("local[2]").appName("pylog-tests")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.pylog_kafka_connector = bool(jars)
    yield session
    session.stop()
