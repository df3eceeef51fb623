"""Kafka's Java consumer with ``group.protocol=consumer`` (KIP-848) across kill -9 of
`pylog serve`: the group's membership is in __consumer_offsets (Kafka's records), so
after the restart the two members go on with their partitions, no rebalance (no
partition assigned, revoked or lost again) and the same member epochs, and they consume
and commit what is produced after it."""

from __future__ import annotations

import time

import pytest

import pylog
from broker.process import ServeProcess
from broker.test_group_persistence import _free_port, _kip848_members, _produce

from .test_java_consumer_protocol import Member, until

pytestmark = pytest.mark.xdist_group("java-clients")


class _Address:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap_servers = bootstrap


def test_java_members_go_on_without_a_rebalance_after_kill_9(tmp_path):
    pytest.importorskip("confluent_kafka")
    path, topic, group = str(tmp_path / "store"), "kept", "java-restart"
    with pylog.open(path) as store:
        store.create_topic(topic, 4)
    listen = f"127.0.0.1:{_free_port()}"
    configs = ("group.consumer.heartbeat.interval.ms=500", "group.consumer.session.timeout.ms=180000")
    broker = ServeProcess(path, *configs, listen=listen)
    members: list[Member] = []
    try:
        sent = _produce(broker.bootstrap, topic, "before", 4, 25)
        members += [Member(_Address(broker.bootstrap), topic, group) for _ in range(2)]
        until(lambda: sorted(len(m.owned()) for m in members) == [2, 2], "2 and 2", members)
        before = None

        def stable():
            nonlocal before
            before = _kip848_members(broker.bootstrap, group)
            return before and len(before) == 2 and len({e for _, e, _ in before}) == 1

        until(stable, "a stable group", members)

        def consumed() -> int:
            return sum(max([int(line.split()[1]) for line in m.lines if line.startswith("CONSUMED")],
                           default=0) for m in members)

        until(lambda: consumed() == len(sent), "every record", members)
        events = [m.events() for m in members]
        broker.kill()
        broker.stop()
        broker = ServeProcess(path, *configs, listen=listen)
        after = _produce(broker.bootstrap, topic, "after", 4, 10)
        until(lambda: consumed() == len(sent) + len(after), "the records after the restart", members)
        assert _kip848_members(broker.bootstrap, group) == before
        time.sleep(2.0)                 # a window of more heartbeats: still no rebalance
        assert [m.events() for m in members] == events
        assert _kip848_members(broker.bootstrap, group) == before
        assert not [e for m in members for e in m.errors if "Exception" in e]
    finally:
        for m in members:
            m.close()
        broker.stop()
