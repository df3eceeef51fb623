"""Consumer: Kafka's consumer API over an embedded store.

``assign`` takes partitions explicitly; ``subscribe`` joins the consumer to
its ``group.id`` in this process (pylog/group.py), which shares the topics'
partitions among the group's members and rebalances when one joins or
leaves. ``poll`` reads from each assigned partition's position, returns at
most ``max.poll.records`` records, and when nothing is there waits for an
append (an event the logs set) instead of busy-looping. ``poll_arrow``
returns the same records as one ``pyarrow.RecordBatch``, decoded in C.

Positions start at the committed offset of the group, else at
``auto.offset.reset``; commits go to the store's ``__consumer_offsets``.

``isolation.level=read_committed`` reads as Kafka's consumer does: each
partition below its last stable offset only, and the records of aborted
transactions skipped, batch by batch, by the aborted transactions the log
returns with each read (``Log.read_committed``); ``poll_arrow`` skips them in
C (``decode_arrow(aborted_transactions=...)``). "latest" (reset, seek_to_end,
end_offsets) is the last stable offset there.

A Consumer is used from one thread at a time (as Kafka's); several
Consumers of one group may run in several threads.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from pylog.common.topic_partition import TopicPartition, as_offset
from pylog.coordinator.group import ConsumerGroup
from pylog.errors import (
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from pylog.record import AbortedBatches, decode_arrow, iter_batches

from .config import ClientConfig

log = logging.getLogger(__name__)

__all__ = ["Consumer", "ConsumerRecord", "OffsetAndTimestamp"]


class ConsumerRecord(NamedTuple):
    """One record as poll() returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


_new_record = tuple.__new__


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


def _tp(item) -> TopicPartition:
    if isinstance(item, TopicPartition):
        return item
    topic, partition = item
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, not {type(partition).__name__} {partition!r}")
    return TopicPartition(topic, partition)


class _Fetch(NamedTuple):
    """What one poll took from one partition: how many records, and where to go on."""

    tp: TopicPartition
    next_position: int
    count: int


