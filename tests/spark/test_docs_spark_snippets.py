"""The ```python blocks marked <!-- snippet: spark --> in README.md and docs/*.md run as
pasted, in the suite's SparkSession (the snippet's getOrCreate() returns it), from an
empty temporary directory."""

import pytest

from docs_snippets import snippets

SPARK = [s for s in snippets() if s.marker == "spark"]


@pytest.mark.spark
@pytest.mark.parametrize("snippet", SPARK, ids=[s.name for s in SPARK])
def test_spark_snippet_runs_as_pasted(snippet, spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(snippet.code, snippet.name, "exec"), namespace)


def test_the_documents_have_spark_snippets():
    assert len(SPARK) >= 2
