"""GroupBridge: a group's in-process members, as one member of its Kafka-protocol group.

In-process ``pylog.Consumer`` members of a group share partitions through
:class:`~pylog.coordinator.group.ConsumerGroup` (assignment computed here, positions kept
by the group). Remote Kafka clients of the same ``group.id`` speak Kafka's classic
protocol (:class:`~pylog.coordinator.classic_group.ClassicGroup`). When both exist, a
bridge thread makes the in-process side one member of the classic group, as a Kafka
client would be: it subscribes to the union of the local members' topics, joins, takes
its share (as the leader it assigns every member with Kafka's range or roundrobin
assignor, over the members' ConsumerProtocolSubscription bytes), and the local group
then splits that share among its own members. On every rebalance the bridge first
revokes (eager protocol): the positions the local members reached are committed, so
whoever gets a partition next resumes exactly there.
"""

from __future__ import annotations

import logging
import threading
import time

from pylog.common.topic_partition import TopicPartition
from pylog.errors import ErrorCode

from .classic_group import ClassicGroup
from .group import ASSIGNORS, ConsumerGroup

__all__ = ["GroupBridge", "encode_subscription", "decode_subscription", "encode_assignment",
           "decode_assignment"]

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
HEARTBEAT_S = 0.2


def _messages():
    """pylog.protocol's messages, imported on first use: a large module that every
    `import pylog` (and every CLI command) would otherwise load for groups shared with
    Kafka clients."""
    from pylog.protocol import messages
    return messages


def _versioned(struct, version: int) -> bytes:
    return version.to_bytes(2, "big") + struct.encode(version)


def encode_subscription(topics: list[str]) -> bytes:
    m = _messages()
    return _versioned(m.ConsumerProtocolSubscription(topics=sorted(topics)), 0)


def decode_subscription(data: bytes) -> set[str]:
    version = min(int.from_bytes(data[:2], "big", signed=True), 3)
    m = _messages()
    return set(m.ConsumerProtocolSubscription.decode(memoryview(data)[2:], version).topics)


def encode_assignment(partitions: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    m = _messages()
    return _versioned(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=sorted(ps))
        for t, ps in sorted(by_topic.items())]), 0)


def decode_assignment(data: bytes) -> set[TopicPartition]:
    if len(data) < 2:
        return set()
    version = min(int.from_bytes(data[:2], "big", signed=True), 3)
    decoded = _messages().ConsumerProtocolAssignment.decode(memoryview(data)[2:], version)
    return {TopicPartition(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions}


class GroupBridge:
    """Runs while a group has in-process members and a Kafka-protocol group exists."""

    def __init__(self, coordinator, local: ConsumerGroup, classic: ClassicGroup,
                 topics_fn, partitions_of) -> None:
        self.coordinator = coordinator
        self.local = local
        self.classic = classic
        self.topics_fn = topics_fn            # () -> every topic of the store
        self.partitions_of = partitions_of    # topic -> partition count
        self.member_id = ""
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pylog-group-bridge-{local.group_id}",
                                       daemon=True)

    def start(self) -> GroupBridge:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        member_id = self.member_id
        if member_id:
            # Leaving answers a JoinGroup or SyncGroup the bridge has parked: it stops now.
            self.classic.leave(member_id)

    # ================================================================ loop

    def _subscribed(self) -> list[str]:
        with self.local.lock:
            return sorted(self.local.subscribed_topics(self.topics_fn()))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.local.members:
                    break
                topics = self._subscribed()
                self._revoke()
                generation = self._join(topics)
                if generation is None:
                    continue
                self._heartbeat(generation, topics)
        except Exception:                       # noqa: BLE001 - the bridge must not die silently
            log.exception("group %s: the in-process members' bridge failed", self.local.group_id)
        finally:
            self._revoke()
            if self.member_id:
                self.classic.leave(self.member_id)
            with self.local.lock:
                self.local.allowed = None
                self.local.rebalance(self.topics_fn(), self.partitions_of)
            self.coordinator._bridge_stopped(self)

    def _join(self, topics: list[str]) -> int | None:
        subscription = encode_subscription(topics)
        protocols = [(name, subscription) for name in ("range", "roundrobin")]
        # The bridge has a thread of its own to wait in (the broker's requests do not).
        result = self.classic.join_blocking(
            REBALANCE_MS / 1000 + 5, member_id=self.member_id, client_id="pylog-in-process",
            client_host="in-process", protocol_type=PROTOCOL_TYPE, protocols=protocols,
            session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            require_known_member=True, group_instance_id=None)
        if result.error == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = result.member_id
            return None
        if result.error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if result.error:
            time.sleep(0.1)
            return None
        assignments = {}
        if result.leader == self.member_id:
            assignments = self._assign(result.protocol, result.members)
        error, data, _, _ = self.classic.sync_blocking(self.member_id, result.generation, assignments,
                                                       wait_s=REBALANCE_MS / 1000)
        if error:
            return None
        mine = decode_assignment(data)
        with self.local.lock:
            self.local.allowed = mine
            self.local.rebalance(self.topics_fn(), self.partitions_of)
        log.info("group %s: in-process members own %s (generation %d)", self.local.group_id,
                 sorted(mine), result.generation)
        return result.generation

    def _assign(self, protocol: str, members) -> dict[str, bytes]:
        """The leader's job: Kafka's assignor over every member's subscription."""
        wanted = {mem.member_id: decode_subscription(mem.metadata(protocol)) for mem in members}
        counts = {t: self.partitions_of(t) for t in set().union(*wanted.values())}
        plan = ASSIGNORS[protocol](wanted, {t: n for t, n in counts.items() if n})
        return {mid: encode_assignment(tps) for mid, tps in plan.items()}

    def _heartbeat(self, generation: int, topics: list[str]) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if not self.local.members or self._subscribed() != topics:
                return                          # local members left or changed: rejoin / stop
            error = self.classic.heartbeat(self.member_id, generation)
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            if error:
                return                          # a rebalance: revoke and rejoin

    def _revoke(self) -> None:
        """Eager revoke: commit the positions the local members reached, forget them."""
        with self.local.lock:
            owned = self.local.allowed or set()
            positions = {tp: pos for tp, pos in self.local.positions.items() if tp in owned}
            self.local.allowed = set()
            for tp in owned:
                self.local.positions.pop(tp, None)
            self.local.rebalance(self.topics_fn(), self.partitions_of)
        if positions:
            try:
                self.coordinator.commit_offsets(self.local.group_id, positions)
            except Exception as exc:            # noqa: BLE001
                log.warning("group %s: committing revoked positions failed: %s", self.local.group_id, exc)