class Consumer:
    """``Consumer(store, *topics, **config)`` with Kafka's consumer config names.

    ``store`` is a :class:`pylog.Store`. Topics given here are subscribed
    (as ``subscribe(topics)``). Config: ``group.id``, ``auto.offset.reset``,
    ``enable.auto.commit``, ``auto.commit.interval.ms``, ``max.poll.records``,
    ``fetch.max.bytes``, ``max.partition.fetch.bytes``,
    ``partition.assignment.strategy``; also as Python keywords.
    """

    def __init__(self, store: Any, *topics: str, config: dict | None = None, **kwargs: Any) -> None:
        self.store = store
        self.config = ClientConfig("consumer", config, **kwargs)
        c = self.config
        self.group_id: str = c.group_id
        self._reset = c.auto_offset_reset
        self._auto_commit = c.enable_auto_commit and bool(self.group_id)
        self._commit_interval = c.auto_commit_interval_ms / 1000
        self._max_records = c.max_poll_records
        self._fetch_max = c.fetch_max_bytes
        self._partition_max = c.max_partition_fetch_bytes
        self._validate = c.check_crcs
        self._read_committed = c.isolation_level == "read_committed"
        self._strategies = tuple(c.partition_assignment_strategy)
        self._event = threading.Event()
        self._arrow_record_bytes = 0.0    # stored bytes per record, as poll_arrow last saw
        self._listening: set[TopicPartition] = set()
        self._manual: list[TopicPartition] = []        # assign()
        self._positions: dict[TopicPartition, int] = {}  # assign() mode
        self._paused: set[TopicPartition] = set()
        self._group: ConsumerGroup | None = None
        self._member: str | None = None
        self._subscription: list[str] | re.Pattern | None = None
        self._next_partition = 0                      # round-robin start across polls
        self._last_commit = time.monotonic()
        self._scratch = bytearray()                   # poll_arrow's read buffer
        self._async_commits: queue.SimpleQueue | None = None   # commit(asynchronous=True)
        self._async_committer: threading.Thread | None = None
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    # ========================================================= assignment

    def assign(self, partitions: Iterable) -> None:
        """Takes these partitions (no group membership); positions come from the
        group's committed offsets (if group.id is set) or auto.offset.reset."""
        self._check_open()
        self._leave_group()
        tps = [_tp(p) for p in partitions]
        for tp in tps:
            self._check_partition(tp)
        self._manual = tps
        self._positions = {tp: pos for tp, pos in self._positions.items() if tp in tps}
        self._sync_listeners()

    def subscribe(self, topics: list[str] | str | re.Pattern) -> None:
        """Joins ``group.id`` with a topic list, or a regex (a string is a pattern
        when it is not a plain topic name, as Kafka's whitelist). Rebalances the
        group: every subscribed partition goes to exactly one member."""
        self._check_open()
        if not self.group_id:
            raise ValueError("subscribe() needs a group.id (or use assign())")
        if isinstance(topics, str):
            topics = re.compile(topics) if re.search(r"[\\^$*+?{}\[\]|()]", topics) else [topics]
        elif not isinstance(topics, re.Pattern):
            topics = list(topics)
        self._leave_group()
        self._manual = []
        self._positions = {}
        self._subscription = topics
        self._group = self.store.coordinator.group(self.group_id)
        self._member = self._group.join(topics, self._strategies, self._list_topics(),
                                        self._partition_count)
        # Remote Kafka clients in the same group (through a Broker on this store)?
        self.store.coordinator.bridge_if_shared(self.group_id)
        self._sync_listeners()

    def unsubscribe(self) -> None:
        self._leave_group()
        self._manual = []
        self._positions = {}
        self._sync_listeners()

    def assignment(self) -> set[TopicPartition]:
        if self._group is not None:
            with self._group.lock:
                return set(self._group.assignment.get(self._member, ()))
        return set(self._manual)

    def subscription(self) -> set[str]:
        if isinstance(self._subscription, re.Pattern):
            return {t for t in self._list_topics() if self._subscription.fullmatch(t)}
        return set(self._subscription or ())

    def _leave_group(self) -> None:
        if self._group is not None and self._member is not None:
            if self._auto_commit:
                self._commit_positions(self._snapshot()[2])
            self._group.leave(self._member, self._list_topics(), self._partition_count)
        self._group = None
        self._member = None
        self._subscription = None

    def _list_topics(self) -> list[str]:
        return list(self.store.list_topics())

    def _partition_count(self, topic: str) -> int:
        try:
            return len(self.store.describe_topic(topic).partitions)
        except UnknownTopicOrPartitionError:
            return 0

    def _check_partition(self, tp: TopicPartition) -> None:
        count = self._partition_count(tp.topic)
        if not 0 <= tp.partition < count:
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition} does not exist")

    # ============================================================ positions

    def _snapshot(self) -> tuple[int, list[TopicPartition], dict[TopicPartition, int]]:
        """(generation, my partitions, their positions) — positions resolved."""
        if self._group is not None:
            group = self._group
            epoch = self.store.topic_epoch
            with group.lock:
                if group.topic_epoch != epoch:
                    # Topics were created, deleted or grown since the last rebalance
                    # (Kafka's consumer notices it through a metadata refresh).
                    group.topic_epoch = epoch
                    group.rebalance(self._list_topics(), self._partition_count)
                generation = group.generation
                mine = list(group.assignment.get(self._member, ()))
                missing = [tp for tp in mine if tp not in group.positions]
            resolved = {tp: self._initial_position(tp) for tp in missing}
            with group.lock:
                for tp, pos in resolved.items():
                    if group.generation == generation:
                        group.positions.setdefault(tp, pos)
                return generation, mine, {tp: group.positions[tp] for tp in mine
                                          if tp in group.positions}
        for tp in self._manual:
            if tp not in self._positions:
                self._positions[tp] = self._initial_position(tp)
        return 0, list(self._manual), dict(self._positions)

    def _store_positions(self, generation: int, updates: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Records new positions; returns those accepted (partitions still ours)."""
        if self._group is not None:
            with self._group.lock:
                if self._group.generation != generation:
                    # A rebalance happened during the read: the partitions may
                    # have new owners reading from these positions. Drop it all;
                    # the caller reads again under the new generation.
                    return {}
                self._group.positions.update(updates)
            return updates
        self._positions.update(updates)
        return updates

    def _initial_position(self, tp: TopicPartition) -> int:
        committed = self.committed(tp) if self.group_id else None
        log = self.store.log(tp.topic, tp.partition)
        if committed is not None and log.log_start_offset <= committed <= log.log_end_offset:
            return committed
        return self._reset_position(tp, log)

    def _out_of_range(self, tp: TopicPartition, log, position: int) -> None:
        """Kafka's OFFSET_OUT_OF_RANGE: a position outside [log start, log end] (a seek
        past the end, or retention overtook it) is reset by auto.offset.reset, or
        raised when that is none."""
        if self._reset == "none":
            raise OffsetOutOfRangeError(
                f"{tp}: position {position} is out of range [{log.log_start_offset}, "
                f"{log.log_end_offset}] (log start offset {log.log_start_offset}, log end "
                f"offset {log.log_end_offset}), and auto.offset.reset is none", offset=position,
                log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset,
                topic_partition=tuple(tp))
        self._set_position(tp, self._reset_position(tp, log))

    def _end(self, log) -> int:
        """Where "latest" is: the log end, or for read_committed the last stable offset."""
        return log.last_stable_offset if self._read_committed else log.log_end_offset

    def _reset_position(self, tp: TopicPartition, log) -> int:
        if self._reset == "earliest":
            return log.log_start_offset
        if self._reset == "latest":
            return self._end(log)
        raise NoOffsetForPartitionError(f"no valid position for {tp} and auto.offset.reset is none")

    def position(self, partition) -> int:
        """The offset of the next record poll() returns from `partition`."""
        tp = _tp(partition)
        _, mine, positions = self._snapshot()
        if tp not in mine:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return positions[tp]

    def seek(self, partition, offset: int) -> None:
        """Sets the position: the next poll reads from `offset`. Out of range (past the
        log end, or below its start) is found by that poll, which resets it by
        auto.offset.reset or raises OffsetOutOfRangeError, as Kafka's consumer does."""
        tp = _tp(partition)
        if tp not in self.assignment():     # no initial position needed to seek
            raise ValueError(f"{tp} is not assigned to this consumer")
        offset = as_offset(offset)
        if offset < 0:
            raise ValueError(f"seek offset must not be a negative number, not {offset}")
        self._set_position(tp, offset)

    def _set_position(self, tp: TopicPartition, offset: int) -> None:
        if self._group is not None:
            with self._group.lock:
                self._group.positions[tp] = offset
        else:
            self._positions[tp] = offset

    def seek_to_beginning(self, *partitions) -> None:
        for tp in self._targets(partitions):
            self._set_position(tp, self.store.log(tp.topic, tp.partition).log_start_offset)

    def seek_to_end(self, *partitions) -> None:
        for tp in self._targets(partitions):
            self._set_position(tp, self._end(self.store.log(tp.topic, tp.partition)))

    def _targets(self, partitions: tuple) -> list[TopicPartition]:
        """seek_to_*(): no argument means every assigned partition; one list means its items."""
        if len(partitions) == 1 and isinstance(partitions[0], (list, set, frozenset)):
            partitions = tuple(partitions[0])
        return [_tp(p) for p in partitions] if partitions else sorted(self.assignment())

    def offsets_for_times(self, timestamps: dict) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the earliest offset whose timestamp is >= the given one."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for partition, ts in timestamps.items():
            tp = _tp(partition)
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"offsets_for_times: the timestamp for {tp} must be a "
                                 f"non-negative int (ms since the epoch), not {ts!r}")
            found = self.store.log(tp.topic, tp.partition).offset_for_timestamp(ts)
            out[tp] = None if found is None else OffsetAndTimestamp(found.offset, found.timestamp)
        return out

    def beginning_offsets(self, partitions) -> dict[TopicPartition, int]:
        return {tp: self.store.log(tp.topic, tp.partition).log_start_offset
                for tp in map(_tp, partitions)}

    def end_offsets(self, partitions) -> dict[TopicPartition, int]:
        return {tp: self._end(self.store.log(tp.topic, tp.partition)) for tp in map(_tp, partitions)}

    def pause(self, *partitions) -> None:
        """Stops fetching from `partitions` (positions are kept) until resume()."""
        self._paused.update(_tp(p) for p in partitions)

    def resume(self, *partitions) -> None:
        self._paused.difference_update(_tp(p) for p in partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    # ============================================================== commits

    def committed(self, partition) -> int | None:
        tp = _tp(partition)
        if not self.group_id:
            raise ValueError("committed() needs a group.id")
        found = self.store.committed(self.group_id, tp.topic, tp.partition)
        return getattr(found, "offset", found)

    def commit(self, offsets: dict | None = None, asynchronous: bool = False,
               callback: Callable[[dict, BaseException | None], Any] | None = None) -> None:
        """Commits `offsets` ({partition: offset}) or the current positions.

        ``asynchronous=True`` returns at once; the consumer's one commit thread
        stores the commits in the order they were made (as Kafka's commitAsync),
        then calls ``callback(offsets, exception or None)``. A synchronous commit,
        and close(), first wait for the asynchronous ones made before."""
        if not self.group_id:
            raise ValueError("commit() needs a group.id")
        target = {_tp(p): int(o) for p, o in offsets.items()} if offsets is not None \
            else self._snapshot()[2]
        if asynchronous:
            self._start_async_committer().put((target, callback))
        else:
            self._wait_for_async_commits()
            self._commit_positions(target)

    def _start_async_committer(self) -> queue.SimpleQueue:
        if self._async_commits is None:
            self._async_commits = queue.SimpleQueue()
            self._async_committer = threading.Thread(
                target=self._run_async_commits, args=(self._async_commits,), daemon=True,
                name="pylog-consumer-commit")
            self._async_committer.start()
        return self._async_commits

    def _run_async_commits(self, commits: queue.SimpleQueue) -> None:
        while True:
            item = commits.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()              # a waiter: every commit queued before it is done
                continue
            target, callback = item
            error = None
            try:
                self._commit_positions(target)
            except Exception as exc:  # noqa: BLE001 - given to the callback, or logged
                error = exc
                if callback is None:
                    log.warning("asynchronous commit of %s failed: %s", self.group_id, exc)
            if callback is not None:
                try:
                    callback({tp: o for tp, o in target.items()}, error)
                except Exception:  # noqa: BLE001 - a user callback
                    log.exception("commit callback raised")

    def _wait_for_async_commits(self) -> None:
        if self._async_commits is not None and self._async_committer.is_alive():
            done = threading.Event()
            self._async_commits.put(done)
            done.wait()

    def _commit_positions(self, positions: dict[TopicPartition, int]) -> None:
        if positions:
            self.store.commit_offsets(self.group_id, {(tp.topic, tp.partition): pos
                                                      for tp, pos in positions.items()})
        self._last_commit = time.monotonic()

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit and time.monotonic() - self._last_commit >= self._commit_interval:
            self._commit_positions(self._snapshot()[2])

    # ================================================================= poll

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, at most max.poll.records; waits up
        to `timeout` seconds for an append when there are none."""
        records = self._poll(timeout, max_records or self._max_records, self._fetch_records)
        return records if records is not None else []

    def poll_arrow(self, timeout: float = 0.0, max_records: int | None = None) -> pa.RecordBatch:
        """The records of one poll as a pyarrow.RecordBatch: columns topic
        (dictionary), partition, offset, timestamp, key, value, headers."""
        batch = self._poll(timeout, max_records or self._max_records, self._fetch_arrow)
        return batch if batch is not None else _empty_arrow()

    def _poll(self, timeout: float, max_records: int, fetch):
        """Runs `fetch(partitions, positions, max_records)` -> (fetches, result) until it
        finds records or `timeout` passes; records its new positions. Returns result or None."""
        self._check_open()
        deadline = time.monotonic() + max(timeout, 0.0)
        event = self._event
        while True:
            if event.is_set():          # (clear() takes the event's lock: only when set)
                event.clear()
            try:
                self._maybe_auto_commit()
                generation, mine, positions = self._snapshot()
                self._sync_listeners(mine)
                fetches, result = fetch(mine, positions, max_records)
            except UnknownTopicOrPartitionError:
                if self._group is None:
                    raise               # assign(): the caller named the partition
                # A subscribed topic was deleted under this poll: the deletion changed
                # the store's topic epoch, so the next snapshot rebalances the group
                # onto what still exists.
                if time.monotonic() >= deadline:
                    return None
                continue
            if fetches:
                if not self._store_positions(generation, {f.tp: f.next_position for f in fetches}):
                    continue    # a rebalance happened meanwhile: read again
                for f in fetches:
                    if f.count:
                        return result
                continue        # only control batches or gaps: moved past them, read on
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            event.wait(min(remaining, 0.5))   # 0.5 s: also notices rebalances

    def _slices(self, mine: list[TopicPartition], positions: dict[TopicPartition, int],
                byte_cap: int | None = None):
        """(tp, position, FileSlice, aborted transactions) for the partitions with data,
        round robin from a different partition each poll, within fetch.max.bytes and
        `byte_cap` (at least one slice, of at least one batch). The aborted transactions
        are None for read_uncommitted; read_committed reads below the last stable offset."""
        budget = self._fetch_max if byte_cap is None else min(self._fetch_max, byte_cap)
        if not mine:
            return
        start = self._next_partition % len(mine)
        self._next_partition += 1
        first = True
        for tp in mine[start:] + mine[:start]:
            if budget <= 0 and not first:
                return
            if tp in self._paused:
                continue
            log = self.store.log(tp.topic, tp.partition)
            position = positions.get(tp)
            if position is None or position == log.log_end_offset:
                continue
            if position > log.log_end_offset:
                self._out_of_range(tp, log, position)
                continue
            aborted = None
            try:
                if self._read_committed:
                    slice_, aborted, _ = log.read_committed(
                        position, max(min(self._partition_max, budget), 1))
                else:
                    slice_ = log.read(position, max(min(self._partition_max, budget), 1))
            except OffsetOutOfRangeError:
                self._out_of_range(tp, log, position)
                continue
            if slice_.size == 0:
                continue
            budget -= slice_.size
            first = False
            yield tp, position, slice_, aborted

    def _fetch_records(self, mine, positions, max_records):
        fetches: list[_Fetch] = []
        out: list[ConsumerRecord] = []
        for tp, position, slice_, aborted in self._slices(mine, positions):
            if len(out) >= max_records:
                break
            topic, partition = tp
            before = len(out)
            next_position = position
            skip = AbortedBatches(aborted) if aborted else None
            for batch in iter_batches(slice_.read(), validate=self._validate):
                full = True
                if skip is not None and skip(batch):
                    pass            # an aborted transaction's: skipped whole, as Kafka's consumer
                elif not batch.is_control:
                    for r in batch.records():
                        if r.offset < position:
                            continue
                        # tuple.__new__ skips the NamedTuple's Python-level __new__.
                        out.append(_new_record(ConsumerRecord, (topic, partition, r.offset,
                                                                r.timestamp, r.key, r.value,
                                                                r.headers)))
                        next_position = r.offset + 1
                        if len(out) >= max_records:
                            full = False
                            break
                if full:
                    # Past every batch read, control batches and offset gaps included
                    # (Kafka's fetcher: nextOffset = lastOffset + 1).
                    next_position = max(next_position, batch.last_offset + 1)
                if len(out) >= max_records:
                    break
            if next_position > position:
                fetches.append(_Fetch(tp, next_position, len(out) - before))
        return fetches, out

    def _fetch_arrow(self, mine, positions, max_records):
        """Reads every slice into one buffer and decodes it with one decode_arrow call;
        the result is a zero-copy slice of it unless rows must be skipped."""
        picked = []
        estimate = 0
        # Read about what max_records needs (bytes per record as last decoded), not
        # max.partition.fetch.bytes: the rows past max_records would be decoded for
        # nothing and read again by the next poll.
        cap = int(max_records * self._arrow_record_bytes * 1.25) + 16384 \
            if self._arrow_record_bytes else None
        for tp, position, slice_, aborted in self._slices(mine, positions, cap):
            picked.append((tp, position, slice_, aborted))
            estimate += slice_.last_offset - max(position, slice_.first_offset) + 1
            if estimate >= max_records:
                break
        if not picked:
            return [], None
        view = self._scratch_view(sum(s.size for _, _, s, _ in picked))
        at = 0
        for _, _, s, _ in picked:
            at += s.readinto(view[at:at + s.size])
        if any(aborted for *_, aborted in picked):
            # Aborted transactions are a partition's: each slice decodes on its own.
            return self._fetch_arrow_by_offsets(picked, view, max_records)
        body = decode_arrow(view, validate=self._validate)
        if body.num_rows:
            self._arrow_record_bytes = len(view) / body.num_rows
        counts = [s.last_offset - s.first_offset + 1 for _, _, s, _ in picked]
        if sum(counts) != body.num_rows:
            # Offset gaps or control batches: cut each slice by its offsets instead.
            return self._fetch_arrow_by_offsets(picked, view, max_records)
        fetches: list[_Fetch] = []
        spans: list[tuple[int, int]] = []      # the rows taken, [start, stop) per slice
        row = taken_to = 0          # taken_to: end of the rows taken so far, if contiguous
        contiguous = True
        left = max_records
        for (tp, position, s, _), count in zip(picked, counts):
            skip = max(position - s.first_offset, 0)     # records before the position
            take = min(count - skip, left)
            if take > 0:
                contiguous = contiguous and row + skip == taken_to
                taken_to = row + skip + take
                spans.append((row + skip, taken_to))
                fetches.append(_Fetch(tp, position + take, take))
                left -= take
            row += count
        if not fetches:
            return [], None
        if contiguous:
            body = body.slice(0, taken_to)
        else:
            body = body.take(pa.array(np.concatenate([np.arange(a, b) for a, b in spans])))
        return fetches, _with_partition_columns(fetches, body)

    def _scratch_view(self, size: int) -> memoryview:
        """`size` bytes of the consumer's read buffer, reused across polls (grown
        to a power of two): a fresh buffer per poll cost a zero-fill and, for
        large ones, new pages (a page fault each on a VM). decode_arrow copies
        everything it returns out of it, so the next poll may overwrite it."""
        if len(self._scratch) < size:
            self._scratch = bytearray(1 << max(size - 1, 1).bit_length())
        return memoryview(self._scratch)[:size]

    def _fetch_arrow_by_offsets(self, picked, view, max_records):
        fetches: list[_Fetch] = []
        parts = []
        at = 0
        left = max_records
        for tp, position, s, aborted in picked:
            rb = decode_arrow(view[at:at + s.size], validate=self._validate,
                              aborted_transactions=aborted)
            at += s.size
            lo = int((rb.column(0).to_numpy() < position).sum())
            whole = rb.num_rows - lo <= left
            rb = rb.slice(lo, left)
            next_position = int(rb.column(0)[rb.num_rows - 1].as_py()) + 1 if rb.num_rows else position
            if whole:                  # past control batches, aborted ones and offset gaps too
                next_position = max(next_position, s.last_offset + 1)
            if next_position > position:
                fetches.append(_Fetch(tp, next_position, rb.num_rows))
            if rb.num_rows:
                parts.append(rb)
                left -= rb.num_rows
            if left <= 0:
                break
        if not parts:
            return fetches, None
        body = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
        return fetches, _with_partition_columns(fetches, body)

    def _sync_listeners(self, mine: list[TopicPartition] | None = None) -> None:
        """Registers the wake-up event on exactly the assigned partitions' logs."""
        if mine is None:
            mine = list(self.assignment()) if not self._closed else []
        wanted = set(mine)
        if wanted == self._listening:
            return
        for tp in self._listening - wanted:
            try:
                self.store.log(tp.topic, tp.partition).remove_listener(self._event)
            except Exception:  # noqa: BLE001 - the partition may be gone or offline
                pass
        for tp in wanted - self._listening:
            self.store.log(tp.topic, tp.partition).add_listener(self._event)
        self._listening = wanted

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Yields records forever (until close())."""
        while not self._closed:
            yield from self.poll(1.0)

    # =========================================================== lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Consumer is closed")

    def close(self) -> None:
        """Commits positions (enable.auto.commit), leaves the group, stops listening."""
        if self._closed:
            return
        # Every step is attempted and the consumer always ends closed, even when the
        # store closed or a topic was deleted under it: as Kafka's consumer, a final
        # commit that fails is logged, not raised.
        if self._async_commits is not None:
            self._async_commits.put(None)
            self._async_committer.join()
        if self._auto_commit and self._group is None and self._manual:
            try:
                self._commit_positions(self._snapshot()[2])
            except Exception as exc:  # noqa: BLE001 - logged
                log.warning("consumer close: the final commit failed: %s", exc)
        try:
            self._leave_group()
        except Exception as exc:  # noqa: BLE001 - logged
            log.warning("consumer close: leaving group %r failed: %s", self.group_id, exc)
        self._closed = True
        try:
            self._sync_listeners([])
        except Exception as exc:  # noqa: BLE001 - logged
            log.warning("consumer close: %s", exc)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_INT32 = pa.int32()
_TOPIC_TYPE = pa.dictionary(_INT32, pa.string())
_topic_dictionaries: dict[tuple[str, ...], pa.Array] = {}


def _int32_column(values: np.ndarray) -> pa.Array:
    """An int32 Arrow array over `values`' memory (no copy, no type inference)."""
    return pa.Array.from_buffers(_INT32, len(values), [None, pa.py_buffer(values)], null_count=0)


