"""Kafka's Java Producer and Consumer against pylog's broker: idempotent produce with every
codec, the cooperative-sticky assignor, static membership (group.instance.id) and
read_uncommitted; records byte-identical with pylog's Consumer and kafka-python. A
transactional producer fails at once (pylog has no transactions)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import pylog

from .support import kafka_libs, unavailable

SOURCE = Path(__file__).resolve().parent / "java" / "JavaClients.java"


def java(*args: str, timeout: float = 180) -> list[str]:
    if shutil.which("javac") is None:
        unavailable("no JDK (javac): Kafka's Java clients run from a Java source file")
    run = subprocess.run(["java", "-Xmx256m", "-Dlog4j.configuration=file:/dev/null", "-cp",
                          f"{kafka_libs()}/*", str(SOURCE), *args],
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stdout.splitlines()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_java_producer_every_codec_idempotent(pylog_broker, codec):
    store, broker = pylog_broker
    topic = f"java-{codec}"
    store.create_topic(topic, 2)
    assert java("produce", broker.bootstrap_servers, topic, codec, "300") == ["SENT 300"]
    got = []
    for p in range(2):
        for batch in store.log(topic, p).read(0, 1 << 24).batches():
            assert batch.producer_id >= 0 and batch.base_sequence >= 0   # idempotent
            assert batch.compression == codec
            got += [(r.key, r.value, r.timestamp, [(k, bytes(v)) for k, v in r.headers])
                    for r in batch.records()]
    want = [(None if i % 4 == 0 else b"k%d" % (i % 9), b"java value %d" % i,
             1_700_000_000_000 + i, [("i", b"%d" % i)]) for i in range(300)]
    assert sorted(got, key=lambda r: r[2]) == want


def test_java_consumer_cooperative_sticky_static_member(pylog_broker):
    """Records kafka-python wrote reach the Java consumer byte for byte; a static member
    (group.instance.id) with the cooperative-sticky assignor commits, and a restart with the
    same instance id resumes at the committed offsets."""
    from kafka import KafkaProducer
    store, broker = pylog_broker
    store.create_topic("java-in", 3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    sent = {}
    for i in range(90):
        md = producer.send("java-in", key=b"key%d" % i, value=b"from kafka-python %d" % i,
                           headers=[("src", b"py")]).get(10)
        sent[(md.partition, md.offset)] = i
    producer.close()
    lines = java("consume", broker.bootstrap_servers, "java-in", "java-group", "member-1", "90")
    rows = [line.split("\t") for line in lines if line[0].isdigit()]
    assert lines[-2:] == ["ASSIGNED 3", "DONE 90"]
    assert len(rows) == 90
    for partition, offset, _ts, key, value, header in rows:
        i = sent[(int(partition), int(offset))]
        assert (key, value, header) == (f"key{i}", f"from kafka-python {i}", "src=py")
    committed = {p: store.committed("java-group", "java-in", p) for p in range(3)}
    assert sum(committed.values()) == 90
    # pylog's own Consumer reads the same bytes.
    consumer = pylog.Consumer(store, auto_offset_reset="earliest")
    consumer.assign([pylog.TopicPartition("java-in", p) for p in range(3)])
    mine = {}
    while got := consumer.poll(0.5):
        mine.update({(r.partition, r.offset): (r.key, r.value) for r in got})
    consumer.close()
    assert {k: (b"key%d" % i, b"from kafka-python %d" % i) for k, i in sent.items()} == mine
    # More records; the same static member resumes after its commits (no re-delivery).
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    for i in range(90, 120):
        producer.send("java-in", key=b"key%d" % i, value=b"from kafka-python %d" % i).get(10)
    producer.close()
    lines = java("consume", broker.bootstrap_servers, "java-in", "java-group", "member-1", "30")
    assert lines[-1] == "DONE 30"
    values = sorted(line.split("\t")[4] for line in lines if line[0].isdigit())
    assert values == sorted(f"from kafka-python {i}" for i in range(90, 120))


def test_java_transactional_producer_fails_at_once(pylog_broker):
    """initTransactions() throws a fatal error within a second or so, instead of retrying
    a coordinator that never appears until max.block.ms (30 s here)."""
    store, broker = pylog_broker
    (line,) = java("transactional", broker.bootstrap_servers, "java-tx")
    word, exception, ms = line.split()
    assert (word, exception) == ("FAILED", "org.apache.kafka.common.errors."
                                           "TransactionalIdAuthorizationException")
    assert int(ms) < 10_000, line
