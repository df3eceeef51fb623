"""offsets.retention.minutes (KIP-211) as Kafka's coordinator enforces it, at a broker
whose store runs on a clock the test moves: an Empty group's offsets go once the
retention has passed since it became Empty (and the group with them); a group that never
joined loses each offset the retention after its commit; a Stable consumer group keeps
the offsets of the topics it subscribes to and loses the others'."""

from __future__ import annotations

import time

import pylog

from .group_client import RawMember


def test_offsets_expire_as_kafka_expires_them(tmp_path):
    skew = [0]
    store = pylog.open(str(tmp_path), background=False,
                       clock=lambda: int(time.time() * 1000) + skew[0])
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          offsets_retention_minutes=1,
                          offsets_retention_check_interval_ms=1000).start()
    try:
        store.create_topic("read", 1)
        store.create_topic("dropped", 1)
        for group in ("simple", "left", "stable"):
            store.commit_offsets(group, {("read", 0): 1, ("dropped", 0): 2})
        with RawMember(broker.bootstrap_servers, "left", topics=("read",)) as member:
            assert member.join_and_sync() == 0
            assert member.leave() == (0, 0)                  # "left" is Empty from now
        stable = RawMember(broker.bootstrap_servers, "stable", topics=("read",))
        with stable:
            assert stable.join_and_sync() == 0
            skew[0] = 50_000
            store.run_background_tasks()
            for group in ("simple", "left", "stable"):       # under a minute: all kept
                assert store.committed(group, "read", 0) == 1
                assert store.committed(group, "dropped", 0) == 2
            skew[0] = 61_000
            store.run_background_tasks()
            assert stable.heartbeat() == 0                   # still a Stable member
            assert store.coordinator.committed_offsets("simple") == {}
            assert store.coordinator.committed_offsets("left") == {}
            assert "left" not in {g.group_id for g in store.coordinator.classic_groups()}
            assert store.committed("stable", "read", 0) == 1
            assert store.committed("stable", "dropped", 0) is None
    finally:
        broker.shutdown()
        store.close()
    # The tombstones are in __consumer_offsets: gone after a restart too.
    with pylog.open(str(tmp_path)) as reopened:
        assert reopened.committed("simple", "read", 0) is None
        assert reopened.committed("stable", "read", 0) == 1


def test_consumer_protocol_group_keeps_offsets_of_subscribed_topics(tmp_path):
    """A KIP-848 group (Kafka's ConsumerGroup expires by commit time): the offsets of
    topics its members subscribe to stay, the others' expire; once empty with no offsets
    left, the group goes."""
    from pylog.protocol import messages as m
    from pylog.protocol.client import ProtocolClient
    skew = [0]
    store = pylog.open(str(tmp_path), background=False,
                       clock=lambda: int(time.time() * 1000) + skew[0])
    broker = pylog.Broker(store, listen="127.0.0.1:0", offsets_retention_minutes=1,
                          offsets_retention_check_interval_ms=1000).start()
    try:
        store.create_topic("read", 1)
        store.create_topic("dropped", 1)
        store.commit_offsets("kip848", {("read", 0): 1, ("dropped", 0): 2})
        with ProtocolClient(broker.bootstrap_servers) as client:
            def beat(epoch):
                return client.request(68, m.ConsumerGroupHeartbeatRequest(
                    group_id="kip848", member_id="m" * 22, member_epoch=epoch,
                    rebalance_timeout_ms=10000 if epoch == 0 else -1,
                    subscribed_topic_names=["read"] if epoch == 0 else None,
                    topic_partitions=[] if epoch == 0 else None), 1)
            assert beat(0).error_code == 0
            skew[0] = 61_000
            store.run_background_tasks()
            assert store.committed("kip848", "read", 0) == 1
            assert store.committed("kip848", "dropped", 0) is None
            assert beat(-1).error_code == 0                  # empty now
            skew[0] = 122_000
            store.run_background_tasks()
            assert store.coordinator.committed_offsets("kip848") == {}
            assert store.coordinator.consumer_group("kip848") is None
    finally:
        broker.shutdown()
        store.close()