def _topic_dictionary(topics: tuple[str, ...]) -> pa.Array:
    """The topic column's dictionary, built once per set of topics (not a pa.array
    of a list on every poll, with the GIL held)."""
    found = _topic_dictionaries.get(topics)
    if found is None:
        if len(_topic_dictionaries) >= 1024:
            _topic_dictionaries.clear()
        found = _topic_dictionaries[topics] = pa.array(topics, pa.string())
    return found


_partition_columns: dict[TopicPartition, tuple[pa.Array, pa.Array]] = {}
_PARTITION_COLUMNS_ROWS = 4 << 20        # at most 32 MiB of cached columns


def _one_partition_columns(tp: TopicPartition, n: int) -> tuple[pa.Array, pa.Array]:
    """The topic and partition columns of `n` rows of one partition: slices (zero
    copy) of columns built once per partition, at a power of two of rows."""
    found = _partition_columns.get(tp)
    if found is None or len(found[1]) < n:
        rows = max(1 << max(n - 1, 0).bit_length(), 1024)
        partitions = np.empty(rows, dtype=np.int32)
        partitions.fill(tp.partition)
        topic = pa.DictionaryArray.from_buffers(_TOPIC_TYPE, rows,
                                                [None, pa.py_buffer(np.zeros(rows, np.int32))],
                                                _topic_dictionary((tp.topic,)), null_count=0)
        if sum(len(c[1]) for c in _partition_columns.values()) + rows > _PARTITION_COLUMNS_ROWS:
            _partition_columns.clear()
        found = _partition_columns[tp] = (topic, _int32_column(partitions))
    return found[0].slice(0, n), found[1].slice(0, n)


