"""Kafka transactions on the broker, with librdkafka's transactional API (confluent-kafka):
commit and abort seen by read_committed and read_uncommitted consumers, offsets sent
to the transaction committed with it (or dropped with an abort), zombie fencing by
epoch, transactions past their timeout aborted by the coordinator, a timeout above
transaction.max.timeout.ms refused, __transaction_state in Kafka's schemas, and
recovery after kill -9 of the broker between the decision (PrepareCommit) and the
markers, and mid-transaction. Transactions v2 (KIP-890 part 2) on the wire: Produce v12
adding partitions, TxnOffsetCommit v5 adding the group, EndTxn v5 bumping the epoch
(markers with the new one, the old one fenced, retries recognised), and its recovery
after kill -9 between the decision and the markers."""

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

    def states():
        found = []
        for part in range(store.partition_count("__transaction_state")):
            lg = store.log("__transaction_state", part)
            for batch in lg.read(0, 1 << 20).batches():
                for record in batch.records():
                    if decode_txn_key(record.key) == tid:
                        meta = decode_txn_value(tid, record.value)
                        found.append((meta.state, sorted(meta.partitions)))
        return found
    # The Complete record follows the answer, once the markers are durable.
    deadline = time.monotonic() + 30
    while len(states()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    states = states()
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
        # (Produce v11: from v12 the first batch adds the partition, transactions v2.)
        (part,) = client.request(0, req, 11).responses[0].partition_responses
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


# ------------------------------------------------------------ transactions v2

INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, PRODUCER_FENCED = 47, 48, 90


class WireTxnV2:
    """A transactional producer of transactions v2 on the wire (as Kafka 4's Java
    producer): Produce v12 with no AddPartitionsToTxn, TxnOffsetCommit v5 with no
    AddOffsetsToTxn, EndTxn v5 taking the producer id and epoch it answers."""

    def __init__(self, client, tid: str, timeout_ms: int = 60000) -> None:
        from pylog.protocol import messages as m
        self.m, self.client, self.tid = m, client, tid
        resp = client.request(22, m.InitProducerIdRequest(transactional_id=tid,
                                                          transaction_timeout_ms=timeout_ms), 5)
        assert resp.error_code == 0, resp
        self.pid, self.epoch = resp.producer_id, resp.producer_epoch
        self.seq: dict[tuple[str, int], int] = {}

    def produce(self, topic: str, partition: int, value: bytes, epoch: int | None = None) -> int:
        from txn_support import txn_batch
        m = self.m
        epoch = self.epoch if epoch is None else epoch
        seq = self.seq.get((topic, partition), 0)
        req = m.ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=30000, topic_data=[
            m.ProduceRequestTopicProduceData(name=topic, partition_data=[
                m.ProduceRequestPartitionProduceData(
                    index=partition, records=txn_batch(self.pid, epoch, seq, [value]))])])
        (part,) = self.client.request(0, req, 12).responses[0].partition_responses
        if part.error_code == 0:
            self.seq[(topic, partition)] = seq + 1
        return part.error_code

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> int:
        m = self.m
        resp = self.client.request(28, m.TxnOffsetCommitRequest(
            transactional_id=self.tid, group_id=group, producer_id=self.pid,
            producer_epoch=self.epoch, topics=[m.TxnOffsetCommitRequestTxnOffsetCommitRequestTopic(
                name=topic, partitions=[m.TxnOffsetCommitRequestTxnOffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset)])]), 5)
        return resp.topics[0].partitions[0].error_code

    def end(self, committed: bool, epoch: int | None = None):
        """The EndTxn v5 response; the producer goes on with its id and epoch."""
        resp = self.client.request(26, self.m.EndTxnRequest(
            transactional_id=self.tid, producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch, committed=committed), 5)
        if resp.error_code == 0:
            if (resp.producer_id, resp.producer_epoch) != (self.pid, self.epoch):
                self.seq = {}
            self.pid, self.epoch = resp.producer_id, resp.producer_epoch
        return resp


def _last_batch(log):
    batches = list(log.read(0, 1 << 24).batches())
    return batches[-1]


def test_api_versions_finalize_transaction_version_2(txn_served):
    """As Kafka 4.1's broker answers (measured): transaction.version supported 0-2 and
    finalized at 2; the versions of transactions v2 listed."""
    from pylog.protocol import messages as m
    from pylog.protocol.client import ProtocolClient
    with ProtocolClient(txn_served.bootstrap) as client:
        resp = client.request(18, m.ApiVersionsRequest(client_software_name="t",
                                                       client_software_version="1"), 4)
        v3 = client.request(18, m.ApiVersionsRequest(client_software_name="t",
                                                     client_software_version="1"), 3)
    assert [(f.name, f.min_version, f.max_version) for f in resp.supported_features] == \
        [("transaction.version", 0, 2)]
    # Below v4 a supported feature with minimum 0 is left out (KIP-1022), as Kafka's.
    assert v3.supported_features == [] and v3.finalized_features == resp.finalized_features
    assert [(f.name, f.min_version_level, f.max_version_level)
            for f in resp.finalized_features] == [("transaction.version", 2, 2)]
    assert resp.finalized_features_epoch >= 0          # clients keep features of epoch > -1
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert versions[0] == (0, 13) and versions[22] == (0, 5) and versions[26] == (0, 5) \
        and versions[28] == (0, 5) and versions[24] == (0, 5)


