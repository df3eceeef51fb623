"""Kafka transactions on the broker, with librdkafka's transactional API (confluent-kafka):
commit and abort seen by read_committed and read_uncommitted consumers, offsets sent
to the transaction committed with it (or dropped with an abort), zombie fencing by
epoch, transactions past their timeout aborted by the coordinator, a timeout above
transaction.max.timeout.ms refused, __transaction_state in Kafka's schemas, and
recovery after kill -9 of the broker between the decision (PrepareCommit) and the
markers, and mid-transaction."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

import pylog
from pylog.coordinator.transaction_state import TxnState, decode_txn_key, decode_txn_value

from .process import ServeProcess, wait_until

ck = pytest.importorskip("confluent_kafka")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def txn_served(tmp_path_factory):
    """A broker whose coordinator aborts timed-out transactions every 100 ms."""
    from .conftest import Served
    store = pylog.open(str(tmp_path_factory.mktemp("txn")),
                       transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
                       transaction_max_timeout_ms=120_000, pylog_background_poll_ms=50)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          group_min_session_timeout_ms=500).start()
    try:
        yield Served(store, broker)
    finally:
        broker.shutdown()
        store.close()


def producer(bootstrap: str, tid: str, **extra):
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(30)
    return p


def consume(bootstrap: str, topic: str, partitions: int, isolation: str, wait: float = 3.0,
            expect: int | None = None) -> list[bytes]:
    """Every value of `topic` from the beginning, read with `isolation`."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    out: list[bytes] = []
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + (60 if expect is not None else wait)
        while time.monotonic() < deadline and (expect is None or len(out) < expect):
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value())
        if expect is not None:          # then a little longer: nothing more may come
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                msg = c.poll(0.2)
                if msg is not None and not msg.error():
                    out.append(msg.value())
        return sorted(out)
    finally:
        c.close()


def test_commit_and_abort_seen_by_each_isolation_level(txn_served):
    topic = txn_served.topic(2)
    p = producer(txn_served.bootstrap, f"tx-{topic}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, b"a%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c-last", partition=0)
    p.commit_transaction(30)
    committed = sorted([b"c%d" % i for i in range(10)] + [b"c-last"])
    assert consume(txn_served.bootstrap, topic, 2, "read_committed", expect=11) == committed
    assert consume(txn_served.bootstrap, topic, 2, "read_uncommitted", expect=17) == \
        sorted(committed + [b"a%d" % i for i in range(6)])
    # Markers in both partitions, and the LSO at the log end once all is decided.
    for part in range(2):
        lg = txn_served.store.log(topic, part)
        assert lg.last_stable_offset == lg.high_watermark
    meta = txn_served.store.transactions.describe(f"tx-{topic}")
    assert meta.state == TxnState.COMPLETE_COMMIT and not meta.partitions


def test_open_transaction_holds_read_committed_at_its_first_offset(txn_served):
    topic = txn_served.topic(1)
    p = producer(txn_served.bootstrap, f"tx-{topic}")
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(30)
    lg = txn_served.store.log(topic, 0)
    assert lg.high_watermark == 1 and lg.last_stable_offset == 0
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", wait=1.5) == []
    p.commit_transaction(30)
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", expect=1) == [b"open"]


def test_offsets_sent_to_the_transaction_commit_with_it(txn_served):
    topic = txn_served.topic(1)
    group = f"g-{topic}"
    store = txn_served.store
    p = producer(txn_served.bootstrap, f"tx-{topic}")
    # Aborted: the offsets never become the group's.
    p.begin_transaction()
    p.produce(topic, b"x")
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 5)],
                                  _group_metadata(txn_served.bootstrap, group), 30)
    p.abort_transaction(30)
    assert store.committed(group, topic, 0) is None
    # Committed: they do, with the records.
    p.begin_transaction()
    p.produce(topic, b"y")
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 7)],
                                  _group_metadata(txn_served.bootstrap, group), 30)
    assert store.committed(group, topic, 0) is None          # not before the commit
    p.commit_transaction(30)
    assert store.committed(group, topic, 0) == 7
    # A remote consumer of the group sees them too.
    c = ck.Consumer({"bootstrap.servers": txn_served.bootstrap, "group.id": group})
    try:
        got = c.committed([ck.TopicPartition(topic, 0)], timeout=30)
        assert got[0].offset == 7
    finally:
        c.close()


