"""kill -9 of `pylog serve` while two share group members consume a queue (KIP-932):
after the restart no record whose acknowledgement was answered is delivered again,
records acquired but not acknowledged are delivered again with their delivery count
kept, and every record is delivered at least once."""

from __future__ import annotations

import json
import os
import socket
import threading

import pylog
from pylog.coordinator.share_group import SHARE_STATE_DIR, share_coordinator

from .process import ServeProcess
from share_support import ACCEPT, UNKNOWN_MEMBER_ID, ShareMember, until

N = 3000


class _Queue:
    """Two members taking turns on one connection each; acknowledgements piggybacked
    on the next ShareFetch, all ACCEPT."""

    def __init__(self, store_view, group: str, topic: str) -> None:
        self.store = store_view
        self.group, self.topic = group, topic
        self.confirmed: set[int] = set()    # acknowledgements answered NONE
        self.sent: set[int] = set()         # acknowledgements sent (answered or not)
        self.delivered: dict[int, list[int]] = {}   # offset -> delivery counts seen
        self.values: dict[int, bytes] = {}
        self.violations: list[str] = []
        self.bootstrap = None
        self.failures = 0                   # times the connections failed (the kill)
        self.stop = threading.Event()

    def run(self) -> None:
        members: list = []
        pending: dict[str, list[int]] = {}
        while not self.stop.is_set():
            try:
                while len(members) < 2:
                    members.append(_Member(self.bootstrap, self.store, self.group, [self.topic]))
                    assert members[-1].beat().error_code == 0
                for mem in members:
                    acks = pending.pop(mem.member_id, [])
                    batches = [(o, o, [ACCEPT]) for o in acks]
                    self.sent.update(acks)
                    before = set(self.confirmed)
                    resp = mem.fetch(self.topic, acks={0: batches} if batches else None,
                                     max_records=97, max_wait_ms=200)
                    if resp.error_code:
                        raise _Rejoin(resp)
                    part = resp.responses[0].partitions[0] if resp.responses else None
                    if acks and part is not None and part.acknowledge_error_code == 0:
                        self.confirmed.update(acks)
                    got = mem.acquired(resp)
                    for (_, offset), count in got.items():
                        if offset in before or (offset in acks and offset in self.confirmed):
                            self.violations.append(f"offset {offset} delivered after its "
                                                   f"acknowledgement was answered")
                        self.delivered.setdefault(offset, []).append(count)
                    self.values.update(mem.values(resp))
                    pending[mem.member_id] = sorted(o for _, o in got)
                    if mem.beat().error_code == UNKNOWN_MEMBER_ID:
                        raise _Rejoin(None)
            except (_Rejoin, OSError, EOFError, ConnectionError, AssertionError):
                for mem in members:
                    mem.close()
                members, pending = [], {}
                self.failures += 1
                # Until the broker (restarted: a new port) listens again.
                until(lambda: self.stop.is_set() or self._up(), "the broker back", timeout=120)
        for mem in members:
            mem.close()

    def _up(self) -> bool:
        host, port = self.bootstrap.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return True
        except OSError:
            return False


class _Rejoin(Exception):
    pass


class _Member(ShareMember):
    def __init__(self, bootstrap, store_view, group, topics) -> None:
        broker = type("B", (), {"bootstrap_servers": bootstrap})()
        super().__init__(broker, store_view, group, topics)


class _StoreView:
    """What ShareMember needs of a store (topic ids), read before the broker started."""

    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids

    def topic_id(self, topic: str) -> str:
        return self.ids[topic]


def test_kill_9_mid_stream_redelivers_nothing_acknowledged_and_loses_nothing(tmp_path):
    path = str(tmp_path / "store")
    group, topic = "kill9-share", "queue"
    with pylog.open(path) as store:
        store.create_topic(topic, 1)
        with pylog.Producer(store, linger_ms=0) as producer:
            for i in range(0, N, 100):
                producer.send_batch(topic, [b"r%d" % j for j in range(i, i + 100)], partition=0)
        share_coordinator(store).group(group).set_configs({"share.auto.offset.reset": "earliest"})
        view = _StoreView({topic: store.topic_id(topic)})
    queue = _Queue(view, group, topic)
    broker = ServeProcess(path, "group.share.heartbeat.interval.ms=200")
    queue.bootstrap = broker.bootstrap
    consumer = threading.Thread(target=queue.run, daemon=True)
    consumer.start()
    try:
        until(lambda: len(queue.confirmed) >= N // 3, "a third acknowledged", timeout=120)
        broker.kill()                                 # mid-stream: requests in flight
        until(lambda: queue.failures, "the members to see the broker gone")
        acquired_unacked = set(queue.delivered) - queue.sent
        # Acknowledgements sent but not answered: applied or not, nobody knows; if not,
        # their records come back and are acknowledged again.
        unanswered = queue.sent - queue.confirmed
        broker.stop()
        broker = ServeProcess(path, "group.share.heartbeat.interval.ms=200")
        queue.bootstrap = broker.bootstrap
        everything = set(range(N))
        until(lambda: queue.violations or queue.confirmed | unanswered >= everything,
              "every record acknowledged", timeout=240)
    finally:
        queue.stop.set()
        consumer.join(30)
        broker.stop()
    assert not queue.violations, queue.violations[:5]
    assert set(queue.delivered) == set(range(N))                   # at least once
    assert all(queue.values[o] == b"r%d" % o for o in range(N))
    # Acquired before the kill and never acknowledged: delivered again, counted twice.
    assert acquired_unacked
    assert all(len(queue.delivered[o]) >= 2 and queue.delivered[o][-1] >= 2 for o in acquired_unacked)
    # The state on disk: everything done, the window empty.
    (name,) = os.listdir(os.path.join(path, SHARE_STATE_DIR))
    with open(os.path.join(path, SHARE_STATE_DIR, name)) as f:
        (part,) = json.load(f)["partitions"]
    assert part["start_offset"] == N and part["state_batches"] == []
