"""Lint as a test: ruff over the Python (src, tests, tools, bench) and cython-lint over the
Cython core, with the rules of pyproject.toml ([tool.ruff], [tool.cython-lint]). Both come
with the [dev] extra (tools/setup.sh). Each check is also shown to fail on a file that
breaks one of its rules."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(args, cwd=ROOT):
    # cython-lint runs pycodestyle as a command: the venv's bin comes first on PATH.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    except FileNotFoundError as exc:
        pytest.fail(f"{exc.filename} is not installed: tools/setup.sh installs the [dev] extra")


def ruff(*args, cwd=ROOT):
    return run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd)


def cython_lint(*args):
    return run([str(BIN / "cython-lint"), *args])


def test_ruff_finds_nothing():
    out = ruff("src", "tests", "tools", "bench")
    assert out.returncode == 0, out.stdout + out.stderr


def test_cython_lint_finds_nothing():
    out = cython_lint("src/pylog/_core")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_reports_an_unused_import_and_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    out = ruff("--config", str(ROOT / "pyproject.toml"), str(bad), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "F401" in out.stdout and "F821" in out.stdout, out.stdout


def test_cython_lint_reports_an_unused_cimport(tmp_path):
    bad = tmp_path / "bad.pyx"
    bad.write_text("from libc.stdint cimport int8_t, int64_t\n\n\n"
                   "def f(int64_t x):\n    return x\n")
    out = cython_lint(str(bad))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "'int8_t' imported but unused" in out.stdout, out.stdout
