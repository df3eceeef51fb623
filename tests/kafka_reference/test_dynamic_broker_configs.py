"""Kafka's kafka-configs (ConfigCommand) on pylog's broker configs (KIP-226): a cluster
default and a per-broker value take effect without a restart, are described with their
sources, and survive a restart of the store and broker. (Errors, DELETE, APPEND and the
rest: tests/broker/test_dynamic_configs.py, with fewer JVM starts.)"""

from __future__ import annotations

import time

import pylog

from .support import run_tool

HOUR_MS = 3_600_000


def wait_until(predicate, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def serve(path):
    store = pylog.open(path, log_retention_check_interval_ms=100)
    return store, pylog.Broker(store, listen="127.0.0.1:0").start()


def append_old(store, topic, count):
    old = int(time.time() * 1000) - HOUR_MS        # kept by the default 7 days, not by 1 min
    store.log(topic, 0).append_records([b"old"] * count, timestamps=[old] * count)


def test_kafka_configs_broker_default_and_per_broker_live_and_after_a_restart(tmp_path):
    path = str(tmp_path / "store")
    store, broker = serve(path)
    try:
        b = ["--bootstrap-server", broker.bootstrap_servers, "--entity-type", "brokers"]
        store.create_topic("follows", 1)
        store.create_topic("keeps", 1, {"retention.ms": str(4 * HOUR_MS)})
        for topic in ("follows", "keeps"):
            append_old(store, topic, 10)
        run_tool("kafka-configs", *b, "--entity-default", "--alter",
                 "--add-config", "log.retention.ms=60000")
        # No restart: the next retention check deletes what is older than a minute.
        assert wait_until(lambda: store.log("follows", 0).log_start_offset == 10)
        assert store.log("keeps", 0).log_start_offset == 0       # its own retention.ms
        out = run_tool("kafka-configs", *b, "--entity-default", "--describe").stdout
        assert "log.retention.ms=60000 sensitive=false " \
               "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=60000}" in out, out
        run_tool("kafka-configs", *b, "--entity-name", "0", "--alter",
                 "--add-config", "log.segment.bytes=1048576")
        assert store.log("follows", 0).config.segment_bytes == 1 << 20
    finally:
        broker.shutdown()
        store.close()
    store, broker = serve(path)                      # a restart keeps both
    try:
        b = ["--bootstrap-server", broker.bootstrap_servers, "--entity-type", "brokers"]
        append_old(store, "follows", 5)
        assert wait_until(lambda: store.log("follows", 0).log_start_offset == 15)
        assert store.log("follows", 0).config.segment_bytes == 1 << 20
        out = run_tool("kafka-configs", *b, "--entity-name", "0", "--describe", "--all").stdout
        assert "log.retention.ms=60000 sensitive=false " \
               "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=60000, " \
               "DEFAULT_CONFIG:log.retention.ms=604800000}" in out, out
        assert "log.segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" \
               "log.segment.bytes=1048576, DEFAULT_CONFIG:log.segment.bytes=1073741824}" in out, out
        assert "log.dirs=" + path + " sensitive=false synonyms={STATIC_BROKER_CONFIG:" in out, out
    finally:
        broker.shutdown()
        store.close()
