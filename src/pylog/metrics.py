"""Metrics in the Prometheus text format, with Kafka's names.

``store.metrics()`` and ``broker.metrics()`` return plain dicts (no dependency, no cost on
the append path: they read counters the store keeps anyway). This module exposes them for
Prometheus (``prometheus_client``) under the names the Prometheus JMX exporter gives
Kafka's MBeans, so dashboards built for Kafka read pylog:

- ``kafka_server_brokertopicmetrics_messagesin_total`` / ``_bytesin_total`` (per topic),
  ``_bytesout_total``;
- ``kafka_log_log_size``, ``_logendoffset``, ``_logstartoffset``, ``_numlogsegments``
  (per partition);
- ``kafka_log_logflushstats_logflushrateandtimems_count`` / ``_sum`` (a summary);
- ``kafka_log_logmanager_offlinelogdirectorycount``, ``kafka_server_replicamanager_partitioncount``;
- ``kafka_network_requestmetrics_requests_total`` and ``kafka_network_requestmetrics_totaltimems``
  ``_count``/``_sum`` (per request);
- ``kafka_consumergroup_lag`` (per group and partition);
- pylog's own, for topics as tables (pylog.table): ``pylog_table_lag_records`` (per
  partition: log end offset minus the table's watermark), ``pylog_table_commits_total``,
  ``pylog_table_records_total``, ``pylog_table_files_written_total`` and
  ``pylog_table_bytes_written_total``; of the scheduled table maintenance
  ``pylog_table_maintenance_runs_total``, ``pylog_table_files_compacted_total``,
  ``pylog_table_snapshots_expired_total``, ``pylog_table_orphan_files_removed_total``
  (per topic, since the store opened).

``serve_metrics(store, broker, port)`` starts the HTTP endpoint (``pylog serve
--metrics-port``), on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

__all__ = ["PylogCollector", "serve_metrics"]


class PylogCollector:
    """A prometheus_client collector over a store (and optionally its broker)."""

    def __init__(self, store, broker=None) -> None:
        self.store = store
        self.broker = broker

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            SummaryMetricFamily,
        )
        m = self.store.metrics()
        msg = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin",
                                  "Records appended (MessagesInPerSec)", labels=["topic"])
        byt = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin",
                                  "Bytes appended (BytesInPerSec)", labels=["topic"])
        for topic, t in sorted(m["topics"].items()):
            msg.add_metric([topic], t["MessagesIn"])
            byt.add_metric([topic], t["BytesIn"])
        yield msg
        yield byt
        for name, key, text in (("size", "Size", "Bytes of the partition's segments"),
                                ("logendoffset", "LogEndOffset", "The log end offset"),
                                ("logstartoffset", "LogStartOffset", "The log start offset"),
                                ("numlogsegments", "NumLogSegments", "Segments of the partition")):
            g = GaugeMetricFamily(f"kafka_log_log_{name}", text, labels=["topic", "partition"])
            for (topic, p), v in sorted(m["partitions"].items()):
                g.add_metric([topic, str(p)], v[key])
            yield g
        flush = m["LogFlushRateAndTimeMs"]
        yield SummaryMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                  "Log flushes (fsyncs) and the milliseconds they took",
                                  count_value=flush["count"], sum_value=flush["total_ms"])
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount",
                                "Offline log dirs", value=m["OfflineLogDirectoryCount"])
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount",
                                "Partitions", value=m["PartitionCount"])
        cleaner = m.get("LogCleaner", {})
        for name, text, owner in (
                ("max-clean-time-secs", "Seconds the last cleaning took", "logcleaner"),
                ("cleaner-recopy-percent", "Bytes written per 100 read, last cleaning", "logcleaner"),
                ("max-buffer-utilization-percent", "Offset map fill, last cleaning", "logcleaner"),
                ("max-dirty-percent", "Dirty ratio of the log cleaned last", "logcleanermanager"),
                ("DeadThreadCount", "Cleaner threads that died", "logcleaner")):
            if name in cleaner:
                metric = name.replace("-", "").lower()
                yield GaugeMetricFamily(f"kafka_log_{owner}_{metric}", text, value=cleaner[name])
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Records behind the log end",
                                labels=["group", "topic", "partition"])
        for group, parts in sorted(m.get("consumer_lag", {}).items()):
            for (topic, p), v in sorted(parts.items()):
                lag.add_metric([group, topic, str(p)], v)
        yield lag
        yield from self._tables(m, GaugeMetricFamily, CounterMetricFamily)
        if self.broker is not None:
            b = self.broker.metrics()
            req = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                      "Requests (RequestsPerSec)", labels=["request"])
            tot = SummaryMetricFamily("kafka_network_requestmetrics_totaltimems",
                                      "Milliseconds from request to response (TotalTimeMs)",
                                      labels=["request"])
            for name, r in sorted(b["requests"].items()):
                req.add_metric([name], r["count"])
                tot.add_metric([name], r["count"], r["total_ms"])
            yield req
            yield tot
            yield CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout",
                                      "Bytes fetched (BytesOutPerSec)", value=b["BytesOut"])
            yield GaugeMetricFamily("kafka_server_socketservermetrics_connection_count",
                                    "Open client connections", value=b["Connections"])

    def _tables(self, m, gauge, counter):
        service = getattr(self.store, "tables", None)
        stats = service.stats.snapshot() if service is not None else {}
        lag = gauge("pylog_table_lag_records", "Records of the log not yet in the topic's "
                    "table (log end offset - watermark)", labels=["topic", "partition"])
        families = [counter(f"pylog_table_{name}", text, labels=["topic"]) for name, text in (
            ("commits", "Commits to the topic's table"),
            ("records", "Records converted into the topic's table"),
            ("files_written", "Parquet data files written for the topic's table"),
            ("bytes_written", "Bytes of Parquet data files written for the topic's table"),
            ("maintenance_runs", "Scheduled maintenance runs of the topic's table"),
            ("files_compacted", "Small data files rewritten by the table's compaction"),
            ("snapshots_expired", "Snapshots of the topic's table expired"),
            ("orphan_files_removed", "Unreferenced files removed from the table's location"))]
        for topic, s in sorted(stats.items()):
            for (t, p), v in sorted(m["partitions"].items()):
                if t == topic:
                    lag.add_metric([t, str(p)], max(v["LogEndOffset"] - s.watermark.get(p, 0), 0))
            for family, value in zip(families, (s.commits, s.records, s.files, s.bytes,
                                                s.maintenance_runs, s.files_compacted,
                                                s.snapshots_expired, s.orphans_removed)):
                family.add_metric([topic], value)
        yield lag
        yield from families


def serve_metrics(store, broker=None, port: int = 0, addr: str = "127.0.0.1"):
    """Serves /metrics over HTTP; returns (server, thread) (``server.server_port`` is the
    port when 0 was asked for). ``server.shutdown()`` stops it."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import start_http_server
    registry = CollectorRegistry()
    registry.register(PylogCollector(store, broker))
    return start_http_server(port, addr=addr, registry=registry)
