"""What leaves a Log: records from its start (retention, DeleteRecords) and from
its end (truncation).

Retention is Kafka's deleteOldSegments: the log-start-offset breach, then
``retention.bytes``, then ``retention.ms`` by each segment's largest timestamp;
a deleted segment's files are renamed ``.deleted`` at once and removed
``file.delete.delay.ms`` later, and one segment always remains (the active one
is rolled first if it too must go). Truncation (Kafka's truncateTo) removes
whole batches from the end and rebuilds the producer state from the newest
snapshot left.

``LogRetention`` is a mixin of :class:`~pylog.storage.log.Log` (its segments,
locks and offsets are the Log's). Locks: each method holds the Log's
``_flush_lock`` and ``_lock`` (see ``_delete_segments`` for why both).
"""

from __future__ import annotations

import logging
import os

from pylog.errors import OffsetOutOfRangeError

from .log_loader import delete_segment_files
from .segment import LogSegment

log = logging.getLogger("pylog.storage.log")   # the Log's own logger: one name for its messages

__all__ = ["LogRetention", "remove_deleted_files"]


class LogRetention:
    """Truncation, retention and DeleteRecords of a Log (a mixin: see the module)."""

    def truncate_to(self, offset: int) -> int:
        """Removes every record at offsets >= `offset` (whole batches: a batch that
        straddles `offset` goes too). Returns the new log end offset."""
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self._next_offset:
                return self._next_offset
            if offset < self._log_start_offset:
                raise OffsetOutOfRangeError(
                    f"{self._name()}: cannot truncate to {offset}, below its log start offset "
                    f"{self._log_start_offset} ({self.path})", offset=offset,
                    log_start_offset=self._log_start_offset, log_end_offset=self._next_offset,
                    topic_partition=self.topic_partition)
            try:
                self._begin_writing()
                keep = [s for s in self._segments if s.base_offset < offset] or [self._segments[0]]
                drop = [s for s in self._segments if s not in keep]
                for segment in drop:
                    segment.close()
                    delete_segment_files(self.path, segment.base_offset)
                last = keep[-1]
                if not last.active:
                    last.make_active()
                last.truncate_to(offset)
                self._publish(tuple(keep))
                self._next_offset = last.next_offset
                # Kafka's truncateAndReload: the snapshots past the new end go, and the
                # state is rebuilt from the newest one left (an open or ended
                # transaction cut away is undone with it).
                self.producer_state.delete_snapshots_above(self._next_offset)
                self._load_producer_state()
                self._recovery_point = min(self._recovery_point, self._next_offset)
                self._log_start_offset = min(self._log_start_offset, self._next_offset)
                self._dir_dirty = True
                if self.standalone:
                    self._write_state(self._recovery_point, self._log_start_offset, clean=False)
            except OSError as exc:
                raise self._storage_error(exc, "truncate") from exc
            return self._next_offset

    def advance_log_start_offset(self, offset: int) -> int:
        """Moves the log start offset up to `offset` (Kafka's DeleteRecords) and deletes
        the segments that lie wholly below it. Returns the number of segments deleted."""
        with self._flush_lock, self._lock:   # never under a flush (see _delete_segments)
            self._check_open()
            if offset > self._next_offset:
                raise OffsetOutOfRangeError(
                    f"{self._name()}: cannot move the log start offset to {offset}, past its "
                    f"log end offset {self._next_offset} ({self.path})", offset=offset,
                    log_start_offset=self._log_start_offset, log_end_offset=self._next_offset,
                    topic_partition=self.topic_partition)
            if offset > self._log_start_offset:
                try:
                    self._begin_writing()   # the new log start is persisted from here on
                except OSError as exc:
                    raise self._storage_error(exc, "advance the log start offset") from exc
                self._log_start_offset = offset
            return self._delete_segments(lambda s, nxt: nxt is not None and nxt <= self._log_start_offset,
                                         reason=f"log start offset {self._log_start_offset} breach "
                                                "(DeleteRecords)")

    def delete_segments_before(self, offset: int) -> int:
        """Deletes every segment whose offsets are all below `offset` and advances the
        log start offset to the first remaining one. Returns the number deleted."""
        with self._flush_lock, self._lock:   # never under a flush (see _delete_segments)
            self._check_open()
            return self._delete_segments(lambda s, nxt: s.next_offset <= offset and nxt is not None
                                         and nxt <= max(offset, s.next_offset),
                                         reason=f"deletion of offsets below {offset}")

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Kafka's deleteOldSegments: log-start-offset breach, then ``retention.bytes``,
        then ``retention.ms`` (by each segment's largest timestamp). The active
        segment is rolled first if it too must go, so one segment always remains.
        Returns the number of segments deleted."""
        with self._flush_lock, self._lock:   # never under a flush (see _delete_segments)
            self._check_open()
            now = self.clock() if now_ms is None else now_ms
            deleted = self._delete_segments(lambda s, nxt: nxt is not None and nxt <= self._log_start_offset,
                                            reason=f"log start offset {self._log_start_offset} breach")
            limit = self.config.retention_bytes
            if limit >= 0:
                excess = [self.size - limit]

                def over_size(segment: LogSegment, nxt: int | None) -> bool:
                    if excess[0] - segment.size < 0:
                        return False
                    excess[0] -= segment.size
                    return True
                deleted += self._delete_segments(over_size, allow_active=True, now=now,
                                                 reason=f"log retention size {limit} breach")
            retention_ms = self.config.retention_ms
            if retention_ms >= 0:
                deleted += self._delete_segments(
                    lambda s, nxt: now - s.largest_timestamp > retention_ms, allow_active=True, now=now,
                    reason=f"log retention time {retention_ms}ms breach based on the largest "
                           "record timestamp in the segment")
            return deleted

    def _delete_segments(self, predicate, allow_active: bool = False, now: int | None = None,
                         reason: str = "") -> int:
        """Deletes the oldest segments while `predicate(segment, next_base)` holds.
        The caller holds _flush_lock and _lock: a flush takes its segments under
        _lock and syncs them outside it, so a deletion in between would pull a
        segment's files from under the flush (an index without a descriptor is
        synced by its path: ENOENT once renamed, which took the dir offline)."""
        segments = self._segments
        doomed: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is None and (not allow_active or segment.size == 0):
                break
            if not predicate(segment, nxt):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        log.info("%s: deleting %d segment%s (base offsets %d..%d, %d bytes) due to %s", self.path,
                 len(doomed), "" if len(doomed) == 1 else "s", doomed[0].base_offset,
                 doomed[-1].base_offset, sum(seg.size for seg in doomed), reason)
        try:
            self._begin_writing()
            if doomed[-1] is segments[-1]:
                self._roll(self.clock() if now is None else now)   # keep one segment
                segments = self._segments
            remaining = segments[len(doomed):]
            self._publish(remaining)
            self._log_start_offset = max(self._log_start_offset, remaining[0].base_offset)
            self.producer_state.delete_snapshots_below(remaining[0].base_offset)
            delay = self.config.file_delete_delay_ms / 1000
            for segment in doomed:
                renamed = segment.rename_to_deleted()
                self.scheduler.schedule(delay, lambda paths=renamed: remove_deleted_files(paths))
            self._dir_dirty = True
            if self.standalone:
                self._write_state(self._recovery_point, self._log_start_offset, clean=False)
        except OSError as exc:
            raise self._storage_error(exc, "delete segments") from exc
        return len(doomed)


def remove_deleted_files(paths: list[str]) -> None:
    """Removes the files of a deletion (renamed .deleted), when its delay is up."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
