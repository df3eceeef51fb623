"""A pylog topic handed to a real Apache Kafka broker, unconverted (`pylog export-to-kafka`):
Kafka loads pylog's segments and serves every record at its original offset, and a
consumer group resumes at the offsets it committed in pylog."""

from __future__ import annotations

import random
import subprocess
import sys

import pylog

from .support import KafkaBroker, run_tool


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli", "export-to-kafka", *args],
                          capture_output=True, text=True, timeout=120)


def test_export_a_topic_to_kafka_and_resume_a_group(tmp_path):
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

    (tmp_path / "kafka").mkdir()
    kafka = KafkaBroker(tmp_path / "kafka")
    kafka.start()
    try:
        run_tool("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--create", "--topic",
                 "moved", "--partitions", "2", "--replication-factor", "1")
    finally:
        kafka.stop()

    with pylog.open(logs):                      # open: refused, the dir's lock is held
        refused = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir", str(kafka.log_dir))
    assert refused.returncode == 2 and "is open in another process" in refused.stderr
    done = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir", str(kafka.log_dir),
                  "--offsets-dir", str(tmp_path / "offsets"))
    assert done.returncode == 0, done.stderr
    again = export("--log-dirs", logs, "--topic", "moved", "--kafka-log-dir", str(kafka.log_dir))
    assert again.returncode == 2 and "already holds records" in again.stderr

    kafka.start(format=False)
    try:
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
