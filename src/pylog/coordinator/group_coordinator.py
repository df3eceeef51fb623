"""GroupCoordinator: consumer groups and their committed offsets, over a storage LogManager.

The one coordinator of a store (Kafka's ``GroupCoordinator`` plus its
``GroupMetadataManager``): in-process consumers use it today, and the broker
will serve the same object to remote clients. It owns

- the **groups** of this process (:class:`~pylog.coordinator.group.ConsumerGroup`,
  one per ``group.id``): members, generations, assignment, positions;
- the remote clients' groups, one table of two kinds: classic
  (:class:`~pylog.coordinator.classic_group.ClassicGroup`, JoinGroup/SyncGroup) and the
  consumer protocol's (:class:`~pylog.coordinator.consumer_group.ConsumerProtocolGroup`,
  KIP-848's ConsumerGroupHeartbeat); a group id is one or the other;
- the **committed offsets**: every commit is appended to the internal
  compacted topic ``__consumer_offsets`` (Kafka's record schemas,
  :mod:`pylog.coordinator.offsets`) and then applied to an in-memory table,
  which is replayed from that topic when the store opens;
- the remote groups' **membership records**, in the same topic and Kafka's schemas
  (:mod:`pylog.coordinator.group_records`): each group hands the records of its changes
  to :meth:`GroupCoordinator._write_group_records`, which appends those that differ from
  the last written (kept per group, replayed at open); :meth:`restore_groups` (the
  broker, at start) rebuilds the groups from them, so a restart costs no rebalance;
- ``__consumer_offsets`` is a compacted topic: the log cleaner (pylog.storage.cleaner)
  keeps it bounded like any other.

It uses storage only through :class:`pylog.storage.LogManager`'s public
methods (``ensure_internal_topic``, ``partition_count``, ``log``,
``add_periodic_task``), so storage never imports it (docs/ARCHITECTURE.md,
"What may import what").

Thread safety: every method may be called from any thread. ``_lock``
covers each append to ``__consumer_offsets`` together with the update of the
in-memory table it implies, and the compaction, so the table and the log
never disagree about which value is newest.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Mapping

from pylog.common.topic_partition import TopicPartition
from pylog.errors import KafkaStorageError, PylogError, UnknownTopicOrPartitionError
from pylog.record import encode_batch
from pylog.storage import OFFSETS_TOPIC, Log, LogManager

from .bridge import GroupBridge
from . import group_records as gr
from .classic_group import ClassicGroup
from .consumer_group import ConsumerProtocolGroup, GroupError, TopicsView
from .consumer_group import codes as consumer_codes
from .group import ConsumerGroup
from .timer import DeadlineTimer
from .offsets import (
    OffsetAndMetadata,
    OffsetStore,
    decode_offset_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
    partition_for_group,
)
from .replay import internal_batches

__all__ = ["GroupCoordinator"]

log = logging.getLogger(__name__)


class GroupCoordinator:
    """Consumer groups and committed offsets of one store: ``GroupCoordinator(storage)``.

    Replays ``__consumer_offsets`` at construction and registers its periodic
    compaction with the store's background tasks.
    """

    def __init__(self, storage: LogManager) -> None:
        self.storage = storage
        self._offsets = OffsetStore()
        #: producer id -> group -> offsets of its open transaction (TxnOffsetCommit).
        self._txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self._lock = threading.Lock()             # appends to __consumer_offsets, compaction
        self._groups: dict[str, ConsumerGroup] = {}
        self._classic: dict[str, ClassicGroup] = {}
        # The consumer-protocol groups (KIP-848). A group id names a classic group or a
        # consumer one, never both (classic_group, consumer_group).
        self._consumer: dict[str, ConsumerProtocolGroup] = {}
        self._bridges: dict[str, GroupBridge] = {}
        self._groups_lock = threading.Lock()
        # The Kafka-protocol groups' deadlines (sessions, rebalances): one thread, alive
        # while any deadline is.
        self.timer = DeadlineTimer("pylog-group-timer")
        #: group id -> {key: value} of its membership records as last written (under _lock).
        self._group_images: dict[str, dict[bytes, bytes]] = {}
        self._restored = False
        self._topic_id_cache: dict[str, bytes] = {}      # base64 id -> 16 bytes (a cache)
        self._load_committed_offsets()

    # ================================================================= groups

    def group(self, group_id: str) -> ConsumerGroup:
        """The group `group_id` of this store's in-process consumers (created on first use).
        GroupError if remote members of the consumer protocol (KIP-848) hold the id: the
        in-process group is bridged to classic groups only, and two unbridged groups would
        both hand out every partition."""
        with self._groups_lock:
            remote = self._consumer.get(group_id)
            if remote is not None and not remote.is_empty():
                raise GroupError(consumer_codes.GROUP_ID_NOT_FOUND,
                                 f"group {group_id!r} is a consumer-protocol (KIP-848) group with "
                                 f"remote members; pylog's in-process Consumer joins classic groups only")
            group = self._groups.get(group_id)
            if group is None:
                group = self._groups[group_id] = ConsumerGroup(group_id)
            return group

    def classic_group(self, group_id: str, initial_delay_ms: int = 3000,
                      create: bool = True) -> ClassicGroup | None:
        """The Kafka-protocol group `group_id` (remote clients' JoinGroup/SyncGroup),
        created on first use unless `create` is false. Creating it where a consumer-protocol
        group of that id exists replaces the group if it is empty, and raises GroupError
        (GROUP_ID_NOT_FOUND) if not: Kafka's rule with online migration off."""
        with self._groups_lock:
            group = self._classic.get(group_id)
            if group is None and create:
                other = self._consumer.get(group_id)
                if other is not None:
                    if not other.is_empty():
                        raise GroupError(consumer_codes.GROUP_ID_NOT_FOUND,
                                         f"Group {group_id} is not a classic group.")
                    del self._consumer[group_id]
                    other.mark_dead()
                    self._forget_group_records(group_id)
                group = self._classic[group_id] = ClassicGroup(group_id, initial_delay_ms, self.timer)
                group.attach_persistence(self._group_writer(group_id))
            return group

    def consumer_group(self, group_id: str, create: bool = False, *, assignors: list[str] | None = None,
                       session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                       max_size: int = 2**31 - 1) -> ConsumerProtocolGroup | None:
        """The consumer-protocol group `group_id` (ConsumerGroupHeartbeat), or None; with
        `create`, made on first use. A classic group of that id is replaced if it has no
        members; one with members raises GroupError GROUP_ID_NOT_FOUND (Kafka's answer when
        group.consumer.migration.policy forbids the online upgrade: pylog has no upgrade)."""
        with self._groups_lock:
            group = self._consumer.get(group_id)
            if group is not None or not create:
                return group
            local = self._groups.get(group_id)
            if local is not None and local.members:
                raise GroupError(consumer_codes.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} has members in pylog's process (its in-process "
                                 f"Consumers), which join classic groups only")
            classic = self._classic.get(group_id)
            if classic is not None:
                if classic.describe()["members"]:
                    raise GroupError(consumer_codes.GROUP_ID_NOT_FOUND,
                                     f"Group {group_id} is not a consumer group")
                del self._classic[group_id]
                classic.mark_dead()
                self._forget_group_records(group_id)
            group = self._consumer[group_id] = ConsumerProtocolGroup(
                group_id, self.timer, assignors or ["uniform", "range"], session_timeout_ms,
                heartbeat_interval_ms, max_size)
            group.attach_persistence(self._group_writer(group_id), self.topic_id_bytes)
            return group

    def consumer_groups_of_protocol(self) -> list[ConsumerProtocolGroup]:
        with self._groups_lock:
            return list(self._consumer.values())

    def bridge_if_shared(self, group_id: str, initial_delay_ms: int = 3000) -> None:
        """Starts the group's bridge (bridge.py) when in-process members and the
        Kafka-protocol group both exist: called when either side gains a member."""
        with self._groups_lock:
            local = self._groups.get(group_id)
            classic = self._classic.get(group_id)
            if local is None or not local.members or group_id in self._bridges:
                return
            if classic is None:
                return
            bridge = self._bridges[group_id] = GroupBridge(
                self, local, classic, lambda: self.storage.list_topics(),
                lambda t: self.storage.partition_count(t) or 0)
        bridge.start()

    def _bridge_stopped(self, bridge: GroupBridge) -> None:
        with self._groups_lock:
            if self._bridges.get(bridge.local.group_id) is bridge:
                del self._bridges[bridge.local.group_id]

    def stop_bridges(self) -> None:
        with self._groups_lock:
            bridges = list(self._bridges.values())
        for b in bridges:
            b.stop()
        for b in bridges:
            b.thread.join(10)

    def classic_groups(self) -> list[ClassicGroup]:
        with self._groups_lock:
            return list(self._classic.values())

    def delete_group(self, group_id: str) -> None:
        """Deletes a group with no members: its committed offsets are tombstoned."""
        with self._groups_lock:
            group = self._classic.pop(group_id, None) or self._consumer.pop(group_id, None)
        if group is not None:
            group.mark_dead()
        self._forget_group_records(group_id)
        with self._lock:
            live = self._offsets.group(group_id)
            if live:
                self._append_offsets(group_id, [encode_offset_key(group_id, t, p) for t, p in live],
                                     [None] * len(live), self.storage.clock())
                self._offsets.remove(group_id, list(live))

    def delete_offsets(self, group_id: str, partitions) -> None:
        """Tombstones the committed offsets of `group_id` for those of `partitions`
        ((topic, partition) pairs) it has (Kafka's OffsetDelete)."""
        with self._lock:
            wanted = set(partitions)
            gone = [tp for tp in self._offsets.group(group_id) if tp in wanted]
            if gone:
                self._append_offsets(group_id, [encode_offset_key(group_id, t, p) for t, p in gone],
                                     [None] * len(gone), self.storage.clock())
                self._offsets.remove(group_id, gone)

    # ============================================ membership records (restarts)

    def topic_id_bytes(self, topic: str) -> bytes | None:
        """A topic's id as 16 bytes (None: no such topic)."""
        text = self.storage.topic_id(topic)
        if text is None:
            return None
        raw = self._topic_id_cache.get(text)
        if raw is None:
            raw = self._topic_id_cache[text] = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return raw

    def _group_writer(self, group_id: str):
        return lambda records, full: self._write_group_records(group_id, records, full)

    def _write_group_records(self, group_id: str, records: dict[bytes, bytes | None],
                             full: bool) -> bool:
        """Appends the records of a group's change that differ from those last written
        (with `full`, tombstones for its keys absent from `records`); False if the append
        failed (the group then hands everything over at its next change)."""
        with self._lock:
            image = self._group_images.get(group_id, {})
            changes = {k: v for k, v in records.items()
                       if image.get(k) != v and (v is not None or k in image)}
            if full:
                changes.update((k, None) for k in image if k not in records)
            if not changes:
                return True
            try:
                self._append_offsets(group_id, list(changes), list(changes.values()),
                                     self.storage.clock())
            except (PylogError, OSError) as exc:
                log.error("could not store the membership of group %s in %s: %s", group_id,
                          OFFSETS_TOPIC, exc)
                return False
            self._apply_group_records(group_id, changes)
            return True

    def _apply_group_records(self, group_id: str, changes: Mapping[bytes, bytes | None]) -> None:
        # The caller holds _lock (or is the replay).
        image = self._group_images.setdefault(group_id, {})
        for key, value in changes.items():
            if value is None:
                image.pop(key, None)
            else:
                image[key] = value
        if not image:
            del self._group_images[group_id]

    def _forget_group_records(self, group_id: str) -> None:
        """Tombstones every membership record of a group (deleted, or replaced by a
        group of the other protocol)."""
        self._write_group_records(group_id, {}, True)

    # The share coordinator (share_group.py) keeps its groups' membership here too.
    write_group_records = _write_group_records
    forget_group_records = _forget_group_records

    def stored_groups(self) -> list[str]:
        """The groups whose membership records ``__consumer_offsets`` holds."""
        with self._lock:
            return sorted(self._group_images)

    def stored_group_records(self, group_id: str) -> dict[bytes, bytes]:
        """A group's membership records as last written: {key: value}."""
        with self._lock:
            return dict(self._group_images.get(group_id, {}))

    def topic_names(self) -> dict[bytes, str]:
        """Topic id (16 bytes) -> name, of every topic."""
        names = {}
        for topic in self.storage.list_topics(include_internal=True):
            tid = self.topic_id_bytes(topic)
            if tid is not None:
                names[tid] = topic
        return names

    def restore_groups(self, *, initial_delay_ms: int = 3000, assignors: list[str] | None = None,
                       session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                       max_size: int = 2**31 - 1) -> int:
        """Rebuilds the remote clients' groups from their records (once; the broker calls
        it at start with its ``group.*`` configs): a classic group from its GroupMetadata
        (Stable with its members and assignments, or Empty), a consumer-protocol group
        from its epochs and members. Members' sessions count from now. Returns how many
        groups were rebuilt."""
        with self._groups_lock:
            if self._restored:
                return 0
            self._restored = True
        with self._lock:
            images = {g: dict(image) for g, image in self._group_images.items()}
        names = self.topic_names()
        topics = TopicsView(self.storage.topic_epoch, self.storage.partition_count,
                            lambda: [t for t in self.storage.list_topics() if not t.startswith("__")])
        restored = 0
        for group_id, image in sorted(images.items()):
            by_kind: dict[int, dict[str | None, bytes]] = {}
            for key, value in image.items():
                parsed = gr.decode_group_key(key)
                if parsed is not None:
                    by_kind.setdefault(parsed[0], {})[parsed[2]] = value
            try:
                if gr.GROUP_METADATA in by_kind:
                    record = gr.decode_classic_group(by_kind[gr.GROUP_METADATA][None])
                    group = ClassicGroup(group_id, initial_delay_ms, self.timer)
                    group.restore(record)
                    with self._groups_lock:
                        self._classic[group_id] = group
                    group.attach_persistence(self._group_writer(group_id))
                elif gr.CONSUMER_GROUP_METADATA in by_kind:
                    group = ConsumerProtocolGroup(group_id, self.timer, assignors or ["uniform", "range"],
                                                  session_timeout_ms, heartbeat_interval_ms, max_size)
                    group.restore(image, names, topics)
                    with self._groups_lock:
                        self._consumer[group_id] = group
                    group.attach_persistence(self._group_writer(group_id), self.topic_id_bytes)
                else:
                    continue            # a share group's (its coordinator's), or leftovers
            except PylogError as exc:
                log.error("group %s's stored membership is unreadable (%s): its members rejoin",
                          group_id, exc)
                continue
            restored += 1
            log.info("restored group %s from %s", group_id, OFFSETS_TOPIC)
        return restored

    # ====================================================== committed offsets

    def _offsets_log(self, group: str) -> Log:
        c = self.storage.config
        partitions = self.storage.ensure_internal_topic(
            OFFSETS_TOPIC, c["offsets.topic.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": c["offsets.topic.segment.bytes"],
             "compression.type": "producer"})
        return self.storage.log(OFFSETS_TOPIC, partition_for_group(group, partitions))

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                       metadata: str = "") -> None:
        """Stores committed offsets of `group`: ``{(topic, partition): offset}``
        (or OffsetAndMetadata values), as one record batch in
        ``__consumer_offsets``. Durable as the topic's flush policy says."""
        if not isinstance(group, str) or not group:
            raise ValueError("group id must be a non-empty string")
        now = self.storage.clock()
        entries: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), value in offsets.items():
            count = self.storage.partition_count(topic)
            if count is None or not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"cannot commit an offset for {topic}-{partition}: "
                                                   f"no such partition")
            if isinstance(value, OffsetAndMetadata):
                entry = OffsetAndMetadata(value.offset, value.metadata, value.leader_epoch,
                                          value.commit_timestamp if value.commit_timestamp >= 0 else now)
            else:
                entry = OffsetAndMetadata(int(value), metadata, -1, now)
            if entry.offset < 0:
                raise ValueError(f"committed offset for {topic}-{partition} must be >= 0, "
                                 f"not {entry.offset}")
            entries[(topic, partition)] = entry
        if not entries:
            return
        # One lock over the append and the table update: the compaction (which
        # rewrites the table at the log end) never sees a record newer than the
        # table, so committed offsets never go backwards across a restart.
        with self._lock:
            self._append_offsets(group, [encode_offset_key(group, t, p) for t, p in entries],
                                 [encode_offset_value(v) for v in entries.values()], now)
            self._offsets.put(group, entries)

    # ------------------------------------------- transactional offset commits

    def offsets_partition(self, group: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition of `group` (created if need be): what
        AddOffsetsToTxn adds to a transaction."""
        self._offsets_log(group)
        partitions = self.storage.partition_count(OFFSETS_TOPIC)
        return TopicPartition(OFFSETS_TOPIC, partition_for_group(group, partitions))

    def txn_commit_offsets(self, group: str, producer_id: int, producer_epoch: int,
                           offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Kafka's TxnOffsetCommit: the offsets go to ``__consumer_offsets`` as one
        transactional batch of the producer, and become the group's committed offsets
        only when its transaction commits (:meth:`complete_txn_offsets`); an abort
        drops them. The caller (the transaction coordinator) has checked that the
        group's partition is in the producer's transaction."""
        now = self.storage.clock()
        entries = {}
        for (topic, partition), value in offsets.items():
            count = self.storage.partition_count(topic)
            if count is None or not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"cannot commit an offset for {topic}-{partition}: "
                                                   f"no such partition")
            if value.offset < 0:
                raise ValueError(f"committed offset for {topic}-{partition} must be >= 0, "
                                 f"not {value.offset}")
            entries[(topic, partition)] = OffsetAndMetadata(
                value.offset, value.metadata, value.leader_epoch,
                value.commit_timestamp if value.commit_timestamp >= 0 else now)
        if not entries:
            return
        with self._lock:
            lg = self._offsets_log(group)
            guard = lg.maybe_start_transaction_verification(producer_id)
            lg.append(encode_batch([encode_offset_value(v) for v in entries.values()],
                                   [encode_offset_key(group, t, p) for t, p in entries],
                                   [now] * len(entries), producer_id=producer_id,
                                   producer_epoch=producer_epoch, transactional=True),
                      verification_guard=guard)
            self._txn_offsets.setdefault(producer_id, {}).setdefault(group, {}).update(entries)

    def complete_txn_offsets(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended (its markers are written): its pending
        offsets become committed offsets, or are dropped."""
        with self._lock:
            pending = self._txn_offsets.pop(producer_id, {})
            if committed:
                for group, entries in pending.items():
                    self._offsets.put(group, entries)

    def _append_offsets(self, group: str, keys: list[bytes], values: list[bytes | None], now: int) -> None:
        # The caller holds _lock.
        lg = self._offsets_log(group)
        lg.append(encode_batch(values, keys, [now] * len(keys)), origin="coordinator")

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset of `group` for one partition, or None."""
        found = self._offsets.get(group, topic, partition)
        return None if found is None else found.offset

    def committed_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of `group`."""
        return self._offsets.group(group)

    def consumer_groups(self) -> list[str]:
        """The groups that have committed offsets."""
        return self._offsets.groups()

    def topic_deleted(self, topic: str) -> None:
        """A topic is gone: its committed offsets are tombstoned and every group forgets
        its positions in it, so a topic re-created under the name starts afresh. (The
        groups rebalance off it on their next poll: the deletion changed the store's
        topic epoch.)"""
        self.remove_offsets_of(topic)
        with self._groups_lock:
            groups = list(self._groups.values())
        for group in groups:
            with group.lock:
                group.positions = {tp: p for tp, p in group.positions.items() if tp.topic != topic}

    def remove_offsets_of(self, topic: str) -> None:
        """Tombstones for the offsets of a deleted topic (Kafka's coordinator does the same)."""
        with self._lock:
            for group, tps in self._offsets.for_topic(topic).items():
                try:
                    self._append_offsets(group, [encode_offset_key(group, t, p) for t, p in tps],
                                         [None] * len(tps), self.storage.clock())
                except (KafkaStorageError, UnknownTopicOrPartitionError) as exc:
                    log.warning("could not remove offsets of %s for group %s: %s", topic, group, exc)
                self._offsets.remove(group, tps)

    def _load_committed_offsets(self) -> None:
        for batch, start in internal_batches(self.storage, OFFSETS_TOPIC):
            if batch.is_control:
                # A transaction's marker: its offsets apply (commit) or go.
                pending = self._txn_offsets.pop(batch.producer_id, {})
                if _is_commit(batch):
                    for group, entries in pending.items():
                        self._offsets.put(group, entries)
            elif batch.is_transactional:
                # Pending until the marker; still pending at the end: the
                # transaction coordinator completes it (complete_txn_offsets).
                for record in batch.records():
                    if record.offset >= start and record.key is not None \
                            and record.value is not None:
                        parsed = decode_offset_key(record.key)
                        if parsed is not None:
                            self._txn_offsets.setdefault(batch.producer_id, {}).setdefault(
                                parsed[0], {})[parsed[1:]] = decode_offset_value(record.value)
            else:
                for record in batch.records():
                    if record.offset >= start and record.key is not None:
                        parsed = gr.decode_group_key(record.key)
                        if parsed is None:
                            self._offsets.apply(record.key, record.value)
                        else:
                            self._apply_group_records(parsed[1], {record.key: record.value})

def _is_commit(control_batch) -> bool:
    """Whether a control batch is a COMMIT marker (its record's key: int16 version,
    int16 type, 1 = COMMIT)."""
    for record in control_batch.records():
        key = record.key
        return key is not None and len(key) >= 4 and key[2:4] == b"\x00\x01"
    return False
