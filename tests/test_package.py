"""The installed package: the public API of pylog/__init__.py and the console script."""

import os
import subprocess
import sys

import pylog

PUBLIC = ("open", "LogManager", "Log", "Producer", "Consumer", "TopicPartition", "records", "errors",
          "crc32c", "io_engine")


def test_public_api_names():
    for name in PUBLIC:
        assert name in pylog.__all__ and getattr(pylog, name) is not None, name
    assert pylog.records.encode_batch is pylog.record.encode_batch


def test_the_store_is_storage_plus_the_coordinator(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        assert isinstance(store, pylog.storage.LogManager)
        store.create_topic("t", 1)
        store.commit_offsets("g", {("t", 0): 3})
        assert store.coordinator.committed("g", "t", 0) == 3 == store.committed("g", "t", 0)


def test_console_script_runs(tmp_path):
    """`pip install` declares a `pylog` command; it must start (not ModuleNotFoundError)."""
    script = os.path.join(os.path.dirname(sys.executable), "pylog")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "pylog.cli"]
    out = subprocess.run(command + ["--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"pylog {pylog.__version__}")
    helped = subprocess.run(command + ["--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "Usage: pylog" in helped.stdout


def test_import_pylog_leaves_the_heavy_optional_layers_unloaded():
    """`import pylog` (and so every CLI command) does not load the wire protocol
    (~90 ms), pyarrow.compute (~50 ms), the broker or Spark: they load when used."""
    probe = ("import sys, pylog; print(' '.join(m for m in ('pylog.protocol', 'pyarrow.compute', "
             "'pylog.broker', 'pylog.spark', 'pyspark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
