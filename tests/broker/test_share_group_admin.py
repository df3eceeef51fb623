"""Share groups seen by the group admin APIs, raw on the wire: ListGroups v5 (types and
states filters), DeleteGroups, DescribeGroups and ConsumerGroupDescribe of a share group,
and KIP-932's DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets (Kafka's own tool against them:
tests/kafka_reference/test_share_group_tools.py)."""

from __future__ import annotations

import os
import uuid

import pytest

from pylog.coordinator.share_group import ShareCoordinator, share_coordinator
from pylog.protocol import messages as m

from share_support import ShareMember, serve_store, topic_with_records

LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, CG_DESCRIBE = 16, 15, 42, 69
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, UNKNOWN_TOPIC_OR_PARTITION = 69, 68, 3


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    yield from serve_store(tmp_path_factory, "share-admin", group_share_session_timeout_ms=60000)



def listed(client, version: int = 5, **filters) -> dict[str, tuple]:
    resp = client.request(LIST_GROUPS, m.ListGroupsRequest(**filters), version)
    assert resp.error_code == 0
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type if version >= 5 else None)
            for g in resp.groups}


def describe_offsets(client, group: str, topics=None):
    wanted = None if topics is None else [
        m.DescribeShareGroupOffsetsRequestDescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
        for t, ps in topics.items()]
    resp = client.request(DESCRIBE_OFFSETS, m.DescribeShareGroupOffsetsRequest(groups=[
        m.DescribeShareGroupOffsetsRequestDescribeShareGroupOffsetsRequestGroup(group_id=group,
                                                                                topics=wanted)]), 0)
    (g,) = resp.groups
    return g.error_code, {(t.topic_name, p.partition_index): (p.start_offset, p.error_code)
                          for t in g.topics for p in t.partitions}


def alter_offsets(client, group: str, offsets: dict[tuple[str, int], int]):
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(
            m.AlterShareGroupOffsetsRequestAlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o))
    return client.request(ALTER_OFFSETS, m.AlterShareGroupOffsetsRequest(group_id=group, topics=[
        m.AlterShareGroupOffsetsRequestAlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
        for t, ps in topics.items()]), 0)


def delete_offsets(client, group: str, topics):
    return client.request(DELETE_OFFSETS, m.DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        m.DeleteShareGroupOffsetsRequestDeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]), 0)


