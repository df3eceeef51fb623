"""LogSegment: one .log file and its .index, .timeindex and .txnindex (docs/FORMAT.md, sections 8-10).

A segment holds a contiguous run of batches whose offsets start at its base
offset. The last segment of a log is active (appends go there, its indexes
are preallocated); the others are read-only and trimmed.

Not thread-safe for writers: the owning Log serialises appends, rolls,
truncations and recovery. Readers may call ``read``/``find_offset_by_timestamp``
concurrently with one writer: they only look below the ``size`` they read,
and index operations hold the GIL.
"""

from __future__ import annotations

import logging
import os
import random
import resource
import threading
from collections import OrderedDict

from pylog._core.storage import (
    LogFile,
    OffsetIndex,
    PreparedAppend,
    SegmentState,
    TimeIndex,
    segment_append,
    segment_roll_reason,
)
from pylog.errors import CorruptIndexError, CorruptRecordError

from . import files
from .config import LogConfig
from .file_slice import FileSlice
from .info import SegmentRecovery
from .segment_check import (OFFSET_ENTRY, TIME_ENTRY, check_offset_entries, check_time_entries,
                            entry_is_wrong, read_index_file)
from .transaction_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from .transaction_index import TransactionIndex

__all__ = ["IndexEntryError", "LogSegment"]

INT32_MAX = 2**31 - 1

logger = logging.getLogger(__name__)
_direct_refused: set[str] = set()     # partition dirs warned about (pylog.io.direct = auto)


