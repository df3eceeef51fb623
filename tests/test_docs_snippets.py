"""Every ```python block of README.md and docs/*.md runs as pasted: each in a fresh
Python process, in an empty temporary directory, with nothing defined beforehand
(tests/docs_snippets.py; the Spark blocks run in tests/spark/test_docs_spark_snippets.py)."""

import os
import subprocess
import sys

import pytest

from docs_snippets import DOCUMENTS, ROOT, snippets

PLAIN = [s for s in snippets() if s.marker is None]


@pytest.mark.parametrize("snippet", PLAIN, ids=[s.name for s in PLAIN])
def test_snippet_runs_as_pasted(snippet, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{snippet.name} failed:\n{run.stderr}"


def test_every_document_is_read_and_the_readme_has_examples():
    names = {d.name for d in DOCUMENTS}
    assert {"README.md", "LIBRARY.md", "BROKER.md", "SPARK.md"} <= names
    readme = [s for s in snippets() if s.document.name == "README.md"]
    assert len(readme) >= 2 and any(s.marker == "spark" for s in readme)