def test_list_groups_names_share_groups_by_type_and_state(shared):
    store, broker = shared
    topic = topic_with_records(store, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    classic = f"cg-{uuid.uuid4().hex[:8]}"
    store.coordinator.commit_offsets(classic, {(topic, 0): 0})
    a = ShareMember(broker, store, group, [topic])
    try:
        assert a.beat().error_code == 0
        assert listed(a.client)[group] == ("share", "Stable", "share")
        assert listed(a.client, 4)[group] == ("share", "Stable", None)
        assert set(listed(a.client, types_filter=["share"])) >= {group}
        assert all(t == "share" for _, _, t in listed(a.client, types_filter=["Share"]).values())
        others = listed(a.client, types_filter=["consumer", "classic"])
        assert group not in others and others[classic] == ("consumer", "Empty", "classic")
        assert listed(a.client, types_filter=["streams"]) == {}
        assert group in listed(a.client, states_filter=["stable"])
        assert group not in listed(a.client, states_filter=["Empty"])
        a.beat(epoch=-1)
        assert listed(a.client, states_filter=["Empty"], types_filter=["share"])[group][1] == "Empty"
    finally:
        a.close()


def test_describe_apis_of_other_group_types_do_not_find_a_share_group(shared):
    store, broker = shared
    topic = topic_with_records(store, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    a = ShareMember(broker, store, group, [topic])
    try:
        a.beat()
        (cg,) = a.client.request(CG_DESCRIBE, m.ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups
        assert cg.error_code == GROUP_ID_NOT_FOUND
        assert cg.error_message == f"Group {group} is not a consumer group."
        # DescribeGroups below v6 answers a group that is not classic Dead, as Kafka.
        (dg,) = a.client.request(DESCRIBE_GROUPS, m.DescribeGroupsRequest(groups=[group]), 5).groups
        assert dg.error_code == 0 and dg.group_state == "Dead" and dg.members == []
    finally:
        a.close()


def test_delete_groups_deletes_an_empty_share_group_and_its_state(shared):
    store, broker = shared
    topic = topic_with_records(store, 10)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    shares = share_coordinator(store)
    shares.group(group).set_configs({"share.auto.offset.reset": "earliest"})
    a = ShareMember(broker, store, group, [topic])
    try:
        a.beat()
        assert len(a.acquired(a.fetch(topic))) == 10
        path = shares._path(group)
        assert os.path.exists(path)

        def delete():
            (r,) = a.client.request(DELETE_GROUPS, m.DeleteGroupsRequest(groups_names=[group]), 2).results
            return r.error_code

        assert delete() == NON_EMPTY_GROUP
        assert a.beat(epoch=-1).error_code == 0
        assert delete() == 0
        assert not os.path.exists(path) and shares.group(group, create=False) is None
        # Nor its membership records, from which a restart would rebuild it, empty.
        assert store.coordinator.stored_group_records(group) == {}
        assert group not in listed(a.client)
        assert delete() == GROUP_ID_NOT_FOUND
        # A group of the same id starts over: the records are delivered again, once.
        b = ShareMember(broker, store, group, [topic])
        try:
            b.beat()
            assert b.acquired(b.fetch(topic)) == {}          # share.auto.offset.reset=latest again
        finally:
            b.close()
    finally:
        a.close()


def test_share_group_offsets_described_altered_and_deleted_while_empty(shared):
    store, broker = shared
    topic = topic_with_records(store, 20, partitions=2)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    share_coordinator(store).group(group).set_configs({"share.auto.offset.reset": "earliest"})
    a = ShareMember(broker, store, group, [topic])
    try:
        assert describe_offsets(a.client, "no-such-share-group")[0] == GROUP_ID_NOT_FOUND
        a.beat()
        ra = a.fetch(topic, partitions=(0,), max_records=5)
        a.acknowledge(topic, {0: [(0, 4, [1])]})
        assert describe_offsets(a.client, group) == (0, {(topic, 0): (5, 0)})
        code, named = describe_offsets(a.client, group, {topic: [0, 1, 7], "no-such-topic": [0]})
        assert code == 0 and named[(topic, 0)] == (5, 0) and named[(topic, 1)] == (-1, 0)
        assert named[(topic, 7)][1] == named[("no-such-topic", 0)][1] == UNKNOWN_TOPIC_OR_PARTITION
        assert ra.error_code == 0

        busy = alter_offsets(a.client, group, {(topic, 0): 0})
        assert busy.error_code == NON_EMPTY_GROUP and "not empty" in busy.error_message
        assert [p.error_code for t in busy.responses for p in t.partitions] == [NON_EMPTY_GROUP]
        assert delete_offsets(a.client, group, [topic]).error_code == NON_EMPTY_GROUP

        a.beat(epoch=-1)
        resp = alter_offsets(a.client, group, {(topic, 0): 2, (topic, 1): 15, (topic, 9): 0})
        codes = {(t.topic_name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}
        assert resp.error_code == 0 and codes == {(topic, 0): 0, (topic, 1): 0,
                                                  (topic, 9): UNKNOWN_TOPIC_OR_PARTITION}
        assert describe_offsets(a.client, group)[1] == {(topic, 0): (2, 0), (topic, 1): (15, 0)}
        # Durable: a coordinator reading the state files sees the new start offsets.
        assert ShareCoordinator(store).group(group).start_offsets() == {(topic, 0): 2, (topic, 1): 15}

        b = ShareMember(broker, store, group, [topic])
        try:
            b.beat()
            got = b.acquired(b.fetch(topic, partitions=(0, 1)))
            assert got == {**{(0, o): 1 for o in range(2, 20)}, **{(1, o): 1 for o in range(15, 20)}}
            b.beat(epoch=-1)
        finally:
            b.close()

        resp = delete_offsets(a.client, group, [topic, "no-such-topic"])
        assert resp.error_code == 0
        assert {t.topic_name: t.error_code for t in resp.responses} == {
            topic: 0, "no-such-topic": UNKNOWN_TOPIC_OR_PARTITION}
        assert describe_offsets(a.client, group) == (0, {})
        # Deleted: the share-partitions start at share.auto.offset.reset (earliest) again.
        c = ShareMember(broker, store, group, [topic])
        try:
            c.beat()
            assert len(c.acquired(c.fetch(topic, partitions=(0, 1)))) == 40
        finally:
            c.close()
    finally:
        a.close()


def test_alter_offsets_creates_the_group_and_refuses_another_groups_id(shared):
    store, broker = shared
    topic = topic_with_records(store, 5)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    a = ShareMember(broker, store, group, [topic])
    try:
        assert alter_offsets(a.client, group, {(topic, 0): 3}).error_code == 0
        assert listed(a.client)[group] == ("share", "Empty", "share")
        a.beat()
        assert a.acquired(a.fetch(topic)) == {(0, 3): 1, (0, 4): 1}
        negative = alter_offsets(a.client, f"sg-{uuid.uuid4().hex[:8]}", {(topic, 0): -5})
        assert negative.responses[0].partitions[0].error_code == 42     # INVALID_REQUEST
    finally:
        a.close()
