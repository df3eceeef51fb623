"""Share groups (KIP-932) on the wire: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch
and ShareAcknowledge sent raw through a broker socket, so each test picks the exact
epochs and acknowledgements (Kafka's Java KafkaShareConsumer:
tests/kafka_reference/test_java_share_consumer.py; kill -9:
tests/broker/test_share_groups_kill9.py)."""

from __future__ import annotations

import uuid

import pytest

import pylog
from pylog.coordinator.share_group import share_coordinator
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from share_support import (ACCEPT, DESCRIBE, FENCED_MEMBER_EPOCH, INVALID_RECORD_STATE,
                           INVALID_REQUEST, INVALID_SHARE_SESSION_EPOCH, REJECT, RELEASE,
                           SHARE_SESSION_LIMIT_REACHED, SHARE_SESSION_NOT_FOUND, UNKNOWN_MEMBER_ID,
                           ShareMember, serve_store, topic_with_records, until)

@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    yield from serve_store(tmp_path_factory, "share", group_share_session_timeout_ms=1500,
                           group_share_record_lock_duration_ms=1000)



def earliest_group(store) -> str:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    share_coordinator(store).group(group).set_configs({"share.auto.offset.reset": "earliest"})
    return group


def test_heartbeat_joins_and_assigns_every_partition_to_every_member(shared):
    store, broker = shared
    topic = topic_with_records(store, 1, partitions=3)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    a, b = ShareMember(broker, store, group, [topic]), ShareMember(broker, store, group, [topic])
    try:
        ra, rb = a.beat(), b.beat()
        assert ra.error_code == rb.error_code == 0
        assert a.assignment == b.assignment == {topic: [0, 1, 2]}
        assert ra.heartbeat_interval_ms == 250 and rb.member_epoch > ra.member_epoch > 0
        assert a.beat().error_code == 0 and a.beat().assignment is None   # unchanged: not resent
        described = a.client.request(DESCRIBE, m.ShareGroupDescribeRequest(group_ids=[group]), 1)
        (g,) = described.groups
        assert g.error_code == 0 and g.group_state == "Stable" and g.assignor_name == "simple"
        assert sorted(mem.member_id for mem in g.members) == sorted([a.member_id, b.member_id])
        assert a.beat(epoch=a.epoch + 7).error_code == FENCED_MEMBER_EPOCH
        assert a.beat(epoch=-1).member_epoch == -1
        assert a.beat(epoch=3).error_code == UNKNOWN_MEMBER_ID
        assert b.beat(epoch=0, subscribed_topic_names=None).error_code == INVALID_REQUEST
    finally:
        a.close(), b.close()


