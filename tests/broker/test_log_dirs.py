"""DescribeLogDirs and AlterReplicaLogDirs against a broker with two log dirs (JBOD): raw
requests for Kafka's answers, and a partition moved while confluent-kafka produces to it
and consumes from it. (Kafka's own kafka-log-dirs.sh and kafka-reassign-partitions.sh:
tests/kafka_reference/test_log_dir_tools.py; crashes mid-move:
tests/storage/test_log_dir_moves.py.)"""

from __future__ import annotations

import errno
import os
import threading
import time
import uuid

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

NONE, REPLICA_NOT_AVAILABLE, LOG_DIR_NOT_FOUND = 0, 9, 57


@pytest.fixture(scope="module")
def jbod(tmp_path_factory):
    root = tmp_path_factory.mktemp("jbod")
    dirs = [str(root / "disk1"), str(root / "disk2")]
    store = pylog.open(dirs, log_segment_bytes=64 * 1024)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0).start()
    try:
        yield store, broker, dirs
    finally:
        broker.shutdown()
        store.close()


def describe(bootstrap, topics=None, version=None):
    with ProtocolClient(bootstrap) as client:
        body = m.DescribeLogDirsRequest(topics=None if topics is None else [
            m.DescribeLogDirsRequestDescribableLogDirTopic(topic=t, partitions=ps)
            for t, ps in topics.items()])
        return client.request(35, body, version)


def alter(bootstrap, path, topic, partitions):
    with ProtocolClient(bootstrap) as client:
        resp = client.request(34, m.AlterReplicaLogDirsRequest(dirs=[
            m.AlterReplicaLogDirsRequestAlterReplicaLogDir(path=path, topics=[
                m.AlterReplicaLogDirsRequestAlterReplicaLogDirTopic(name=topic,
                                                                    partitions=partitions)])]))
    return {(t.topic_name, p.partition_index): p.error_code for t in resp.results
            for p in t.partitions}


def where(resp, topic):
    """{(dir, partition, is_future): (size, lag)} for `topic`."""
    return {(r.log_dir, p.partition_index, p.is_future_key): (p.partition_size, p.offset_lag)
            for r in resp.results for t in r.topics if t.name == topic for p in t.partitions}


