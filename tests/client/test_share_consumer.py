"""pylog.ShareConsumer (KafkaShareConsumer's API in-process, KIP-932): records go to one
member at a time, acknowledgements ACCEPT/RELEASE/REJECT, implicit and explicit modes,
closing releases, a reopened store keeps what was acknowledged; and an in-process member
beside a remote one (raw ShareFetch through a broker) in one group."""

from __future__ import annotations

import threading
import uuid

import pytest

import pylog
from pylog import AcknowledgeType
from pylog.client.share_consumer import IllegalStateError
from pylog.coordinator.share_group import share_coordinator

from share_support import ShareMember


def _queue(store, n: int, partitions: int = 1) -> tuple[str, str]:
    topic, group = f"q-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, partitions)
    with pylog.Producer(store, linger_ms=0) as producer:
        for p in range(partitions):
            producer.send_batch(topic, [b"%d-%d" % (p, i) for i in range(n)], partition=p)
    share_coordinator(store).group(group).set_configs({"share.auto.offset.reset": "earliest"})
    return topic, group


@pytest.fixture
def store(tmp_path):
    with pylog.open(str(tmp_path / "store")) as s:
        yield s


def test_two_members_split_the_records_and_implicit_mode_accepts_them(store):
    topic, group = _queue(store, 100)
    a = pylog.ShareConsumer(store, topic, group_id=group, max_poll_records=30)
    b = pylog.ShareConsumer(store, topic, group_id=group, max_poll_records=30)
    seen: list[int] = []
    while len(seen) < 100:
        got = a.poll(5.0) + b.poll(5.0)
        assert got, "nothing left to poll before every record was seen"
        seen += [r.offset for r in got]
        assert all(r.delivery_count == 1 and r.value == b"0-%d" % r.offset for r in got)
    assert sorted(seen) == list(range(100))                 # each to one member, once
    assert a.commit_sync() == {pylog.TopicPartition(topic, 0): None}
    b.close()                                               # accepts its last poll's records
    assert a.poll(0) == [] and b._closed
    sp = share_coordinator(store).group(group).partitions[(topic, 0)]
    assert (sp.start_offset, sp.end_offset) == (100, 100)
    a.close()


def test_explicit_release_and_reject_and_the_delivery_count(store):
    topic, group = _queue(store, 5)
    c = pylog.ShareConsumer(store, topic, group_id=group, share_acknowledgement_mode="explicit")
    first = c.poll(5.0)
    assert [r.offset for r in first] == [0, 1, 2, 3, 4]
    with pytest.raises(IllegalStateError):
        c.poll(0)                                            # explicit: acknowledge first
    c.acknowledge(first[0])                                  # ACCEPT
    c.acknowledge(first[1], AcknowledgeType.RELEASE)
    c.acknowledge(first[2], AcknowledgeType.REJECT)
    c.acknowledge(first[3], AcknowledgeType.RELEASE)
    c.acknowledge(first[4])
    with pytest.raises(IllegalStateError):
        c.acknowledge(first[4])                              # twice
    again = c.poll(5.0)
    assert [(r.offset, r.delivery_count) for r in again] == [(1, 2), (3, 2)]
    for r in again:
        c.acknowledge(r)
    assert all(v is None for v in c.commit_sync().values())
    assert c.poll(0) == []
    c.close()


def test_closing_releases_what_a_member_holds_and_a_reopened_store_keeps_acks(tmp_path, caplog):
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        topic, group = _queue(store, 10)
        a = pylog.ShareConsumer(store, topic, group_id=group, share_acknowledgement_mode="explicit",
                                max_poll_records=4)
        got = a.poll(5.0)
        for r in got[:2]:
            a.acknowledge(r)
        a.commit_sync()
        held = got[2:]
        a.close()                       # 2 and 3 unacknowledged: released
    caplog.clear()
    with pylog.open(path) as store:     # the state came back from share-groups/
        assert not [r for r in caplog.records if "share-groups" in r.getMessage()]   # not a partition dir
        b = pylog.ShareConsumer(store, topic, group_id=group)
        again = b.poll(5.0)
        assert [(r.offset, r.delivery_count) for r in again] == \
            [(r.offset, 2) for r in held] + [(o, 1) for o in range(4, 10)]
        b.close()


def test_an_in_process_member_beside_a_remote_member_of_one_share_group(tmp_path):
    with pylog.open(str(tmp_path / "store")) as store:
        topic, group = _queue(store, 200)
        with pylog.Broker(store, listen="127.0.0.1:0") as broker:
            local = pylog.ShareConsumer(store, topic, group_id=group, max_poll_records=25)
            remote = ShareMember(broker, store, group, [topic])
            assert remote.beat().error_code == 0
            members = share_coordinator(store).group(group).members
            assert set(members) == {local.member_id, remote.member_id}
            local_got, remote_got = [], []
            acks = []
            for _ in range(50):
                local_got += [r.offset for r in local.poll(1.0)]
                resp = remote.fetch(topic, acks={0: acks} if acks else None, max_records=25)
                got = sorted(o for _, o in remote.acquired(resp))
                remote_got += got
                acks = [(o, o, [1]) for o in got]
                if len(local_got) + len(remote_got) >= 200:
                    break
            remote.acknowledge(topic, {0: acks})
            local.close()
            remote.close()
        assert local_got and remote_got
        assert sorted(local_got + remote_got) == list(range(200))
        sp = share_coordinator(store).group(group).partitions[(topic, 0)]
        assert (sp.start_offset, sp.end_offset) == (200, 200)


def test_poll_waits_for_an_append(store):
    topic, group = _queue(store, 0)
    c = pylog.ShareConsumer(store, topic, group_id=group)
    assert c.poll(0) == []
    writer = threading.Thread(target=lambda: store.log(topic, 0).append_records([b"late"]))
    writer.start()
    got = c.poll(10.0)
    writer.join()
    assert [(r.offset, r.value) for r in got] == [(0, b"late")]
    c.close()


def test_a_deleted_topic_leaves_the_state_file(store):
    topic, group = _queue(store, 3)
    other, _ = _queue(store, 3)
    shares = share_coordinator(store)
    with pylog.ShareConsumer(store, topic, other, group_id=group) as c:
        assert len(c.poll(5.0)) + len(c.poll(5.0)) == 6
    assert set(shares.group(group).partitions) == {(topic, 0), (other, 0)}
    store.delete_topic(other)
    shares.group(group).set_configs({"share.delivery.count.limit": "3"})      # a write
    assert set(shares.group(group).partitions) == {(topic, 0)}
    assert [p["topic"] for p in shares.group(group).to_json()["partitions"]] == [topic]
