"""One SparkSession for every Spark test (starting one costs 5-8 s).

The session never calls ``register``: every test that reads or writes
``format("pylog")`` also proves Spark finds pylog's source by itself (the
``pyspark_pylog`` module). Where Java or pyspark is missing the tests skip
with the reason; in CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest


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
    session = (SparkSession.builder.master("local[2]").appName("pylog-tests")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
