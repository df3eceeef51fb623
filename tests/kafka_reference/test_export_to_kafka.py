"""A pylog topic handed to a real Apache Kafka broker, unconverted (`pylog export-to-kafka`):
Kafka loads pylog's segments and serves every record at its original offset, a consumer
group resumes at the offsets it committed in pylog, new producers of every client append
(no producer ids carried over), and the store stays locked for the whole copy and is left
exactly as it was."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest
from dir_listing import age, changes, listing

import pylog
from pylog.record import encode_batch
from pylog.storage import PartitionReader
from pylog.storage.kafka_export import ExportError, export_topic

from .support import KafkaBroker, create_topics, run_tool
from .test_java_clients import java

# One worker for the module: its Kafka broker is set up once, and JavaClients compiled once.
pytestmark = pytest.mark.xdist_group("export-to-kafka")

# Each test's topic, created in one Kafka cluster for the module (a start costs seconds).
TOPICS = {"moved": 2, "pids": 2, "locked": 2}


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli", "export-to-kafka", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """A real Kafka broker with TOPICS created, stopped cleanly: ready for exports."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), KafkaBroker.FOR_TESTS)
    broker.start()
    try:
        create_topics(broker.bootstrap, TOPICS)
    finally:
        broker.stop()
    return broker


def test_export_a_topic_to_kafka_and_resume_a_group(kafka, tmp_path):
    from kafka import KafkaConsumer, TopicPartition
    logs = str(tmp_path / "pylog")
    with pylog.open(logs) as store:
        store.create_topic("moved", 2, config={"segment.bytes": 1 << 20})
        producer = pylog.Producer(store, compression_type="lz4")
        noise = random.Random(5)
        for i in range(30000):
            producer.send("moved", key=b"k%d" % (i % 11), value=b"record %d " % i + noise.randbytes(90),
                          headers=[("n", b"%d" % i)] if i % 3 else [])
        producer.close()
        store.log("moved", 0).advance_log_start_offset(40)       # DeleteRecords
        store.commit_offsets("resume-me", {("moved", 0): 500, ("moved", 1): 700})
        ends = {p: store.log("moved", p).log_end_offset for p in range(2)}
        assert len(store.log("moved", 0).segments) >= 2       # several segments move
        consumer = pylog.Consumer(store, auto_offset_reset="earliest")
        consumer.assign([pylog.TopicPartition("moved", p) for p in range(2)])
        want = {}
        while got := consumer.poll(0.5):
            want.update({(r.partition, r.offset): (r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
                         for r in got})
        consumer.close()

    with pylog.open(logs):                      # open: refused, the dir's lock is held
        refused = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir", str(kafka.log_dir))
    assert refused.returncode == 2 and "is open in another process" in refused.stderr
    before = age(logs)
    done = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir", str(kafka.log_dir),
                  "--offsets-dir", str(tmp_path / "offsets"))
    assert done.returncode == 0, done.stderr
    # The export only reads the store (its lock held, no pid written; the offsets read
    # from __consumer_offsets's files): every file keeps its inode, bytes and mtime.
    assert changes(before, listing(logs)) == []
    again = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir", str(kafka.log_dir))
    assert again.returncode == 2 and "already holds records" in again.stderr

    kafka.start(format=False)
    try:
        # Kafka locks its log dir with a POSIX record lock, which flock(2) does not see.
        running = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir",
                         str(kafka.log_dir))
        assert running.returncode == 2 and "stop the Kafka broker first" in running.stderr
        consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
        tps = [TopicPartition("moved", p) for p in range(2)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        assert consumer.beginning_offsets(tps) == {tps[0]: 40, tps[1]: 0}
        assert consumer.end_offsets(tps) == {tps[p]: ends[p] for p in range(2)}
        got = {}
        while len(got) < len(want):
            records = consumer.poll(2000)
            assert records, f"Kafka served {len(got)} of {len(want)} records"
            for batch in records.values():
                got.update({(r.partition, r.offset): (r.key, r.value, list(r.headers)) for r in batch})
        consumer.close()
        assert got == want

        run_tool("kafka-consumer-groups", "--bootstrap-server", kafka.bootstrap, "--group",
                 "resume-me", "--reset-offsets", "--from-file",
                 str(tmp_path / "offsets" / "resume-me.csv"), "--execute")
        group = KafkaConsumer("moved", bootstrap_servers=kafka.bootstrap, group_id="resume-me",
                              enable_auto_commit=False)
        first = {}
        while len(first) < 2:
            for tp, batch in group.poll(2000).items():
                first.setdefault(tp.partition, batch[0].offset)
        group.close()
        assert first == {0: 500, 1: 700}
    finally:
        kafka.stop()


def test_new_producers_of_every_client_append_to_an_exported_topic(kafka, tmp_path):
    """pylog's producer ids (0, 1, 2 ...) are in the exported batches; a freshly formatted
    Kafka cluster hands out the same ids. The export hands over no producer state, so a
    librdkafka and a Java idempotent producer, given ids 0 and 1 by Kafka, append cleanly."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition
    logs = str(tmp_path / "pylog")
    with pylog.open(logs) as store:
        store.create_topic("pids", 2, config={"segment.bytes": 1 << 16})
        for n in range(3):                       # producer ids 0, 1, 2, many sequences each
            producer = pylog.Producer(store, acks="all", enable_idempotence=True)
            for i in range(2000):
                producer.send("pids", value=b"pylog %d %d " % (n, i) + b"x" * 50, partition=i % 2)
            producer.close()
        assert all(set(store.log("pids", p).producer_state.producers) == {0, 1, 2}
                   for p in range(2))
        ends = {p: store.log("pids", p).log_end_offset for p in range(2)}
    done = export("--log-dirs", logs, "--topic", "pids", "--kafka-log-dir", str(kafka.log_dir))
    assert done.returncode == 0, done.stderr

    kafka.start(format=False)
    try:
        # Kafka hands its first ids, 0 and 1, to these two: pylog's producers 0 and 1 wrote
        # sequences up to 999 in both partitions.
        assert java("produce", kafka.bootstrap, "pids", "none", "300") == ["SENT 300"]
        failed, delivered = [], []

        def report(err, msg):
            (failed if err else delivered).append(err)
        librdkafka = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                               "linger.ms": 5})
        for i in range(400):
            librdkafka.produce("pids", b"librdkafka %d" % i, partition=i % 2, on_delivery=report)
        librdkafka.flush(60)
        consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
        tps = [TopicPartition("pids", p) for p in range(2)]
        total = sum(consumer.end_offsets(tps).values())
        consumer.close()
    finally:
        kafka.stop()
    assert failed == [] and len(delivered) == 400
    assert total == sum(ends.values()) + 700
    # The Java producer survives an out-of-sequence answer by bumping its epoch, but Kafka
    # logs the refused batch ("Error processing append operation ...
    # OutOfOrderSequenceException"): none here.
    assert "OutOfOrderSequence" not in kafka.output(), kafka.output()[-3000:]


WRITER = """
import sys
import pylog
try:
    store = pylog.open(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
with store:
    for p in (0, 1):
        store.log("locked", p).append_records([b"late"] * 100)
print("appended")
"""


def test_export_holds_the_store_lock_for_the_whole_copy(kafka, tmp_path, monkeypatch):
    """A writer that opens the store while the segments are copied is refused (its
    records would never be handed over); the end offsets reported are those of the copied
    files, and a change the lock cannot stop fails the export and removes what it copied."""
    logs = str(tmp_path / "pylog")
    with pylog.open(logs) as store:
        store.create_topic("locked", 2, config={"segment.bytes": 4096})
        for i in range(60):
            for p in (0, 1):
                store.log("locked", p).append_records([b"record %d" % i] * 10)
        assert len(store.log("locked", 0).segments) > 3
    targets = [kafka.log_dir / f"locked-{p}" for p in (0, 1)]
    real_copy = shutil.copy2
    during = []

    def copy_then(action):
        def copy(src, dst, **kw):
            real_copy(src, dst, **kw)
            if not during and os.path.dirname(dst) == str(targets[1]):   # partition 0 done
                during.append(action())
        return copy

    # A writer that ignores the lock (appending to a segment file itself) changes a
    # partition the copy has not reached: the copied end differs from the one read
    # under the lock, and the export fails, leaving Kafka's dirs empty.
    def rogue_append():
        reader = PartitionReader("locked", 1, os.path.join(logs, "locked-1"))
        end, last = reader.log_end_offset(), reader.segment_bases()[-1]
        with open(os.path.join(logs, "locked-1", f"{last:020d}.log"), "ab") as f:
            f.write(encode_batch([b"rogue"], None, 1000, base_offset=end))
    monkeypatch.setattr(shutil, "copy2", copy_then(rogue_append))
    with pytest.raises(ExportError, match="the store changed during the copy"):
        export_topic(logs, "locked", str(kafka.log_dir))
    assert all(os.listdir(t) == ["partition.metadata"] for t in targets)

    # A pylog writer opening the store during the copy is refused.
    ends = {p: PartitionReader("locked", p, os.path.join(logs, f"locked-{p}")).log_end_offset()
            for p in (0, 1)}
    during.clear()
    monkeypatch.setattr(shutil, "copy2", copy_then(lambda: subprocess.run(
        [sys.executable, "-c", WRITER, logs], capture_output=True, text=True, timeout=120)))
    report = export_topic(logs, "locked", str(kafka.log_dir))
    (writer,) = during
    assert writer.returncode == 3 and "LogDirLockedError" in writer.stdout, writer.stdout
    copied = {p: PartitionReader("locked", p, str(targets[p])).log_end_offset() for p in (0, 1)}
    assert report.end_offsets == copied == ends
