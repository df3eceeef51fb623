"""ShareConsumer: Kafka's KafkaShareConsumer (KIP-932) over an embedded store.

A member of a share group: the records of its subscribed topics are handed to one member
of the group at a time (in-process ShareConsumers and remote KafkaShareConsumers of the
same group id alike: they share :mod:`pylog.coordinator.share_group`'s state machine),
acknowledged one by one, and handed out again when released, when their acquisition lock
(``share.record.lock.duration.ms``) ends, or when the member leaves.

``poll`` acquires up to ``max.poll.records`` available records and returns them with
their delivery counts; with nothing available it waits for an append. With
``share.acknowledgement.mode=implicit`` (Kafka's default) the next ``poll`` (or
``commit_sync``) accepts every record of the previous one; with ``explicit``, each
record is acknowledged with ``acknowledge(record, AcknowledgeType.ACCEPT | RELEASE |
REJECT)`` before the next ``poll`` (else IllegalStateError, as Kafka's). Acknowledgements
are applied by ``commit_sync`` (per partition: None or the exception) or, piggybacked, by
the next ``poll``; each is on disk before it returns.

The member heartbeats from ``poll``: one that does not poll for
``share.session.timeout.ms`` leaves the group and its records are released (it joins
again on its next poll). Used from one thread at a time, as Kafka's.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from enum import IntEnum
from typing import Any, NamedTuple

from pylog.common.topic_partition import TopicPartition
from pylog.coordinator.consumer_group import GroupError
from pylog.coordinator.share_group import AcknowledgeError, share_coordinator
from pylog.coordinator.share_partition import GAP
from pylog.errors import ConfigError, PylogError
from pylog.record import iter_batches

from .config import ClientConfig

__all__ = ["ShareConsumer", "ShareRecord", "AcknowledgeType", "IllegalStateError"]


class AcknowledgeType(IntEnum):
    """Kafka's AcknowledgeType (its wire ids)."""
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class IllegalStateError(PylogError):
    """A call in the wrong state (Kafka's IllegalStateException): an explicit-mode poll
    with records of the last poll not acknowledged, a record acknowledged twice."""


