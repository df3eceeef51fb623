"""Topics as tables behind a broker: `pylog serve` in a child process, a topic created by a
real client (confluent-kafka's AdminClient) with pylog.table.* configs (maintenance's too,
checked and described by the broker like the others), records produced by
librdkafka, and the table appearing in the local catalog, read here by pyiceberg."""

from __future__ import annotations

import pytest
from broker.process import ServeProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from log_support import wait_until

from pylog.table import open_catalog, watermarks

from .support import rows_of


def test_a_topic_created_with_table_configs_becomes_a_table(tmp_path):
    logs = str(tmp_path / "logs")
    with ServeProcess(logs) as serve:
        admin = AdminClient({"bootstrap.servers": serve.bootstrap})
        configs = {"pylog.table.enable": "true", "pylog.table.commit.interval.ms": "50",
                   "pylog.table.namespace": "raw", "pylog.table.maintenance.interval.ms": "600000",
                   "pylog.table.orphan.min.age.ms": "3600000"}
        admin.create_topics([NewTopic("orders.eu", 2, config=configs)])["orders.eu"].result(30)
        elsewhere = {"pylog.table.catalog": "lake", "pylog.table.catalog.uri": "http://127.0.0.1:9"}
        admin.create_topics([NewTopic("other", 1, config=elsewhere)])["other"].result(30)
        bad = admin.create_topics([NewTopic("bad", 1, config={"pylog.table.partition.by": "year"})])
        with pytest.raises(Exception, match="pylog.table.partition.by"):
            bad["bad"].result(30)
        bad = admin.create_topics([NewTopic("bad", 1, config={"pylog.table.orphan.min.age.ms": "5"})])
        with pytest.raises(Exception, match="pylog.table.orphan.min.age.ms = '?5'?: must be -1"):
            bad["bad"].result(30)
        described = admin.describe_configs([ConfigResource("topic", "orders.eu"),
                                            ConfigResource("topic", "other")])
        entries = [f.result(30) for f in described.values()]
        mine = next(e for e in entries if "pylog.table.namespace" in e and
                    e["pylog.table.namespace"].value == "raw")
        assert mine["pylog.table.commit.interval.ms"].value == "50"
        assert mine["pylog.table.enable"].value == "true"
        assert mine["pylog.table.maintenance.interval.ms"].value == "600000"
        assert mine["pylog.table.orphan.min.age.ms"].value == "3600000"
        assert mine["pylog.table.snapshot.max.age.ms"].value == "86400000"     # the default
        other = next(e for e in entries if "pylog.table.catalog.uri" in e)
        assert other["pylog.table.catalog.uri"].value == "http://127.0.0.1:9"

        p = Producer({"bootstrap.servers": serve.bootstrap, "linger.ms": 1})
        for i in range(40):
            p.produce("orders.eu", value=b"o%d" % i, key=b"k%d" % i, partition=i % 2,
                      headers=[("n", b"%d" % i)])
        assert p.flush(30) == 0

        catalog = open_catalog(logs, {})          # the local catalog, read beside the broker

        def converted():
            try:
                table = catalog.load_table(("raw", "orders_eu"))
            except Exception:
                return False
            return watermarks(table) == {0: 20, 1: 20}
        assert wait_until(converted, timeout=60), serve.log_lines()[-20:]
        rows = rows_of(catalog.load_table(("raw", "orders_eu")))
        assert sorted(r[3] for r in rows) == sorted(b"o%d" % i for i in range(40))
        assert {r[4] for r in rows if r[3] == b"o7"} == {(("n", b"7"),)}
        del p, admin           # the clients go before the broker (no reconnect noise)
