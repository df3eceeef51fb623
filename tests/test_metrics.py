"""Metrics with Kafka's names: known traffic gives known values, in-process and scraped over
HTTP from `pylog serve --metrics-port`."""

from __future__ import annotations

import re
import urllib.request

import pylog
from pylog.metrics import serve_metrics


def test_store_metrics_after_known_traffic(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 2)
        info = store.log("t", 0).append_records([b"x" * 100] * 10)
        store.log("t", 1).append_records([b"y" * 10] * 5)
        store.log("t", 0).flush()
        store.commit_offsets("g", {("t", 0): 4})
        m = store.metrics()
    assert m["topics"]["t"]["MessagesIn"] == 15
    assert m["topics"]["t"]["BytesIn"] >= info.size
    assert m["partitions"][("t", 0)]["LogEndOffset"] == 10
    assert m["partitions"][("t", 1)]["NumLogSegments"] == 1
    assert m["partitions"][("t", 0)]["Size"] > 1000
    assert m["LogFlushRateAndTimeMs"]["count"] >= 1
    assert m["OfflineLogDirectoryCount"] == 0 and m["PartitionCount"] >= 2
    assert m["consumer_lag"]["g"][("t", 0)] == 6


def test_prometheus_endpoint_with_the_broker(tmp_path):
    from kafka import KafkaProducer
    with pylog.open(str(tmp_path)) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        store.create_topic("p", 1)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(20):
            producer.send("p", b"v%d" % i).get(10)
        producer.close()
        server, _ = serve_metrics(store, broker, 0)
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics",
                                          timeout=10).read().decode()
        finally:
            server.shutdown()
            server.server_close()
    values = dict(re.findall(r"^(\S+) (\S+)$", text, re.M))
    assert float(values['kafka_server_brokertopicmetrics_messagesin_total{topic="p"}']) == 20
    assert float(values['kafka_log_log_logendoffset{partition="0",topic="p"}']) == 20
    assert float(values['kafka_network_requestmetrics_requests_total{request="Produce"}']) >= 20
    assert float(values['kafka_network_requestmetrics_totaltimems_sum{request="Produce"}']) > 0
    assert "kafka_log_logmanager_offlinelogdirectorycount 0.0" in text


def test_log_cleaner_metrics_after_a_cleaning(tmp_path):
    """Kafka's LogCleaner gauges describe the last cleaning, in-process and in the
    Prometheus text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    from pylog.metrics import PylogCollector
    with pylog.open(str(tmp_path), background=False) as store:
        store.create_topic("c", 1, config={"cleanup.policy": "compact", "segment.bytes": "2000"})
        for i in range(200):
            store.log("c", 0).append_records([b"value %d" % i], keys=[b"k%d" % (i % 4)])
        assert store.metrics()["LogCleaner"]["cleanings"] == 0
        stats = store.clean_once()
        cleaner = store.metrics()["LogCleaner"]
        registry = CollectorRegistry()
        registry.register(PylogCollector(store))
        text = generate_latest(registry).decode()
    assert cleaner["cleanings"] == 1 and cleaner["max-dirty-percent"] == 100.0
    assert 0 < cleaner["cleaner-recopy-percent"] < 10           # 4 keys of 200 records
    assert cleaner["max-clean-time-secs"] == stats.seconds
    assert cleaner["DeadThreadCount"] == 0
    assert "kafka_log_logcleaner_cleanerrecopypercent" in text
    assert "kafka_log_logcleanermanager_maxdirtypercent 100.0" in text
