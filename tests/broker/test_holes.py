"""A hole below the log end, as real Kafka clients see it (issue 42, item 9).

A segment .log removed after a clean shutdown: the broker serves every record up to
the hole, then answers CORRUPT_MESSAGE at its first offset (never the records after
it, as if nothing were missing); a consumer that seeks past the hole reads on."""

from __future__ import annotations

import os
import time

import pytest

import pylog
from pylog import records


@pytest.fixture
def broken(tmp_path):
    """A served store whose topic h lost the .log of its 4th segment: offsets 150..199."""
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("h", 1, {"segment.bytes": 1000})
        log = store.log("h", 0)
        for i in range(0, 300, 10):
            log.append(records.encode_batch([b"v%03d" % j for j in range(i, i + 10)]))
        assert [s.base_offset for s in log.segments][3:5] == [150, 200]
    os.remove(os.path.join(tmp_path, "h-0", f"{150:020d}.log"))
    store = pylog.open(str(tmp_path))
    assert store.log("h", 0).recovery.missing_offsets == ((150, 200),)
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.shutdown()
        store.close()


def test_confluent_kafka_sees_the_hole_and_reads_on_after_a_seek(broken):
    """Today: offsets 150..199 are skipped without a word (Kafka's fetch does the same)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": broken, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("h", 0, 0)])
        got, errors = [], []
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                (errors if m.error() else got).append(m.error() or m.offset())
        assert got == list(range(150))
        # CORRUPT_MESSAGE (librdkafka's name for code 2: INVALID_MSG) at the hole's start
        assert errors and "offset 150" in errors[0].str() and errors[0].code() == 2
        consumer.seek(TopicPartition("h", 0, 200))
        while len(got) < 250 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.offset())
        assert got == list(range(150)) + list(range(200, 300))
    finally:
        consumer.close()


def test_kafka_python_raises_at_the_hole(broken):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import CorruptRecordError
    tp = TopicPartition("h", 0)
    consumer = KafkaConsumer(bootstrap_servers=broken, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        with pytest.raises(CorruptRecordError):
            for m in consumer:
                got.append(m.offset)
        assert got == list(range(150))
        consumer.seek(tp, 200)
        assert [m.offset for _, ms in consumer.poll(10_000, max_records=500).items()
                for m in ms][:1] == [200]
    finally:
        consumer.close()
