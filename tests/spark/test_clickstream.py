"""examples/clickstream runs end to end on a small input: a generator process writes while
a streaming job reads beside it, and every event lands once in the Parquet output and in
the summary topic."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .support import require_pyspark

require_pyspark()

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream"


def test_clickstream_pipeline(spark, tmp_path):
    sys.path.insert(0, str(EXAMPLE))
    try:
        import pipeline
        result = pipeline.run(str(tmp_path), events=3000, rate=3000, spark=spark)
    finally:
        sys.path.remove(str(EXAMPLE))
    assert result["views"] == result["topic_views"] == 3000
    assert result["rows"] == result["topic_rows"] > 0
    assert set(result["pages"]) <= {"/home", "/search", "/product", "/cart", "/checkout", "/help"}
    assert result["pages"]["/home"] > result["pages"].get("/help", 0)
