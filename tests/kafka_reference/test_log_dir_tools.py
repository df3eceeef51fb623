"""Kafka's kafka-log-dirs.sh and kafka-reassign-partitions.sh (with ``log_dirs``) against
a pylog broker with two log dirs: describe them, move a partition, verify the move."""

from __future__ import annotations

import json
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
