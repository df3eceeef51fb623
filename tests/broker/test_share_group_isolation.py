"""A share group's ``share.isolation.level`` (KIP-932, Kafka's group config): the default
read_uncommitted delivers every record below the high watermark; read_committed only
below the last stable offset, and the records of aborted transactions are archived,
never delivered. Transactions written through the storage API (step by step) and by a
real transactional producer (confluent-kafka against the broker), read by raw ShareFetch
and by pylog's in-process ShareConsumer."""

from __future__ import annotations

import time
import uuid

import pytest
from txn_support import TxnProducer

import pylog
from pylog.coordinator.share_group import share_coordinator
from pylog.coordinator.share_partition import ARCHIVED
from pylog.errors import ConfigError
from pylog.record import encode_batch

from share_support import ACCEPT, ShareMember, serve_store


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    yield from serve_store(tmp_path_factory, "share-iso", group_share_session_timeout_ms=60000)


def group_with(store, isolation: str | None) -> str:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    configs = {"share.auto.offset.reset": "earliest"}
    if isolation is not None:
        configs["share.isolation.level"] = isolation
    share_coordinator(store).group(group).set_configs(configs)
    return group


def write_transactions(log):
    """plain, a committed transaction interleaved with an aborted one, plain, a
    transaction left open (the LSO stops at it), a plain record after it."""
    a, b, c = TxnProducer(log, pid=1), TxnProducer(log, pid=2), TxnProducer(log, pid=3)
    log.append(encode_batch([b"plain-0"]))           # 0
    a.send([b"a-0", b"a-1"])                         # 1-2
    b.send([b"b-0", b"b-1"])                         # 3-4
    a.send([b"a-2"])                                 # 5
    a.commit()                                       # 6
    b.abort()                                        # 7
    log.append(encode_batch([b"plain-1"]))           # 8
    c.send([b"c-0"])                                 # 9: open
    log.append(encode_batch([b"plain-2"]))           # 10
    return c


def test_read_committed_archives_aborted_records_and_stops_at_the_lso(shared):
    store, broker = shared
    topic = f"txq-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    log = store.log(topic, 0)
    c = write_transactions(log)
    assert log.last_stable_offset == 9 and log.high_watermark == 11
    committed, uncommitted = group_with(store, "read_committed"), group_with(store, None)
    a = ShareMember(broker, store, committed, [topic])
    u = ShareMember(broker, store, uncommitted, [topic])
    try:
        a.beat(), u.beat()
        resp = a.fetch(topic)
        got = a.acquired(resp)
        # Markers (6, 7) are acquired too (the client acknowledges them as gaps); the
        # aborted b-0, b-1 (3, 4) are not; nothing at or past the LSO (9).
        assert sorted(o for _, o in got) == [0, 1, 2, 5, 6, 7, 8]
        values = a.values(resp)                 # (the markers' offsets hold control records)
        assert [values[o] for o in (0, 1, 2, 5, 8)] == [b"plain-0", b"a-0", b"a-1", b"a-2", b"plain-1"]
        sp = share_coordinator(store).group(committed).partitions[(topic, 0)]
        assert sp.state(3)[0] == sp.state(4)[0] == ARCHIVED
        assert a.acquired(a.fetch(topic)) == {}
        # read_uncommitted (the default): every record below the high watermark.
        assert sorted(o for _, o in u.acquired(u.fetch(topic))) == list(range(11))
        assert share_coordinator(store).group(uncommitted).config("share.isolation.level") \
            == "read_uncommitted"

        ack = a.acknowledge(topic, {0: [(0, 2, [ACCEPT]), (5, 8, [ACCEPT])]})
        assert ack.responses[0].partitions[0].error_code == 0
        assert sp.start_offset == 9            # the archived 3-4 are done too
        c.commit()                             # 11: the LSO passes 9 and 10
        resp = a.fetch(topic, max_wait_ms=10_000)
        assert sorted(o for _, o in a.acquired(resp)) == [9, 10, 11]
        assert [a.values(resp)[o] for o in (9, 10)] == [b"c-0", b"plain-2"]
    finally:
        a.close(), u.close()


def test_a_read_that_is_all_aborted_reads_on(shared):
    store, broker = shared
    topic = f"txq-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    log = store.log(topic, 0)
    b = TxnProducer(log, pid=7)
    b.send([b"x%d" % i for i in range(5)])           # 0-4
    b.abort()                                        # 5
    log.append(encode_batch([b"after"]))             # 6
    group = group_with(store, "read_committed")
    m = ShareMember(broker, store, group, [topic])
    try:
        m.beat()
        # At most 5 records: the first read acquires only aborted ones, archived; the
        # fetch reads on and answers the marker and the record after it.
        resp = m.fetch(topic, max_records=5)
        assert sorted(o for _, o in m.acquired(resp)) == [5, 6]
        assert m.values(resp)[6] == b"after"
    finally:
        m.close()


def test_the_isolation_level_is_checked_as_a_group_config(shared):
    store, _ = shared
    with pytest.raises(ConfigError, match="share.isolation.level"):
        share_coordinator(store).group(f"sg-{uuid.uuid4().hex[:8]}").set_configs(
            {"share.isolation.level": "read_most"})


def test_a_transactional_producer_and_an_in_process_share_consumer(shared):
    ck = pytest.importorskip("confluent_kafka")
    store, broker = shared
    topic = f"txq-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    group = group_with(store, "read_committed")
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers,
                            "transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "linger.ms": 0})
    producer.init_transactions(30)
    for n, commit in ((0, True), (1, False), (2, True)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, b"t%d-%d" % (n, i), partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)     # left open: never delivered
    producer.flush(30)
    consumer = pylog.ShareConsumer(store, topic, group_id=group, max_poll_records=100,
                                   share_acknowledgement_mode="explicit")
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            for r in consumer.poll(0.5):
                got.append(r.value)
                consumer.acknowledge(r)
            consumer.commit_sync()
        assert sorted(got) == sorted(b"t%d-%d" % (n, i) for n in (0, 2) for i in range(3))
        assert consumer.poll(0.3) == []
    finally:
        consumer.close()
        producer.abort_transaction(30)
