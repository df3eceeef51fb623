"""Static membership (KIP-345, ``group.instance.id``) as Kafka's classic coordinator does it.

A member that joins with a known instance id and no member id takes over the instance's
member id: the old id is fenced (FENCED_INSTANCE_ID on its next JoinGroup, SyncGroup,
Heartbeat, OffsetCommit), and in a Stable group with unchanged protocols the member gets
its old assignment back with no rebalance. Static members are not dropped from a
rebalance they miss (only their session expiry or an explicit LeaveGroup removes them),
and a restarted static consumer (which sends no LeaveGroup on close) returns without
the others seeing a revocation. Raw requests pin the rules; librdkafka shows them.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import pylog

from .clients import Rec, produce
from .group_client import FENCED_INSTANCE_ID, RawMember

NONE, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 25, 27


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("static")))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          group_min_session_timeout_ms=500).start()
    store.create_topic("t", 1)
    try:
        yield broker
    finally:
        broker.shutdown()
        store.close()


def group_name() -> str:
    return f"static-{uuid.uuid4().hex[:8]}"


def classic(broker, group):
    return broker.store.coordinator.classic_group(group, create=False)


# ====================================================================== raw rules

def test_a_static_member_replaces_its_old_id_which_is_fenced(broker):
    group = group_name()
    boot = broker.bootstrap_servers
    with RawMember(boot, group, instance="i1") as old, RawMember(boot, group, instance="i1") as new, \
            RawMember(boot, group) as watcher:
        first = old.finish_join(old.send_join())
        assert first.error_code == NONE, first       # no MEMBER_ID_REQUIRED for a static member
        assert old.member_id.startswith("i1-")
        assert old.sync({old.member_id: b"\x00\x00old-assignment"}).error_code == NONE
        generation = old.generation
        described = watcher.describe()
        assert [(mem.member_id, mem.group_instance_id) for mem in described.members] == \
            [(old.member_id, "i1")]
        # The same instance comes back with no member id (a restart): Stable, same
        # protocols, so it takes the old id's place and assignment, with no rebalance.
        again = new.join()
        assert again.error_code == NONE
        assert new.member_id != old.member_id and new.member_id.startswith("i1-")
        assert again.generation_id == generation
        # Kafka tells a replaced leader the old leader id, so it does not reassign.
        assert again.leader == old.member_id and again.members == []
        synced = new.sync()
        assert (synced.error_code, synced.assignment) == (NONE, b"\x00\x00old-assignment")
        assert watcher.describe().group_state == "Stable"
        assert classic(broker, group).generation == generation
        assert [(mem.member_id, mem.group_instance_id) for mem in watcher.describe().members] == \
            [(new.member_id, "i1")]
        # The old id is fenced everywhere.
        assert old.heartbeat() == FENCED_INSTANCE_ID
        assert old.sync().error_code == FENCED_INSTANCE_ID
        assert old.commit("t", 1) == FENCED_INSTANCE_ID
        assert old.join().error_code == FENCED_INSTANCE_ID
        assert old.leave() == (NONE, FENCED_INSTANCE_ID)
        assert new.heartbeat() == NONE
        assert new.commit("t", 1) == NONE


def test_a_replaced_static_member_parked_in_a_join_is_fenced_at_once(broker):
    group = group_name()
    boot = broker.bootstrap_servers
    with RawMember(boot, group, instance="a") as a, RawMember(boot, group, instance="b") as b, \
            RawMember(boot, group, instance="b") as b2:
        assert a.join_and_sync() == NONE
        parked = b.send_join()                     # a new static member: a rebalance, a not rejoined
        wait_state(a, "PreparingRebalance")
        replacing = b2.send_join()                 # the same instance, no member id
        assert b.finish_join(parked).error_code == FENCED_INSTANCE_ID
        rejoined = a.finish_join(a.send_join())
        assert rejoined.error_code == NONE
        assert b2.finish_join(replacing).error_code == NONE
        assert {mem.group_instance_id for mem in rejoined.members} == {"a", "b"}
        assert b2.generation == a.generation


def test_a_static_member_that_misses_a_rebalance_stays_in_the_group(broker):
    """Kafka drops only dynamic members that did not rejoin before the rebalance timeout;
    a static one stays (its session expiry or a LeaveGroup removes it)."""
    group = group_name()
    boot = broker.bootstrap_servers
    with RawMember(boot, group, instance="s", rebalance_ms=1500) as s, \
            RawMember(boot, group, rebalance_ms=1500) as d, RawMember(boot, group, rebalance_ms=1500) as e:
        assert s.join_and_sync() == NONE
        d.join()                                   # MEMBER_ID_REQUIRED
        joined = d.finish_join(d.send_join())      # s never rejoins: the rebalance times out
        assert joined.error_code == NONE and d.leader == d.member_id
        assert {(mem.member_id, mem.group_instance_id) for mem in joined.members} == \
            {(s.member_id, "s"), (d.member_id, None)}
        assert d.sync({s.member_id: b"", d.member_id: b""}).error_code == NONE
        assert s.sync(generation=d.generation).error_code == NONE
        # A dynamic member that misses a rebalance is dropped.
        e.join()
        joined = e.finish_join(e.send_join())      # neither s nor d rejoins
        assert joined.error_code == NONE and e.leader == e.member_id
        assert {(mem.member_id, mem.group_instance_id) for mem in joined.members} == \
            {(s.member_id, "s"), (e.member_id, None)}


def wait_state(member: RawMember, state: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while member.describe().group_state != state:
        assert time.monotonic() < deadline, f"group never reached {state}"
        time.sleep(0.01)


def test_leave_group_by_instance_id_removes_a_static_member(broker):
    group = group_name()
    boot = broker.bootstrap_servers
    with RawMember(boot, group, instance="x") as x, RawMember(boot, group) as admin:
        assert x.join_and_sync() == NONE
        assert admin.leave(member_id="", instance="nobody") == (NONE, UNKNOWN_MEMBER_ID)
        assert admin.leave(member_id="", instance="x") == (NONE, NONE)
        assert admin.describe().group_state == "Empty"
        assert x.heartbeat() == UNKNOWN_MEMBER_ID


def test_a_static_member_is_removed_when_its_session_expires(broker):
    group = group_name()
    with RawMember(broker.bootstrap_servers, group, instance="gone", session_ms=600) as x:
        assert x.join_and_sync() == NONE
        wait_state(x, "Empty")                       # no heartbeat: expired after 600 ms
        assert x.heartbeat() == UNKNOWN_MEMBER_ID


# ================================================================ librdkafka

class Static:
    """A confluent-kafka consumer polling on its own thread, recording its rebalances."""

    def __init__(self, broker, group: str, instance: str | None, session_ms: int = 30_000) -> None:
        import confluent_kafka as ck
        self.events: list[tuple[float, str, list[int]]] = []
        self.errors: list = []
        self.values: list[bytes] = []
        conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                "session.timeout.ms": session_ms, "heartbeat.interval.ms": 200,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "partition.assignment.strategy": "range", "fetch.wait.max.ms": 50,
                "error_cb": self.errors.append}
        if instance is not None:
            conf["group.instance.id"] = instance
        self.consumer = ck.Consumer(conf)
        self.consumer.subscribe(["two"], on_assign=self._on("assigned"), on_revoke=self._on("revoked"),
                                on_lost=self._on("lost"))
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on(self, what):
        def record(consumer, partitions):
            self.events.append((time.monotonic(), what, sorted(p.partition for p in partitions)))
        return record

    def _run(self) -> None:
        import confluent_kafka as ck
        while not self._stop:
            try:
                msg = self.consumer.poll(0.05)
            except ck.KafkaException as exc:     # a fatal error (fenced)
                self.errors.append(exc.args[0])
                return
            if msg is None:
                continue
            if msg.error():
                self.errors.append(msg.error())
            else:
                self.values.append(msg.value())

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for _, what, parts in self.events:
            owned = set(parts) if what == "assigned" else owned - set(parts)
        return owned

    def close(self) -> None:
        if not self._stop:
            self._stop = True
            self.thread.join(30)
            try:
                self.consumer.close()
            except Exception:              # noqa: BLE001 - a fenced consumer may refuse
                pass


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not in {timeout}s: {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def two(broker):
    broker.store.create_topic("two", 2)


def test_librdkafka_static_member_restarts_without_a_rebalance(broker, two):
    group = group_name()
    a = Static(broker, group, "a")
    b = Static(broker, group, "b")
    restarted = None
    try:
        wait_for(lambda: len(a.owned()) == 1 and len(b.owned()) == 1, "one partition each")
        time.sleep(0.5)                              # the generation is settled
        generation = classic(broker, group).generation
        b_events = len(b.events)
        owned_by_a = a.owned()
        a.close()                                    # a static member sends no LeaveGroup
        start = time.monotonic()
        restarted = Static(broker, group, "a")
        wait_for(lambda: restarted.owned() == owned_by_a, "the restarted member has its partition",
                 timeout=20)
        took = time.monotonic() - start
        time.sleep(0.5)
        assert b.events[b_events:] == [], "the other member saw a rebalance"
        assert classic(broker, group).generation == generation
        assert took < 10, f"{took:.1f}s: the restart waited for a rebalance (session 30 s)"
    finally:
        for c in (a, b, restarted):
            if c is not None:
                c.close()


def test_librdkafka_second_consumer_with_one_instance_id_fences_the_first(broker, two):
    import confluent_kafka as ck
    group = group_name()
    first = Static(broker, group, "same")
    second = None
    try:
        wait_for(lambda: first.owned() == {0, 1}, "the first consumer owns the topic")
        second = Static(broker, group, "same")
        wait_for(lambda: second.owned() == {0, 1}, "the second takes the instance's partitions")
        wait_for(lambda: any(e.code() == ck.KafkaError._FATAL or e.fatal() for e in first.errors),
                 "the first is fenced (a fatal error)")
        assert any("fenced" in e.str() for e in first.errors), first.errors
        seen_by_first = len(first.values)
        produce("confluent", broker.bootstrap_servers, "two", [Rec(None, b"after-%d" % i) for i in range(4)],
                partition=0)
        wait_for(lambda: sum(v.startswith(b"after-") for v in second.values) == 4, "the second consumes")
        assert len(first.values) == seen_by_first    # one instance id: one consumer consumes
        assert len(classic(broker, group).members) == 1
    finally:
        first.close()
        if second is not None:
            second.close()
