"""confluent-kafka (librdkafka) with ``group.protocol=consumer`` (KIP-848, GA in librdkafka
2.12) against pylog's broker: members join and split the partitions, one leaves and the
others take its partitions, every record is consumed, and no partition is owned by two
members at once (by their rebalance callbacks)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import pylog

confluent_kafka = pytest.importorskip("confluent_kafka")
if confluent_kafka.libversion()[1] < 0x020C0000:
    pytest.skip(f"librdkafka {confluent_kafka.libversion()[0]} predates group.protocol=consumer (2.12)",
                allow_module_level=True)


STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID = 113, 25


@pytest.fixture(scope="module")
def kip848_timers() -> dict:
    """librdkafka's members heartbeat more often than kip848_broker's default."""
    return {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 15000}


class Member:
    """A confluent-kafka consumer of the consumer protocol polling in its own thread."""

    def __init__(self, broker, topic: str, group: str, assignor: str | None = None) -> None:
        config = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False}
        if assignor:
            config["group.remote.assignor"] = assignor
        self.consumer = confluent_kafka.Consumer(config)
        self.events: list[tuple[str, float, set[int]]] = []
        self.values: list[bytes] = []
        self.failure: BaseException | None = None
        self.commit_retries: list[int] = []
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._lost)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assigned(self, consumer, partitions) -> None:
        self.events.append(("ASSIGNED", time.monotonic(), {p.partition for p in partitions}))

    def _revoked(self, consumer, partitions) -> None:
        self.events.append(("REVOKED", time.monotonic(), {p.partition for p in partitions}))

    def _lost(self, consumer, partitions) -> None:
        self.events.append(("LOST", time.monotonic(), {p.partition for p in partitions}))

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    raise confluent_kafka.KafkaException(msg.error())
                self.values.append(msg.value())
                self._commit(msg)
            self.consumer.close()
        except BaseException as exc:            # noqa: BLE001 - reported by the test
            self.failure = exc

    def _commit(self, msg) -> None:
        """A synchronous commit, retried while the member's epoch moves under it: a commit
        sent with the epoch a heartbeat response is just replacing gets STALE_MEMBER_EPOCH
        (as from Kafka 4.1's broker), and one across a rejoin UNKNOWN_MEMBER_ID."""
        for _ in range(100):
            try:
                self.consumer.commit(message=msg, asynchronous=False)
                return
            except confluent_kafka.KafkaException as exc:
                code = exc.args[0].code()
                if code not in (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
                    raise
                self.commit_retries.append(code)
                time.sleep(0.05)
        raise AssertionError("a commit kept failing")

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for what, _, parts in list(self.events):
            owned = owned | parts if what == "ASSIGNED" else owned - parts
        return owned

    def intervals(self, now: float):
        start: dict[int, float] = {}
        out = []
        for what, at, parts in list(self.events):
            for p in parts:
                if what == "ASSIGNED":
                    start[p] = at
                elif p in start:
                    out.append((p, start.pop(p), at))
        return out + [(p, at, now) for p, at in start.items()]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def until(condition, what: str, members, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        failures = [m.failure for m in members if m.failure is not None]
        assert not failures, f"a member failed: {failures[0]!r}"
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout}s: {what}: {[m.events for m in members]}")
        time.sleep(0.05)


@pytest.mark.parametrize("assignor", [None, "range"])
def test_confluent_consumers_share_and_hand_over_partitions(kip848_broker, assignor):
    store, broker = kip848_broker
    topic, group = f"rdk848-{uuid.uuid4().hex[:6]}", f"rdk848-group-{uuid.uuid4().hex[:6]}"
    store.create_topic(topic, 6)
    with pylog.Producer(store) as producer:
        for p in range(6):
            producer.send_batch(topic, [b"%d-%d" % (p, i) for i in range(50)], partition=p)
    members = [Member(broker, topic, group, assignor)]
    try:
        until(lambda: members[0].owned() == set(range(6)), "the first member owns all", members)
        members.append(Member(broker, topic, group, assignor))
        until(lambda: [len(m.owned()) for m in members] == [3, 3], "3 and 3", members)
        members.append(Member(broker, topic, group, assignor))
        until(lambda: [len(m.owned()) for m in members] == [2, 2, 2], "2, 2 and 2", members)
        described = store.coordinator.consumer_group(group)
        assert described is not None and described.assignor_name() == (assignor or "uniform")
        members[1].close()
        assert members[1].failure is None
        rest = [members[0], members[2]]
        until(lambda: [len(m.owned()) for m in rest] == [3, 3], "3 and 3 after a leave", members)
        until(lambda: sum(store.committed(group, topic, p) or 0 for p in range(6)) == 300,
              "all committed", members)
        consumed = [v for m in members for v in m.values]
        assert set(consumed) == {b"%d-%d" % (p, i) for p in range(6) for i in range(50)}
        now = time.monotonic()
        spans = [(p, a, b, i) for i, m in enumerate(members) for p, a, b in m.intervals(now)]
        for p, a, b, i in spans:
            for q, c, d, j in spans:
                if p == q and i < j:
                    assert b <= c or d <= a, f"partition {p} owned by members {i} and {j} at once"
    finally:
        for m in members:
            m.close()


def test_confluent_member_goes_on_after_a_broker_restart(tmp_path):
    """Membership and offsets are in __consumer_offsets: across a broker restart the
    member goes on from its committed offsets (every record once, none re-delivered;
    kill -9 and no rebalance: test_group_persistence.py)."""
    store = pylog.open(str(tmp_path))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_consumer_heartbeat_interval_ms=300).start()
    port = broker.bootstrap_servers.rsplit(":", 1)[1]
    store.create_topic("restart", 2)
    with pylog.Producer(store) as producer:
        for p in range(2):
            producer.send_batch("restart", [b"before-%d-%d" % (p, i) for i in range(20)], partition=p)
    member = Member(broker, "restart", "restart-group")
    try:
        until(lambda: len(member.values) == 40, "the first 40 records", [member])
        until(lambda: sum(store.committed("restart-group", "restart", p) or 0 for p in range(2)) == 40,
              "committed", [member])
        broker.shutdown()
        store.close()
        store = pylog.open(str(tmp_path))
        broker = pylog.Broker(store, listen=f"127.0.0.1:{port}",
                              group_consumer_heartbeat_interval_ms=300).start()
        with pylog.Producer(store) as producer:
            for p in range(2):
                producer.send_batch("restart", [b"after-%d-%d" % (p, i) for i in range(10)], partition=p)
        until(lambda: len(member.values) >= 60, "the 20 records after the restart", [member])
        group = store.coordinator.consumer_group("restart-group")
        assert group is not None and len(group.members) == 1
        assert sorted(member.values) == sorted(
            [b"before-%d-%d" % (p, i) for p in range(2) for i in range(20)]
            + [b"after-%d-%d" % (p, i) for p in range(2) for i in range(10)])
    finally:
        member.close()
        broker.shutdown()
        store.close()