def _group_metadata(bootstrap: str, group: str):
    """A consumer group's metadata as librdkafka hands it to send_offsets_to_transaction."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def test_a_new_producer_fences_the_zombie_and_aborts_its_transaction(txn_served):
    topic = txn_served.topic(1)
    tid = f"tx-{topic}"
    zombie = producer(txn_served.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(30)
    fresh = producer(txn_served.bootstrap, tid)      # bumps the epoch, aborts the open one
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh")
    fresh.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as raised:
        zombie.produce(topic, b"zombie-2")
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                            ck.KafkaError.INVALID_PRODUCER_EPOCH), error
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", expect=1) == [b"fresh"]


def test_a_transaction_past_its_timeout_is_aborted(txn_served):
    topic = txn_served.topic(1)
    tid = f"tx-{topic}"
    # Long enough for the record to land before the abort on a loaded machine (at 1 s,
    # beside busy xdist workers, the abort came first and fenced the producer's flush).
    p = producer(txn_served.bootstrap, tid, **{"transaction.timeout.ms": 5000})
    p.begin_transaction()
    p.produce(topic, b"late")
    p.flush(30)
    lg = txn_served.store.log(topic, 0)
    assert lg.last_stable_offset == 0
    # The coordinator aborts it (an ABORT marker): the LSO passes it, nothing visible.
    assert wait_until(lambda: lg.last_stable_offset == lg.high_watermark == 2, 30)
    assert txn_served.store.transactions.describe(tid).state == TxnState.COMPLETE_ABORT
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", wait=1.5) == []
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(30)        # its epoch was bumped: the commit cannot succeed


def test_timeout_above_the_maximum_is_refused(txn_served):
    p = ck.Producer({"bootstrap.servers": txn_served.bootstrap, "transactional.id": "tx-too-long",
                     "transaction.timeout.ms": 600_000})
    with pytest.raises(ck.KafkaException) as raised:
        p.init_transactions(30)
    assert raised.value.args[0].code() == ck.KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_transaction_state_records_in_kafkas_schema(txn_served):
    topic = txn_served.topic(1)
    tid = f"tx-{topic}"
    p = producer(txn_served.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, b"v")
    p.commit_transaction(30)
    store = txn_served.store
    states = []
    for part in range(store.partition_count("__transaction_state")):
        lg = store.log("__transaction_state", part)
        for batch in lg.read(0, 1 << 20).batches():
            for record in batch.records():
                if decode_txn_key(record.key) == tid:
                    meta = decode_txn_value(tid, record.value)
                    states.append((meta.state, sorted(meta.partitions)))
    assert [s for s, _ in states] == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT,
                                      TxnState.COMPLETE_COMMIT]
    assert states[1][1] == states[2][1] == [(topic, 0)]
    assert store.describe_topic("__transaction_state").internal


# ------------------------------------------------------------------------ kill -9

def _crash_child(log_dir: str) -> subprocess.Popen:
    """A broker that kills itself (SIGKILL) once a PrepareCommit is durable, before
    any marker (tests/broker/txn_crash_broker.py)."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "txn_crash_broker.py"), log_dir],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("listening "), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split()[1]


def test_kill_9_between_prepare_commit_and_markers(tmp_path):
    """The decision survives: after a restart the coordinator writes the markers, and a
    read_committed consumer sees the transaction's records in every partition."""
    log_dir = str(tmp_path / "d")
    proc, bootstrap = _crash_child(log_dir)
    try:
        admin_store_topic(bootstrap, "crash", 3)
        p = producer(bootstrap, "tx-crash", **{"message.timeout.ms": 10_000})
        p.begin_transaction()
        p.produce("crash", b"before", partition=0)
        p.commit_transaction(30)      # the child crashes only on the second commit
        p.begin_transaction()
        for i in range(6):
            p.produce("crash", b"decided-%d" % i, partition=i % 3)
        p.flush(30)
        with pytest.raises(ck.KafkaException):
            p.commit_transaction(3)
        assert proc.wait(30) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    with ServeProcess(log_dir) as served:
        got = consume(served.bootstrap, "crash", 3, "read_committed", expect=7)
        assert got == sorted([b"before"] + [b"decided-%d" % i for i in range(6)])


def test_kill_9_mid_transaction_never_shows_it(tmp_path):
    """An open transaction when the broker dies: after the restart its producer's
    successor aborts it; read_committed never shows it, the committed one stays."""
    log_dir = str(tmp_path / "d")
    with ServeProcess(log_dir) as served:
        admin_store_topic(served.bootstrap, "mid", 2)
        p = producer(served.bootstrap, "tx-mid")
        p.begin_transaction()
        p.produce("mid", b"kept", partition=0)
        p.produce("mid", b"kept", partition=1)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce("mid", b"open", partition=0)
        p.produce("mid", b"open", partition=1)
        p.flush(30)
        served.kill()
        del p
    with ServeProcess(log_dir) as served:
        # The LSO is held at the open transaction: only what was committed before it.
        assert consume(served.bootstrap, "mid", 2, "read_committed", wait=1.5) == [b"kept", b"kept"]
        fresh = producer(served.bootstrap, "tx-mid")      # fences and aborts the open one
        fresh.begin_transaction()
        fresh.produce("mid", b"after", partition=1)
        fresh.commit_transaction(30)
        assert consume(served.bootstrap, "mid", 2, "read_committed", expect=3) == \
            [b"after", b"kept", b"kept"]


