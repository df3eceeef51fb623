"""One pylog broker per test module (Kafka's tools run against it)."""

from __future__ import annotations

import pytest

import pylog


@pytest.fixture(scope="module")
def pylog_broker(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("pylog")))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0).start()
    try:
        yield store, broker
    finally:
        broker.shutdown()
        store.close()
