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


def test_the_readme_command_block_runs(tmp_path):
    """The README's block of `pylog` commands, pasted into a shell (the store moved to a
    temp dir, the perf run cut down); the lines that need a broker or root are run by
    tests/cli (docs/OPERATIONS.md's blocks) and the tuning rig's tests."""
    import re
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The command, benchmarks and tuning"):]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    lines = [line for line in block.splitlines()
             if "--bootstrap-server" not in line and not line.startswith("sudo ")]
    assert len(lines) == 5
    script = "\n".join(lines).replace("/data/pylog", str(tmp_path / "pylog"))
    script = re.sub(r"--num-records \d+", "--num-records 20000", script)
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"]))
    assert out.returncode == 0, out.stderr
    assert {"/home", "/cart"} <= set(out.stdout.splitlines())     # the console consumer's lines
    assert ": OK" in out.stdout and "20000 records sent" in out.stdout
