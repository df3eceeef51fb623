"""A real Apache Kafka broker (KRaft, single node) beside pylog: segment files Kafka wrote
open in pylog and read byte-identical to what Kafka serves."""

from __future__ import annotations

import shutil
import time

import pytest

import pylog

from .support import KafkaBroker


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
