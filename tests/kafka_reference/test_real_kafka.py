"""A real Apache Kafka broker (KRaft, single node) beside pylog: segment files Kafka wrote
open in pylog and read byte-identical to what Kafka serves; reading Kafka's dirs changes
nothing, and reaches the end of a partition that ends in transaction markers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

import pylog

from .support import KafkaBroker

# One worker for the module: its Kafka broker (a JVM with a 1 GiB heap) starts once.
pytestmark = pytest.mark.xdist_group("real-kafka")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka")).start()
    try:
        yield broker
    finally:
        broker.stop()


def test_partition_dirs_written_by_kafka_open_in_pylog(kafka, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    admin.create_topics([NewTopic("from-kafka", 1, 1)])
    admin.close()
    now = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=20)
    for i in range(300):
        producer.send("from-kafka", key=b"k%d" % (i % 7), value=b"value-%d" % i, partition=0,
                      headers=[("n", b"%d" % i)], timestamp_ms=now + i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap)
    tp = TopicPartition("from-kafka", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    served = []
    deadline = time.monotonic() + 30
    while len(served) < 300 and time.monotonic() < deadline:
        for recs in consumer.poll(500).values():
            served += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in recs]
    consumer.close()
    assert len(served) == 300
    kafka.stop()                                  # a clean shutdown: segments complete
    copy = tmp_path / "from-kafka-0"
    shutil.copytree(kafka.log_dir / "from-kafka-0", copy)
    with pylog.Log(str(copy)) as log:
        got = [(r.offset, r.timestamp, r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
               for r in log.read(0, 1 << 30).records()]
    assert got == served


def _files(root) -> dict[str, tuple[bytes, int]]:
    """Every file under `root`: its bytes and modification time."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = (f.read(), os.stat(path).st_mtime_ns)
    return out


def test_reading_a_kafka_partition_that_ends_in_transaction_markers(kafka, tmp_path):
    """A transactional producer's partition ends in a commit marker (a control batch).
    `pylog console-consumer --log-dirs` on Kafka's own log dir prints every record and
    exits at the end, changing no byte and adding no file; a pylog.Log (a writer: it
    locks and keeps its state) opened on a copy and closed writes Kafka's producer
    snapshot back unchanged (the coordinator epoch of the transaction included)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic
    if kafka.proc is None or kafka.proc.poll() is not None:
        kafka.start(format=False)            # the test before stops it
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    admin.create_topics([NewTopic("txn", 1, 1)])
    admin.close()
    # A Log (a writer) is refused a partition of a running Kafka broker: Kafka's lock is a
    # POSIX record lock, which the flock of pylog's own dirs does not see.
    live = kafka.log_dir / "txn-0"
    with pytest.raises(pylog.errors.LogDirLockedError, match="running Kafka broker"):
        pylog.Log(str(live))
    assert not (live / ".lock").exists() and not (live / "pylog-log-state").exists()
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "pylog-txn"})
    producer.init_transactions(30)
    values = []
    for t in range(2):
        producer.begin_transaction()
        for i in range(20):
            values.append(b"txn %d record %d" % (t, i))
            producer.produce("txn", values[-1], partition=0)
        producer.commit_transaction(30)
    kafka.stop()                               # its producer snapshot at the log end
    before = _files(kafka.log_dir)
    snapshots = [n for n in before if n.startswith("txn-0/") and n.endswith(".snapshot")]
    assert snapshots

    run = subprocess.run([sys.executable, "-m", "pylog.cli", "console-consumer", "--log-dirs",
                          str(kafka.log_dir), "--topic", "txn", "--from-beginning",
                          "--timeout-ms", "1000"], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == values
    assert _files(kafka.log_dir) == before

    copy = tmp_path / "txn-0"
    shutil.copytree(kafka.log_dir / "txn-0", copy)
    with pylog.Log(str(copy)) as log:
        batches = log.read(0, 1 << 20).batches()
        assert [b.control_type for b in batches if b.is_control] == ["commit", "commit"]
        assert [r.value for b in batches if not b.is_control for r in b.records()] == values
    for name in snapshots:
        assert (copy / os.path.basename(name)).read_bytes() == before[name][0]