class OpenSegments:
    """The inactive segments whose files are open, oldest first, process-wide.

    An inactive segment's .log descriptor and index maps are opened when a read,
    a lookup or a flush needs them, and closed when more than :meth:`limit`
    inactive segments are open (the least recently opened first), so a store of
    40,000 segments fits the default open-files limit and ``vm.max_map_count``.
    Active segments are never here: their files stay open. ``lock`` guards the
    table and every segment's handle fields while an eviction clears them."""

    MAX = 2000              # at most 2 maps + 1 descriptor each: far below max_map_count

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._open: OrderedDict[int, LogSegment] = OrderedDict()

    @classmethod
    def limit(cls) -> int:
        """A quarter of the soft open-files limit (the rest is for active segments,
        sockets and clients), at most MAX."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return max(16, min(cls.MAX, (soft if soft != resource.RLIM_INFINITY else 1 << 20) // 4))

    def opened(self, segment: LogSegment) -> None:
        """`segment` (inactive) has handles open now; evicts the oldest beyond the limit."""
        with self.lock:
            if segment.active:
                return
            self._open[id(segment)] = segment
            self._open.move_to_end(id(segment))
            excess = len(self._open) - self.limit()
            while excess > 0:
                _, oldest = self._open.popitem(last=False)
                oldest._drop_handles()
                excess -= 1

    def discard(self, segment: LogSegment) -> None:
        with self.lock:
            self._open.pop(id(segment), None)

    def __len__(self) -> int:
        return len(self._open)


#: The process's open inactive segments.
open_segments = OpenSegments()


class IndexEntryError(CorruptIndexError):
    """A read met an offset-index entry that does not name the batch at its position
    (the .log is intact there): the owning Log rebuilds the segment's indexes
    (:meth:`LogSegment.rebuild_indexes`) and reads again."""

    def __init__(self, segment: LogSegment, offset: int, position: int) -> None:
        super().__init__(f"index {files.index_file(segment.directory, segment.base_offset)}: "
                         f"the entry for offset {offset} points at byte {position}, which does "
                         f"not start the batch ending at offset {offset}")
        self.segment = segment
        self.offset = offset
        self.position = position


class LogSegment(SegmentState):
    """One segment. Build with :meth:`create` or :meth:`open`.

    ``log``, ``offset_index`` and ``time_index`` are the segment's files. Those of an
    inactive segment are opened on first use and closed again by :data:`open_segments`
    (a reader that holds one keeps it open: the objects close when unreferenced)."""

    # SegmentState (the C core) holds what an append reads and writes: config,
    # base_offset, next_offset, max_timestamp, offset_of_max_timestamp,
    # rolling_based_timestamp, created_ms, bytes_since_index_entry,
    # roll_jitter_ms, flushed_size and the three files (_log, _offset_index,
    # _time_index).
    __slots__ = ("directory", "_size", "dropped_size", "write_behind_size", "active", "deleted",
                 "_txn_index")

    def __init__(self, directory: str, base_offset: int, log: LogFile, offset_index: OffsetIndex,
                 time_index: TimeIndex, config: LogConfig, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._log: LogFile | None = log
        self._offset_index: OffsetIndex | None = offset_index
        self._time_index: TimeIndex | None = time_index
        self._size = log.size                   # the size while the files are closed
        self.config = config
        self.next_offset = base_offset          # one past the last offset in the segment
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_based_timestamp = -1       # first batch's max timestamp (segment.ms)
        self.created_ms = created_ms
        self.bytes_since_index_entry = 0
        jitter = min(config.segment_jitter_ms, config.segment_ms)
        self.roll_jitter_ms = random.randrange(jitter) if jitter > 0 else 0
        self.flushed_size = 0                   # bytes known to be on disk
        self.dropped_size = 0                   # bytes dropped from the page cache (fadvise)
        self.write_behind_size = 0              # bytes handed to sync_file_range
        self.active = False
        self.deleted = False                    # its files were renamed to *.deleted
        self._txn_index: TransactionIndex | None = None

    # ------------------------------------------------------------------ open

    @classmethod
    def create(cls, directory: str, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """A new, empty, active segment (files must not exist yet)."""
        log_path = files.log_file(directory, base_offset)
        for path in (log_path, files.index_file(directory, base_offset),
                     files.time_index_file(directory, base_offset)):
            if os.path.exists(path):
                raise FileExistsError(f"segment file {path} already exists")
        prealloc = config.segment_bytes if config.preallocate else 0
        log = oi = None
        try:
            log = LogFile(log_path, create=True, preallocate=prealloc)
            oi = OffsetIndex.open(files.index_file(directory, base_offset), base_offset,
                                  config.segment_index_bytes)
            ti = TimeIndex.open(files.time_index_file(directory, base_offset), base_offset,
                                config.segment_index_bytes)
        except BaseException:
            # Leave nothing behind (e.g. ENOSPC while preallocating an index),
            # so a later roll at the same offset can try again.
            for opened in (oi, log):
                if opened is not None:
                    opened.close()
            for path in (log_path, files.index_file(directory, base_offset),
                         files.time_index_file(directory, base_offset)):
                if os.path.exists(path):
                    os.remove(path)
            raise
        segment = cls(directory, base_offset, log, oi, ti, config, now_ms)
        segment.active = True
        try:
            segment.apply_direct()
        except BaseException:
            segment.close()
            for path in (log_path, files.index_file(directory, base_offset),
                         files.time_index_file(directory, base_offset)):
                if os.path.exists(path):
                    os.remove(path)
            raise
        return segment

    @classmethod
    def open(cls, directory: str, base_offset: int, config: LogConfig, now_ms: int,
             before_change=None) -> tuple[LogSegment, str | None]:
        """Opens an existing segment without validating its data, and inactive.

        Indexes are opened writable at their current size, changing nothing (a
        missing one is created empty, after ``before_change()``). Returns
        (segment, problem): problem is None when the indexes pass the checks of
        :meth:`_load_from_indexes`, else why they cannot be trusted (missing, or
        failing a check against the .log), in which case the caller must recover
        the segment (rebuilding the indexes).
        """
        log = LogFile(files.log_file(directory, base_offset))
        problem = None
        oi = ti = None
        try:
            paths = (files.index_file(directory, base_offset), files.time_index_file(directory, base_offset))
            missing = [p for p in paths if not os.path.exists(p)]
            if missing:
                problem = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
                if before_change is not None:
                    before_change()
            oi = OffsetIndex.open(paths[0], base_offset, 0)
            ti = TimeIndex.open(paths[1], base_offset, 0)
        except BaseException:
            log.close()
            if oi is not None:
                oi.close()
            raise
        segment = cls(directory, base_offset, log, oi, ti, config, now_ms)
        if problem is None:
            problem = segment._load_from_indexes()
        return segment, problem

    def _load_from_indexes(self) -> str | None:
        """Restores the in-memory state from the indexes and the tail of the .log.

        Returns None, or why the indexes disagree with the .log: then the segment
        must be recovered. The checks cover what the loaded state comes from, each
        in O(1) reads whatever the segment's size (docs/FORMAT.md, section 9):
        Kafka's (a file size that is a multiple of the entry size, entries above
        the base offset) plus entries strictly increasing up to a zero tail; the
        last offset entry naming the batch at its position (a header read) and the
        batches after it ending exactly at the end of the .log (a walk of about
        index.interval.bytes): the next offset; the time index's last entry naming
        a batch of the segment whose max timestamp it holds (no read when that is
        the tail's maximum, else a walk of about index.interval.bytes): the max
        timestamp. An entry in the middle that lies is found where a read meets
        it (:meth:`read`).
        """
        size = self.log.size
        oi, ti = self.offset_index, self.time_index
        try:
            oi.sanity_check(size)
            ti.sanity_check(size)
            last_offset, position = oi.last_entry()
            if oi.entries:
                batch = self.log.slice_info(position, size, -1, 1)
                if batch is None or batch[0] != position or batch[3] != last_offset:
                    return (f"index {oi.path}: its last entry (offset {last_offset}) does not "
                            f"name the batch at byte {position}")
            _, end, tail_last, tail_max_ts, tail_off_max, first_max = \
                self.log.summarize(position, size)
            first = first_max if position == 0 or not size else \
                self.log.find_timestamp(0, size, -2**63, -1)[4]
            if end != size:
                return (f"{self.log.path}: the {size - end} bytes after byte {end} are not a "
                        "whole batch")
            next_offset = tail_last + 1 if tail_last >= 0 else (
                last_offset + 1 if oi.entries else self.base_offset)
            self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
            if ti.entries:
                ts, ts_offset = ti.last_entry()
                if (ts, ts_offset) == (tail_max_ts, tail_off_max):
                    holding = (None, None, ts_offset, ts_offset, ts)    # the tail's maximum
                elif ts_offset < next_offset:
                    holding = self.log.find_timestamp(oi.lookup(ts_offset)[1], size, -2**63,
                                                      ts_offset)
                else:
                    holding = None
                # (-1, base) is what earlier pylog wrote closing a segment without
                # timestamps: harmless.
                no_timestamps = ts < 0 and ts_offset == self.base_offset
                if not no_timestamps and (holding is None or holding[2] > ts_offset or
                                          holding[4] != ts):
                    return (f"time index {ti.path}: its last entry (timestamp {ts}, offset "
                            f"{ts_offset}) does not match the batch holding offset {ts_offset}"
                            f"{f' (max timestamp {holding[4]})' if holding else ''}")
                self.max_timestamp, self.offset_of_max_timestamp = ts, ts_offset
        except (CorruptIndexError, CorruptRecordError) as exc:
            return str(exc)
        if tail_max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = tail_max_ts, tail_off_max
        self.next_offset = next_offset
        self.bytes_since_index_entry = size - position if oi.entries else size
        self.rolling_based_timestamp = first if size else -1
        return None

    def check(self) -> tuple[SegmentRecovery, bool]:
        """Recovery's scan without its writes: every batch validated (lengths, magic,
        CRC-32C, offsets) into indexes of no capacity, and every entry of both index
        files checked against the batches (pylog.storage.segment_check). Returns
        (the report :meth:`recover` would give, sound): sound when the .log is valid
        to its end and the indexes are right, so that recovery would change nothing
        the segment's state (loaded from its indexes) does not already say."""
        scratch = []
        try:
            # /dev/null: an index file of length 0, so the scan stores no entry.
            scratch.append(OffsetIndex.open(os.devnull, self.base_offset, 0))
            scratch.append(TimeIndex.open(os.devnull, self.base_offset, 0))
            result = self.log.recover(self.base_offset, 2**62, *scratch)
        finally:
            for index in scratch:
                index.close()
        valid, size = result["valid_bytes"], result["file_bytes"]
        error = result["error"]
        report = SegmentRecovery(self.base_offset, result["scanned_bytes"], valid, 0,
                                 result["batches"], result["reason"],
                                 str(error) if error else None)
        scanned_next = result["last_offset"] + 1 if result["last_offset"] >= 0 else self.base_offset
        if valid != size or error is not None or size != self.size or \
                scanned_next != self.next_offset or result["max_timestamp"] != self.max_timestamp:
            return report, False
        last_offset = self.next_offset - 1
        for path, entry, check in (
                (files.index_file(self.directory, self.base_offset), OFFSET_ENTRY,
                 lambda e: check_offset_entries(self.log, self.base_offset, e, valid)),
                (files.time_index_file(self.directory, self.base_offset), TIME_ENTRY,
                 lambda e: check_time_entries(self.log, self.base_offset, e, valid, last_offset))):
            entries, problems = read_index_file(path, entry)
            if problems or check(entries):
                return report, False
        return report, True

    def recover(self, truncate: bool = True) -> SegmentRecovery:
        """Validates every batch and rebuilds the indexes. With `truncate` (a segment
        that may hold unflushed data) the file is cut after the last valid batch;
        without it (data below the recovery point) every byte is kept, the indexes
        cover the valid prefix, and reads past it report the corruption where
        they meet it."""
        # Room for a full rebuild (the files may be trimmed, short or missing).
        self.offset_index.resize(self.config.segment_index_bytes)
        self.time_index.resize(self.config.segment_index_bytes)
        result = self.log.recover(self.base_offset, self.config.index_interval_bytes,
                                  self.offset_index, self.time_index)
        valid = result["valid_bytes"]
        reason = result["reason"]
        if truncate:
            truncated = result["file_bytes"] - valid
            if truncated:
                self.log.truncate(valid)
            self.log.set_size(valid)
        else:
            truncated = 0
            self.log.set_size(result["file_bytes"])
        self.next_offset = result["last_offset"] + 1 if result["last_offset"] >= 0 else self.base_offset
        self.max_timestamp = result["max_timestamp"]
        self.offset_of_max_timestamp = result["offset_of_max_timestamp"]
        self.rolling_based_timestamp = result["first_batch_max_timestamp"]
        self.bytes_since_index_entry = result["bytes_since_index_entry"]
        self.flushed_size = min(self.flushed_size, valid)
        self.dropped_size = min(self.dropped_size, valid)
        if not self.active:
            # As Kafka's recover: the time index ends with the segment's largest
            # timestamp, as a segment rolled or closed normally does.
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
            self.offset_index.trim()
            self.time_index.trim()
        error = result["error"]
        return SegmentRecovery(self.base_offset, result["scanned_bytes"], valid, truncated,
                               result["batches"], reason, str(error) if error else None)

    # ---------------------------------------------------------------- writes

    @property
    def size(self) -> int:
        log = self._log
        return log.size if log is not None else self._size

    # ------------------------------------------------------------- handles

    @property
    def path(self) -> str:
        """The .log file's path (no file is opened)."""
        return files.log_file(self.directory, self.base_offset)

    def _reopen(self, opener, path: str):
        """Opens one of the segment's files by name: its *.deleted name once retention
        or the cleaner renamed it (FileNotFoundError once it is removed for good)."""
        names = (path + files.DELETED_SUFFIX, path) if self.deleted else \
            (path, path + files.DELETED_SUFFIX)
        try:
            return opener(names[0])
        except FileNotFoundError:
            return opener(names[1])     # renamed between the flag and the open

    @property
    def log(self) -> LogFile:
        log = self._log
        if log is None:
            log = self._log = self._reopen(LogFile, self.path)
            open_segments.opened(self)
        return log

    @property
    def offset_index(self) -> OffsetIndex:
        index = self._offset_index
        if index is None:
            index = self._reopen(lambda p: OffsetIndex.open(p, self.base_offset, 0),
                                 files.index_file(self.directory, self.base_offset))
            if not self.active:
                index.release_fd()              # the mapping is enough to read
            self._offset_index = index
            open_segments.opened(self)
        return index

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        if index is None:
            index = self._reopen(lambda p: TimeIndex.open(p, self.base_offset, 0),
                                 files.time_index_file(self.directory, self.base_offset))
            if not self.active:
                index.release_fd()
            self._time_index = index
            open_segments.opened(self)
        return index

    @property
    def txn_index(self) -> TransactionIndex:
        """The segment's aborted transactions (``.txnindex``; read on first use, held
        in memory, no descriptor kept)."""
        index = self._txn_index
        if index is None:
            path = files.txn_index_file(self.directory, self.base_offset)
            if self.deleted:
                path += files.DELETED_SUFFIX
            index = self._txn_index = TransactionIndex(path, self.base_offset)
        return index

    def txn_index_whole(self) -> bool:
        """False when the ``.txnindex`` is not a whole number of entries (torn or
        damaged: recovery rebuilds it). One stat; the entries are read on first use."""
        try:
            size = os.stat(files.txn_index_file(self.directory, self.base_offset)).st_size
        except FileNotFoundError:
            return True
        return size % TXN_ENTRY_SIZE == 0

    def release_handles(self) -> None:
        """Closes an inactive segment's files now; they reopen on the next use."""
        with open_segments.lock:
            open_segments._open.pop(id(self), None)
            self._drop_handles()

    def _drop_handles(self) -> None:
        # Dropped, not closed: a reader holding one (a FileSlice being sent) keeps
        # it open, and it closes when the last reference goes.
        if self.active:
            return
        log = self._log
        if log is not None:
            self._size = log.size
        self._log = self._offset_index = self._time_index = None

    def make_active(self) -> None:
        """Grows the indexes back to segment.index.bytes so appends can continue."""
        self.active = True             # first: an eviction now leaves the handles alone
        open_segments.discard(self)
        self.offset_index.resize(self.config.segment_index_bytes)
        self.time_index.resize(self.config.segment_index_bytes)
        self.apply_direct()

    def apply_direct(self) -> None:
        """Puts the active segment's appends in the mode pylog.io.direct asks for.
        ``true`` on a file system without O_DIRECT raises OSError naming the file;
        ``auto`` stays buffered there, with one warning per partition."""
        mode = self.config.pylog_io_direct
        if mode == "false" or not self.active:
            self.log.end_direct()
            return
        try:
            self.log.enable_direct(self.config.pylog_io_direct_queue_depth)
        except OSError as exc:
            if mode == "true":
                raise
            if self.directory not in _direct_refused:
                _direct_refused.add(self.directory)
                logger.warning("%s: pylog.io.direct = auto: appending through the page cache: "
                            "%s", self.directory, exc.strerror)

    def should_roll(self, incoming: PreparedAppend, now_ms: int) -> str | None:
        """Why the segment must roll before taking `incoming`, or None (Kafka's shouldRoll)."""
        return segment_roll_reason(self, self.log, self.offset_index, self.time_index, incoming,
                                   now_ms)

    def should_roll_by_time(self, now_ms: int) -> bool:
        """The LogManager's periodic check: has segment.ms passed since creation?"""
        return self.size > 0 and now_ms - self.created_ms > self.config.segment_ms - self.roll_jitter_ms

    def append(self, engine, prepared: PreparedAppend, datasync: bool) -> int:
        """Writes the batches in one I/O, then indexes them. Returns their position.
        Only the active segment appends (``segment_append``, shared with the Log's
        C fast path)."""
        return segment_append(self, self.log, self.offset_index, self.time_index, engine, prepared,
                              datasync)

    def on_become_inactive(self) -> None:
        """At roll: the final time index entry, then trim the indexes and the .log."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        self.offset_index.trim()
        self.time_index.trim()
        self.log.trim()
        self.log.end_direct()
        self._size = self.log.size
        self.active = False
        self.release_index_fds()
        open_segments.opened(self)     # kept open for now: consumers at the tail read it

    def release_index_fds(self) -> None:
        """An inactive segment's open indexes keep their mappings, not their descriptors
        (reopened by path if the segment becomes active)."""
        if self._offset_index is not None:
            self._offset_index.release_fd()
        if self._time_index is not None:
            self._time_index.release_fd()

    def needs_flush(self) -> bool:
        """Unsynced bytes, an inactive segment's indexes, or synced pages to drop."""
        return (self.flushed_size < self.size or not self.active or
                (self.config.pylog_flush_fadvise_dontneed and self.dropped_size < self.size))

    def flush(self, engine, indexes: bool = True) -> None:
        """fsync the data (unless an earlier sync covered it), then the indexes
        (Kafka's order). The Log skips the indexes of the active segment: after
        an unclean shutdown that segment is always recovered, which rebuilds them."""
        size = self.size
        if self.flushed_size < size:
            self.log.sync(engine)
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()
            if self._txn_index is not None:
                self._txn_index.flush()
        self.flushed_size = max(self.flushed_size, size)
        if self.config.pylog_flush_fadvise_dontneed and self.flushed_size > self.dropped_size:
            # Behind every flush, however it came (flush.messages syncs with the
            # write itself): only pages already on disk can be dropped.
            self.log.fadvise_dontneed(self.dropped_size, self.flushed_size)
            self.dropped_size = self.flushed_size

    def maybe_write_behind(self) -> None:
        """Starts write-back of appended bytes once pylog.write.behind.bytes accumulated."""
        step = self.config.pylog_write_behind_bytes
        if step and self.size - self.write_behind_size >= step:
            self.log.write_behind(self.write_behind_size, self.size)
            self.write_behind_size = self.size

    def truncate_to(self, offset: int) -> int:
        """Removes every batch holding offsets >= offset; returns the bytes removed."""
        size = self.size
        info = self.log.slice_info(self.offset_index.lookup(offset)[1], size, offset, 1)
        if info is None:
            return 0
        position = info[0]
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.log.truncate(position)
        if self.active:
            self.make_active()
        # Rebuild the in-memory state from what is left (the indexes were cut
        # at a batch boundary, so they agree with the .log unless corrupt).
        if self._load_from_indexes() is not None:
            self.recover()
        self.flushed_size = min(self.flushed_size, position)
        self.dropped_size = min(self.dropped_size, position)
        self.write_behind_size = min(self.write_behind_size, position)
        return size - position

    # ----------------------------------------------------------------- reads

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             on_io_error=None) -> FileSlice | None:
        """Whole batches from the one holding `offset` (at least one), or None if none.
        `on_io_error` goes to the slice (see FileSlice). Raises IndexEntryError when the
        index entry it starts from lies (see :meth:`_check_entry`)."""
        size = self.log.size
        entry_offset, position = self.offset_index.lookup(offset)
        try:
            info = self.log.slice_info(position, size, offset, max_bytes,
                                       max_offset if max_offset is not None else 2**63 - 1)
        except CorruptRecordError:
            self._check_entry(entry_offset, position, size)
            raise
        # Nothing at `offset`, or batches after it: normal only when the data says so
        # (the end of the segment, max_offset, a compacted gap), never for a lying entry.
        if position and (info is None or info[2] > offset):
            self._check_entry(entry_offset, position, size)
        if info is None:
            return None
        start, end, first, last, _ = info
        return FileSlice(self.log, start, end - start, first, last, on_io_error)

    def _check_entry(self, offset: int, position: int, size: int) -> None:
        """Raises IndexEntryError if the offset-index entry (offset, position) a read
        started from does not name the batch there (segment_check.entry_is_wrong).
        The entry (base_offset, 0) of an empty lookup is always right."""
        if position and entry_is_wrong(self.log, offset, position, size):
            raise IndexEntryError(self, offset, position)

    def find_batch_by_timestamp(self, timestamp: int, starting_offset: int):
        """The first batch whose max timestamp is >= timestamp (Kafka's searchForTimestamp):
        (position, size, base_offset, last_offset, max_timestamp) or None. Raises
        IndexEntryError as :meth:`read` does."""
        _, ts_offset = self.time_index.lookup(timestamp)
        target = max(ts_offset, starting_offset)
        entry_offset, position = self.offset_index.lookup(target)
        size = self.log.size
        try:
            found = self.log.find_timestamp(position, size, timestamp, starting_offset)
        except CorruptRecordError:
            self._check_entry(entry_offset, position, size)
            raise
        if position and (found is None or found[2] > target):
            self._check_entry(entry_offset, position, size)
        return found

    def rebuild_indexes(self) -> tuple[list, list]:
        """Rebuilds both indexes from the .log (every batch checked, as recovery does)
        into new files that replace the old ones; readers holding the old maps keep
        them. Returns the old entries (offset index, time index) for the caller's
        report. The caller holds the owning Log's lock (no append, roll, truncation
        or flush of this segment meanwhile)."""
        base = self.base_offset
        paths = (files.index_file(self.directory, base),
                 files.time_index_file(self.directory, base))
        temps = tuple(p + ".tmp" for p in paths)        # removed at open if left by a crash
        old = (self.offset_index.to_list(), self.time_index.to_list())
        for temp in temps:
            if os.path.exists(temp):
                os.remove(temp)
        oi = ti = None
        try:
            oi = OffsetIndex.open(temps[0], base, self.config.segment_index_bytes)
            ti = TimeIndex.open(temps[1], base, self.config.segment_index_bytes)
            result = self.log.recover(base, self.config.index_interval_bytes, oi, ti)
            if not self.active:
                if result["max_timestamp"] >= 0:         # as recover() does
                    ti.maybe_append(result["max_timestamp"], result["offset_of_max_timestamp"],
                                    True)
                oi.trim()
                ti.trim()
            oi.flush()
            ti.flush()
            os.replace(temps[0], paths[0])
            os.replace(temps[1], paths[1])
        except BaseException:
            for index in (oi, ti):
                if index is not None:
                    index.close()
            for temp in temps:
                if os.path.exists(temp):
                    os.remove(temp)
            raise
        files.fsync_dir(self.directory)
        if self.active:
            if result["valid_bytes"] == self.size:
                self.bytes_since_index_entry = result["bytes_since_index_entry"]
        else:
            oi.release_fd()
            ti.release_fd()
        with open_segments.lock:
            # Dropped, not closed: a reader in a lookup holds the old ones.
            self._offset_index, self._time_index = oi, ti
        open_segments.opened(self)
        return old

    @property
    def largest_timestamp(self) -> int:
        """The max timestamp in the segment, or the file's mtime if it has none (retention)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        """The .log's mtime (0 once deleted). For a cleaned segment, when it was cleaned."""
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    # -------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Trims (if active) and closes the files. Trim happens before any final flush."""
        if self.active and not self.log.closed:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
            self.offset_index.trim()
            self.time_index.trim()
            self.log.trim()
        self.close_handles()

    def close_handles(self) -> None:
        """Closes whichever files are open, trimming nothing (a failed dir, a deleted
        log). Never opens one."""
        open_segments.discard(self)
        for handle in (self._offset_index, self._time_index, self._log):
            if handle is not None:
                handle.close()

    def rename_to_deleted(self) -> list[str]:
        """Renames the segment's files to *.deleted; returns the new paths."""
        if self._txn_index is not None:
            self._txn_index.entries()           # kept in memory: readers of it go on
        self.deleted = True
        renamed = []
        for path in (self.path, files.index_file(self.directory, self.base_offset),
                     files.time_index_file(self.directory, self.base_offset),
                     files.txn_index_file(self.directory, self.base_offset)):
            if os.path.exists(path):
                os.replace(path, path + files.DELETED_SUFFIX)
                renamed.append(path + files.DELETED_SUFFIX)
        if self._txn_index is not None:
            self._txn_index.path = files.txn_index_file(self.directory, self.base_offset) + \
                files.DELETED_SUFFIX
        return renamed

    def __repr__(self) -> str:
        return (f"LogSegment(base_offset={self.base_offset}, size={self.size}, "
                f"next_offset={self.next_offset}, active={self.active})")