class ShareRecord(NamedTuple):
    """One record as a share consumer's poll() returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    delivery_count: int


class ShareConsumer:
    """``ShareConsumer(store, *topics, group_id=..., **config)``: a member of the share
    group ``group.id`` (see the module docstring). Config: ``group.id``,
    ``share.acknowledgement.mode``, ``max.poll.records``, ``fetch.max.bytes``."""

    def __init__(self, store: Any, *topics: str, config: dict | None = None, **kwargs: Any) -> None:
        self.store = store
        c = self.config = ClientConfig("share_consumer", config, **kwargs)
        if not c.group_id:
            raise ConfigError("group.id is required: a share consumer is a member of a share group")
        self.group_id: str = c.group_id
        self._explicit = c.share_acknowledgement_mode == "explicit"
        self._max_records = c.max_poll_records
        self._fetch_max = c.fetch_max_bytes
        self._validate = c.check_crcs
        self._group = share_coordinator(store).group(self.group_id)
        self.member_id = uuid.uuid4().hex[:22]
        self._epoch = 0                     # 0: not (or no longer) a member
        self._topics: list[str] = []
        self._assignment: list[TopicPartition] = []
        self._last_beat = 0.0
        self._delivered: dict[tuple[str, int, int], ShareRecord] = {}   # the last poll's, unacked
        self._acks: dict[TopicPartition, list[tuple[int, int, list[int]]]] = {}
        self._event = threading.Event()
        self._listening: set[TopicPartition] = set()
        self._next_partition = 0
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    # ========================================================== membership

    def subscribe(self, topics: Iterable[str] | str) -> None:
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            self.unsubscribe()
            return
        self._topics = topics
        self._heartbeat(force=True, subscribed=topics)

    def unsubscribe(self) -> None:
        self._leave()
        self._topics = []
        self._assignment = []
        self._sync_listeners()

    def subscription(self) -> set[str]:
        return set(self._topics)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def _heartbeat(self, force: bool = False, subscribed: list[str] | None = None) -> None:
        now = time.monotonic()
        if not self._topics:
            return
        if not force and self._epoch and \
                now - self._last_beat < self._group.config("share.heartbeat.interval.ms") / 1000:
            return
        joining = self._epoch == 0
        try:
            result = self._group.heartbeat(self.member_id, self._epoch,
                                           self._topics if joining or subscribed else None,
                                           self.store.partition_count, client_id="pylog-share-consumer")
        except GroupError:
            # The session ended (no poll for share.session.timeout.ms): join again.
            self._epoch = 0
            result = self._group.heartbeat(self.member_id, 0, self._topics,
                                           self.store.partition_count, client_id="pylog-share-consumer")
        self._last_beat = now
        self._epoch = result.member_epoch
        if result.assignment is not None:
            self._assignment = [TopicPartition(t, p) for t, ps in sorted(result.assignment.items())
                                for p in ps]

    def _leave(self) -> None:
        if self._epoch:
            self._group.heartbeat(self.member_id, -1, None, self.store.partition_count)
            self._epoch = 0

    # ============================================================== poll

    def poll(self, timeout: float = 0.0) -> list[ShareRecord]:
        """Acquires and returns up to max.poll.records records; waits up to `timeout`
        seconds for some. Applies the acknowledgements of the last poll first."""
        self._check_open()
        if self._explicit and self._delivered:
            raise IllegalStateError(f"{len(self._delivered)} records of the last poll are not "
                                    f"acknowledged (share.acknowledgement.mode=explicit)")
        self._accept_the_rest()
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            if self._event.is_set():
                self._event.clear()
            self._heartbeat()
            self._sync_listeners()
            with self._group.deferred():        # acknowledgements and acquisitions: one write
                self._apply_acks()
                records = self._acquire()
            if records:
                for r in records:
                    self._delivered[(r.topic, r.partition, r.offset)] = r
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            # 0.5 s at most: locks that end and heartbeats need no append.
            self._event.wait(min(remaining, 0.5))

    def _acquire(self) -> list[ShareRecord]:
        group, left, budget = self._group, self._max_records, self._fetch_max
        out: list[ShareRecord] = []
        mine = self._assignment
        if not mine:
            return out
        start = self._next_partition % len(mine)
        self._next_partition += 1
        for tp in mine[start:] + mine[:start]:
            if left <= 0 or budget <= 0:
                break
            log = self.store.log(tp.topic, tp.partition)
            with group.lock:
                sp = group.share_partition(tp.topic, tp.partition, log)
                data, ranges = group.acquire_records(self.member_id, sp, log, budget, left)
            if not ranges:
                continue
            budget -= data.size
            counts = {}
            for r in ranges:
                for o in range(r.first, r.last + 1):
                    counts[o] = r.delivery_count
            left -= len(counts)
            for batch in iter_batches(data.read(), validate=self._validate):
                if batch.last_offset < ranges[0].first:
                    continue
                if batch.is_control:
                    continue            # acquired control offsets: acknowledged as GAP below
                for rec in batch.records():
                    count = counts.pop(rec.offset, None)
                    if count is not None:
                        out.append(ShareRecord(tp.topic, tp.partition, rec.offset, rec.timestamp,
                                               rec.key, rec.value, rec.headers, count))
            # Offsets acquired with no record (control batches, compacted away): gaps.
            for o in sorted(counts):
                self._acks.setdefault(tp, []).append((o, o, [GAP]))
        return out

    # ====================================================== acknowledgements

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledges a record of the last poll: ACCEPT (done), RELEASE (to be delivered
        again), REJECT (never delivered again). Applied by commit_sync or the next poll."""
        self._check_open()
        found = self._delivered.pop((record.topic, record.partition, record.offset), None)
        if found is None:
            raise IllegalStateError(f"record {record.topic}-{record.partition}@{record.offset} is "
                                    f"not one of the last poll's unacknowledged records")
        tp = TopicPartition(record.topic, record.partition)
        self._acks.setdefault(tp, []).append((record.offset, record.offset, [int(type)]))

    def _accept_the_rest(self) -> None:
        """Implicit mode: what the last poll returned and was not acknowledged is accepted."""
        for record in list(self._delivered.values()):
            self.acknowledge(record, AcknowledgeType.ACCEPT)

    def _apply_acks(self) -> dict[TopicPartition, Exception | None]:
        acks, self._acks = self._acks, {}
        results: dict[TopicPartition, Exception | None] = {}
        for tp, batches in acks.items():
            try:
                log = self.store.log(tp.topic, tp.partition)
                with self._group.lock:
                    sp = self._group.share_partition(tp.topic, tp.partition, log)
                    self._group.acknowledge(self.member_id, sp, _merged(batches))
                results[tp] = None
            except (AcknowledgeError, PylogError) as exc:
                results[tp] = exc if isinstance(exc, PylogError) else _AckFailed(exc.code, exc.message)
        return results

    def commit_sync(self) -> dict[TopicPartition, Exception | None]:
        """Applies the acknowledgements made (implicit mode: the last poll's records are
        accepted): per partition None, or the exception (INVALID_RECORD_STATE: a lock
        ended first, the records went to another delivery)."""
        self._check_open()
        if not self._explicit:
            self._accept_the_rest()
        return self._apply_acks()

    commit_async = commit_sync

    # ============================================================ lifecycle

    def _sync_listeners(self) -> None:
        wanted = set() if self._closed else set(self._assignment)
        for tp in self._listening - wanted:
            try:
                self.store.log(tp.topic, tp.partition).remove_listener(self._event)
            except Exception:  # noqa: BLE001 - the partition may be gone
                pass
        for tp in wanted - self._listening:
            self.store.log(tp.topic, tp.partition).add_listener(self._event)
        self._listening = wanted

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ShareConsumer is closed")

    def close(self) -> None:
        """Applies pending acknowledgements (implicit mode: accepts the last poll's), then
        leaves the group: records it still holds are released to the others."""
        if self._closed:
            return
        try:
            if not self._explicit:
                self._accept_the_rest()
            self._apply_acks()
            self._leave()
        finally:
            self._closed = True
            self._sync_listeners()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _AckFailed(PylogError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _merged(batches: list[tuple[int, int, list[int]]]) -> list[tuple[int, int, list[int]]]:
    """One-offset acknowledgements merged into runs (one batch per run, types per offset)."""
    out: list[tuple[int, int, list[int]]] = []
    for first, last, types in sorted(batches, key=lambda b: b[0]):
        if out and out[-1][1] == first - 1:
            prev = out[-1]
            prev_types = prev[2] if len(prev[2]) == prev[1] - prev[0] + 1 else prev[2] * (prev[1] - prev[0] + 1)
            out[-1] = (prev[0], last, prev_types + (types if len(types) == last - first + 1
                                                    else types * (last - first + 1)))
        else:
            out.append((first, last, list(types)))
    return out
