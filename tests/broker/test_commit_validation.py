"""OffsetCommit validation, row by row, as Kafka's classic group coordinator answers it
(ClassicGroup.validateOffsetCommit, OffsetMetadataManager.validateOffsetCommit): who may
commit (a member of the current generation, an admin's generation -1 commit only while
the group is empty, a static member's current member id only), in every group state.

Every row is a raw OffsetCommit (v8) against a real broker; the admin path is also
driven by librdkafka's AlterConsumerGroupOffsets against a group with a live consumer.
"""

from __future__ import annotations

import time
import uuid

import pytest

import pylog
from pylog.coordinator.classic_group import ClassicGroup

from .group_client import RawMember

NONE, COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION = 0, 15, 22
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID = 25, 27, 82


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("commits")))
    # An initial delay, so that members joining together form one generation.
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=300,
                          group_min_session_timeout_ms=500).start()
    store.create_topic("t", 1)
    try:
        yield broker
    finally:
        broker.shutdown()
        store.close()


def form(*members: RawMember) -> None:
    """Joins every member into one generation and syncs it (the leader assigns)."""
    for mem in members:
        if mem.instance is None and not mem.member_id:
            assert mem.finish_join(mem.send_join()).error_code == 79   # MEMBER_ID_REQUIRED: an id
    sent = [mem.send_join() for mem in members]
    for mem, s in zip(members, sent):
        response = mem.finish_join(s)
        if response.error_code == 79:               # (a static member before KIP-345 was honoured)
            response = mem.finish_join(mem.send_join())
        assert response.error_code == NONE, response
    generations = {mem.generation for mem in members}
    assert len(generations) == 1, generations
    leader = next(mem for mem in members if mem.member_id == mem.leader)
    plan = {mem.member_id: b"" for mem in members}
    assert leader.sync(plan).error_code == NONE
    for mem in members:
        if mem is not leader:
            assert mem.sync().error_code == NONE


def test_commit_validation_table(broker):
    group = f"g-{uuid.uuid4().hex[:8]}"
    boot = broker.bootstrap_servers
    with RawMember(boot, group) as admin, RawMember(boot, group) as a, \
            RawMember(boot, group, instance="s1") as s, RawMember(boot, group) as c:
        # ---- no group yet
        assert admin.commit("t", 1, generation=5, member_id="ghost") == ILLEGAL_GENERATION
        assert admin.commit("t", 1, generation=-1, member_id="") == NONE     # a simple group
        # ---- a group known only by its committed offsets (Empty)
        assert admin.commit("t", 2, generation=0, member_id="ghost") == UNKNOWN_MEMBER_ID
        assert admin.commit("t", 2, generation=-1, member_id="ghost") == NONE
        assert broker.store.committed(group, "t", 0) == 2
        # ---- Stable, with a dynamic and a static member
        form(a, s)
        g = a.generation
        assert admin.commit("t", 3, generation=-1, member_id="") == UNKNOWN_MEMBER_ID   # admin, live group
        assert admin.commit("t", 3, generation=-1, member_id="", instance=None,
                            version=6) == UNKNOWN_MEMBER_ID
        assert a.commit("t", 3, generation=-1) == ILLEGAL_GENERATION
        assert a.commit("t", 3, member_id="ghost") == UNKNOWN_MEMBER_ID
        assert a.commit("t", 3, generation=g - 1) == ILLEGAL_GENERATION                  # stale
        assert a.commit("t", 3, generation=g + 1) == ILLEGAL_GENERATION
        assert a.commit("t", 3, instance="nobody") == UNKNOWN_MEMBER_ID
        assert s.commit("t", 3, member_id=a.member_id) == FENCED_INSTANCE_ID            # s1 is s's
        assert admin.commit("t", 3, generation=-1, member_id="", instance="s1") == FENCED_INSTANCE_ID
        assert broker.store.committed(group, "t", 0) == 2                                # none landed
        assert a.commit("t", 4) == NONE
        assert s.commit("t", 5) == NONE
        assert broker.store.committed(group, "t", 0) == 5
        # ---- PreparingRebalance: c joins, a and s have not rejoined; the current
        # generation may still commit (Kafka: offsets of revoked partitions).
        assert c.finish_join(c.send_join()).error_code == 79          # MEMBER_ID_REQUIRED: an id
        parked = c.send_join()
        wait_state(admin, "PreparingRebalance")
        assert a.commit("t", 6) == NONE
        assert admin.commit("t", 7, generation=-1, member_id="") == UNKNOWN_MEMBER_ID
        # c (its JoinGroup parked on its own connection) is a member of no generation yet.
        assert admin.commit("t", 7, generation=-1, member_id=c.member_id) == ILLEGAL_GENERATION
        # ---- CompletingRebalance: everyone rejoined, no assignment yet
        rejoin = [a.send_join(), s.send_join()]
        c.finish_join(parked)
        a.finish_join(rejoin[0])
        s.finish_join(rejoin[1])
        assert admin.describe().group_state == "CompletingRebalance"
        assert a.commit("t", 8) == REBALANCE_IN_PROGRESS
        assert a.commit("t", 8, generation=g) == ILLEGAL_GENERATION
        assert admin.commit("t", 8, generation=-1, member_id="") == UNKNOWN_MEMBER_ID
        assert broker.store.committed(group, "t", 0) == 6
        # ---- Empty again: every member left
        for mem in (a, s, c):
            assert mem.leave() == (NONE, NONE)
        assert admin.describe().group_state == "Empty"
        assert a.commit("t", 9) == UNKNOWN_MEMBER_ID
        assert admin.commit("t", 9, generation=-1, member_id="") == NONE
        assert broker.store.committed(group, "t", 0) == 9


def test_commit_to_a_dead_group_is_coordinator_not_available():
    group = ClassicGroup("dead", initial_delay_ms=0)
    group.mark_dead()
    assert group.check_commit("", -1) == COORDINATOR_NOT_AVAILABLE
    assert group.check_commit("m", 3) == COORDINATOR_NOT_AVAILABLE


def wait_state(member: RawMember, state: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while member.describe().group_state != state:
        assert time.monotonic() < deadline, f"group never reached {state}"
        time.sleep(0.01)


def test_admin_alters_offsets_of_a_live_group_with_librdkafka(broker):
    """AlterConsumerGroupOffsets (generation -1, no member id) against a group with a
    subscribed consumer: UNKNOWN_MEMBER_ID, as Kafka answers; once the consumer has
    left, the same alteration lands."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient
    group = f"live-{uuid.uuid4().hex[:8]}"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                            "enable.auto.commit": False})
    consumer.subscribe(["t"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer never got its partition"
            consumer.poll(0.1)
        request = [ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition("t", 0, 7)])]
        refused = admin.alter_consumer_group_offsets(request)[group].result(30)
        assert [tp.error.code() for tp in refused.topic_partitions] == [ck.KafkaError.UNKNOWN_MEMBER_ID]
        assert broker.store.committed(group, "t", 0) is None
        consumer.close()
        done = admin.alter_consumer_group_offsets(request)[group].result(30)
        assert [tp.error for tp in done.topic_partitions] == [None]
        assert broker.store.committed(group, "t", 0) == 7
    finally:
        consumer.close()
