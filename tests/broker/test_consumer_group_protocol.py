"""The consumer rebalance protocol (KIP-848) on the wire: ConsumerGroupHeartbeat and
ConsumerGroupDescribe sent raw, so each test picks the exact epochs and owned partitions
(real clients: tests/kafka_reference/test_java_consumer_protocol.py, and
tests/broker/test_confluent_consumer_protocol.py)."""

from __future__ import annotations

import uuid

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

HEARTBEAT, DESCRIBE, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP = 68, 69, 8, 9, 11
UNKNOWN_MEMBER_ID, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 25, 42, 69
FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH = 110, 111, 112, 113


@pytest.fixture(scope="module")
def kip848_timers() -> dict:
    """Short timers: a silent member's session expires within a test."""
    return {"group_consumer_heartbeat_interval_ms": 250, "group_consumer_session_timeout_ms": 1500}


@pytest.fixture
def kip848(kip848_broker):
    """(store, broker, topic, group) for one test: the module's broker, a fresh topic of
    4 partitions and a fresh group id."""
    store, broker = kip848_broker
    topic = f"t-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 4)
    return store, broker, topic, f"g-{uuid.uuid4().hex[:8]}"


class Member:
    """One member speaking ConsumerGroupHeartbeat v1 on its own connection."""

    def __init__(self, broker, store, group: str, topics, instance: str | None = None,
                 assignor: str | None = None) -> None:
        self.client = ProtocolClient(broker.bootstrap_servers, client_id="raw-848")
        self.store = store
        self.group = group
        self.topics = list(topics)
        self.instance = instance
        self.assignor = assignor
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0
        self.owned: dict[str, set[int]] = {}

    def ids(self) -> dict[bytes, str]:
        from pylog.broker.admin import topic_id_bytes
        return {topic_id_bytes(self.store.topic_id(t)): t for t in self.store.list_topics()}

    def beat(self, epoch: int | None = None, owned=None, full: bool = False, **fields):
        epoch = self.epoch if epoch is None else epoch
        names = {t: i for i, t in self.ids().items()}
        joining = epoch == 0
        req = m.ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=epoch,
            instance_id=self.instance, rebalance_timeout_ms=10_000 if joining or full else -1,
            subscribed_topic_names=self.topics if joining or full else None,
            server_assignor=self.assignor,
            topic_partitions=[] if joining else (None if owned is None else [
                m.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=names[t], partitions=sorted(ps))
                for t, ps in owned.items()]))
        for k, v in fields.items():
            setattr(req, k, v)
        resp = self.client.request(HEARTBEAT, req, 1)
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                ids = self.ids()
                self.target = {ids[tp.topic_id]: set(tp.partitions) for tp in resp.assignment.topic_partitions}
        return resp

    def settle(self):
        """Acts as a client: gives up what the assignment no longer has, reports it."""
        assigned = getattr(self, "target", {})
        self.owned = {t: ps & assigned.get(t, set()) for t, ps in self.owned.items()}
        self.owned = {t: ps for t, ps in self.owned.items() if ps}
        resp = self.beat(owned=self.owned)
        self.owned = {t: set(ps) for t, ps in self.target.items()}
        return resp

    def close(self):
        self.client.close()


def describe(broker, group: str):
    with ProtocolClient(broker.bootstrap_servers) as c:
        return c.request(DESCRIBE, m.ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]


def test_two_members_split_then_one_leaves(kip848):
    """The second member gets its partitions only after the first revoked them; at no
    point does the coordinator hold a partition for two members."""
    store, broker, topic, group = kip848
    a = Member(broker, store, group, [topic])
    b = Member(broker, store, group, [topic])
    try:
        r = a.beat(0)
        assert r.error_code == 0 and r.member_epoch == 1 and r.heartbeat_interval_ms == 250
        assert a.target == {topic: {0, 1, 2, 3}}
        a.owned = {topic: {0, 1, 2, 3}}
        r = b.beat(0)
        assert r.error_code == 0
        assert b.target == {}                       # its partitions are still a's
        assert r.member_epoch == 2                  # reconciled to the new epoch, waiting
        # a must revoke two partitions: same epoch, smaller assignment.
        r = a.beat(owned=a.owned)
        assert r.member_epoch == 1 and len(a.target[topic]) == 2
        kept = a.target[topic]
        d = describe(broker, group)
        assert d.group_state == "Reconciling" and d.group_epoch == 2 and d.assignment_epoch == 2
        assert d.assignor_name == "uniform"
        # b still gets nothing while a holds them.
        b.beat()
        assert b.target == {}
        # a acknowledges: it owns only what it kept; it moves to epoch 2.
        a.owned = {topic: set(kept)}
        r = a.beat(owned=a.owned)
        assert r.member_epoch == 2
        r = b.beat(owned={})
        assert b.target == {topic: {0, 1, 2, 3} - kept} and r.member_epoch == 2
        d = describe(broker, group)
        assert d.group_state == "Stable"
        got = {mem.member_id: {p for tp in mem.assignment.topic_partitions for p in tp.partitions}
               for mem in d.members}
        assert got == {a.member_id: kept, b.member_id: {0, 1, 2, 3} - kept}
        assert all(mem.member_type == 1 for mem in d.members)
        # a leaves: b takes everything at the next epoch.
        r = a.beat(-1)
        assert r.error_code == 0 and r.member_epoch == -1
        r = b.beat(owned={topic: {0, 1, 2, 3} - kept})
        assert b.target == {topic: {0, 1, 2, 3}} and r.member_epoch == 3
    finally:
        a.close()
        b.close()


