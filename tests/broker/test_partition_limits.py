"""Partition bounds on a real `pylog serve` process with a real open-files limit
(issue "A broker that survives its clients", item 4).

One CreateTopics request of 2,000 partitions under ``ulimit -n 1024`` used to stop
half-way with KAFKA_STORAGE_ERROR, leave the topic in the table with ~330 partition
dirs, hold every descriptor of the broker, and make the next start exit with
"Too many open files". Now the request is refused whole with POLICY_VIOLATION naming
the limit, before anything is written; a store with more partitions than the limit
holds starts, serves the partitions that fit and keeps the rest offline, named; a
higher limit and a restart bring them back. Kafka's bound of 10,000 partitions per
request and pylog's total bound are configs.
"""

from __future__ import annotations

import os

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from pylog import records
from pylog.protocol.client import ProtocolClient
from pylog.storage import LogManager

from .process import ServeProcess

POLICY_VIOLATION, LEADER_NOT_AVAILABLE, KAFKA_STORAGE_ERROR = 44, 5, 56


def _results(futures) -> dict[str, tuple[int, str]]:
    out = {}
    for name, future in futures.items():
        try:
            future.result(120)
            out[name] = (0, "")
        except ck.KafkaException as exc:
            out[name] = (exc.args[0].code(), exc.args[0].str())
    return out


def create_topics(bootstrap: str, *topics: tuple[str, int], validate_only: bool = False):
    """{name: (error code, message)} of one CreateTopics request."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return _results(admin.create_topics([NewTopic(n, p, 1) for n, p in topics],
                                        validate_only=validate_only, request_timeout=120))


def create_partitions(bootstrap: str, *totals: tuple[str, int]):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return _results(admin.create_partitions([NewPartitions(n, c) for n, c in totals],
                                            request_timeout=120))


def partition_errors(client: ProtocolClient, topic: str) -> dict[int, int]:
    (t,) = client.metadata([topic]).topics
    assert t.error_code == 0, t
    return {p.partition_index: p.error_code for p in t.partitions}


def dirs_of(store: str, topic: str) -> list[str]:
    return [e for e in os.listdir(store) if e.rpartition("-")[0] == topic]


def test_a_creation_beyond_the_open_files_limit_is_refused_whole(tmp_path):
    store = str(tmp_path / "store")
    with ServeProcess(store, nofile=1024) as broker:
        assert create_topics(broker.bootstrap, ("old", 1)) == {"old": (0, "")}
        with ProtocolClient(broker.bootstrap) as client:
            assert client.produce("old", 0, records.encode_batch([b"before"])).error_code == 0
            code, message = create_topics(broker.bootstrap, ("big", 2000))["big"]
            assert code == POLICY_VIOLATION, message
            assert "2000 partitions need 6000 more open files" in message
            assert "open-files limit is 1024 (ulimit -n)" in message
            assert dirs_of(store, "big") == []                       # nothing half-made
            (t,) = client.metadata(["big"]).topics
            assert t.error_code == 3                                 # UNKNOWN_TOPIC_OR_PARTITION
            assert broker.open_files() < 100
            # The old topic serves, and a creation that fits is made.
            assert client.produce("old", 0, records.encode_batch([b"after"])).error_code == 0
            assert create_topics(broker.bootstrap, ("fits", 50)) == {"fits": (0, "")}
            assert len(dirs_of(store, "fits")) == 50
    assert broker.proc.returncode == 0, broker.stderr
    with ServeProcess(store, nofile=1024) as again, ProtocolClient(again.bootstrap) as client:
        part = client.fetch("old", 0, 0)
        assert part.error_code == 0 and part.high_watermark == 2
        assert set(partition_errors(client, "fits").values()) == {0}


def test_partitions_per_request_and_in_all_are_bounded(tmp_path):
    store = str(tmp_path / "store")
    with ServeProcess(store) as broker:
        # Kafka's controller: at most 10,000 partitions in one request, all topics together.
        got = create_topics(broker.bootstrap, ("a", 6000), ("b", 5000), validate_only=True)
        assert {code for code, _ in got.values()} == {POLICY_VIOLATION}, got
        assert "Excessively large number of partitions per request: 11000 partitions; at most " \
               "10000 (pylog.max.partitions.per.request)" in got["a"][1]
    with ServeProcess(store, "pylog.max.partitions.per.request=40",
                      "pylog.max.partitions=100") as broker:
        assert create_topics(broker.bootstrap, ("a", 30)) == {"a": (0, "")}
        got = create_topics(broker.bootstrap, ("b", 30), ("c", 20))
        assert {code for code, _ in got.values()} == {POLICY_VIOLATION}, got
        assert dirs_of(store, "b") == [] and dirs_of(store, "c") == []
        got = create_partitions(broker.bootstrap, ("a", 80))
        assert got["a"][0] == POLICY_VIOLATION
        assert "Unable to perform excessively large batch operation: 50 partitions" in got["a"][1]
        assert create_partitions(broker.bootstrap, ("a", 70)) == {"a": (0, "")}
        code, message = create_topics(broker.bootstrap, ("d", 31))["d"]
        assert code == POLICY_VIOLATION
        assert "31 more partitions would make 101 in this broker; at most 100 " \
               "(pylog.max.partitions)" in message
        assert create_topics(broker.bootstrap, ("d", 30)) == {"d": (0, "")}
        assert len(dirs_of(store, "a")) == 70 and len(dirs_of(store, "d")) == 30


def test_a_restart_with_more_partitions_than_the_limit_serves_the_rest(tmp_path):
    store = str(tmp_path / "store")
    with LogManager(store, background=False) as m:
        m.create_topic("small", 3)
        m.create_topic("huge", 100)
        for p in range(3):
            m.log("small", p).append(records.encode_batch([b"small-%d" % p]))
        m.log("huge", 99).append(records.encode_batch([b"kept"]))
    with ServeProcess(store, "pylog.open.files.reserve=64", nofile=256) as broker, \
            ProtocolClient(broker.bootstrap) as client:
        # The small topic is whole and serves; the huge one is cut where the limit is.
        assert set(partition_errors(client, "small").values()) == {0}
        for p in range(3):
            assert client.produce("small", p, records.encode_batch([b"more"])).error_code == 0
        huge = partition_errors(client, "huge")
        online = [p for p, code in huge.items() if code == 0]
        assert 10 < len(online) < 100 and online == list(range(len(online)))
        assert {huge[p] for p in range(len(online), 100)} == {LEADER_NOT_AVAILABLE}
        answer = client.produce("huge", 99, records.encode_batch([b"x"]))
        assert answer.error_code == KAFKA_STORAGE_ERROR
        assert "was not opened at start-up" in answer.error_message
        assert "open-files limit is 256 (ulimit -n)" in answer.error_message
        assert "64 kept free by pylog.open.files.reserve" in answer.error_message
    assert broker.proc.returncode == 0
    assert "partitions were not opened and stay offline (huge-" in broker.stderr
    with ServeProcess(store, nofile=4096) as broker, ProtocolClient(broker.bootstrap) as client:
        assert set(partition_errors(client, "huge").values()) == {0}
        assert client.fetch("huge", 99, 0).high_watermark == 1
        assert [client.fetch("small", p, 0).high_watermark for p in range(3)] == [2, 2, 2]
