"""Transactions against Apache Kafka itself: Kafka's DumpLogSegments reads pylog's markers,
.txnindex and snapshots; pylog, recovering a partition Kafka wrote with transactions,
rebuilds Kafka's .txnindex byte for byte and reads what Kafka's read_committed consumers
read; and a pylog topic with committed and aborted transactions, exported with
`pylog export-to-kafka`, is served by Kafka 4.1 to read_committed consumers."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import pytest
from txn_support import TxnProducer

import pylog
from pylog.record import decode_arrow, encode_batch
from pylog.storage import Log

from .support import KafkaBroker, create_topics, run_tool

# One worker for the module: its Kafka broker and transactions are set up once.
pytestmark = pytest.mark.xdist_group("kafka-transactions")

TOPICS = {"written-by-kafka": 1, "txn-export": 2, "txn-open": 1}


def committed_values(log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.last_stable_offset:
        read = log.read_committed(offset)
        if not read.records.size:
            break
        rows = decode_arrow(read.records.read(), aborted_transactions=read.aborted_transactions)
        out += [v for o, v in zip(rows.column("offset").to_pylist(),
                                  rows.column("value").to_pylist()) if o >= offset]
        offset = read.records.last_offset + 1
    return out


def consume(bootstrap: str, topic: str, partition: int, isolation: str, count: int) -> list[bytes]:
    """Values of one partition from the beginning, with librdkafka."""
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    out: list[bytes] = []
    try:
        c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
        return out
    finally:
        c.close()


def kafka_python_committed(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 60
        while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, batch in c.poll(1000).items():
                out[tp.partition] += [m.value for m in batch]
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """A real Kafka broker with TOPICS created, and transactions of two librdkafka
    transactional producers interleaved in "written-by-kafka" (committed and aborted, with
    plain records between, over several segments), read back read_committed; then stopped
    cleanly. Returns (broker, what Kafka's read_committed consumer read there)."""
    from confluent_kafka import Producer
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), KafkaBroker.FOR_TESTS)
    broker.start()
    try:
        create_topics(broker.bootstrap, TOPICS, {"written-by-kafka": {"segment.bytes": "1048576"}})
        common = {"bootstrap.servers": broker.bootstrap, "linger.ms": 0}
        a = Producer({**common, "transactional.id": "txn-a"})
        b = Producer({**common, "transactional.id": "txn-b"})
        plain = Producer(common)
        a.init_transactions(60)
        b.init_transactions(60)
        filler = b"f" * 12_000
        for round_ in range(12):
            a.begin_transaction()
            b.begin_transaction()
            for i in range(4):
                a.produce("written-by-kafka", b"a-%d-%d" % (round_, i) + filler, partition=0)
                a.flush()
                b.produce("written-by-kafka", b"b-%d-%d" % (round_, i) + filler, partition=0)
                b.flush()
            plain.produce("written-by-kafka", b"plain-%d" % round_, partition=0)
            plain.flush()
            (a.commit_transaction if round_ % 3 else a.abort_transaction)(60)
            (b.abort_transaction if round_ % 2 else b.commit_transaction)(60)
        read = consume(broker.bootstrap, "written-by-kafka", 0, "read_committed", 10**6)
    finally:
        broker.stop()
    return broker, read


def test_pylog_rebuilds_kafkas_txnindex_byte_for_byte(kafka, tmp_path):
    broker, kafka_read = kafka
    source = broker.log_dir / "written-by-kafka-0"
    kafka_indexes = {p.name: p.read_bytes() for p in source.glob("*.txnindex")}
    assert any(kafka_indexes.values()) and len(list(source.glob("*.log"))) >= 2
    copy = tmp_path / "written-by-kafka-0"
    shutil.copytree(source, copy)
    for p in copy.glob("*.txnindex"):
        p.unlink()                  # pylog must rebuild every entry from the markers
    log = Log(str(copy))            # no pylog state: every segment recovered
    try:
        assert len(log.recovery.segments_recovered) == len(list(copy.glob("*.log")))
        rebuilt = {p.name: p.read_bytes() for p in copy.glob("*.txnindex")}
        assert {k: v for k, v in rebuilt.items() if v} == {k: v for k, v in kafka_indexes.items() if v}
        assert log.last_stable_offset == log.log_end_offset
        assert committed_values(log) == kafka_read
        assert len(kafka_read) == 12 + 4 * (8 + 6)      # plain, a's 8 and b's 6 commits
    finally:
        log.close()


