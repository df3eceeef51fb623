"""A real Apache Kafka broker (KRaft, single node) beside pylog: segment files Kafka wrote
open in pylog and read byte-identical to what Kafka serves; reading Kafka's dirs (with
console-consumer --log-dirs or a pylog.Log) changes nothing, and reaches the end of a
partition that ends in transaction markers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from dir_listing import changes, listing

import pylog


def test_partition_dirs_written_by_kafka_open_in_pylog(running_kafka, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=running_kafka.bootstrap)
    admin.create_topics([NewTopic("from-kafka", 1, 1)])
    admin.close()
    now = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=running_kafka.bootstrap, linger_ms=20)
    for i in range(300):
        producer.send("from-kafka", key=b"k%d" % (i % 7), value=b"value-%d" % i, partition=0,
                      headers=[("n", b"%d" % i)], timestamp_ms=now + i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=running_kafka.bootstrap)
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
    running_kafka.stop()                                  # a clean shutdown: segments complete
    before = _files(running_kafka.log_dir)
    # Kafka's own partition dir: a Log that only reads leaves every file (and mtime) of
    # Kafka's log dir as it was, and adds none (no .lock, no pylog-log-state).
    with pylog.Log(str(running_kafka.log_dir / "from-kafka-0")) as log:
        got = [(r.offset, r.timestamp, r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
               for r in log.read(0, 1 << 30).records()]
        assert log.offset_for_timestamp(now + 150).offset == 150
        assert changes(before, _files(running_kafka.log_dir)) == []
    assert got == served
    assert changes(before, _files(running_kafka.log_dir)) == []


def _files(root) -> dict[str, tuple]:
    """Every file and directory under `root`: inode, size, mtime and bytes' SHA-256."""
    return listing(root)