def test_records_go_to_one_member_each_and_accepted_ones_never_return(shared):
    store, broker = shared
    topic = topic_with_records(store, 100)
    group = earliest_group(store)
    a, b = ShareMember(broker, store, group, [topic]), ShareMember(broker, store, group, [topic])
    try:
        a.beat(), b.beat()
        ra = a.fetch(topic, max_records=40)
        rb = b.fetch(topic, max_records=100)
        got_a, got_b = a.acquired(ra), b.acquired(rb)
        assert len(got_a) == 40 and len(got_b) == 60 and not set(got_a) & set(got_b)
        assert set(got_a.values()) == set(got_b.values()) == {1}
        assert a.values(ra)[0] == b"0-0" and b.values(rb)[99] == b"0-99"
        # a accepts its 40 with a ShareAcknowledge; b accepts 40-79 piggybacked on a fetch,
        # rejects 80-89 and releases 90-99, which a then gets with delivery count 2.
        ack = a.acknowledge(topic, {0: [(0, 39, [ACCEPT])]})
        assert ack.error_code == 0 and ack.responses[0].partitions[0].error_code == 0
        rb2 = b.fetch(topic, acks={0: [(40, 79, [ACCEPT]), (80, 99, [REJECT] * 10 + [RELEASE] * 10)]})
        assert rb2.responses[0].partitions[0].acknowledge_error_code == 0
        # The same fetch acquires what its acknowledgements released, delivered twice now.
        assert b.acquired(rb2) == {(0, o): 2 for o in range(90, 100)}
        assert a.acquired(a.fetch(topic)) == {}
        # Acknowledging records it does not hold: INVALID_RECORD_STATE, nothing applied.
        bad = a.acknowledge(topic, {0: [(90, 95, [ACCEPT])]})
        assert bad.responses[0].partitions[0].error_code == INVALID_RECORD_STATE
        assert b.acknowledge(topic, {0: [(90, 99, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
        sp = share_coordinator(store).group(group).partitions[(topic, 0)]
        assert sp.start_offset == 100 and sp.end_offset == 100
        assert a.acquired(a.fetch(topic)) == {} and b.acquired(b.fetch(topic)) == {}
    finally:
        a.close(), b.close()


def test_a_lock_that_times_out_makes_records_available_until_the_delivery_limit(shared):
    store, broker = shared
    topic = topic_with_records(store, 3)
    group = earliest_group(store)
    share_coordinator(store).group(group).set_configs({"share.delivery.count.limit": "2",
                                                       "share.session.timeout.ms": "60000"})
    a = ShareMember(broker, store, group, [topic])
    try:
        a.beat()
        assert a.acquired(a.fetch(topic)) == {(0, o): 1 for o in range(3)}
        # Not acknowledged: the 1 s lock expires and a parked fetch gets them again.
        assert a.acquired(a.fetch(topic, max_wait_ms=10_000)) == {(0, o): 2 for o in range(3)}
        sp = share_coordinator(store).group(group).partitions[(topic, 0)]
        until(lambda: sp.acquired_count() == 0, "the second lock to expire")
        late = a.acknowledge(topic, {0: [(0, 2, [ACCEPT])]})
        assert late.error_code == 0, late
        late = late.responses[0].partitions[0]
        assert late.error_code == INVALID_RECORD_STATE
        # Delivered twice, the limit: archived, never delivered again.
        assert sp.start_offset == 3 and a.acquired(a.fetch(topic)) == {}
    finally:
        a.close()


def test_share_sessions_need_their_epoch_and_closing_releases_the_member_records(shared):
    store, broker = shared
    topic = topic_with_records(store, 10)
    group = earliest_group(store)
    a, b = ShareMember(broker, store, group, [topic]), ShareMember(broker, store, group, [topic])
    try:
        a.beat(), b.beat()
        assert a.fetch(topic, epoch=5).error_code == SHARE_SESSION_NOT_FOUND
        assert a.acknowledge(topic, {}, epoch=0).error_code == INVALID_SHARE_SESSION_EPOCH
        assert len(a.acquired(a.fetch(topic, max_records=4))) == 4
        assert a.fetch(topic, epoch=a.session_epoch + 3).error_code == INVALID_SHARE_SESSION_EPOCH
        assert b.acquired(b.fetch(topic)) == {(0, o): 1 for o in range(4, 10)}
        closed = a.fetch(topic, acks={0: [(0, 0, [ACCEPT])]}, epoch=-1)
        assert closed.error_code == 0 and closed.responses[0].partitions[0].acknowledge_error_code == 0
        assert a.fetch(topic, epoch=1).error_code == SHARE_SESSION_NOT_FOUND
        assert b.acquired(b.fetch(topic)) == {(0, o): 2 for o in range(1, 4)}
    finally:
        a.close(), b.close()


def test_a_member_whose_session_times_out_gives_its_records_back(shared):
    store, broker = shared
    topic = topic_with_records(store, 5)
    group = earliest_group(store)
    share_coordinator(store).group(group).set_configs({"share.record.lock.duration.ms": "600000"})
    a, b = ShareMember(broker, store, group, [topic]), ShareMember(broker, store, group, [topic])
    try:
        a.beat(), b.beat()
        assert len(a.acquired(a.fetch(topic))) == 5
        assert b.acquired(b.fetch(topic)) == {}
        got = until(lambda: (b.beat(), b.acquired(b.fetch(topic)))[1], "a's records after its session",
                    timeout=20)
        assert got == {(0, o): 2 for o in range(5)}
        assert a.beat().error_code == UNKNOWN_MEMBER_ID
    finally:
        a.close(), b.close()


def test_latest_reset_starts_at_the_log_end_and_api_versions_lists_share_apis(shared):
    store, broker = shared
    topic = topic_with_records(store, 5)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    a = ShareMember(broker, store, group, [topic])
    try:
        a.beat()
        assert a.acquired(a.fetch(topic)) == {}
        with pylog.Producer(store, linger_ms=0) as producer:
            producer.send_batch(topic, [b"late"], partition=0)
        resp = a.fetch(topic, max_wait_ms=10_000)
        assert a.acquired(resp) == {(0, 5): 1} and a.values(resp) == {5: b"late"}
        versions = {k.api_key: (k.min_version, k.max_version)
                    for k in a.client.request(18, m.ApiVersionsRequest(), 3).api_keys}
        assert all(versions[k] == (1, 1) for k in (76, 77, 78, 79))
    finally:
        a.close()


def test_share_sessions_are_bounded(tmp_path):
    with pylog.open(str(tmp_path / "store")) as store:
        topic = topic_with_records(store, 1)
        with pylog.Broker(store, listen="127.0.0.1:0", group_share_max_share_sessions=2) as broker:
            members = [ShareMember(broker, store, "bounded", [topic]) for _ in range(4)]
            try:
                for mem in members[:3]:
                    assert mem.beat().error_code == 0
                codes = [mem.fetch(topic).error_code for mem in members[:3]]
                assert codes == [0, 0, SHARE_SESSION_LIMIT_REACHED]
                assert members[0].fetch(topic, epoch=-1).error_code == 0      # one closes
                assert members[2].fetch(topic).error_code == 0
                # A session of a client that is no member gives way when the limit is reached.
                assert members[1].beat(epoch=-1).error_code == 0              # leaves: session gone
                assert members[3].fetch(topic).error_code == 0                # never joined
                assert members[0].beat(epoch=0).error_code == 0
                assert members[0].fetch(topic, epoch=0).error_code == 0       # evicts members[3]'s
                assert members[3].fetch(topic).error_code == SHARE_SESSION_NOT_FOUND
            finally:
                for mem in members:
                    mem.close()


def test_group_configs_through_describe_and_incremental_alter_configs(shared):
    store, broker = shared
    topic = topic_with_records(store, 3)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    with ProtocolClient(broker.bootstrap_servers) as client:
        def describe():
            resp = client.request(32, m.DescribeConfigsRequest(resources=[
                m.DescribeConfigsRequestDescribeConfigsResource(resource_type=32, resource_name=group,
                                                                configuration_keys=None)]), 4)
            (res,) = resp.results
            assert res.error_code == 0, res
            return {c.name: (c.value, c.config_source) for c in res.configs}

        assert describe()["share.auto.offset.reset"] == ("latest", 5)
        assert describe()["share.record.lock.duration.ms"] == ("1000", 5)     # the broker's
        def alter(name, value):
            resp = client.request(44, m.IncrementalAlterConfigsRequest(resources=[
                m.IncrementalAlterConfigsRequestAlterConfigsResource(resource_type=32, resource_name=group,
                    configs=[m.IncrementalAlterConfigsRequestAlterableConfig(
                        name=name, config_operation=0, value=value)])], validate_only=False), 1)
            return resp.responses[0].error_code
        assert alter("share.auto.offset.reset", "earliest") == 0
        assert alter("share.auto.offset.reset", "yesterday") == 40          # INVALID_CONFIG
        assert alter("share.no.such.key", "1") == 40
        assert describe()["share.auto.offset.reset"] == ("earliest", 8)     # GROUP_CONFIG
    member = ShareMember(broker, store, group, [topic])
    try:
        member.beat()
        assert member.acquired(member.fetch(topic)) == {(0, o): 1 for o in range(3)}
    finally:
        member.close()


def test_fetches_turn_from_partition_to_partition(shared):
    store, broker = shared
    topic = topic_with_records(store, 50, partitions=3)
    group = earliest_group(store)
    a = ShareMember(broker, store, group, [topic])
    try:
        a.beat()
        firsts = [{p for p, _ in a.acquired(a.fetch(topic, partitions=(0, 1, 2), max_records=5))}
                  for _ in range(3)]
        assert sorted(p for ps in firsts for p in ps) == [0, 1, 2]      # one each, in turn
    finally:
        a.close()


def test_a_fetch_sends_the_batches_it_acquired_records_of(shared):
    store, broker = shared
    topic = f"q-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, 1)
    with pylog.Producer(store, linger_ms=0) as producer:
        for i in range(10):                          # 10 batches of 100 records
            producer.send_batch(topic, [b"v%d" % j for j in range(i * 100, i * 100 + 100)], partition=0)
    group = earliest_group(store)
    a = ShareMember(broker, store, group, [topic])
    try:
        a.beat()
        resp = a.fetch(topic, max_records=150)       # ends inside the second batch
        assert a.acquired(resp) == {(0, o): 1 for o in range(150)}
        batches = list(pylog.records.iter_batches(bytes(resp.responses[0].partitions[0].records)))
        assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 99), (100, 199)]
        resp = a.fetch(topic, max_records=1000)      # the rest: from the second batch on
        assert sorted(o for _, o in a.acquired(resp)) == list(range(150, 1000))
        assert a.values(resp)[999] == b"v999"
    finally:
        a.close()
