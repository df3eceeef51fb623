"""kill -9 of `pylog serve` while it moves a partition between log dirs under a real
producer (confluent-kafka, acks=all, idempotent): after the restart every acknowledged
record is there once, at its offset, and the partition is in exactly one log dir. (Each
step of the move, deterministically: tests/storage/test_log_dir_moves.py.)"""

from __future__ import annotations

import os
import threading
import time

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess


def test_kill_9_of_the_broker_during_a_move_under_produce(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    dirs = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    with pylog.open(dirs, log_segment_bytes=8 << 20) as store:       # 96 MiB to copy
        store.create_topic("moving", 1)
        source = store.log_dir_of("moving", 0)
        lg = store.log("moving", 0)
        for i in range(96):
            lg.append_records([b"%d" % (i * 1000 + j) + b"." * 1000 for j in range(1000)])
        prefilled = lg.log_end_offset
    dest = next(d for d in dirs if d != source)
    broker = ServeProcess(",".join(dirs))
    acked: dict[int, bytes] = {}
    stop = threading.Event()
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 1,
                                         "message.timeout.ms": 5000})

    def delivered(error, msg):
        if error is None:
            acked[msg.offset()] = msg.value()

    def produce():
        i = 0
        while not stop.is_set():
            try:
                producer.produce("moving", value=b"p%d" % i, partition=0, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001)
    writer = threading.Thread(target=produce)
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 200:
            assert time.monotonic() < deadline, "no produce acknowledged"
            time.sleep(0.01)
        with ProtocolClient(broker.bootstrap) as client:
            resp = client.request(34, m.AlterReplicaLogDirsRequest(dirs=[
                m.AlterReplicaLogDirsRequestAlterReplicaLogDir(path=dest, topics=[
                    m.AlterReplicaLogDirsRequestAlterReplicaLogDirTopic(name="moving",
                                                                        partitions=[0])])]))
            assert resp.results[0].partitions[0].error_code == 0
            # Kill it once the future replica has some of the data: mid-copy.
            while True:
                assert time.monotonic() < deadline, "the move never showed"
                described = client.request(35, m.DescribeLogDirsRequest(topics=None))
                future = [p for r in described.results if r.log_dir == dest for t in r.topics
                          for p in t.partitions if p.is_future_key]
                if future and future[0].partition_size > 0:
                    break
        broker.kill()
    finally:
        stop.set()
        writer.join()
        producer.flush(10)          # what was in flight fails: the broker is gone
        if broker.alive():
            broker.kill()
        broker.stop()               # (its pipes)
    assert "Traceback" not in broker.stderr, broker.stderr[-3000:]
    assert acked
    with pylog.open(dirs) as store:
        # The move cut mid-copy resumes from its copy at the open and completes.
        deadline = time.monotonic() + 120
        while store.moving("moving", 0) is not None:
            assert time.monotonic() < deadline, "the resumed move did not complete"
            time.sleep(0.05)
        assert store.log_dir_of("moving", 0) in dirs
        lg = store.log("moving", 0)
        for offset, value in sorted(acked.items()):
            [record] = [r for r in lg.read(offset, 1 << 16).records() if r.offset == offset]
            assert record.value == value
        values = []
        offset = prefilled
        while offset < lg.log_end_offset:
            batch = list(lg.read(offset, 1 << 20).records())
            values += [r.value for r in batch]
            offset = batch[-1].offset + 1
        assert len(set(values)) == len(values)                  # nothing written twice
        names = sorted(e for d in dirs for e in os.listdir(d) if e.startswith("moving-0")
                       and not e.endswith("-delete"))
        assert names == ["moving-0"]                            # one dir, no future left