def test_fencing_and_validation(kip848):
    store, broker, topic, group = kip848
    a = Member(broker, store, group, [topic])
    try:
        assert a.beat(5).error_code == UNKNOWN_MEMBER_ID        # no such group (yet)
        r = a.beat(0, rebalance_timeout_ms=-1)
        assert r.error_code == INVALID_REQUEST and "RebalanceTimeoutMs" in r.error_message
        assert a.beat(0, server_assignor="sticky").error_code == UNSUPPORTED_ASSIGNOR
        assert a.beat(0).error_code == 0
        assert a.beat(7).error_code == FENCED_MEMBER_EPOCH
        other = Member(broker, store, group, [topic])
        assert other.beat(3).error_code == UNKNOWN_MEMBER_ID
        other.close()
        # OffsetCommit v9 carries the member epoch: the current one commits, another is stale.
        def commit(epoch, version=9):
            req = m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch,
                                        member_id=a.member_id, topics=[
                m.OffsetCommitRequestOffsetCommitRequestTopic(name=topic, partitions=[
                    m.OffsetCommitRequestOffsetCommitRequestPartition(partition_index=0,
                                                                      committed_offset=0)])])
            return a.client.request(OFFSET_COMMIT, req, version).topics[0].partitions[0].error_code
        assert commit(a.epoch) == 0
        assert commit(a.epoch + 1) == STALE_MEMBER_EPOCH
        assert commit(a.epoch, 8) == 35                              # UNSUPPORTED_VERSION
        fetch = a.client.request(OFFSET_FETCH, m.OffsetFetchRequest(groups=[
            m.OffsetFetchRequestOffsetFetchRequestGroup(group_id=group, member_id=a.member_id,
                                                        member_epoch=a.epoch + 1, topics=None)]), 9)
        assert fetch.groups[0].error_code == STALE_MEMBER_EPOCH
        fetch = a.client.request(OFFSET_FETCH, m.OffsetFetchRequest(groups=[
            m.OffsetFetchRequestOffsetFetchRequestGroup(group_id=group, member_id=a.member_id,
                                                        member_epoch=a.epoch, topics=None)]), 9)
        assert fetch.groups[0].error_code == 0
        assert fetch.groups[0].topics[0].partitions[0].committed_offset == 0
        # A classic JoinGroup to the live consumer group: GROUP_ID_NOT_FOUND (no online
        # migration); a classic group's id is refused to the consumer protocol likewise.
        join = a.client.request(JOIN_GROUP, m.JoinGroupRequest(
            group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=[]), 7)
        assert join.error_code == GROUP_ID_NOT_FOUND
    finally:
        a.close()


def test_session_timeout_fences_a_silent_member(kip848):
    store, broker, topic, group = kip848
    a = Member(broker, store, group, [topic])
    try:
        a.beat(0)
        group_obj = store.coordinator.consumer_group(group)
        import time
        deadline = time.monotonic() + 30
        while group_obj.members and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group_obj.members
        assert a.beat().error_code == UNKNOWN_MEMBER_ID
        assert describe(broker, group).group_state == "Empty"
    finally:
        a.close()


def test_static_member_leaves_and_returns_without_a_rebalance(kip848):
    store, broker, topic, group = kip848
    a = Member(broker, store, group, [topic], instance="a")
    b = Member(broker, store, group, [topic], instance="b")
    try:
        a.beat(0)
        a.owned = {topic: set(a.target[topic])}
        b.beat(0)
        for _ in range(3):
            a.settle()
            b.settle()
        assert describe(broker, group).group_state == "Stable"
        epoch = describe(broker, group).group_epoch
        had = b.target
        assert b.beat(-2).member_epoch == -2                  # temporary leave
        again = Member(broker, store, group, [topic], instance="b")
        assert again.beat(0).error_code == 0
        assert again.target == had                             # its partitions back at once
        assert describe(broker, group).group_epoch == epoch    # no rebalance
        # The instance id is taken while its member is live.
        third = Member(broker, store, group, [topic], instance="b")
        assert third.beat(0).error_code == UNRELEASED_INSTANCE_ID
        third.close()
        again.close()
    finally:
        a.close()
        b.close()