def test_transactions_v2_add_partitions_implicitly_and_bump_the_epoch(txn_served):
    from pylog.protocol.client import ProtocolClient
    store = txn_served.store
    topic = txn_served.topic(2)
    group = f"g-{topic}"
    tid = f"tx2-{topic}"
    with ProtocolClient(txn_served.bootstrap) as client:
        p = WireTxnV2(client, tid)
        pid, e0 = p.pid, p.epoch
        # The first Produce of each partition adds it: no AddPartitionsToTxn.
        assert p.produce(topic, 0, b"c0") == 0 and p.produce(topic, 1, b"c1") == 0
        assert p.produce(topic, 0, b"c2") == 0
        assert p.commit_offset(group, topic, 0, 7) == 0                 # no AddOffsetsToTxn
        meta = store.transactions.describe(tid)
        assert meta.state == TxnState.ONGOING and meta.client_tv == 2
        assert {(topic, 0), (topic, 1)} <= meta.partitions
        resp = p.end(committed=True)
        assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, pid, e0 + 1)
        for part in (0, 1):                      # markers carry the new epoch
            marker = _last_batch(store.log(topic, part))
            assert marker.is_control and marker.producer_epoch == e0 + 1
        assert store.committed(group, topic, 0) == 7
        # A retry of that EndTxn (its old epoch) is recognised; an abort with it is not.
        retry = p.end(committed=True, epoch=e0)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (0, pid, e0 + 1)
        assert p.end(committed=False, epoch=e0).error_code == INVALID_TXN_STATE
        # The old epoch is fenced in the partitions: nothing written.
        before = store.log(topic, 0).log_end_offset
        assert p.produce(topic, 0, b"zombie", epoch=e0) == INVALID_PRODUCER_EPOCH
        assert store.log(topic, 0).log_end_offset == before
        # The next transaction, with the new epoch, aborted: bumped again.
        assert p.produce(topic, 1, b"a0") == 0
        resp = p.end(committed=False)
        assert (resp.error_code, resp.producer_epoch) == (0, e0 + 2)
        # An abort with nothing added bumps the epoch alone; a commit of nothing is refused.
        assert p.end(committed=True).error_code == INVALID_TXN_STATE
        resp = p.end(committed=False)
        assert (resp.error_code, resp.producer_epoch) == (0, e0 + 3)
        assert p.end(committed=True, epoch=e0 + 1).error_code == PRODUCER_FENCED
    assert consume(txn_served.bootstrap, topic, 2, "read_committed", expect=3) == [b"c0", b"c1", b"c2"]
    # __transaction_state: version 1 values, ClientTransactionVersion 2 (Kafka 4's records).
    from pylog.coordinator.transaction_state import partition_for_transactional_id
    part = partition_for_transactional_id(tid, store.partition_count("__transaction_state"))
    values = [r.value for b in store.log("__transaction_state", part).read(0, 1 << 26).batches()
              for r in b.records() if r.key is not None and decode_txn_key(r.key) == tid]
    assert values[-1][:2] == b"\x00\x01"
    last = decode_txn_value(tid, values[-1])
    assert (last.client_tv, last.producer_epoch, last.state) == (2, e0 + 3, TxnState.COMPLETE_ABORT)


def test_transactions_v2_kill_9_between_prepare_commit_and_markers(tmp_path):
    """The bumped epoch is part of the durable decision: after the restart the markers
    carry it, and the producer's retried EndTxn (its old epoch) gets the new one."""
    from pylog.protocol.client import ProtocolClient
    log_dir = str(tmp_path / "d")
    proc, bootstrap = _crash_child(log_dir)
    try:
        admin_store_topic(bootstrap, "crash2", 2)
        with ProtocolClient(bootstrap) as client:
            p = WireTxnV2(client, "tx2-crash")
            pid, e0 = p.pid, p.epoch
            assert p.produce("crash2", 0, b"first") == 0
            assert p.end(committed=True).error_code == 0       # the child dies on the second
            assert p.produce("crash2", 0, b"decided-0") == 0 and p.produce("crash2", 1, b"decided-1") == 0
            with pytest.raises(ConnectionError):
                p.end(committed=True)
        assert proc.wait(30) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    with ServeProcess(log_dir) as served:
        with ProtocolClient(served.bootstrap) as client:
            from pylog.protocol import messages as m
            resp = client.request(26, m.EndTxnRequest(transactional_id="tx2-crash", producer_id=pid,
                                                      producer_epoch=e0 + 1, committed=True), 5)
            assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, pid, e0 + 2)
        assert consume(served.bootstrap, "crash2", 2, "read_committed", expect=3) == \
            [b"decided-0", b"decided-1", b"first"]
    store = pylog.open(log_dir)
    try:
        for part in (0, 1):
            marker = _last_batch(store.log("crash2", part))
            assert marker.is_control and marker.producer_epoch == e0 + 2
    finally:
        store.close()