def test_reading_a_kafka_partition_that_ends_in_transaction_markers(running_kafka, tmp_path):
    """A transactional producer's partition ends in a commit marker (a control batch).
    `pylog console-consumer --log-dirs` on Kafka's own log dir prints every record and
    exits at the end, and a pylog.Log opened there to read and closed, changing no byte
    and no mtime and adding no file; a pylog.Log that writes (a roll) on a copy writes
    Kafka's producer snapshot back unchanged (the coordinator epoch of the transaction
    included)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=running_kafka.bootstrap)
    admin.create_topics([NewTopic("txn", 1, 1)])
    admin.close()
    # A Log (a writer) is refused a partition of a running Kafka broker: Kafka's lock is a
    # POSIX record lock, which the flock of pylog's own dirs does not see.
    live = running_kafka.log_dir / "txn-0"
    with pytest.raises(pylog.errors.LogDirLockedError, match="running Kafka broker"):
        pylog.Log(str(live))
    assert not (live / ".lock").exists() and not (live / "pylog-log-state").exists()
    producer = Producer({"bootstrap.servers": running_kafka.bootstrap, "transactional.id": "pylog-txn"})
    producer.init_transactions(30)
    values = []
    for t in range(2):
        producer.begin_transaction()
        for i in range(20):
            values.append(b"txn %d record %d" % (t, i))
            producer.produce("txn", values[-1], partition=0)
        producer.commit_transaction(30)
    running_kafka.stop()                               # its producer snapshot at the log end
    before = _files(running_kafka.log_dir)
    snapshots = [n for n in before if n.startswith("txn-0/") and n.endswith(".snapshot")]
    assert snapshots

    run = subprocess.run([sys.executable, "-m", "pylog.cli", "console-consumer", "--log-dirs",
                          str(running_kafka.log_dir), "--topic", "txn", "--from-beginning",
                          "--timeout-ms", "1000"], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == values
    assert changes(before, _files(running_kafka.log_dir)) == []

    def read(log):
        batches = log.read(0, 1 << 20).batches()
        assert [b.control_type for b in batches if b.is_control] == ["commit", "commit"]
        assert [r.value for b in batches if not b.is_control for r in b.records()] == values
        return batches[-1].last_offset + 1

    with pylog.Log(str(running_kafka.log_dir / "txn-0")) as log:
        assert read(log) == log.log_end_offset
    assert changes(before, _files(running_kafka.log_dir)) == []

    copy = tmp_path / "txn-0"
    shutil.copytree(running_kafka.log_dir / "txn-0", copy)
    with pylog.Log(str(copy)) as log:
        read(log)
        log.roll()                            # a write: a snapshot at the log end, as Kafka's
    names = {os.path.basename(n) for n in snapshots}
    assert {n for n in os.listdir(copy) if n.endswith(".snapshot")} >= names
    for name in snapshots:
        assert (copy / os.path.basename(name)).read_bytes() == (running_kafka.log_dir / name).read_bytes()


def pylog_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_running_kafkas_dir_is_refused_and_every_reader_leaves_a_stopped_one_as_it_was(
        running_kafka, tmp_path):
    """While Kafka runs, a store (pylog.open, a writer) is refused its log dir before it
    writes a byte (Kafka's lock is a POSIX record lock, which pylog's flock does not see)
    and a reader reads it safely. Once Kafka stopped, every reader (console-consumer,
    dump-log, verify, topics, a pylog.Log on each partition) leaves every file, inode and
    mtime of the dir as it was. A store opened on a copy hands out producer ids above
    every producer id Kafka's controller allocated to the logs' batches."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=running_kafka.bootstrap)
    admin.create_topics([NewTopic("idem", 2, 1)])
    admin.close()
    producer = Producer({"bootstrap.servers": running_kafka.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    values = [b"idempotent %d" % i for i in range(200)]
    for i, value in enumerate(values):
        producer.produce("idem", value, partition=i % 2)
    assert producer.flush(30) == 0

    lock = running_kafka.log_dir / ".lock"
    lock_bytes = lock.read_bytes()
    with pytest.raises(pylog.errors.LogDirLockedError, match="held by a running Kafka broker"):
        pylog.open(str(running_kafka.log_dir), node_id=1)
    assert lock.read_bytes() == lock_bytes
    assert not [n for n in os.listdir(running_kafka.log_dir) if n.startswith("pylog")]
    run = pylog_cli("console-consumer", "--log-dirs", str(running_kafka.log_dir), "--topic", "idem",
                    "--partition", "0", "--from-beginning", "--timeout-ms", "1000")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [v.decode() for v in values[0::2]]

    running_kafka.stop()
    before = _files(running_kafka.log_dir)
    partition = running_kafka.log_dir / "idem-1"
    segment_files = sorted(str(partition / n) for n in os.listdir(partition)
                           if n.endswith((".log", ".index", ".timeindex", ".snapshot")))
    for args in (["console-consumer", "--log-dirs", str(running_kafka.log_dir), "--topic", "idem",
                  "--from-beginning", "--timeout-ms", "1000"],
                 ["dump-log", "--files", ",".join(segment_files), "--print-data-log",
                  "--index-sanity-check"],
                 ["verify", "--log-dirs", str(running_kafka.log_dir)],
                 ["topics", "--log-dirs", str(running_kafka.log_dir), "--describe"]):
        run = pylog_cli(*args)
        assert run.returncode == 0, (args, run.stdout, run.stderr)
        assert changes(before, _files(running_kafka.log_dir)) == [], args
    pids = set()
    for name in ("idem-0", "idem-1", "__consumer_offsets-0", "txn-0"):
        if (running_kafka.log_dir / name).is_dir():
            with pylog.Log(str(running_kafka.log_dir / name)) as log:
                pids |= {b.producer_id for b in log.read(0, 1 << 30).batches()}
    assert changes(before, _files(running_kafka.log_dir)) == []
    pids.discard(-1)
    assert pids

    copy = tmp_path / "kafka-logs"
    shutil.copytree(running_kafka.log_dir, copy)
    with pylog.open(str(copy), node_id=1) as store:
        assert [r.value for r in store.log("idem", 1).read(0, 1 << 30).records()] == values[1::2]
        fresh = store.init_producer_id()[0]
        assert fresh > max(pids), (fresh, pids)