def _with_partition_columns(fetches: list[_Fetch], body: pa.RecordBatch) -> pa.RecordBatch:
    """Prepends the topic (dictionary) and partition columns. A poll of one
    partition slices columns made for it once; rows of
    several partitions are built with numpy."""
    if len(fetches) == 1:
        topic, partition = _one_partition_columns(fetches[0].tp, body.num_rows)
    else:
        counts = np.fromiter((f.count for f in fetches), dtype=np.int64, count=len(fetches))
        topics = tuple(sorted({f.tp.topic for f in fetches}))
        slot = {t: i for i, t in enumerate(topics)}
        topic_ids = np.repeat(np.fromiter((slot[f.tp.topic] for f in fetches), dtype=np.int32,
                                          count=len(fetches)), counts)
        partition = _int32_column(np.repeat(np.fromiter((f.tp.partition for f in fetches),
                                                        dtype=np.int32, count=len(fetches)),
                                            counts))
        # The indices are slots of `topics`, in range by construction: from_buffers
        # skips Arrow's check of every index (a pass over the rows with the GIL held).
        topic = pa.DictionaryArray.from_buffers(_TOPIC_TYPE, len(topic_ids),
                                                [None, pa.py_buffer(topic_ids)],
                                                _topic_dictionary(topics), null_count=0)
    return body.add_column(0, "partition", partition).add_column(0, "topic", topic)


_EMPTY_ARROW: pa.RecordBatch | None = None


def _empty_arrow() -> pa.RecordBatch:
    """An empty poll's batch (one, shared: a RecordBatch is immutable)."""
    global _EMPTY_ARROW
    if _EMPTY_ARROW is None:
        schema = decode_arrow(b"").schema
        schema = pa.schema([pa.field("topic", _TOPIC_TYPE), pa.field("partition", _INT32)]
                           + list(schema))
        _EMPTY_ARROW = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema],
                                                  schema=schema)
    return _EMPTY_ARROW