def test_range_assignor_and_regex(kip848_broker):
    store, broker = kip848_broker
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    store.create_topic(f"{prefix}-a", 3)
    store.create_topic(f"{prefix}-b", 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(broker, store, group, [], assignor="range")
    b = Member(broker, store, group, [], assignor="range")
    a.member_id, b.member_id = "a" * 22, "b" * 22
    try:
        a.beat(0, subscribed_topic_names=None, subscribed_topic_regex=f"{prefix}-.*")
        a.owned = {t: set(ps) for t, ps in a.target.items()}
        b.beat(0, subscribed_topic_names=None, subscribed_topic_regex=f"{prefix}-.*")
        for _ in range(3):
            a.settle()
            b.settle()
        # Range: per topic, the first member (by id) gets 2, the second 1.
        assert a.target == {f"{prefix}-a": {0, 1}, f"{prefix}-b": {0, 1}}
        assert b.target == {f"{prefix}-a": {2}, f"{prefix}-b": {2}}
        assert describe(broker, group).assignor_name == "range"
        # A new topic matching the regex joins the subscription.
        store.create_topic(f"{prefix}-c", 2)
        a.settle()
        b.settle()
        assert f"{prefix}-c" in a.target
    finally:
        a.close()
        b.close()


def test_describe_unknown_and_classic_groups(kip848_broker):
    store, broker = kip848_broker
    d = describe(broker, "no-such-group")
    assert d.error_code == GROUP_ID_NOT_FOUND


def test_metadata_by_topic_id(kip848):
    """Metadata v12 names a topic by id alone (librdkafka resolves a KIP-848 assignment so)."""
    from pylog.broker.admin import topic_id_bytes
    store, broker, topic, _ = kip848
    tid = topic_id_bytes(store.topic_id(topic))
    with ProtocolClient(broker.bootstrap_servers) as c:
        resp = c.request(3, m.MetadataRequest(topics=[
            m.MetadataRequestMetadataRequestTopic(topic_id=tid, name=None),
            m.MetadataRequestMetadataRequestTopic(topic_id=b"\x01" * 16, name=None)],
            allow_auto_topic_creation=False), 12)
    known, unknown = resp.topics
    assert (known.error_code, known.name, known.topic_id, len(known.partitions)) == (0, topic, tid, 4)
    assert (unknown.error_code, unknown.name, unknown.topic_id) == (100, None, b"\x01" * 16)


def test_restart_keeps_committed_offsets_and_members(tmp_path):
    """Membership and committed offsets are in __consumer_offsets. After a restart a
    member's heartbeat at its epoch goes on (same epoch, its partitions kept) and finds its
    group's committed offsets (kill -9 and real clients: test_group_persistence.py)."""
    store = pylog.open(str(tmp_path))
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    store.create_topic("kept", 2)
    a = Member(broker, store, "restarted", ["kept"])
    try:
        assert a.beat(0).error_code == 0
        req = m.OffsetCommitRequest(group_id="restarted", generation_id_or_member_epoch=a.epoch,
                                    member_id=a.member_id, topics=[
            m.OffsetCommitRequestOffsetCommitRequestTopic(name="kept", partitions=[
                m.OffsetCommitRequestOffsetCommitRequestPartition(partition_index=p, committed_offset=7 + p)
                for p in range(2)])])
        assert [p.error_code for p in a.client.request(OFFSET_COMMIT, req, 9).topics[0].partitions] == [0, 0]
    finally:
        a.close()
        broker.shutdown()
        store.close()
    store = pylog.open(str(tmp_path))
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    again = Member(broker, store, "restarted", ["kept"])
    again.member_id, again.epoch = a.member_id, a.epoch
    try:
        r = again.beat(owned={"kept": {0, 1}})
        assert (r.error_code, r.member_epoch) == (0, a.epoch)
        described = again.client.request(DESCRIBE, m.ConsumerGroupDescribeRequest(
            group_ids=["restarted"]), 0).groups[0]
        assert [(x.member_id, x.member_epoch, [(t.topic_name, t.partitions)
                                               for t in x.assignment.topic_partitions])
                for x in described.members] == [(a.member_id, a.epoch, [("kept", [0, 1])])]
        fetch = again.client.request(OFFSET_FETCH, m.OffsetFetchRequest(groups=[
            m.OffsetFetchRequestOffsetFetchRequestGroup(group_id="restarted", member_id=again.member_id,
                                                        member_epoch=again.epoch, topics=None)]), 9)
        got = {p.partition_index: p.committed_offset for p in fetch.groups[0].topics[0].partitions}
        assert got == {0: 7, 1: 8}
    finally:
        again.close()
        broker.shutdown()
        store.close()


def test_in_process_consumers_and_kip848_members_never_share_a_group_id(kip848):
    """pylog's in-process Consumer is bridged to classic groups only: a group id that the
    one side holds is refused to the other, so no partition is handed out twice."""
    from pylog.coordinator.consumer_group import GroupError
    store, broker, topic, remote_group = kip848
    local_group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(broker, store, remote_group, [topic])
    local = pylog.Consumer(store, group_id=local_group)
    try:
        assert a.beat(0).error_code == 0
        other = pylog.Consumer(store, group_id=remote_group)
        with pytest.raises(GroupError, match="in-process Consumer joins classic groups only"):
            other.subscribe([topic])
        other.close()
        local.subscribe([topic])
        b = Member(broker, store, local_group, [topic])
        r = b.beat(0)
        assert r.error_code == GROUP_ID_NOT_FOUND and "in-process" in r.error_message
        b.close()
    finally:
        local.close()
        a.close()
