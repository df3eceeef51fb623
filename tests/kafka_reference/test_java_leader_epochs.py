"""Kafka's Java consumer validating its position (KIP-320) at pylog's broker: it commits
offsets with the leader epoch of the last record it saw, and after the broker restarts a
new consumer of the group resumes from them only once OffsetForLeaderEpoch says that
epoch ends at or after them: it goes on where it stopped, no reset, no record twice."""

from __future__ import annotations

import pylog

from .test_java_clients import java


def test_java_consumer_validates_its_position_after_a_restart(tmp_path):
    root = str(tmp_path)
    store = pylog.open(root)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0).start()
    try:
        store.create_topic("epochs", 2)
        for p in range(2):
            store.log("epochs", p).append_records([b"before %d %d" % (p, i) for i in range(20)])
        lines = java("consume", broker.bootstrap_servers, "epochs", "validating", "-", "40")
        assert lines[-1] == "DONE 40"
    finally:
        broker.shutdown()
        store.close()
    store = pylog.open(root)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0).start()
    try:
        for p in range(2):
            store.log("epochs", p).append_records([b"after %d %d" % (p, i) for i in range(10)])
        lines = java("consume", broker.bootstrap_servers, "epochs", "validating", "-", "20")
        assert lines[-1] == "DONE 20"
        got = sorted((int(line.split("\t")[0]), int(line.split("\t")[1]), line.split("\t")[4])
                     for line in lines[:-2])
        assert got == sorted((p, 20 + i, "after %d %d" % (p, i)) for p in range(2) for i in range(10))
        assert broker.stats["requests.OffsetForLeaderEpoch"] >= 1     # it did validate
    finally:
        broker.shutdown()
        store.close()
