"""Group membership survives kill -9 of `pylog serve`, as Kafka's does (its records in
__consumer_offsets): confluent-kafka members of the consumer protocol (KIP-848) and of the
classic protocol go on after the broker is killed between their heartbeats and restarted,
with no rebalance (no partition revoked, lost or assigned again; the same member epochs
and generation), and the group's describe shows them; a member that never comes back is
fenced when its session, counted from the restart, lapses, and stays gone."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess

confluent_kafka = pytest.importorskip("confluent_kafka")

HEARTBEAT, DESCRIBE_KIP848, DESCRIBE_GROUPS = 68, 69, 15
UNKNOWN_MEMBER_ID = 25


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(condition, what: str, timeout: float = 90, failures=()):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        failed = [f for f in failures() if f is not None] if failures else []
        assert not failed, f"a member failed: {failed[0]!r}"
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout}s: {what}")
        time.sleep(0.05)


class Consumer:
    """A confluent-kafka consumer polling in its own thread, recording its rebalance
    callbacks and what it consumed (by partition)."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str) -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "reconnect.backoff.max.ms": 200, "retry.backoff.max.ms": 200}
        if protocol == "classic":
            # A session long enough for a restart on a loaded machine (librdkafka's classic
            # member gives up its id when its session passes with no answer).
            config.update({"session.timeout.ms": 180000, "heartbeat.interval.ms": 300,
                           "partition.assignment.strategy": "range"})
        self.consumer = confluent_kafka.Consumer(config)
        self.events: list[tuple[str, set[int]]] = []
        self.values: list[tuple[int, bytes]] = []
        self.failure: BaseException | None = None
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on("ASSIGNED"),
                                on_revoke=self._on("REVOKED"), on_lost=self._on("LOST"))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on(self, what: str):
        return lambda consumer, partitions: self.events.append(
            (what, {p.partition for p in partitions}))

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None or msg.error():
                    continue        # (transport errors while the broker is down)
                self.values.append((msg.partition(), msg.value()))
            self.consumer.close()
        except BaseException as exc:            # noqa: BLE001 - reported by the test
            self.failure = exc

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for what, parts in list(self.events):
            owned = owned | parts if what == "ASSIGNED" else owned - parts
        return owned

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def _produce(bootstrap: str, topic: str, prefix: str, partitions: int, n: int) -> set[bytes]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    sent = set()
    for p in range(partitions):
        for i in range(n):
            value = b"%s-%d-%d" % (prefix.encode(), p, i)
            producer.produce(topic, value, partition=p)
            sent.add(value)
    assert producer.flush(60) == 0
    return sent


def _kip848_members(bootstrap: str, group: str) -> list[tuple[str, int, list[int]]] | None:
    """ConsumerGroupDescribe: (member id, member epoch, partitions) sorted, or None."""
    client = ProtocolClient(bootstrap, client_id="describe")
    try:
        g = client.request(DESCRIBE_KIP848, m.ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]
    finally:
        client.close()
    if g.error_code:
        return None
    return sorted((x.member_id, x.member_epoch,
                   sorted(p for t in x.assignment.topic_partitions for p in t.partitions))
                  for x in g.members)


def _classic_group(bootstrap: str, group: str) -> tuple[str, list[str]]:
    """DescribeGroups: (state, member ids sorted)."""
    client = ProtocolClient(bootstrap, client_id="describe")
    try:
        g = client.request(DESCRIBE_GROUPS, m.DescribeGroupsRequest(groups=[group]), 5).groups[0]
    finally:
        client.close()
    return g.group_state, sorted(x.member_id for x in g.members)


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_members_go_on_without_a_rebalance_after_kill_9(tmp_path, protocol):
    if protocol == "consumer" and confluent_kafka.libversion()[1] < 0x020C0000:
        pytest.skip("librdkafka predates group.protocol=consumer (2.12)")
    path, topic, group = str(tmp_path / "store"), "kept", f"g-{uuid.uuid4().hex[:6]}"
    with pylog.open(path) as store:
        store.create_topic(topic, 4)
    listen = f"127.0.0.1:{_free_port()}"
    configs = ("group.consumer.heartbeat.interval.ms=300", "group.consumer.session.timeout.ms=180000",
               "group.initial.rebalance.delay.ms=0")
    broker = ServeProcess(path, *configs, listen=listen)
    members: list[Consumer] = []
    failures = lambda: [c.failure for c in members]     # noqa: E731
    try:
        sent = _produce(broker.bootstrap, topic, "before", 4, 25)
        members += [Consumer(broker.bootstrap, topic, group, protocol) for _ in range(2)]
        until(lambda: sorted(len(c.owned()) for c in members) == [2, 2]
              and len({v for c in members for _, v in c.values}) == len(sent),
              "2 and 2 partitions, every record", failures=failures)
        if protocol == "consumer":
            before = until(lambda: (d := _kip848_members(broker.bootstrap, group)) and len(d) == 2
                           and len({e for _, e, _ in d}) == 1 and d, "a stable group")
        else:
            before = until(lambda: (d := _classic_group(broker.bootstrap, group))[0] == "Stable"
                           and len(d[1]) == 2 and d, "a stable group")
        events = [list(c.events) for c in members]
        owned = [c.owned() for c in members]
        broker.kill()
        broker.stop()
        broker = ServeProcess(path, *configs, listen=listen)
        after = _produce(broker.bootstrap, topic, "after", 4, 10)
        # Both go on fetching their own partitions, with no rebalance.
        until(lambda: after <= {v for c in members for _, v in c.values},
              "every record produced after the restart", failures=failures)
        if protocol == "consumer":
            assert _kip848_members(broker.bootstrap, group) == before
        else:
            assert _classic_group(broker.bootstrap, group) == before
        time.sleep(1.0)                 # a window of more heartbeats: still no rebalance
        assert [c.events for c in members] == events
        for c, parts in zip(members, owned):
            assert {p for p, v in c.values if v.startswith(b"after")} <= parts
        if protocol == "consumer":
            assert _kip848_members(broker.bootstrap, group) == before
        else:
            assert _classic_group(broker.bootstrap, group) == before
    finally:
        for c in members:
            c.close()
        broker.stop()


