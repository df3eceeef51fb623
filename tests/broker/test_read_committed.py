"""read_committed over the wire: Fetch v4+ with isolation_level=1 and ListOffsets, to real
Kafka clients (confluent-kafka/librdkafka, kafka-python) with transactions written through
the storage API (committed, aborted and one left open), as Kafka's broker answers them:
records below the last stable offset only, the aborted transactions of the range in the
response, and a parked fetch woken when a marker moves the LSO."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from log_support import wait_until
from txn_support import TxnProducer, txn_batch

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.record import decode_arrow, encode_batch

from .conftest import parked


def consume(client: str, bootstrap: str, topic: str, isolation: str, count: int,
            timeout: float) -> list[bytes]:
    """Values read from partition 0 from the beginning (at most `count`, until `timeout`)."""
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    if client == "confluent":
        import confluent_kafka as ck
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation})
        try:
            c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
            while len(out) < count and time.monotonic() < deadline:
                msg = c.poll(0.2)
                if msg is not None:
                    assert not msg.error(), msg.error()
                    out.append(msg.value())
        finally:
            c.close()
    else:
        from kafka import KafkaConsumer, TopicPartition
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                          isolation_level=isolation)
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            while len(out) < count and time.monotonic() < deadline:
                for batch in c.poll(200).values():
                    out += [m.value for m in batch]
        finally:
            c.close()
    return out


def write_transactions(log):
    """plain, a committed transaction interleaved with an aborted one, plain, and a
    transaction left open (the LSO stops at it), then a plain record after it."""
    a, b, c = TxnProducer(log, pid=1), TxnProducer(log, pid=2), TxnProducer(log, pid=3)
    log.append(encode_batch([b"plain-0"]))           # 0
    a.send([b"a-0", b"a-1"])                         # 1-2
    b.send([b"b-0"])                                 # 3
    a.send([b"a-2"])                                 # 4
    a.commit()                                       # 5
    b.abort()                                        # 6
    log.append(encode_batch([b"plain-1"]))           # 7
    c.send([b"c-0"])                                 # 8: open
    log.append(encode_batch([b"plain-2"]))           # 9
    return c


COMMITTED = [b"plain-0", b"a-0", b"a-1", b"a-2", b"plain-1"]
EVERYTHING = [b"plain-0", b"a-0", b"a-1", b"b-0", b"a-2", b"plain-1", b"c-0", b"plain-2"]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_read_committed_clients_skip_aborted_records_and_wait_at_the_lso(served, client):
    topic = served.topic()
    log = served.store.log(topic, 0)
    c = write_transactions(log)
    assert log.last_stable_offset == 8 and log.high_watermark == 10
    assert consume(client, served.bootstrap, topic, "read_uncommitted", 8, 20) == EVERYTHING
    assert consume(client, served.bootstrap, topic, "read_committed", 6, 3) == COMMITTED
    # A read_committed consumer parked at the LSO gets the rest when the marker lands.
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(
        consume(client, served.bootstrap, topic, "read_committed", 7, 30)))
    reader.start()
    assert wait_until(lambda: parked(served.broker) >= 1, timeout=60), "the fetch never parked"
    c.commit()
    reader.join(40)
    assert got == COMMITTED + [b"c-0", b"plain-2"]


def test_fetch_answers_the_lso_and_the_aborted_transactions_of_the_range(served):
    topic = served.topic()
    log = served.store.log(topic, 0)
    write_transactions(log)
    with ProtocolClient(served.bootstrap) as client:
        committed = client.fetch(topic, 0, 0, isolation_level=1)
        assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(2, 3)]
        rows = decode_arrow(bytes(committed.records),
                            aborted_transactions=committed.aborted_transactions)
        assert rows.column("value").to_pylist() == COMMITTED
        assert max(rows.column("offset").to_pylist()) < 8
        # read_uncommitted: every record, the LSO still answered, no aborted list (null).
        uncommitted = client.fetch(topic, 0, 0, isolation_level=0)
        assert uncommitted.last_stable_offset == 8 and uncommitted.aborted_transactions is None
        assert decode_arrow(bytes(uncommitted.records)).column("value").to_pylist() == EVERYTHING
        # A fetch past the aborted transaction's range answers none of it.
        later = client.fetch(topic, 0, 7, isolation_level=1)
        assert later.aborted_transactions == []
        assert client.list_offset(topic, 0, -1, isolation_level=1) == 8
        assert client.list_offset(topic, 0, -1, isolation_level=0) == 10
        assert client.list_offset(topic, 0, -2, isolation_level=1) == 0


def test_a_transactional_batch_without_a_transactional_id_is_refused(served):
    """Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; nothing opens a transaction
    the coordinator never heard of (the LSO would stop there for ever)."""
    topic = served.topic()
    with ProtocolClient(served.bootstrap) as client:
        pid = client.request(22, m.InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1)).producer_id
        answer = client.produce(topic, 0, txn_batch(pid, 0, 0, [b"x"]))
    assert answer.error_code == 53
    log = served.store.log(topic, 0)
    assert log.log_end_offset == 0 and log.last_stable_offset == 0
