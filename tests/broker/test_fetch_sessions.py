"""Incremental fetch sessions (KIP-227) and topics by id (Fetch 13+), on the wire: a full
fetch opens a session, an incremental fetch with nothing new answers no partition, one
with an append answers that partition alone, forgotten partitions stop being read, and
the session errors are Kafka's (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR, UNKNOWN_TOPIC_ID)."""

from __future__ import annotations

import pytest

import pylog
from pylog.broker.admin import topic_id_bytes
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
UNKNOWN_TOPIC_ID = 100
FETCH_SESSION_TOPIC_ID_ERROR = 106


def fetch(client, version, session_id, epoch, parts, forgotten=(), by_id=True):
    """parts: [(topic name, topic id, partition, fetch offset)]."""
    topics: dict = {}
    for name, tid, p, offset in parts:
        topics.setdefault((name, tid), []).append(m.FetchRequestFetchPartition(
            partition=p, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=-1, log_start_offset=-1))
    req = m.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 24, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[m.FetchRequestFetchTopic(topic="" if by_id else name, topic_id=tid, partitions=ps)
                for (name, tid), ps in topics.items()],
        forgotten_topics_data=[m.FetchRequestForgottenTopic(
            topic="" if by_id else name, topic_id=tid, partitions=ps)
            for name, tid, ps in forgotten])
    return client.request(1, req, version)


def answered(resp, by_id=True):
    return sorted(((t.topic_id if by_id else t.topic), p.partition_index, p.error_code,
                   len(p.records or b""))
                  for t in resp.responses for p in t.partitions)


@pytest.fixture
def topic(served):
    name = served.topic(3)
    for p in range(3):
        served.store.log(name, p).append_records([b"v%d" % p])
    return name, topic_id_bytes(served.store.describe_topic(name).topic_id)


def test_apiversions_advertises_fetch_18_as_kafka_41(served):
    with ProtocolClient(served.broker.bootstrap_servers) as c:
        assert c.versions[1] == (4, 18)


def test_incremental_fetch_answers_only_what_changed(served, topic):
    name, tid = topic
    with ProtocolClient(served.broker.bootstrap_servers) as c:
        full = fetch(c, 18, 0, 0, [(name, tid, p, 0) for p in range(3)])
        assert full.error_code == 0 and full.session_id != 0
        assert answered(full) == [(tid, p, 0, len(full.responses[0].partitions[p].records))
                                  for p in range(3)]
        assert all(len(p.records) > 0 for p in full.responses[0].partitions)
        sid = full.session_id
        # The consumer moved to offset 1 everywhere: it says so, and nothing is new.
        moved = fetch(c, 18, sid, 1, [(name, tid, p, 1) for p in range(3)])
        assert moved.error_code == 0 and moved.session_id == sid and moved.responses == []
        # Nothing named, nothing new: an empty response (a few bytes on the wire).
        empty = fetch(c, 18, sid, 2, [])
        assert (empty.error_code, empty.session_id, empty.responses) == (0, sid, [])
        # An append to partition 1: it alone is answered, with its record.
        served.store.log(name, 1).append_records([b"new"])
        one = fetch(c, 18, sid, 3, [])
        assert [(p, e) for _, p, e, _ in answered(one)] == [(1, 0)]
        assert answered(one)[0][3] > 0
        # Forget partition 2, then append to it: it is no longer read.
        served.store.log(name, 2).append_records([b"unseen"])
        forgot = fetch(c, 18, sid, 4, [(name, tid, 1, 2)], forgotten=[(name, tid, [2])])
        assert forgot.responses == []
        # A reused epoch, an unknown session, names in a session of ids: Kafka's errors.
        stale = fetch(c, 18, sid, 4, [])
        assert (stale.error_code, stale.session_id, stale.responses) == \
            (INVALID_FETCH_SESSION_EPOCH, 0, [])
        unknown = fetch(c, 18, sid ^ 0x5A5A5A5, 1, [])
        assert (unknown.error_code, unknown.session_id) == (FETCH_SESSION_ID_NOT_FOUND, 0)
        mixed = fetch(c, 12, sid, 5, [], by_id=False)
        assert mixed.error_code == FETCH_SESSION_TOPIC_ID_ERROR
        # The session survived those errors; epoch -1 closes it.
        assert fetch(c, 18, sid, 5, []).error_code == 0
        closed = fetch(c, 18, sid, -1, [(name, tid, 0, 0)])
        assert closed.error_code == 0 and closed.session_id == 0
        assert fetch(c, 18, sid, 6, []).error_code == FETCH_SESSION_ID_NOT_FOUND


def test_sessions_by_name_before_v13(served, topic):
    name, _ = topic
    with ProtocolClient(served.broker.bootstrap_servers) as c:
        full = fetch(c, 12, 0, 0, [(name, None, p, 0) for p in range(3)], by_id=False)
        assert full.session_id != 0 and len(answered(full, by_id=False)) == 3
        assert fetch(c, 12, full.session_id, 1, [(name, None, p, 1) for p in range(3)],
                     by_id=False).responses == []
        served.store.log(name, 0).append_records([b"x"])
        got = fetch(c, 12, full.session_id, 2, [], by_id=False)
        assert [(t, p) for t, p, _, _ in answered(got, by_id=False)] == [(name, 0)]


def test_unknown_topic_id(served, topic):
    name, tid = topic
    bogus = bytes(16 - 1) + b"\x07"
    with ProtocolClient(served.broker.bootstrap_servers) as c:
        resp = fetch(c, 13, 0, -1, [(name, bogus, 0, 0), (name, tid, 0, 0)])
        assert sorted((t.topic_id, p.error_code) for t in resp.responses for p in t.partitions) \
            == sorted([(bogus, UNKNOWN_TOPIC_ID), (tid, 0)])
        # A topic deleted and created again has a new id: the old one is unknown.
        served.store.delete_topic(name)
        served.store.create_topic(name, 3)
        again = fetch(c, 13, 0, -1, [(name, tid, 0, 0)])
        assert again.responses[0].partitions[0].error_code == UNKNOWN_TOPIC_ID


def test_cache_slots_bound_the_sessions(tmp_path):
    store = pylog.open(str(tmp_path))
    broker = pylog.Broker(store, listen="127.0.0.1:0",
                          max_incremental_fetch_session_cache_slots=2).start()
    try:
        store.create_topic("t", 1)
        tid = topic_id_bytes(store.describe_topic("t").topic_id)
        with ProtocolClient(broker.bootstrap_servers) as c:
            ids = [fetch(c, 18, 0, 0, [("t", tid, 0, 0)]).session_id for _ in range(3)]
        # Two slots, both sessions in use (younger than 2 minutes): the third goes without.
        assert ids[0] != 0 and ids[1] != 0 and ids[2] == 0
    finally:
        broker.shutdown()
        store.close()