def _join(bootstrap: str, group: str, topic: str, topic_id: bytes) -> tuple[ProtocolClient, str, int]:
    client = ProtocolClient(bootstrap, client_id="raw-848")
    member_id = uuid.uuid4().hex[:22]
    r = client.request(HEARTBEAT, m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=10_000,
        subscribed_topic_names=[topic], topic_partitions=[]), 1)
    assert r.error_code == 0 and r.assignment is not None
    return client, member_id, r.member_epoch


def test_a_member_that_never_comes_back_expires_after_the_restart(tmp_path):
    """Restored members' sessions count from the restart: one that never heartbeats again
    is fenced (its partitions freed, the group empty) and stays gone across another kill."""
    from pylog.broker.admin import topic_id_bytes
    path, topic, group = str(tmp_path / "store"), "gone", "expiring"
    with pylog.open(path) as store:
        store.create_topic(topic, 2)
        tid = topic_id_bytes(store.topic_id(topic))
    configs = ("group.consumer.heartbeat.interval.ms=200", "group.consumer.session.timeout.ms=15000")
    broker = ServeProcess(path, "group.consumer.session.timeout.ms=60000")
    try:
        client, member_id, epoch = _join(broker.bootstrap, group, topic, tid)
        client.close()
        broker.kill()
        broker.stop()
        broker = ServeProcess(path, *configs)
        # Restored: described with its epoch and both partitions, until its session lapses.
        assert _kip848_members(broker.bootstrap, group) == [(member_id, epoch, [0, 1])]
        until(lambda: _kip848_members(broker.bootstrap, group) == [], "the member fenced", timeout=60)
        client = ProtocolClient(broker.bootstrap, client_id="raw-848")
        r = client.request(HEARTBEAT, m.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=epoch), 1)
        client.close()
        assert r.error_code == UNKNOWN_MEMBER_ID
        broker.kill()
        broker.stop()
        broker = ServeProcess(path, *configs)
        assert _kip848_members(broker.bootstrap, group) == []         # the fencing was stored
    finally:
        broker.stop()


def test_share_group_members_go_on_after_kill_9_and_expire_if_they_never_return(tmp_path):
    """KIP-932: a share group's membership is in __consumer_offsets too (Kafka's ShareGroup*
    records). After kill -9 a member heartbeating at its epoch goes on (same epoch, same
    partitions) and opens its share session again (sessions are not kept, as Kafka's); a
    member that never returns is removed when its session, counted from the restart, lapses."""
    from share_support import ShareMember
    path, topic, group = str(tmp_path / "store"), "queue", "share-kept"
    with pylog.open(path) as store:
        store.create_topic(topic, 2)
        view = type("View", (), {"topic_id": staticmethod({topic: store.topic_id(topic)}.get)})()
    configs = ("group.share.heartbeat.interval.ms=200", "group.share.session.timeout.ms=15000")
    listen = f"127.0.0.1:{_free_port()}"
    broker = ServeProcess(path, *configs, listen=listen)
    shim = type("B", (), {"bootstrap_servers": broker.bootstrap})()
    stays, goes = ShareMember(shim, view, group, [topic]), ShareMember(shim, view, group, [topic])
    try:
        for member in (stays, goes):
            assert member.beat(0).error_code == 0
        assert stays.beat().error_code == 0
        epoch, assignment = stays.epoch, stays.assignment
        assert assignment == {topic: [0, 1]}
        broker.kill()
        broker.stop()
        broker = ServeProcess(path, *configs, listen=listen)
        stays.client.close()
        stays.client = ProtocolClient(broker.bootstrap, client_id="raw-share")
        r = stays.beat()
        assert (r.error_code, r.member_epoch) == (0, epoch)
        assert stays.fetch(topic, epoch=0).error_code == 0     # a new share session

        def members():
            client = ProtocolClient(broker.bootstrap, client_id="describe")
            try:
                g = client.request(77, m.ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0]
            finally:
                client.close()
            return sorted(x.member_id for x in g.members)

        assert members() == sorted([stays.member_id, goes.member_id])
        # `goes` never heartbeats again: removed; `stays` heartbeats on.
        until(lambda: stays.beat().error_code == 0 and members() == [stays.member_id],
              "the silent member removed", timeout=60)
    finally:
        for member in (stays, goes):
            member.client.close()
        broker.stop()