def test_dump_log_segments_reads_pylog_markers_txnindex_and_snapshots(tmp_path):
    log = Log(str(tmp_path / "dump-0"), {"segment.bytes": 1 << 20})
    a, b = TxnProducer(log, pid=4, coordinator_epoch=9), TxnProducer(log, pid=5, epoch=2)
    log.append(encode_batch([b"plain"]))         # 0
    a.send([b"a0", b"a1"])                       # 1-2
    b.send([b"b0"])                              # 3
    a.abort()                                    # 4
    b.commit()                                   # 5
    b.send([b"open"])                            # 6: open at close
    log.close()
    out = run_tool("kafka-dump-log", "--files", str(tmp_path / "dump-0" / f"{0:020d}.log"),
                   "--deep-iteration").stdout
    assert "endTxnMarker: ABORT coordinatorEpoch: 9" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 0" in out
    assert out.count("isControl: true") == 2 and out.count("isTransactional: true") == 5
    assert out.count("isvalid: true") == 6 and "Exception" not in out
    index = run_tool("kafka-dump-log", "--files",
                     str(tmp_path / "dump-0" / f"{0:020d}.txnindex")).stdout
    assert "version: 0 producerId: 4 firstOffset: 1 lastOffset: 4 lastStableOffset: 3" in index
    snapshot = run_tool("kafka-dump-log", "--files",
                        str(tmp_path / "dump-0" / f"{7:020d}.snapshot")).stdout
    assert "producerId: 5 producerEpoch: 2 coordinatorEpoch: 0 currentTxnFirstOffset: " \
           "OptionalLong[6]" in snapshot, snapshot
    assert "producerId: 4 producerEpoch: 0 coordinatorEpoch: 9 currentTxnFirstOffset: " \
           "OptionalLong.empty" in snapshot, snapshot


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli", "export-to-kafka", *args],
                          capture_output=True, text=True, timeout=120)


def test_exported_transactions_are_served_read_committed_by_kafka(kafka, tmp_path):
    broker, _ = kafka
    logs = str(tmp_path / "pylog")
    want: dict[int, list[bytes]] = {}
    with pylog.open(logs) as store:
        store.create_topic("txn-export", 2, config={"segment.bytes": 4096})
        for p in range(2):
            lg = store.log("txn-export", p)
            producers = [TxnProducer(lg, pid) for pid in (30, 31)]
            want[p] = []
            for round_ in range(20):
                sent = []
                for q in producers:
                    values = [b"%d-%d-%d" % (q.pid, round_, i) for i in range(3)]
                    q.send(values)
                    sent.append((q, values))
                lg.append(encode_batch([b"plain-%d-%d" % (p, round_)]))
                for q, values in sent:
                    keep = (round_ + q.pid + p) % 3 != 0
                    q.end(keep, bump=round_ % 2 == 1)
                    want[p] += values if keep else []
                want[p].append(b"plain-%d-%d" % (p, round_))
            assert len(lg.segments) >= 3 and lg.last_stable_offset == lg.log_end_offset
            assert committed_values(lg) == want[p]
    done = export("--log-dirs", logs, "--topic", "txn-export", "--kafka-log-dir",
                  str(broker.log_dir))
    assert done.returncode == 0, done.stderr
    copied = {p.name for p in (broker.log_dir / "txn-export-0").glob("*.txnindex")}
    assert copied == {p.name for p in (tmp_path / "pylog" / "txn-export-0").glob("*.txnindex")}
    assert copied
    broker.start(format=False)
    try:
        assert kafka_python_committed(broker.bootstrap, "txn-export", 2) == want
        for p in range(2):
            assert consume(broker.bootstrap, "txn-export", p, "read_committed",
                           len(want[p])) == want[p]
            uncommitted = consume(broker.bootstrap, "txn-export", p, "read_uncommitted", 10**6)
            assert len(uncommitted) == 20 * 7          # every record; markers are not records
    finally:
        broker.stop()


def test_export_refuses_a_partition_with_an_open_transaction(kafka, tmp_path):
    broker, _ = kafka
    logs = str(tmp_path / "pylog")
    with pylog.open(logs) as store:
        store.create_topic("txn-open", 1)
        TxnProducer(store.log("txn-open", 0), pid=3).send([b"never ended"])
    refused = export("--log-dirs", logs, "--topic", "txn-open", "--kafka-log-dir",
                     str(broker.log_dir))
    assert refused.returncode == 2
    assert "open transaction(s), the oldest of producer 3 from offset 0" in refused.stderr
    assert not list((broker.log_dir / "txn-open-0").glob("*.log"))