def wait_for(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_lists_each_dir_and_its_partitions(jbod, version):
    store, broker, dirs = jbod
    topic = f"d-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 4)
    store.log(topic, 1).append_records([b"v%d" % i for i in range(100)])
    resp = describe(broker.bootstrap_servers, version=version)
    assert resp.error_code == 0
    assert sorted(r.log_dir for r in resp.results) == sorted(dirs)
    assert all(r.error_code == NONE for r in resp.results)
    got = where(resp, topic)
    assert got == {(store.log_dir_of(topic, p), p, False): (store.log(topic, p).size, 0)
                   for p in range(4)}
    assert got[(store.log_dir_of(topic, 1), 1, False)][0] > 0
    assert {store.log_dir_of(topic, p) for p in range(4)} == set(dirs)      # spread over both
    for r in resp.results:
        st = os.statvfs(r.log_dir)
        if version >= 4:
            assert r.total_bytes == st.f_blocks * st.f_frsize
            assert 0 < r.usable_bytes <= r.total_bytes
        else:
            assert r.total_bytes == r.usable_bytes == -1     # not on the wire before v4


def test_describe_log_dirs_of_some_partitions(jbod):
    store, broker, _dirs = jbod
    topic = f"s-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 3)
    resp = describe(broker.bootstrap_servers, {topic: [0, 2, 7], "no-such-topic": [0]})
    assert set(where(resp, topic)) == {(store.log_dir_of(topic, p), p, False) for p in (0, 2)}
    assert {t.name for r in resp.results for t in r.topics} == {topic}
    assert all(r.error_code == NONE for r in resp.results)


def test_alter_replica_log_dirs_errors(jbod, tmp_path):
    store, broker, _dirs = jbod
    topic = f"e-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    here = store.log_dir_of(topic, 0)
    b = broker.bootstrap_servers
    assert alter(b, str(tmp_path), topic, [0]) == {(topic, 0): LOG_DIR_NOT_FOUND}
    assert alter(b, here, "no-such-topic", [0]) == {("no-such-topic", 0): REPLICA_NOT_AVAILABLE}
    assert alter(b, here, topic, [5]) == {(topic, 5): REPLICA_NOT_AVAILABLE}
    assert alter(b, here, topic, [0]) == {(topic, 0): NONE}       # already there: nothing to do
    assert store.moving(topic, 0) is None and store.log_dir_of(topic, 0) == here


def test_move_while_confluent_kafka_produces_and_consumes(jbod):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    store, broker, dirs = jbod
    b = broker.bootstrap_servers
    topic = f"m-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    source = store.log_dir_of(topic, 0)
    dest = next(d for d in dirs if d != source)
    total = 30_000
    # Enough data before the move for several copy passes over many segments.
    for start in range(0, 10_000, 1_000):
        store.log(topic, 0).append_records([b"%d" % i for i in range(start, start + 1_000)])
    first = 10_000
    producer = confluent_kafka.Producer({"bootstrap.servers": b, "enable.idempotence": True,
                                         "linger.ms": 2, "batch.num.messages": 50})
    failures = []
    delivered = [0]
    started_move = threading.Event()

    def on_delivery(error, msg):
        if error is not None:
            failures.append(error)
        delivered[0] += 1
        if delivered[0] == 2_000:
            started_move.set()

    def produce():
        for i in range(first, total):
            while True:
                try:
                    producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 100 == 0:
                producer.poll(0)
                time.sleep(0.01)          # spread the produce over the move
        producer.flush(60)

    consumer = confluent_kafka.Consumer({"bootstrap.servers": b, "group.id": f"g-{topic}",
                                         "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    done = threading.Event()

    def consume():
        while not done.is_set() or len(seen) < total:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                failures.append(msg.error())
                continue
            seen.append(msg.value())
            if len(seen) >= total:
                return

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    assert started_move.wait(60)
    futures_seen = []
    assert alter(b, dest, topic, [0]) == {(topic, 0): NONE}
    while store.moving(topic, 0) is not None:
        futures_seen += [k for k in where(describe(b, {topic: [0]}), topic) if k[2]]
        time.sleep(0.01)
    swapped_at = store.log(topic, 0).log_end_offset
    threads[0].join(120)
    done.set()
    threads[1].join(120)
    consumer.close()
    assert not failures, failures[:5]
    assert store.log_dir_of(topic, 0) == dest
    assert set(where(describe(b, {topic: [0]}), topic)) == {(dest, 0, False)}
    assert not any(n.startswith(f"{topic}-0") and not n.endswith("-delete")
                   for n in os.listdir(source))
    # Every record exactly once, in order: by the consumer and in the moved log.
    assert seen == [b"%d" % i for i in range(total)]
    lg = store.log(topic, 0)
    assert lg.log_end_offset == total
    values, offset = [], 0
    while offset < total:
        batch = list(lg.read(offset, 1 << 20).records())
        values += [r.value for r in batch]
        offset = batch[-1].offset + 1
    assert values == [b"%d" % i for i in range(total)]
    assert all(k == (dest, 0, True) for k in futures_seen)
    assert first < swapped_at < total       # the producer wrote before and after the swap


def test_partition_reassignments_of_a_single_broker(jbod):
    store, broker, _dirs = jbod
    topic = f"r-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    node = broker.node_id

    def reassign(replicas, partition=0, name=topic):
        with ProtocolClient(broker.bootstrap_servers) as client:
            resp = client.request(45, m.AlterPartitionReassignmentsRequest(topics=[
                m.AlterPartitionReassignmentsRequestReassignableTopic(name=name, partitions=[
                    m.AlterPartitionReassignmentsRequestReassignablePartition(
                        partition_index=partition, replicas=replicas)])]))
        assert resp.error_code == 0
        [t] = resp.responses
        [p] = t.partitions
        return p.error_code

    assert reassign([node]) == NONE                       # already so: complete at once
    assert reassign([node + 1]) == 39                     # INVALID_REPLICA_ASSIGNMENT
    assert reassign([node, node]) == 39
    assert reassign(None) == 85                           # NO_REASSIGNMENT_IN_PROGRESS
    assert reassign([node], partition=3) == 3             # UNKNOWN_TOPIC_OR_PARTITION
    with ProtocolClient(broker.bootstrap_servers) as client:
        listed = client.request(46, m.ListPartitionReassignmentsRequest(topics=None))
    assert listed.error_code == 0 and listed.topics == []


def test_an_offline_dir_is_described_with_kafka_storage_error(tmp_path, monkeypatch):
    from pylog.storage.segment import LogSegment
    dirs = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    with pylog.open(dirs) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        store.create_topic("t", 2)
        broken = store.log_dir_of("t", 0)
        store.log("t", 0).append_records([b"x"])

        def flush(self, engine, indexes=True):
            raise OSError(errno.EIO, "Input/output error (injected)", self.log.path)
        monkeypatch.setattr(LogSegment, "flush", flush)
        with pytest.raises(pylog.errors.KafkaStorageError):
            store.log("t", 0).flush()
        monkeypatch.undo()
        resp = describe(broker.bootstrap_servers, version=4)
        by_dir = {r.log_dir: r for r in resp.results}
        assert by_dir[broken].error_code == 56 and by_dir[broken].topics == []
        assert by_dir[broken].total_bytes == -1
        healthy = next(d for d in dirs if d != broken)
        assert by_dir[healthy].error_code == NONE
        assert alter(broker.bootstrap_servers, broken, "t", [1]) == {("t", 1): 56}


def test_log_dir_apis_need_the_cluster_permissions_kafka_asks(tmp_path):
    """DescribeLogDirs needs DESCRIBE on the cluster, AlterReplicaLogDirs and
    AlterPartitionReassignments ALTER (Kafka's KafkaApis)."""
    admin_client = pytest.importorskip("confluent_kafka.admin")
    from .test_acls import acl, add_acls, serve, wire
    with serve(str(tmp_path / "data")) as broker:
        def as_alice(api, body, version=None):
            with wire(broker, "alice") as client:
                return client.request(api, body, version)
        alter_body = m.AlterReplicaLogDirsRequest(dirs=[
            m.AlterReplicaLogDirsRequestAlterReplicaLogDir(path="/x", topics=[
                m.AlterReplicaLogDirsRequestAlterReplicaLogDirTopic(name="t", partitions=[0])])])
        described = as_alice(35, m.DescribeLogDirsRequest(topics=None), 4)
        assert (described.error_code, described.results) == (31, [])
        altered = as_alice(34, alter_body)
        assert altered.results[0].partitions[0].error_code == 31
        reassigned = as_alice(45, m.AlterPartitionReassignmentsRequest(topics=[]))
        assert reassigned.error_code == 31
        cluster = admin_client.ResourceType.BROKER
        add_acls(broker, acl(cluster, "kafka-cluster", "User:alice",
                             admin_client.AclOperation.DESCRIBE),
                 acl(cluster, "kafka-cluster", "User:alice", admin_client.AclOperation.ALTER))
        described = as_alice(35, m.DescribeLogDirsRequest(topics=None), 4)
        assert described.error_code == 0 and len(described.results) == 1
        altered = as_alice(34, alter_body)
        assert altered.results[0].partitions[0].error_code == LOG_DIR_NOT_FOUND