def admin_store_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


# ------------------------------------------------------------------- wire level

@pytest.mark.parametrize("version", [1, 3, 4])
def test_find_coordinator_for_a_transactional_id_names_this_broker(txn_served, version):
    from pylog.protocol import messages as m
    from pylog.protocol.client import ProtocolClient
    with ProtocolClient(txn_served.bootstrap) as client:
        req = m.FindCoordinatorRequest(key="tx-raw", key_type=1, coordinator_keys=["tx-raw"])
        resp = client.request(10, req, version)
        if version >= 4:
            (resp,) = resp.coordinators
        assert resp.error_code == 0
        assert resp.node_id == txn_served.broker.node_id


def test_a_partition_outside_the_transaction_is_refused(txn_served):
    """KIP-890 part 1: a transactional batch for a partition AddPartitionsToTxn never
    added opens nothing (INVALID_TXN_STATE); the log is left as it was."""
    from pylog.protocol import messages as m
    from pylog.protocol.client import ProtocolClient
    from txn_support import txn_batch
    topic = txn_served.topic()
    with ProtocolClient(txn_served.bootstrap) as client:
        resp = client.request(22, m.InitProducerIdRequest(transactional_id="tx-unadded",
                                                          transaction_timeout_ms=60000))
        assert resp.error_code == 0
        req = m.ProduceRequest(transactional_id="tx-unadded", acks=-1, timeout_ms=30000, topic_data=[
            m.ProduceRequestTopicProduceData(name=topic, partition_data=[
                m.ProduceRequestPartitionProduceData(
                    index=0, records=txn_batch(resp.producer_id, resp.producer_epoch, 0, [b"v"]))])])
        (part,) = client.request(0, req).responses[0].partition_responses
        assert part.error_code == 48, part         # INVALID_TXN_STATE
    lg = txn_served.store.log(topic, 0)
    assert lg.log_end_offset == 0 and lg.last_stable_offset == 0


def test_kafka_python_and_aiokafka_transactional_producers_commit(txn_served):
    import asyncio

    import aiokafka
    import kafka
    topic = txn_served.topic(1)

    async def aio():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=txn_served.bootstrap,
                                             transactional_id=f"tx-aio-{topic}")
        await asyncio.wait_for(producer.start(), 30)
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aiokafka", partition=0)
        finally:
            await producer.stop()

    asyncio.run(aio())
    producer = kafka.KafkaProducer(bootstrap_servers=txn_served.bootstrap,
                                   transactional_id=f"tx-kp-{topic}", max_block_ms=30000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kafka-python", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(5)
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", expect=2) == \
        [b"aiokafka", b"kafka-python"]


# ------------------------------------------------------- pylog's remote producer

def test_pylog_remote_transactional_producer(txn_served):
    """pylog's RemoteProducer with a transactional_id, over the wire: a committed and an
    aborted transaction, offsets sent with the committed one, and the zombie fenced."""
    from pylog.protocol.client import ProtocolError
    from pylog.record import encode_batch
    from pylog.remote import RemoteProducer, leaders
    topic = txn_served.topic(2)
    group = f"g-{topic}"
    _, where = leaders(txn_served.bootstrap, [topic])
    with RemoteProducer(where, transactional_id=f"tx-{topic}") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, 0, encode_batch([b"c0", b"c1"]), 2)
        p.send(topic, 1, encode_batch([b"c2"]), 1)
        p.send(topic, 0, encode_batch([b"c3"]), 1)
        p.send_offsets_to_transaction({(topic, 0): 11}, group)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, 1, encode_batch([b"a0"]), 1)
        p.abort_transaction()
        with RemoteProducer(where, transactional_id=f"tx-{topic}") as successor:
            successor.init_transactions()
        p.begin_transaction()
        with pytest.raises(ProtocolError) as fenced:
            p.send(topic, 0, encode_batch([b"zombie"]), 1)
        assert fenced.value.code in (90, 47)          # PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
    assert txn_served.store.committed(group, topic, 0) == 11
    assert consume(txn_served.bootstrap, topic, 2, "read_committed", expect=4) == \
        [b"c0", b"c1", b"c2", b"c3"]
    assert consume(txn_served.bootstrap, topic, 2, "read_uncommitted", expect=5) == \
        [b"a0", b"c0", b"c1", b"c2", b"c3"]
