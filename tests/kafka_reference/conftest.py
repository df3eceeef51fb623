"""One pylog broker per test module (Kafka's tools run against it); one real Kafka broker
per run for the modules that only need one running (a JVM with a 1 GiB heap: seconds to
format and start, minutes on a loaded machine)."""

from __future__ import annotations

import pytest

import pylog

from .support import KafkaBroker


@pytest.fixture(scope="module")
def pylog_broker(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("pylog")))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0).start()
    try:
        yield store, broker
    finally:
        broker.shutdown()
        store.close()


@pytest.fixture(scope="session")
def real_kafka(tmp_path_factory):
    """A real Kafka broker (KRaft, single node), formatted and started once per run for
    every test that uses it (tests/conftest.py's SHARED_FIXTURES puts them all on one
    xdist worker). Tests name their own topics and transactional ids; a test may stop it
    to read its files at rest: take it through ``running_kafka``, which starts it again."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), KafkaBroker.FOR_TESTS).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def running_kafka(real_kafka):
    """``real_kafka``, started again on its own storage if a test before stopped it."""
    if real_kafka.proc is None or real_kafka.proc.poll() is not None:
        real_kafka.start(format=False)
    return real_kafka
