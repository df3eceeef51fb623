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
