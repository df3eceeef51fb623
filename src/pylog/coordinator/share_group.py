"""Share groups (KIP-932): membership, share-partitions and their durable state.

A :class:`ShareGroup` is Kafka's share group as its group coordinator and share
coordinator keep it together:

- **members** heartbeat (ShareGroupHeartbeat, or pylog's in-process ShareConsumer) with
  their subscribed topics; every member is assigned every partition of the topics it
  subscribes to (Kafka's ``SimpleAssignor`` with as many members as partitions or more: a
  share-partition hands each record to one member, so members may share partitions). The
  group epoch grows on every join, leave and subscription change; a member's epoch is the
  group epoch of its last assignment. A member silent for
  ``group.share.session.timeout.ms`` is removed;
- **share-partitions** (:class:`~pylog.coordinator.share_partition.SharePartition`), one per
  topic-partition the group has fetched, created at the SPSO ``share.auto.offset.reset``
  names (``latest``, Kafka's default: the log end; ``earliest``: the log start); a fetch
  reads below the high watermark, or with ``share.isolation.level=read_committed`` below
  the last stable offset with aborted transactions' records archived
  (:meth:`ShareGroup.acquire_records`); the admin APIs replace or forget
  share-partitions of an empty group (:meth:`ShareGroup.alter_start_offset`,
  :meth:`ShareGroup.delete_topic_state`, :meth:`ShareCoordinator.delete_group`);
- **durability**: the group's state (SPSO and the window's runs of delivery counts and
  states, the group's configs) is written with ``write_file_atomically`` to
  ``<first log dir>/share-groups/<hex of the group id>.json`` (docs/FORMAT.md) after every
  change and before the change is answered: an acknowledgement answered is never undone
  by a crash, and an acquisition's delivery count survives it (Kafka keeps the same in
  ``__share_group_state``). After a restart the acquired records are AVAILABLE again.
  The writes are group commits (:class:`_CommitLock`): a change is made under the
  group's lock and numbered; the thread that made it waits, after releasing the lock,
  until a write that began after the change is fsynced; one write covers every change
  made before its snapshot, so the members' requests do not wait one fsync each;
- **membership** (group epoch, each member's metadata, target and current assignment) is
  written to ``__consumer_offsets`` in Kafka's ShareGroup* records (group_records.py),
  through the store's GroupCoordinator, after each heartbeat that changed it and each
  removal: after a restart, members heartbeating with their epoch go on (their sessions
  count from the restart). Share sessions (ShareFetch's) are not kept, as Kafka keeps
  them in memory only: a member opens its session again.

Thread safety: each group's ``lock`` covers its members, share-partitions and the
snapshot of its state; its ``_durable`` condition the version written and whether a write
runs (one at a time, outside the lock); the coordinator's lock its table of groups.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pylog.common.config import ConfigDef, at_least, between, config_defs, one_of
from pylog.errors import ConfigError, ErrorCode, KafkaStorageError
from pylog.record import AbortedBatches, iter_batches
from pylog.storage import SHARE_GROUPS_DIR, fsync_dir, write_file_atomically

from . import group_records as gr
from .consumer_group import GroupError
from .share_partition import AcknowledgeError, AcquiredRange, SharePartition

__all__ = ["ShareCoordinator", "ShareGroup", "share_coordinator", "SHARE_STATE_DIR",
           "GROUP_CONFIG_DEFAULTS", "AcquiredRange", "AcknowledgeError"]

log = logging.getLogger(__name__)

#: Under the store's first log dir.
SHARE_STATE_DIR = SHARE_GROUPS_DIR
STATE_FILE_VERSION = 1
LEAVE_GROUP_EPOCH = -1

#: Kafka's group configs of a share group (GroupConfig, resource type GROUP), defaulting
#: to the broker's ``group.share.*``: a group's own values override them.
GROUP_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("share.session.timeout.ms", "int32", 45000,
              "A member silent this long leaves the group.", at_least(1)),
    ConfigDef("share.heartbeat.interval.ms", "int32", 5000,
              "How often the members heartbeat.", at_least(1)),
    ConfigDef("share.record.lock.duration.ms", "int32", 30000,
              "How long a member holds the records it acquired.", between(1000, 3600000)),
    ConfigDef("share.delivery.count.limit", "int32", 5,
              "Deliveries of a record before it is archived.", between(2, 10)),
    ConfigDef("share.auto.offset.reset", "str", "latest",
              "Where a share-partition starts: latest (the log end) or earliest.",
              one_of("latest", "earliest")),
    ConfigDef("share.isolation.level", "str", "read_uncommitted",
              "read_uncommitted: every record below the high watermark is delivered; "
              "read_committed: only below the last stable offset, aborted transactions' "
              "records archived, never delivered.",
              one_of("read_uncommitted", "read_committed")),
)
GROUP_CONFIG_DEFAULTS = {name: d.default for name, d in GROUP_CONFIGS.items()}


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)
    timer: object = None


@dataclass(slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    #: The member's partitions when they changed since its last heartbeat, else None.
    assignment: dict[str, tuple[int, ...]] | None


class ShareGroup:
    """One share group (see the module docstring)."""

    def __init__(self, coordinator: "ShareCoordinator", group_id: str) -> None:
        self.coordinator = coordinator
        self.group_id = group_id
        self.lock = _CommitLock(self)
        self.group_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.partitions: dict[tuple[str, int], SharePartition] = {}
        self.topic_ids: dict[str, str] = {}          # topic -> its id (hex) when first read
        self.configs: dict[str, str] = {}            # the group's own configs (share.*)
        self.state_epoch = 0                         # writes of the state file
        #: Group commit: `_version` counts the changes (under the lock); `_written` is
        #: the version the state file holds, fsynced; `_writing` whether a write runs.
        self._version = 0
        self._written = 0
        self._writing = False
        self._durable = threading.Condition(threading.Lock())
        #: Held while the state file is written or deleted; `deleted` (set under the
        #: lock, read under this) keeps a late write from bringing a deleted group back.
        self._file_lock = threading.Lock()
        self.deleted = False
        #: What to ``set()`` when records may have become available to acquire (an
        #: acknowledgement, a release, a lock that ended): parked ShareFetches' wakers.
        #: A tuple, replaced whole: read without the lock.
        self.waiters: tuple = ()

    # ================================================================ configs

    def config(self, name: str):
        """A group config: the group's own value, else the broker's ``group.<name>``."""
        value = self.configs.get(name)
        if value is None:
            return self.coordinator.defaults[name]
        default = GROUP_CONFIG_DEFAULTS[name]
        return int(value) if isinstance(default, int) else value

    def set_configs(self, values: dict[str, str | None]) -> None:
        """Sets (a value) or deletes (None) the group's own configs, durably."""
        with self.lock:
            new = dict(self.configs)
            for name, value in values.items():
                if value is None:
                    new.pop(name, None)
                else:
                    new[name] = value
            self.replace_configs(new)

    def replace_configs(self, values: dict, validate_only: bool = False) -> None:
        """The group's own configs become `values` (each checked: ConfigError names an
        unknown key or a bad value), durably."""
        checked = {}
        for name, value in values.items():
            definition = GROUP_CONFIGS.get(name)
            if definition is None:
                raise ConfigError(f"unknown share group config {name!r} (known: "
                                  f"{', '.join(sorted(GROUP_CONFIGS))})")
            parsed = definition.parse(value, name)
            checked[name] = str(parsed)
        if validate_only:
            return
        with self.lock:
            self.configs = checked
            self.persist()

    # ============================================================= membership

    def heartbeat(self, member_id: str, member_epoch: int, subscribed: list[str] | None,
                  partitions_of: Callable[[str], int | None], rack_id: str | None = None,
                  client_id: str = "", client_host: str = "") -> HeartbeatResult:
        """One ShareGroupHeartbeat: join (epoch 0), stay (the member's epoch) or leave
        (-1). GroupError: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH (Kafka's)."""
        with self.lock:
            member = self.members.get(member_id)
            if member_epoch == LEAVE_GROUP_EPOCH:
                if member is not None:
                    self._remove(member)
                return HeartbeatResult(member_id, LEAVE_GROUP_EPOCH, None)
            if member_epoch == 0:
                if member is None:
                    member = self.members[member_id] = ShareMember(member_id, 0, ())
                    self.group_epoch += 1
            elif member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {self.group_id}.")
            elif member_epoch != member.member_epoch:
                raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The share group member has a smaller or larger member epoch "
                                 f"({member_epoch}) than the one known by the group coordinator "
                                 f"({member.member_epoch}).")
            if subscribed is not None and tuple(sorted(subscribed)) != member.subscribed:
                if member.subscribed:
                    self.group_epoch += 1        # (a join counted once, above)
                member.subscribed = tuple(sorted(subscribed))
            if rack_id is not None:
                member.rack_id = rack_id
            member.client_id, member.client_host = client_id, client_host
            target = {}
            for topic in member.subscribed:
                count = partitions_of(topic)
                if count:
                    target[topic] = tuple(range(count))
            changed = member_epoch == 0 or target != member.assignment
            if changed:
                if target != member.assignment and member_epoch != 0:
                    self.group_epoch += 1        # a subscribed topic grew or went away
                member.assignment = target
                member.member_epoch = self.group_epoch
            self._schedule_expiry(member)
            self._persist_membership(member_id)
            return HeartbeatResult(member_id, member.member_epoch, dict(target) if changed else None)

    def _schedule_expiry(self, member: ShareMember) -> None:
        timer = self.coordinator.timer
        timer.cancel(member.timer)
        member_id, epoch = member.member_id, member.member_epoch
        member.timer = timer.call_later(self.config("share.session.timeout.ms") / 1000,
                                        lambda: self._expire(member_id, epoch))

    def _expire(self, member_id: str, epoch: int) -> None:
        if self.coordinator.store.closed:
            return
        with self.lock:
            member = self.members.get(member_id)
            if member is not None and member.member_epoch == epoch:
                log.info("share group %s: member %s's session timed out", self.group_id, member_id)
                self._remove(member)

    def _remove(self, member: ShareMember) -> None:
        """The member leaves: its acquired records are available again."""
        self.coordinator.timer.cancel(member.timer)
        del self.members[member.member_id]
        self.group_epoch += 1
        self.coordinator.sessions.pop((self.group_id, member.member_id), None)
        self._persist_membership(member.member_id)
        self.release_member(member.member_id)

    # ============================================ membership records (restarts)

    def _persist_membership(self, member_id: str) -> None:
        """Hands the group's records and `member_id`'s (tombstones if it is gone) to the
        store's GroupCoordinator, which appends those that changed (the lock held)."""
        groups = self.coordinator.store.coordinator
        topic_id = groups.topic_id_bytes
        g = self.group_id
        counts = {t: len(ps) for m in self.members.values() for t, ps in m.assignment.items()}
        records: dict[bytes, bytes | None] = {
            gr.group_key(gr.SHARE_GROUP_METADATA, g): gr.encode_group_epoch(
                self.group_epoch, gr.metadata_hash(counts), share=True),
            gr.group_key(gr.SHARE_TARGET_METADATA, g): gr.encode_assignment_epoch(self.group_epoch)}
        keys = [gr.member_key(kind, g, member_id) for kind in
                (gr.SHARE_MEMBER_METADATA, gr.SHARE_TARGET_MEMBER, gr.SHARE_CURRENT_ASSIGNMENT)]
        m = self.members.get(member_id)
        if m is None:
            records.update(dict.fromkeys(keys))
        else:
            assignment = {tid: list(ps) for t, ps in m.assignment.items()
                          if (tid := topic_id(t)) is not None}
            records[keys[0]] = gr.encode_member_metadata(gr.MemberMetadata(
                rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                subscribed_names=list(m.subscribed)), share=True)
            records[keys[1]] = gr.encode_target_member(assignment)
            records[keys[2]] = gr.encode_current_assignment(gr.CurrentAssignment(
                m.member_epoch, m.member_epoch, "STABLE", assignment, {}), share=True)
        groups.write_group_records(g, records, False)

    def restore_membership(self, records: dict[bytes, bytes], names: dict[bytes, str]) -> None:
        """Rebuilds the members from the group's records (`names`: topic id -> name; a
        topic gone since leaves their assignments). Each member's session starts now."""
        by_kind: dict[int, dict[str | None, bytes]] = {}
        for key, value in records.items():
            parsed = gr.decode_group_key(key)
            if parsed is not None:
                by_kind.setdefault(parsed[0], {})[parsed[2]] = value
        with self.lock:
            stored = by_kind.get(gr.SHARE_GROUP_METADATA, {}).get(None)
            if stored is not None:
                self.group_epoch = gr.decode_group_epoch(stored, share=True)[0]
            currents = by_kind.get(gr.SHARE_CURRENT_ASSIGNMENT, {})
            for member_id, raw in sorted(by_kind.get(gr.SHARE_MEMBER_METADATA, {}).items()):
                meta = gr.decode_member_metadata(raw, share=True)
                member = ShareMember(member_id, 0, tuple(sorted(meta.subscribed_names)), meta.rack_id,
                                     meta.client_id, meta.client_host)
                if member_id in currents:
                    current = gr.decode_current_assignment(currents[member_id], share=True)
                    member.member_epoch = current.member_epoch
                    member.assignment = {names[tid]: tuple(sorted(ps))
                                         for tid, ps in current.assigned.items() if tid in names}
                self.members[member_id] = member
                self._schedule_expiry(member)

    def release_member(self, member_id: str) -> None:
        """Releases what `member_id` holds in every share-partition (durably)."""
        with self.lock:
            if any([sp.release_member(member_id) for sp in self.partitions.values()]):
                self.persist()
                self.wake()

    def is_member(self, member_id: str) -> bool:
        return member_id in self.members

    def state(self) -> str:
        """Kafka's ShareGroupState: Empty or Stable (or Dead once deleted)."""
        return "Stable" if self.members else "Empty"

    # ======================================================= share-partitions

    def share_partition(self, topic: str, partition: int, log) -> SharePartition:
        """The share-partition of `topic`-`partition` (whose Log is `log`), created at
        ``share.auto.offset.reset`` on first use; a recreated topic (another id) starts
        over. Moves its SPSO past the log's start and expires its locks."""
        topic_id = self.coordinator.store.topic_id(topic)
        key = (topic, partition)
        sp = self.partitions.get(key)
        if sp is not None and topic_id is not None and self.topic_ids.get(topic) not in (None, topic_id):
            sp = None
        if sp is None:
            reset = str(self.config("share.auto.offset.reset")).lower()
            start = log.log_start_offset if reset == "earliest" else log.high_watermark
            sp = self.partitions[key] = SharePartition(
                start, delivery_count_limit=self.config("share.delivery.count.limit"),
                max_in_flight=self.coordinator.max_in_flight)
            if topic_id is not None:
                self.topic_ids[topic] = topic_id
            self.persist()
        changed = sp.move_start(log.log_start_offset)
        changed = sp.expire_locks(now_ms()) or changed
        if changed:
            self.persist()
        return sp

    def acquire_records(self, member_id: str, sp: SharePartition, log, max_bytes: int,
                        max_records: int):
        """Reads `sp`'s log from its first available offset and acquires what was read
        for `member_id` (at most `max_records`): (the FileSlice, the AcquiredRanges), or
        (None, []) with nothing available. ``share.isolation.level`` read_uncommitted
        reads below the high watermark; read_committed below the last stable offset, and
        archives the records of aborted transactions instead of delivering them (Kafka's
        SharePartition: filterAbortedTransactionalAcquiredRecords). The caller holds the
        group's lock; durable before it returns."""
        committed = self.config("share.isolation.level") == "read_committed"
        bound = log.last_stable_offset if committed else log.high_watermark
        with self.deferred():
            while True:
                first = sp.first_available()
                if first >= bound:
                    return None, []
                data = log.read(first, max(max_bytes, 1), max_offset=bound)
                if not data.size:
                    return None, []
                ranges = self.acquire(member_id, sp, first, data.last_offset + 1, max_records)
                if not (committed and ranges):
                    return _trimmed(log, data, ranges), ranges
                aborted = log.aborted_transactions(first, data.last_offset + 1)
                runs = _aborted_runs(data.read(), aborted) if aborted else []
                if not runs:
                    return _trimmed(log, data, ranges), ranges
                ranges = sp.archive_acquired(ranges, runs)
                self.persist()
                if ranges:
                    return _trimmed(log, data, ranges), ranges
                # Everything read was aborted (now archived): read on.

    def acquire(self, member_id: str, sp: SharePartition, first: int, end: int,
                max_records: int) -> list[AcquiredRange]:
        """Acquires records of `sp` for `member_id` (SharePartition.acquire) under the
        group's record lock duration; durable before it returns."""
        lock_ms = self.config("share.record.lock.duration.ms")
        ranges = sp.acquire(member_id, first, end, max_records, now_ms(), lock_ms)
        if ranges:
            self.persist()
            # The locks' end releases the records even if nobody looks (Kafka's
            # acquisition lock timer task); a later look would release them too.
            self.coordinator.timer.call_later(lock_ms / 1000 + 0.001, lambda: self._expire_locks(sp))
        return ranges

    def _expire_locks(self, sp: SharePartition) -> None:
        if self.coordinator.store.closed:
            return                  # a timer outliving its store: the state file is not ours
        with self.lock:
            if any(p is sp for p in self.partitions.values()) and sp.expire_locks(now_ms()):
                self.persist()
                self.wake()

    def acknowledge(self, member_id: str, sp: SharePartition, batches) -> None:
        """Applies a partition's acknowledgement batches, durably (AcknowledgeError: none)."""
        sp.expire_locks(now_ms())
        sp.acknowledge_batches(member_id, batches)
        self.persist()
        self.wake()

    def add_waiter(self, waiter) -> None:
        """(From the broker's event loop only: no lock, so it never waits for a write.)"""
        self.waiters = self.waiters + (waiter,)

    def remove_waiter(self, waiter) -> None:
        self.waiters = tuple(w for w in self.waiters if w is not waiter)

    def wake(self) -> None:
        """Tells the parked fetches that records may be available (they look again)."""
        for waiter in self.waiters:
            waiter.set()

    # ================================================== start offsets (admin)

    def start_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> SPSO of every share-partition the group keeps state for
        (Kafka's DescribeShareGroupOffsets with all topics)."""
        with self.lock:
            self._forget_deleted_topics()
            return {key: sp.start_offset for key, sp in self.partitions.items()}

    def alter_start_offset(self, topic: str, partition: int, offset: int) -> None:
        """The share-partition of `topic`-`partition` starts over at `offset`: every record
        from it on is AVAILABLE with no delivery (AlterShareGroupOffsets, allowed on an
        empty group only: nobody holds a record). Durable before it returns."""
        with self.lock:
            self.partitions[(topic, partition)] = SharePartition(
                offset, delivery_count_limit=self.config("share.delivery.count.limit"),
                max_in_flight=self.coordinator.max_in_flight)
            topic_id = self.coordinator.store.topic_id(topic)
            if topic_id is not None:
                self.topic_ids[topic] = topic_id
            self.persist()

    def delete_topic_state(self, topics) -> None:
        """Forgets the share-partitions of `topics` (DeleteShareGroupOffsets): the next
        fetch starts them at ``share.auto.offset.reset`` again. Durable before it returns."""
        with self.lock:
            for key in [k for k in self.partitions if k[0] in topics]:
                del self.partitions[key]
            for topic in topics:
                self.topic_ids.pop(topic, None)
            self.persist()

    # ============================================================= durability

    def _forget_deleted_topics(self) -> None:
        """Drops the share-partitions of topics deleted since (or deleted and created
        again: another id), so the state file holds live topics only."""
        topic_id = self.coordinator.store.topic_id
        for key in [k for k in self.partitions
                    if topic_id(k[0]) is None or topic_id(k[0]) != self.topic_ids.get(k[0], topic_id(k[0]))]:
            del self.partitions[key]
        for topic in [t for t in self.topic_ids if topic_id(t) != self.topic_ids[t]]:
            if not any(k[0] == topic for k in self.partitions):
                del self.topic_ids[topic]

    def to_json(self) -> dict:
        self._forget_deleted_topics()
        parts = []
        for (topic, partition), sp in sorted(self.partitions.items()):
            start, runs = sp.snapshot()
            parts.append({"topic": topic, "topic_id": self.topic_ids.get(topic),
                          "partition": partition, "start_offset": start,
                          "state_batches": [list(r) for r in runs]})
        return {"version": STATE_FILE_VERSION, "group_id": self.group_id,
                "state_epoch": self.state_epoch, "configs": dict(self.configs),
                "partitions": parts}

    def persist(self) -> None:
        """Records a change of the group's state: the thread that made it returns from
        its outermost hold of the lock only once the state file holding the change is
        fsynced (:meth:`wait_durable`)."""
        with self.lock:
            self._version += 1
            self.lock.needs(self._version)

    @contextlib.contextmanager
    def deferred(self):
        """Holds the group's lock: every change made inside is durable at the block's end
        (a ShareFetch's acknowledgements and acquisitions: one write at most). The caller
        answers only after the block."""
        with self.lock:
            yield self

    def wait_durable(self, version: int) -> None:
        """Returns once the state file holds `version` (fsynced). Called without the lock:
        the first waiter while no write runs writes, for itself and every change made
        before its snapshot; the others wait for that write or the next one."""
        with self._durable:
            while self._written < version:
                if not self._writing:
                    self._writing = True
                    break
                self._durable.wait()
            else:
                return
        try:
            with self.lock.raw:                  # the snapshot: a consistent state
                target = self._version
                self.state_epoch += 1
                data = self.to_json()
            encoded = json.dumps(data, separators=(",", ":")).encode()
            with self._file_lock:
                if not self.deleted:
                    self.coordinator.write_state(self.group_id, encoded)
        except BaseException:
            with self._durable:
                self._writing = False
                self._durable.notify_all()       # (a waiter left uncovered writes itself)
            raise
        with self._durable:
            self._written = max(self._written, target)
            self._writing = False
            self._durable.notify_all()

    def load(self, data: dict) -> None:
        self.state_epoch = int(data.get("state_epoch", 0))
        self.configs = {str(k): str(v) for k, v in (data.get("configs") or {}).items()}
        limit = self.config("share.delivery.count.limit")
        for entry in data.get("partitions", ()):
            key = (entry["topic"], int(entry["partition"]))
            self.partitions[key] = SharePartition.restore(
                int(entry["start_offset"]), [tuple(int(x) for x in r) for r in entry["state_batches"]],
                delivery_count_limit=limit, max_in_flight=self.coordinator.max_in_flight)
            if entry.get("topic_id"):
                self.topic_ids[entry["topic"]] = entry["topic_id"]


class _CommitLock:
    """A share group's lock: reentrant, as an RLock; on its outermost release, the
    releasing thread waits (the lock released) until the state changes it made while
    holding it (:meth:`needs`) are durable (:meth:`ShareGroup.wait_durable`)."""

    __slots__ = ("raw", "_group", "_local")

    def __init__(self, group: ShareGroup) -> None:
        self.raw = threading.RLock()            # the lock itself, with no wait at release
        self._group = group
        self._local = threading.local()         # .depth, .version: this thread's

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self.raw.acquire(blocking, timeout):
            return False
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        return True

    def needs(self, version: int) -> None:
        """The holding thread's release waits until `version` is durable."""
        self._local.version = version

    def release(self) -> None:
        local = self._local
        local.depth -= 1
        version = 0
        if not local.depth:
            version = getattr(local, "version", 0)
            local.version = 0
        self.raw.release()
        if version:
            self._group.wait_durable(version)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _trimmed(log, data, ranges):
    """`data` cut after the batch holding the last offset acquired: a fetch sends (and
    the member decodes) the batches it acquired records of, not the whole read (with
    MaxRecords below what MaxBytes holds, most of it). The cut is a FileSlice of the
    same file, no copy."""
    if not ranges or ranges[-1].last >= data.last_offset:
        return data
    tail = log.read(ranges[-1].last, 1)          # the one batch holding it
    if tail.file is not data.file or not tail.size or tail.position < data.position:
        return data                              # (another segment: keep the whole read)
    return dataclasses.replace(data, size=tail.position + tail.size - data.position,
                               last_offset=tail.last_offset)


def _aborted_runs(buffer, aborted) -> list[tuple[int, int]]:
    """The offset runs (first, last) of `buffer`'s batches that belong to the `aborted`
    transactions (a read_committed consumer's filter, batch by batch: batch headers only,
    the records are not decoded)."""
    skip = AbortedBatches(aborted)
    runs: list[tuple[int, int]] = []
    for batch in iter_batches(buffer, validate=False):
        if skip(batch):
            if runs and runs[-1][1] + 1 >= batch.base_offset:
                runs[-1] = (runs[-1][0], batch.last_offset)
            else:
                runs.append((batch.base_offset, batch.last_offset))
    return runs


@dataclass(slots=True)
class ShareSession:
    """A member's share session (ShareSessionEpoch): the partitions it fetches."""
    epoch: int
    partitions: set = field(default_factory=set)     # (topic, partition)


class ShareCoordinator:
    """The share groups of one store: ``share_coordinator(store)``."""

    def __init__(self, store, defaults: dict | None = None, max_in_flight: int = 2000) -> None:
        self.store = store
        self.defaults = dict(GROUP_CONFIG_DEFAULTS)
        if defaults:
            self.defaults.update({k: v for k, v in defaults.items() if k in self.defaults})
        self.max_in_flight = max_in_flight
        self.timer = store.coordinator.timer
        self.dir = os.path.join(store.dirs[0].path, SHARE_STATE_DIR)
        self._lock = threading.Lock()
        self._groups: dict[str, ShareGroup] = {}
        #: (group id, member id) -> ShareSession (ShareFetch's sessions, KIP-932).
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._restored = False
        self._load()

    def configure(self, defaults: dict) -> None:
        """The broker's ``group.share.*`` values (Kafka's names, ``group.`` dropped)."""
        self.defaults.update({k: v for k, v in defaults.items() if k in self.defaults})
        self._restore_membership()

    def group(self, group_id: str, create: bool = True) -> ShareGroup | None:
        self._restore_membership()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None and create:
                group = self._groups[group_id] = ShareGroup(self, group_id)
            return group

    def groups(self) -> list[ShareGroup]:
        self._restore_membership()
        with self._lock:
            return list(self._groups.values())

    def delete_group(self, group_id: str) -> bool:
        """Deletes an empty share group and its state file (DeleteGroups). Whether it
        existed. GroupError NON_EMPTY_GROUP while it has members."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return False
            with group.lock:
                if group.members:
                    raise GroupError(ErrorCode.NON_EMPTY_GROUP,
                                     f"Share group {group_id} is not empty.")
                group.deleted = True
                with group._file_lock, contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(group_id))
                    fsync_dir(self.dir)
                del self._groups[group_id]
        # Its membership records too, or a restart would bring it back, empty.
        self.store.coordinator.forget_group_records(group_id)
        for key in [k for k in list(self.sessions) if k[0] == group_id]:
            self.sessions.pop(key, None)
        return True

    def _path(self, group_id: str) -> str:
        return os.path.join(self.dir, group_id.encode("utf-8").hex() + ".json")

    def write_state(self, group_id: str, encoded: bytes) -> None:
        """Writes a group's state file (its JSON, encoded), atomically and fsynced."""
        if self.store.closed:
            # Another store object may own the dir now (the same path reopened).
            raise KafkaStorageError(f"the store is closed: share group {group_id!r}'s state "
                                    f"cannot be written")
        os.makedirs(self.dir, exist_ok=True)
        write_file_atomically(self._path(group_id), encoded)

    def _load(self) -> None:
        for name in sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else ():
            if not name.endswith(".json"):
                continue                        # a .tmp a crash left: the old file is whole
            path = os.path.join(self.dir, name)
            with open(path, "rb") as f:
                data = json.loads(f.read())
            if data.get("version") != STATE_FILE_VERSION:
                raise ValueError(f"{path}: share group state version {data.get('version')} "
                                 f"is not {STATE_FILE_VERSION}")
            group = ShareGroup(self, data["group_id"])
            group.load(data)
            self._groups[group.group_id] = group

    def _restore_membership(self) -> None:
        """Members, from __consumer_offsets (of the groups with no state file too): once,
        at the first configure() (the broker's timeouts known) or the first use."""
        with self._lock:
            if self._restored:
                return
            self._restored = True
        groups = self.store.coordinator
        names = None
        for group_id in groups.stored_groups():
            records = groups.stored_group_records(group_id)
            if gr.group_key(gr.SHARE_GROUP_METADATA, group_id) not in records:
                continue
            names = groups.topic_names() if names is None else names
            with self._lock:
                group = self._groups.get(group_id)
                if group is None:
                    group = self._groups[group_id] = ShareGroup(self, group_id)
            group.restore_membership(records, names)


_attach_lock = threading.Lock()


def share_coordinator(store) -> ShareCoordinator:
    """The store's one ShareCoordinator, created (and its state files read) on first use."""
    found = getattr(store, "_share_coordinator", None)
    if found is None:
        with _attach_lock:
            found = getattr(store, "_share_coordinator", None)
            if found is None:
                found = ShareCoordinator(store)
                store._share_coordinator = found
    return found
