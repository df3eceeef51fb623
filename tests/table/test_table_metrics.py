"""The table converters' metrics: lag per partition, commits, records, files and bytes
written, from the store's TableService, in the Prometheus text format."""

from __future__ import annotations

import re
import time

from prometheus_client import CollectorRegistry, generate_latest

import pylog
from pylog.metrics import PylogCollector


def scrape(store) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(PylogCollector(store))
    text = generate_latest(registry).decode()
    return {k: float(v) for k, v in re.findall(r"^(pylog_table\S+) (\S+)$", text, re.M)}


def test_metrics_follow_the_converter(tmp_path):
    with pylog.open(str(tmp_path / "logs"), background=False) as store:
        store.create_topic("t", 2, {"pylog.table.enable": "true",
                                    "pylog.table.commit.interval.ms": "1"})
        store.log("t", 0).append_records([b"x" * 100] * 30)
        store.log("t", 1).append_records([b"y" * 100] * 20)
        now = time.time_ns() // 1_000_000
        store.tables.run_due(now)                # the first run only schedules
        assert store.tables.run_due(now + 10) == 1
        store.log("t", 1).append_records([b"z"] * 5)
        m = scrape(store)
    assert m['pylog_table_lag_records{partition="0",topic="t"}'] == 0
    assert m['pylog_table_lag_records{partition="1",topic="t"}'] == 5
    assert m['pylog_table_commits_total{topic="t"}'] == 1
    assert m['pylog_table_records_total{topic="t"}'] == 50
    assert m['pylog_table_files_written_total{topic="t"}'] >= 1
    assert m['pylog_table_bytes_written_total{topic="t"}'] > 1000
