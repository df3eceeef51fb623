"""A share group member speaking ShareGroupHeartbeat, ShareFetch and ShareAcknowledge raw
(pylog.protocol.client), for the tests that pick exact epochs and acknowledgements."""

from __future__ import annotations

import time
import uuid

import pylog
from pylog.broker.admin import topic_id_bytes
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

HEARTBEAT, DESCRIBE, SHARE_FETCH, SHARE_ACK = 76, 77, 78, 79
ACCEPT, RELEASE, REJECT = 1, 2, 3
UNKNOWN_MEMBER_ID, INVALID_REQUEST, FENCED_MEMBER_EPOCH = 25, 42, 110
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 121, 122, 123
SHARE_SESSION_LIMIT_REACHED = 133


def serve_store(tmp_path_factory, name: str, **broker_configs):
    """A store in a fresh temp dir and a pylog.Broker serving it on loopback (a module
    fixture's body: yields (store, broker), then stops both)."""
    store = pylog.open(str(tmp_path_factory.mktemp(name)))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_share_heartbeat_interval_ms=250,
                          **broker_configs).start()
    try:
        yield store, broker
    finally:
        broker.shutdown()
        store.close()


def topic_with_records(store, n: int, partitions: int = 1) -> str:
    """A new topic of `partitions` partitions, each with `n` records ``b"<p>-<i>"``."""
    name = f"q-{uuid.uuid4().hex[:8]}"
    store.create_topic(name, partitions)
    with pylog.Producer(store, linger_ms=0) as producer:
        for p in range(partitions):
            producer.send_batch(name, [b"%d-%d" % (p, i) for i in range(n)], partition=p)
    return name


class ShareMember:
    """One share group member on its own connection: heartbeats, a share session."""

    def __init__(self, broker, store, group: str, topics) -> None:
        self.client = ProtocolClient(broker.bootstrap_servers, client_id="raw-share")
        self.store = store
        self.group = group
        self.topics = list(topics)
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0
        self.session_epoch = 0
        self.assignment: dict[str, list[int]] = {}

    def tid(self, topic: str) -> bytes:
        return topic_id_bytes(self.store.topic_id(topic))

    def beat(self, epoch: int | None = None, **fields):
        epoch = self.epoch if epoch is None else epoch
        req = m.ShareGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id,
                                           member_epoch=epoch,
                                           subscribed_topic_names=self.topics if epoch == 0 else None)
        for k, v in fields.items():
            setattr(req, k, v)
        resp = self.client.request(HEARTBEAT, req, 1)
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                names = {self.tid(t): t for t in self.topics}
                self.assignment = {names[tp.topic_id]: list(tp.partitions)
                                   for tp in resp.assignment.topic_partitions}
        return resp

    def fetch(self, topic: str, partitions=(0,), acks=None, max_records: int = 500,
              max_wait_ms: int = 0, epoch: int | None = None):
        """One ShareFetch; `acks`: partition -> [(first, last, [types])]. Returns the
        response; records: ``self.records(resp)``."""
        acks = acks or {}
        req = m.ShareFetchRequest(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.session_epoch if epoch is None else epoch,
            max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, max_records=max_records,
            batch_size=max_records,
            topics=[m.ShareFetchRequestFetchTopic(topic_id=self.tid(topic), partitions=[
                m.ShareFetchRequestFetchPartition(partition_index=p, acknowledgement_batches=[
                    m.ShareFetchRequestAcknowledgementBatch(first_offset=f, last_offset=la,
                                                            acknowledge_types=list(ts))
                    for f, la, ts in acks.get(p, ())]) for p in partitions])],
            forgotten_topics_data=[])
        resp = self.client.request(SHARE_FETCH, req, 1)
        if resp.error_code == 0 and epoch is None:
            self.session_epoch += 1
        return resp

    def acknowledge(self, topic: str, acks, epoch: int | None = None):
        req = m.ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.session_epoch if epoch is None else epoch,
            topics=[m.ShareAcknowledgeRequestAcknowledgeTopic(topic_id=self.tid(topic), partitions=[
                m.ShareAcknowledgeRequestAcknowledgePartition(partition_index=p, acknowledgement_batches=[
                    m.ShareAcknowledgeRequestAcknowledgementBatch(first_offset=f, last_offset=la,
                                                                  acknowledge_types=list(ts))
                    for f, la, ts in batches]) for p, batches in acks.items()])])
        resp = self.client.request(SHARE_ACK, req, 1)
        if resp.error_code == 0 and epoch is None:
            self.session_epoch += 1
        return resp

    @staticmethod
    def acquired(resp) -> dict[tuple[int, int], int]:
        """(partition, offset) -> delivery count of every acquired record."""
        out = {}
        for t in resp.responses:
            for p in t.partitions:
                for r in p.acquired_records:
                    for o in range(r.first_offset, r.last_offset + 1):
                        out[(p.partition_index, o)] = r.delivery_count
        return out

    @staticmethod
    def values(resp) -> dict[int, bytes]:
        """offset -> value of the acquired records in the response's batches."""
        out = {}
        for t in resp.responses:
            for p in t.partitions:
                wanted = {o for r in p.acquired_records for o in range(r.first_offset, r.last_offset + 1)}
                for batch in pylog.records.iter_batches(bytes(p.records or b"")):
                    for rec in batch:
                        if rec.offset in wanted:
                            out[rec.offset] = rec.value
        return out

    def close(self) -> None:
        self.client.close()


def until(predicate, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