def test_transactions_v2_timeout_fences_the_producer(txn_served):
    """A v2 transaction past its timeout is aborted with the epoch bumped twice (fence,
    then the end, as Kafka's): the producer's EndTxn with its epoch is no retry."""
    from pylog.protocol.client import ProtocolClient
    topic = txn_served.topic()
    tid = f"tx2-timeout-{topic}"
    with ProtocolClient(txn_served.bootstrap) as client:
        p = WireTxnV2(client, tid, timeout_ms=300)
        e0 = p.epoch
        assert p.produce(topic, 0, b"late") == 0
        wait_until(lambda: txn_served.store.transactions.describe(tid).state ==
                   TxnState.COMPLETE_ABORT, timeout=30)
        assert txn_served.store.transactions.describe(tid).producer_epoch == e0 + 2
        assert p.end(committed=True).error_code == PRODUCER_FENCED
        assert p.end(committed=False).error_code == PRODUCER_FENCED
        assert p.produce(topic, 0, b"later") == INVALID_PRODUCER_EPOCH
    marker = _last_batch(txn_served.store.log(topic, 0))
    assert marker.is_control and marker.producer_epoch == e0 + 2
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", wait=1.0) == []


def test_transactions_v2_epoch_exhausted_moves_to_a_new_producer_id(txn_served):
    """At epoch 32766 (Short.MaxValue - 1) an EndTxn v5 writes its markers with 32767 and
    hands out a new producer id at epoch 0; its retry gets the same answer."""
    from pylog.coordinator.transactions import MAX_EPOCH
    from pylog.protocol.client import ProtocolClient
    topic = txn_served.topic()
    tid = f"tx2-overflow-{topic}"
    with ProtocolClient(txn_served.bootstrap) as client:
        p = WireTxnV2(client, tid)
        # 32766 transactions take too long: the coordinator's epoch is set where they end.
        txn_served.store.transactions._txns[tid].producer_epoch = MAX_EPOCH
        p.epoch, old_pid = MAX_EPOCH, p.pid
        assert p.produce(topic, 0, b"last of the id") == 0
        resp = p.end(committed=True)
        assert resp.error_code == 0 and resp.producer_id != old_pid and resp.producer_epoch == 0
        marker = _last_batch(txn_served.store.log(topic, 0))
        assert (marker.producer_id, marker.producer_epoch) == (old_pid, MAX_EPOCH + 1)
        # The new id with the old id's epoch: fenced. The old id and epoch: the retry.
        assert p.end(committed=True, epoch=MAX_EPOCH).error_code == PRODUCER_FENCED
        from pylog.protocol import messages as m
        again = client.request(26, m.EndTxnRequest(transactional_id=tid, producer_id=old_pid,
                                                   producer_epoch=MAX_EPOCH, committed=True), 5)
        assert (again.error_code, again.producer_id, again.producer_epoch) == \
            (0, resp.producer_id, 0)
        assert p.produce(topic, 0, b"first of the new id") == 0
        assert p.end(committed=True).error_code == 0
    assert consume(txn_served.bootstrap, topic, 1, "read_committed", expect=2) == \
        [b"first of the new id", b"last of the id"]


def test_transactions_v2_kill_9_mid_transaction(tmp_path):
    """An open v2 transaction when the broker dies: read_committed never shows it; after
    the restart its producer aborts it with EndTxn v5 (the coordinator read back that the
    transaction is v2) and commits the next one with the bumped epoch."""
    from pylog.protocol.client import ProtocolClient
    log_dir = str(tmp_path / "d")
    with ServeProcess(log_dir) as served:
        admin_store_topic(served.bootstrap, "mid2", 2)
        with ProtocolClient(served.bootstrap) as client:
            p = WireTxnV2(client, "tx2-mid")
            assert p.produce("mid2", 0, b"kept") == 0
            assert p.end(committed=True).error_code == 0
            assert p.produce("mid2", 0, b"open") == 0 and p.produce("mid2", 1, b"open") == 0
            served.kill()
    with ServeProcess(log_dir) as served:
        assert consume(served.bootstrap, "mid2", 2, "read_committed", wait=1.5) == [b"kept"]
        with ProtocolClient(served.bootstrap) as client:
            p.client = client
            epoch = p.epoch
            resp = p.end(committed=False)
            assert (resp.error_code, resp.producer_epoch) == (0, epoch + 1)
            assert p.produce("mid2", 1, b"after") == 0
            assert p.end(committed=True).error_code == 0
        assert consume(served.bootstrap, "mid2", 2, "read_committed", expect=2) == [b"after", b"kept"]
        assert consume(served.bootstrap, "mid2", 2, "read_uncommitted", expect=4) == \
            [b"after", b"kept", b"open", b"open"]
