"""A real broker per test module: a store in a temporary dir served on a free port of
127.0.0.1, stopped (and the store closed) when the module ends."""

from __future__ import annotations

import shutil
import uuid

import pytest

import pylog


class Served:
    def __init__(self, store, broker) -> None:
        self.store = store
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers

    def topic(self, partitions: int = 1, **config) -> str:
        """A fresh topic for one test."""
        name = f"t-{uuid.uuid4().hex[:10]}"
        self.store.create_topic(name, partitions, config)
        return name


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("broker")))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          group_min_session_timeout_ms=500).start()
    try:
        yield Served(store, broker)
    finally:
        broker.shutdown()
        store.close()


def need_kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (apt-get install kcat; tools/setup.sh does it as root)")
    return path


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory):
    """A CA, broker and client certificates made by openssl for this run (tls_certs.py)."""
    from .tls_certs import make_certs
    return make_certs(tmp_path_factory.mktemp("certs"))
