"""The README's Python examples run as written (paths moved into a temp dir)."""

import os
import re
import socket
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    code = BLOCKS[index]
    if "pyspark" in code:
        if not os.environ.get("CI"):
            pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
        monkeypatch.setenv("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", sys.executable))
        monkeypatch.setenv("SPARK_LOCAL_IP", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    for path in sorted(set(re.findall(r'"(/(?:data|disk\d)[^"]*)"', code)), key=len, reverse=True):
        code = code.replace(f'"{path}"', repr(str(tmp_path) + path))
    a, b = socket.socketpair()
    try:
        namespace = {"values": [b"v%d" % i for i in range(100)],
                     "keys": [b"k%d" % i for i in range(100)], "sock": a}
        exec(compile(code, f"README.md python block {index + 1}", "exec"), namespace)
    finally:
        a.close()
        b.close()
    for value in namespace.values():      # close what the example left open
        if hasattr(value, "close") and type(value).__module__.startswith("pylog"):
            value.close()


def test_readme_has_examples():
    assert len(BLOCKS) >= 4
