"""Kafka's kafka-log-dirs.sh and kafka-reassign-partitions.sh (with ``log_dirs``) against
a pylog broker with two log dirs: describe them, move a partition, verify the move."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

import pylog

from .support import run_tool


@pytest.fixture
def jbod_broker(tmp_path):
    dirs = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    store = pylog.open(dirs, log_segment_bytes=64 * 1024)
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    try:
        yield store, broker, dirs
    finally:
        broker.shutdown()
        store.close()


def log_dirs_json(bootstrap: str, *extra: str) -> dict:
    out = run_tool("kafka-log-dirs", "--bootstrap-server", bootstrap, "--describe", *extra).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def test_kafka_log_dirs_describe(jbod_broker):
    store, broker, dirs = jbod_broker
    store.create_topic("disks", 4)
    for p in range(4):
        store.log("disks", p).append_records([b"x" * 100] * (p + 1))
    described = log_dirs_json(broker.bootstrap_servers)
    [only] = described["brokers"]
    assert only["broker"] == int(store.config["node.id"])
    by_dir = {d["logDir"]: d for d in only["logDirs"]}
    assert sorted(by_dir) == sorted(dirs)
    assert all(d["error"] is None for d in by_dir.values())
    partitions = {(d["logDir"], p["partition"]): (p["size"], p["offsetLag"], p["isFuture"])
                  for d in by_dir.values() for p in d["partitions"]}
    assert partitions == {(store.log_dir_of("disks", p), f"disks-{p}"):
                          (store.log("disks", p).size, 0, False) for p in range(4)}
    some = log_dirs_json(broker.bootstrap_servers, "--topic-list", "disks")
    assert sum(len(d["partitions"]) for d in some["brokers"][0]["logDirs"]) == 4


def test_kafka_reassign_partitions_moves_a_partition_between_log_dirs(jbod_broker, tmp_path):
    store, broker, dirs = jbod_broker
    b = broker.bootstrap_servers
    store.create_topic("moving", 2)
    lg = store.log("moving", 0)
    for i in range(20):
        lg.append_records([b"r%d-%d" % (i, j) for j in range(200)])
    before = [r.value for r in _records(lg)]
    source = store.log_dir_of("moving", 0)
    dest = next(d for d in dirs if d != source)
    node = int(store.config["node.id"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moving", "partition": 0, "replicas": [node], "log_dirs": [dest]}]}))
    out = run_tool("kafka-reassign-partitions", "--bootstrap-server", b,
                   "--reassignment-json-file", str(plan), "--execute").stdout
    assert "Successfully started moving log directory to " + dest in out
    deadline = time.monotonic() + 60
    while True:
        verified = run_tool("kafka-reassign-partitions", "--bootstrap-server", b,
                            "--reassignment-json-file", str(plan), "--verify").stdout
        if f"Reassignment of replica moving-0-{node} completed successfully" in verified:
            break
        assert "is still in progress" in verified or "is being moved" in verified, verified
        assert time.monotonic() < deadline, verified
        time.sleep(0.2)
    assert store.log_dir_of("moving", 0) == dest
    assert [r.value for r in _records(store.log("moving", 0))] == before
    described = log_dirs_json(b)
    assert {(d["logDir"], p["partition"]) for d in described["brokers"][0]["logDirs"]
            for p in d["partitions"] if p["partition"] == "moving-0"} == {(dest, "moving-0")}
    # A replica list other than this broker is refused with Kafka's error.
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moving", "partition": 1, "replicas": [node + 1]}]}))
    refused = run_tool("kafka-reassign-partitions", "--bootstrap-server", b,
                       "--reassignment-json-file", str(plan), "--execute", check=False)
    assert refused.returncode != 0
    assert "Unknown broker id" in refused.stdout or "aren't registered" in refused.stdout \
        or "not registered" in refused.stdout, refused.stdout[-2000:]


def _records(lg):
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        batch = list(lg.read(offset, 1 << 20).records())
        yield from batch
        offset = batch[-1].offset + 1


@pytest.fixture
def two_disks(tmp_path):
    """Two loop-mounted ext4 file systems (root only), as two disks of a JBOD broker."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("mkfs.ext4", "mount", "umount")):
        pytest.skip("needs root, mkfs.ext4 and mount to make loop-mounted file systems")
    mounts = []
    try:
        for i in range(2):
            image, mnt = tmp_path / f"disk{i}.img", tmp_path / f"mnt{i}"
            mnt.mkdir()
            with open(image, "wb") as f:
                f.truncate(128 << 20)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True,
                           capture_output=True)
            done = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                pytest.skip(f"cannot mount a loop device here: {done.stderr.strip()}")
            mounts.append(mnt)
        yield [str(m / "pylog") for m in mounts]
    finally:
        for mnt in mounts:
            if subprocess.run(["umount", str(mnt)], capture_output=True,
                              check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def test_reassign_between_two_file_systems_under_produce_and_fetch(two_disks, tmp_path):
    """kafka-reassign-partitions.sh moves a partition from one loop-mounted file system to
    the other while confluent-kafka produces to it and consumes it: every record reaches
    the consumer once, in order."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with pylog.open(two_disks, log_segment_bytes=1 << 20) as store, \
            pylog.Broker(store, listen="127.0.0.1:0") as broker:
        b = broker.bootstrap_servers
        store.create_topic("jbod", 1)
        lg = store.log("jbod", 0)
        for i in range(30):                                  # ~30 MiB before the move
            lg.append_records([b"%d" % (i * 1000 + j) + b"." * 1000 for j in range(1000)])
        first = lg.log_end_offset
        source = store.log_dir_of("jbod", 0)
        dest = next(d for d in two_disks if d != source)
        total = first + 20_000
        failures, seen = [], []
        producer = confluent_kafka.Producer({"bootstrap.servers": b, "enable.idempotence": True,
                                             "linger.ms": 2})
        consumer = confluent_kafka.Consumer({"bootstrap.servers": b, "group.id": "jbod",
                                             "enable.auto.commit": False})
        consumer.assign([confluent_kafka.TopicPartition("jbod", 0, 0)])

        def produce():
            for i in range(first, total):
                while True:
                    try:
                        producer.produce("jbod", value=b"%d" % i + b"." * 1000, partition=0,
                                         on_delivery=lambda e, _m: e and failures.append(e))
                        break
                    except BufferError:
                        producer.poll(0.05)
                if i % 200 == 0:
                    producer.poll(0)
                    time.sleep(0.01)
            producer.flush(60)

        def consume():
            deadline = time.monotonic() + 180
            while len(seen) < total and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    seen.append(msg.value())
        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "jbod", "partition": 0, "replicas": [broker.node_id], "log_dirs": [dest]}]}))
        try:
            run_tool("kafka-reassign-partitions", "--bootstrap-server", b,
                     "--reassignment-json-file", str(plan), "--execute")
            deadline = time.monotonic() + 120
            while store.log_dir_of("jbod", 0) != dest:
                assert time.monotonic() < deadline, "the move did not finish"
                time.sleep(0.05)
            verified = run_tool("kafka-reassign-partitions", "--bootstrap-server", b,
                                "--reassignment-json-file", str(plan), "--verify").stdout
            assert f"Reassignment of replica jbod-0-{broker.node_id} completed successfully" \
                in verified
        finally:
            for t in threads:
                t.join(240)
            consumer.close()
        assert not failures, failures[:3]
        assert [v.split(b".", 1)[0] for v in seen] == [b"%d" % i for i in range(total)]
        assert store.log("jbod", 0).log_end_offset == total
        assert not [e for e in os.listdir(source) if e.startswith("jbod-0")
                    and not e.endswith("-delete")]
