"""The storage layer's log lines (logger ``pylog.storage``): each log dir's state and I/O
engine at start, segment deletions with their reason, slow flushes; and the pylog
command's ``--log-level``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pylog
from pylog.storage import log as log_module


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("pylog.storage")]


def test_each_log_dir_is_described_at_start(tmp_path, caplog):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with pylog.open(dirs) as store:
        store.create_topic("t", 3)
    with caplog.at_level(logging.INFO, logger="pylog.storage"), pylog.open(dirs):
        pass
    lines = [m for m in _messages(caplog) if m.startswith("log dir ")]
    assert len(lines) == 2
    for d, line in zip(dirs, lines):
        assert line.startswith(f"log dir {d}: online, clean shutdown, ")
        assert "GiB free; I/O engine: " in line
    assert sum(int(line.split(", ")[2].split()[0]) for line in lines) == 3   # partitions


def test_retention_deletions_name_their_reason(tmp_path, caplog):
    now = [10_000_000]
    with pylog.open(str(tmp_path), clock=lambda: now[0]) as store:
        store.create_topic("t", 1, config={"segment.bytes": 2000, "retention.ms": 60_000})
        log = store.log("t", 0)
        for i in range(30):
            log.append_records([b"x" * 100], timestamps=[now[0] - 120_000 + i])
        segments = len(log.segments)
        with caplog.at_level(logging.INFO, logger="pylog.storage"):
            deleted = log.apply_retention()
    assert deleted >= 1
    lines = [m for m in _messages(caplog) if "deleting" in m]
    assert len(lines) == 1 and f"deleting {deleted} segment" in lines[0]
    assert "due to log retention time 60000ms breach based on the largest record timestamp" in lines[0]
    assert deleted == segments          # every record is older: the active one rolled and went too


def test_slow_flushes_are_warned_about(tmp_path, caplog, monkeypatch):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 1)
        log = store.log("t", 0)
        log.append_records([b"x"] * 10)
        with caplog.at_level(logging.WARNING, logger="pylog.storage"):
            log.flush()                                   # a healthy flush: quiet
            assert not [m for m in _messages(caplog) if "flush" in m]
            monkeypatch.setattr(log_module, "SLOW_FLUSH_MS", 0.0)
            log.append_records([b"y"] * 10)
            log.flush()
    warned = [m for m in _messages(caplog) if "a flush of 1 segment took" in m]
    assert len(warned) == 1 and "LogFlushRateAndTimeMs" in warned[0]


def test_the_command_logs_at_the_level_asked(tmp_path):
    d = str(tmp_path)
    with pylog.open(d) as store:
        store.create_topic("t", 1)
    script = os.path.join(os.path.dirname(sys.executable), "pylog")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "pylog.cli"]
    quiet = subprocess.run([*command, "recover", "--log-dirs", d], capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = subprocess.run([*command, "--log-level", "info", "recover", "--log-dirs", d],
                          capture_output=True, text=True, timeout=120)
    assert loud.returncode == 0, loud.stderr
    assert f"INFO log dir {d}: online" in loud.stderr and "(pylog.storage.manager)" in loud.stderr
