"""Log: one topic-partition directory of segments (docs/ARCHITECTURE.md, "Log").

Appends go to the last (active) segment and are serialised by one lock;
reads never take it. The segment list is copy-on-write: a reader binary-
searches an immutable tuple, so appends, rolls and deletions never block or
break a read, and a FileSlice keeps its file open for as long as it is held.

Durability follows Kafka: appends land in the page cache; ``flush.messages``
and ``flush.ms`` (default: never) make the log fsync, data before indexes,
and each flush advances the recovery point. Opening a log after an unclean
shutdown validates every segment from the recovery point on (length, magic,
CRC-32C, offsets), truncates at the first invalid batch, drops later
segments and rebuilds the indexes (docs/FORMAT.md, sections 10-11).

A Log opened on its own keeps its recovery point, log start offset and
clean-shutdown flag in its directory (``pylog-log-state``) and locks the
directory (flock on the directory itself, see
:class:`~pylog.storage.log_dir.PartitionDirLock`): one writer per partition.
A LogManager passes the state in instead, keeps Kafka's checkpoint files, and
its dir lock covers its Logs.

**Reading writes nothing.** A Log changes its dir only once it writes: an
append, a truncation, a deletion (retention, DeleteRecords), a roll, the
cleaner's swap, an index rebuild, or a repair at open (a torn tail cut,
an index rebuilt, leftovers of an interrupted delete removed). Before its
first change it marks the dir as being written (``pylog-log-state`` with
clean-shutdown 0, :meth:`Log._mark_dirty`) and makes its last segment active
(indexes grown for appends, :meth:`Log._begin_writing`); a close then trims,
snapshots and marks the shutdown clean. A Log that only read closes its files
and leaves every file, size and mtime as it found them: a dir Kafka wrote
(which has no ``pylog-log-state``) included. Without a state file recovery
assumes the worst, a crash before offset 0: every segment is validated, and
one whose batches and indexes are all sound is kept as it is (the scan writes
nothing); only damage is repaired, and that is a write. A Log that crashes
after its first change finds clean-shutdown 0 at the next open and recovers.
A Log is refused a partition of a running Kafka broker. To read a dir that
another process owns (without its lock), use
:class:`~pylog.storage.reader.LogDirsReader` / ``PartitionReader``.

Transactions (the storage side, in log_transactions.py; a coordinator drives it, docs/FORMAT.md
sections 5 and 8): ``append`` takes transactional batches (attribute bit 4, producer
id, epoch, sequences); the first one of a producer here opens its transaction and
needs the ``verification_guard`` that ``maybe_start_transaction_verification`` hands
out; ``write_txn_marker`` writes a COMMIT or ABORT marker and closes it (the last
stable offset moves; an aborted one is indexed in the segment's ``.txnindex``);
``last_stable_offset``, ``ongoing_transactions``/``describe_producers``,
``aborted_transactions`` and ``read_committed`` are the read side. Fencing: an older
producer epoch is InvalidProducerEpochError, an older coordinator epoch
TransactionCoordinatorFencedError, a batch that does not fit the transaction state
InvalidTxnStateError.

I/O errors: the core raises OSError; the Log turns it into KafkaStorageError
and reports it to ``on_io_error`` (the LogManager takes the dir offline).
"""

from __future__ import annotations

import bisect
import copy
import errno as errno_mod
import logging
import os
import threading
import time
from collections.abc import Callable
from functools import partial

from pylog._core.engine import IoEngine
from pylog._core.storage import (LogLock, LogState, configure_fast_append, log_append,
                                 use_fast_append)  # noqa: F401 - use_fast_append: for tests
from pylog.common.topic_partition import as_offset
from pylog.errors import (
    CorruptRecordError,
    KafkaStorageError,
    MissingOffsetsError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from pylog.record.batch_layout import ATTR_TRANSACTIONAL

from . import files
from .background import wall_clock_ms
from .config import LogConfig
from .file_slice import FileSlice
from .info import AppendInfo, RecoveryReport, TimestampOffset
from .log_dir import PartitionDirLock, process_limit_hint
from .log_loader import (
    cleaned_up_to,
    delete_segment_files,
    load_segments,
    read_log_state,
    remove_temporary_files,
    write_log_state,
)
from .log_retention import LogRetention, remove_deleted_files
from .log_transactions import LogTransactions
from .log_validator import TARGET_CODECS, validate_append
from .producer_state import (BatchMetadata, ProducerStateManager,
                             VerificationGuard)
from .scheduler import Scheduler, default_scheduler
from .segment import IndexEntryError, LogSegment

log = logging.getLogger(__name__)


# AppendInfo from a tuple without the namedtuple's Python __new__ (once per append).
_new_append_info = partial(tuple.__new__, AppendInfo)

# A flush at least this slow is logged at WARNING (an outlier: a healthy fdatasync of a
# segment's new pages takes milliseconds; a second means a stalled or saturated disk).
SLOW_FLUSH_MS = 1000.0

__all__ = ["Log", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "default_engine"]

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

_engines: dict[str, IoEngine] = {}
_engines_lock = threading.Lock()


def default_engine(kind: str = "auto") -> IoEngine:
    """A process-wide engine of `kind`, shared by Logs opened without one."""
    with _engines_lock:
        engine = _engines.get(kind)
        if engine is None:
            engine = _engines[kind] = IoEngine(kind)
        return engine


# The one wall clock of the storage layer: a LogManager's logs share it, and
# _append_fast reads it as clock_gettime when a Log's clock is this function.
_now_ms = wall_clock_ms

# Log.append's common case runs in one C call (storage_fastappend.pxi); the rest,
# and everything after use_fast_append(False) (tests compare both), runs in
# Log._append_locked.
configure_fast_append(AppendInfo, _now_ms, TARGET_CODECS, BatchMetadata)


class Log(LogState, LogTransactions, LogRetention):
    """One topic-partition: ``Log(path, config)``.

    ``config`` is a LogConfig or a mapping of Kafka topic config keys. Options
    for embedding: ``engine`` (an IoEngine; default by ``pylog.io.engine``),
    ``clock`` (ms since the epoch; injectable for tests), ``scheduler`` for
    delayed deletes and roll flushes, and the LogManager's state
    (``recovery_point``, ``log_start_offset``, ``clean_shutdown``).
    """

    def __init__(self, path: str, config: LogConfig | dict | None = None, *,
                 engine: IoEngine | None = None, clock: Callable[[], int] = _now_ms,
                 scheduler: Scheduler | None = None, recovery_point: int | None = None,
                 log_start_offset: int | None = None, clean_shutdown: bool | None = None,
                 leader_epoch: int = 0, on_io_error: Callable[[OSError], None] | None = None,
                 topic_partition: tuple[str, int] | None = None) -> None:
        self.path = os.path.abspath(path)
        self.config = config if isinstance(config, LogConfig) else LogConfig(config or {})
        self.engine = engine or default_engine(self.config.pylog_io_engine)
        self.clock = clock
        self.scheduler = scheduler or default_scheduler()
        self.leader_epoch = leader_epoch
        self.on_io_error = on_io_error
        self.topic_partition = topic_partition or files.parse_partition_dir(os.path.basename(self.path))
        self.standalone = recovery_point is None
        self._lock = LogLock()                  # appends, rolls, truncation, deletion (reentrant)
        self._append_limits = None              # _append_fast's view of self.config
        self._flush_lock = threading.Lock()     # one flush at a time; taken before _lock
        self._closed = False
        self._offline: Exception | None = None   # set when its log dir fails or it is deleted
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._next_offset = 0
        self._log_start_offset = 0
        self._recovery_point = 0
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._last_checkpoint_ms = clock()
        self._dir_dirty = True                  # new segment files since the last dir fsync
        self._pending_deletes: list[str] = []
        self._listeners: tuple[threading.Event, ...] = ()   # set after every append
        # Base offsets of the segments whose .txnindex holds entries (sorted; a stale
        # one, of a segment since deleted, is skipped): read_committed looks only there.
        self._aborted_bases: tuple[int, ...] = ()
        # Counters for metrics (Kafka's MessagesInPerSec, BytesInPerSec, LogFlushRateAndTimeMs):
        # bumped under the locks already held, read without them (ints: a read is atomic).
        self.records_appended = 0
        self.bytes_appended = 0
        self.flushes = 0
        self.flush_ms_total = 0.0
        self._synced_in_write_ms = 0.0   # fdatasyncs done with a write, not yet counted
        self._rolled: list[LogSegment] = []     # rolled segments awaiting their flush task
        self._dir_lock: PartitionDirLock | None = None
        self._dirty = False                     # the dir is marked as being written (_mark_dirty)
        self._writing = False                   # _begin_writing ran: the last segment is active
        self._stale_state = (0, 0)              # what _mark_dirty writes before the segments load
        if self.standalone:
            # One writer per partition dir (a LogManager's Logs are covered by its dir lock).
            files.make_dirs(self.path)
            self._dir_lock = PartitionDirLock(self.path)
        try:
            self.producer_state = ProducerStateManager(self.path)
            self.recovery: RecoveryReport = self._open(recovery_point, log_start_offset, clean_shutdown)
        except BaseException:
            self._release_dir_lock()
            raise

    # =============================================================== opening

    def _open(self, recovery_point, log_start_offset, clean_shutdown) -> RecoveryReport:
        started = time.monotonic()
        # A standalone Log made its dir durably before locking it (__init__); the
        # LogManager fsyncs the log dir once for every partition it created.
        os.makedirs(self.path, exist_ok=True)
        if self.standalone:
            # No state file (a new dir, or one Kafka wrote): nothing is known, so
            # every segment is validated (a crash before offset 0).
            state = read_log_state(self.path)
            recovery_point = state.get("recovery-point", 0)
            log_start_offset = state.get("log-start-offset", 0)
            clean_shutdown = bool(state.get("clean-shutdown", 0))
        # A crash during a repair at load counts as unclean: the state is marked
        # before the first file changes (and not at all when none needs to).
        self._stale_state = (recovery_point or 0, log_start_offset or 0)
        now = self.clock()
        remove_temporary_files(self.path, self._mark_dirty)
        loaded = load_segments(self.path, self.config, now, recovery_point or 0,
                               bool(clean_shutdown), log_start_offset or 0, self._mark_dirty)
        segments = loaded.segments
        if not segments:
            self._mark_dirty()
            start = max(log_start_offset or 0, 0)
            segments.append(LogSegment.create(self.path, start, self.config, now))
        for segment in segments[:-1]:
            segment.release_handles()     # the last loaded one, if later ones were dropped
        self._publish(tuple(segments))
        self._next_offset = segments[-1].next_offset
        self._log_start_offset = min(max(log_start_offset or 0, segments[0].base_offset), self._next_offset)
        self._recovery_point = min(recovery_point or 0, self._next_offset)
        if clean_shutdown:
            self._recovery_point = self._next_offset
        # Only a clean shutdown proves the bytes reached the disk; after a crash
        # they may still be in the page cache only, so the next flush syncs them.
        for segment in segments:
            segment.flushed_size = segment.size if clean_shutdown else 0
        self._aborted_bases = tuple(s.base_offset for s in segments if s.base_offset in
                                    loaded.txn_indexes and s.base_offset not in loaded.txn_rebuild)
        self._load_producer_state(loaded.txn_rebuild)
        self._last_checkpoint_ms = self.clock()
        if self._dirty:
            # Loading changed files (or made the first segment): this Log is a
            # writer from here on, with its state as loaded.
            self._begin_writing()
            if self.standalone:
                self._write_state(self._recovery_point, self._log_start_offset, clean=False)
        recovered = loaded.recovered
        return RecoveryReport(
            clean_shutdown=bool(clean_shutdown), recovery_point=self._recovery_point,
            segments=len(segments), segments_recovered=tuple(recovered),
            segments_deleted=loaded.deleted, bytes_deleted=loaded.bytes_deleted,
            indexes_rebuilt=loaded.indexes_rebuilt, missing_offsets=tuple(loaded.holes),
            bytes_scanned=sum(r.scanned_bytes for r in recovered),
            bytes_truncated=sum(r.truncated_bytes for r in recovered),
            seconds=time.monotonic() - started)

    def _write_state(self, recovery_point: int, log_start_offset: int, clean: bool) -> None:
        write_log_state(self.path, recovery_point, log_start_offset, clean)

    def _mark_dirty(self) -> None:
        """Called before the Log first changes a file of its dir: a standalone Log
        writes its state with clean-shutdown 0 (durably: write, fsync, rename,
        fsync the dir), so a crash from here on is recovered at the next open.
        Until then the dir is as the Log found it and needs no marking."""
        if self._dirty:
            return
        if self.standalone:
            if self._segments:
                self._write_state(self._recovery_point, self._log_start_offset, clean=False)
            else:                       # still loading: the state as read
                self._write_state(*self._stale_state, clean=False)
        self._dirty = True

    def _begin_writing(self) -> None:
        """Before the Log's first write after open (the caller holds _lock, or the
        Log is still opening): marks the dir (:meth:`_mark_dirty`) and makes the
        last segment active (its indexes grown back to segment.index.bytes). Until
        then it stays as loaded, files and sizes untouched, and appends take the
        Python path (``_writing`` is False), which calls this first."""
        if self._writing:
            return
        self._mark_dirty()
        last = self._segments[-1]
        if not last.active:
            last.make_active()
        self._writing = True

    # ============================================================ properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        """Single node: every appended record is committed."""
        return self._next_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset has been fsync'ed."""
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size(self) -> int:
        """Bytes of all segments."""
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def offline(self) -> bool:
        """True once the log is unavailable: its log dir failed or its topic was
        deleted (see :meth:`mark_offline`)."""
        return self._offline is not None

    def _publish(self, segments: tuple[LogSegment, ...]) -> None:
        # Readers load _segments then _bases; a mismatched pair is detected in read().
        self._bases = tuple(s.base_offset for s in segments)
        self._segments = segments

    def _check_open(self) -> None:
        if self._offline is not None:
            raise self._offline_error()
        if self._closed:
            raise ValueError(f"log {self.path} is closed")

    def _offline_error(self) -> Exception:
        # A fresh copy each time, so tracebacks do not pile up on one instance.
        cause = self._offline
        err = copy.copy(cause)
        err.__cause__ = cause.__cause__
        return err

    def mark_offline(self, error: Exception) -> None:
        """Makes the log unavailable: every later call raises a copy of `error`
        (KafkaStorageError when its log dir failed, UnknownTopicOrPartitionError
        when its topic was deleted). Takes no lock: the LogManager calls it from
        any thread, possibly while another log of the same dir holds its own
        lock. Open files stay open (a FileSlice already handed out stays
        readable); :meth:`abandon` closes them. Its listeners are set, so whoever
        waits for an append (a parked Fetch, a Consumer) sees the error at once."""
        if self._offline is None:
            self._offline = error
        for event in self._listeners:
            event.set()

    def _storage_error(self, exc: OSError, action: str) -> KafkaStorageError:
        if self.on_io_error is not None:
            self.on_io_error(exc)
        name = errno_mod.errorcode.get(exc.errno or 0, "")
        hint = process_limit_hint(exc)
        err = KafkaStorageError(exc.errno or 0, f"{action} failed for log {self.path}: "
                                f"{exc.strerror or exc} ({name})" + (f": {hint}" if hint else ""),
                                exc.filename)
        err.__cause__ = exc
        return err

    # =============================================================== appends

    # Appends Kafka v2 record batches and assigns their offsets (the docstring
    # is log_append's, in _core/storage_fastappend.pxi): under the lock,
    # _append_fast or else _append_locked; then the listeners and a flush.ms
    # flush outside the lock.
    append = log_append

    def _append_locked(self, batches, origin: str, validated, converted: bool = False,
                       verification_guard: VerificationGuard | None = None) -> AppendInfo:
        """Log.append's steps under the lock, for what _append_fast hands back:
        None (nothing done yet) or (PreparedAppend, now) (validated);
        `converted`: the compressed batches were checked and converted before
        the lock. Returns an AppendInfo whose ``flushed`` asks the caller to
        flush; its size is 0 when the batches were duplicates and nothing was
        written."""
        if validated is None:
            self._check_open()
            now = self.clock()
            prepared = validate_append(batches, self.config, self._next_offset,
                                       self.leader_epoch, now, origin, converted=converted)
        else:
            prepared, now = validated
        markers = None
        if prepared.has_producer_ids and origin == "coordinator":
            markers = self._check_markers(batches, prepared)
        elif prepared.has_producer_ids:
            producers = [prepared.batch(i) for i in range(prepared.batch_count)]
            duplicates = self.producer_state.check_append(
                [(b[5], b[6], b[7], b[3], b[8] & ATTR_TRANSACTIONAL) for b in producers],
                verification_guard)
            if duplicates is not None:
                # A retry of batches already in the log: nothing is written.
                first, last = duplicates[0], duplicates[-1]
                newest = max(duplicates, key=lambda d: d.timestamp)
                return AppendInfo(first.first_offset, last.last_offset, newest.timestamp,
                                  newest.last_offset, -1, self._log_start_offset,
                                  sum(d.last_offset - d.first_offset + 1 for d in duplicates),
                                  len(duplicates), 0,
                                  self._recovery_point > max(d.last_offset for d in duplicates))
        if prepared.size > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {prepared.size} bytes to {self.path} exceeds segment.bytes "
                f"({self.config.segment_bytes})")
        if not self._writing:
            try:
                self._begin_writing()
            except OSError as exc:
                raise self._storage_error(exc, "append") from exc
        segment = self._maybe_roll(prepared, now)
        flush_records = self._unflushed_records + prepared.records >= self.config.flush_messages
        try:
            if flush_records:           # the fdatasync rides with the write: timed as a flush
                started = time.perf_counter()
                segment.append(self.engine, prepared, datasync=True)
                self._synced_in_write_ms += (time.perf_counter() - started) * 1000
            else:
                segment.append(self.engine, prepared, datasync=False)
        except OSError as exc:
            self._undo_partial_write(segment)
            raise self._storage_error(exc, "append") from exc
        self._next_offset = prepared.last_offset + 1
        self._unflushed_records += prepared.records
        self.records_appended += prepared.records
        self.bytes_appended += prepared.size
        if prepared.has_producer_ids:
            self._update_producers(prepared, segment, markers)
        segment.maybe_write_behind()
        flush = flush_records or now - self._last_flush_ms >= self.config.flush_ms
        lat = prepared.max_timestamp if self.config.message_timestamp_type == "LogAppendTime" \
            else -1
        return _new_append_info((prepared.first_offset, prepared.last_offset,
                                 prepared.max_timestamp, prepared.offset_of_max_timestamp, lat,
                                 self._log_start_offset, prepared.records, prepared.batch_count,
                                 prepared.size, flush))

    def append_records(self, values, keys=None, timestamps=None, headers=None, *,
                       compression: str | None = None) -> AppendInfo:
        """Encodes records into one batch (pylog.records.encode_batch) and appends it."""
        from pylog.record import encode_batch
        if compression is None:
            topic = self.config.compression_type
            compression = "none" if topic in ("producer", "uncompressed") else topic
        return self.append(encode_batch(values, keys, timestamps, headers, compression=compression))

    def _undo_partial_write(self, segment: LogSegment) -> None:
        """After a failed write, cut any partial bytes so the file ends on a batch."""
        try:
            segment.log.truncate(segment.size)
        except OSError:
            pass  # recovery will cut it at the next open

    # ================================================================= rolls

    def _maybe_roll(self, prepared, now: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.should_roll(prepared, now) is None:
            return segment
        return self._roll(now)

    def roll(self) -> LogSegment:
        """Starts a new active segment at the log end offset (if the active one has data)."""
        with self._lock:
            self._check_open()
            if self._segments[-1].size == 0:
                return self._segments[-1]
            return self._roll(self.clock())

    def _roll(self, now: int) -> LogSegment:
        try:
            self._begin_writing()
            new = LogSegment.create(self.path, self._next_offset, self.config, now)
        except OSError as exc:
            raise self._storage_error(exc, "roll") from exc
        old = self._segments[-1]
        try:
            old.on_become_inactive()
        except BaseException:
            # A roll that fails leaves no half-made segment behind.
            new.close()
            delete_segment_files(self.path, new.base_offset)
            raise
        self._publish(self._segments + (new,))
        self._dir_dirty = True
        # Kafka writes one at every roll, even empty: after a crash, state is
        # replayed from the newest snapshot, never from further back.
        try:
            # Not fsync'ed here, on the append path: a snapshot lost to a power loss
            # (or torn: its CRC fails) only makes the next open replay from an older
            # one, or the log start. Kafka too flushes it later, off the append path.
            self.producer_state.write_snapshot(new.base_offset, sync=False)
        except OSError as exc:
            raise self._storage_error(exc, "producer state snapshot") from exc
        # Kafka flushes the rolled segment asynchronously; the flush advances
        # the recovery point past it. Rolls in quick succession share one task.
        self._rolled.append(old)
        if len(self._rolled) == 1:
            self.scheduler.schedule(0, self._flush_rolled)
        return new

    def _flush_rolled(self) -> None:
        """After rolls: flush the log, and the rolled segments' indexes even if
        their data was already synced while they were active."""
        with self._lock:
            rolled, self._rolled = self._rolled, []
        self._background_flush(None)
        with self._flush_lock:
            for old in rolled:
                if self._closed or self._offline is not None or old not in self._segments:
                    continue
                try:
                    old.flush(self.engine, indexes=True)
                except OSError as exc:
                    self._storage_error(exc, "flush")   # reported; the next open rebuilds the index
                    return

    def maybe_roll_by_time(self) -> bool:
        """Rolls the active segment if segment.ms has passed (LogManager's periodic check)."""
        with self._lock:
            if self._closed or self._offline is not None or \
                    not self._segments[-1].should_roll_by_time(self.clock()):
                return False
            self._roll(self.clock())
            return True

    # =============================================================== flushes

    def flush(self, offset: int | None = None) -> None:
        """Makes every record below `offset` durable (default: all): fsyncs the data,
        then the indexes of inactive segments, then advances (and persists) the
        recovery point.

        The fsyncs run outside the append lock (appends continue meanwhile);
        flushes are serialised, and a flush that finds its offset already
        covered by an earlier one returns at once (group commit)."""
        with self._flush_lock:
            with self._lock:
                self._check_open()
                if offset is not None and offset <= self._recovery_point:
                    return                  # an earlier flush covered it
                target = self._next_offset  # cover every append so far (group commit)
                if target <= self._recovery_point:
                    return
                segments = self._segments_between(self._recovery_point, target)
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            started = time.perf_counter()
            try:
                for segment in segments:
                    if segment.needs_flush():
                        segment.flush(self.engine, indexes=not segment.active)
                if dir_dirty:
                    files.fsync_dir(self.path)
            except OSError as exc:
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise self._storage_error(exc, "flush") from exc
            took_ms = (time.perf_counter() - started) * 1000
            self.flushes += 1
            self.flush_ms_total += took_ms
            if took_ms >= SLOW_FLUSH_MS:
                log.warning("%s: a flush of %d segment%s took %.0f ms (the disk is slow or "
                            "saturated; see LogFlushRateAndTimeMs)", self.path, len(segments),
                            "" if len(segments) == 1 else "s", took_ms)
            with self._lock:
                # A flush.messages append synced with its write: that write + fdatasync
                # is this flush's time (Kafka's LogFlushRateAndTimeMs times its flush()).
                self.flush_ms_total += self._synced_in_write_ms
                self._synced_in_write_ms = 0.0
                self._recovery_point = max(self._recovery_point, target)
                self._unflushed_records = max(0, self._next_offset - self._recovery_point)
                now = self.clock()
                self._last_flush_ms = now
                if self.standalone and self._dirty and now - self._last_checkpoint_ms >= \
                        self.config.pylog_recovery_point_checkpoint_interval_ms:
                    self._checkpoint(now)

    def _segments_between(self, start: int, end: int) -> list[LogSegment]:
        """The segments holding any offset in [start, end) (Kafka's logSegments(from, to))."""
        segments = self._segments
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        return [s for s in segments[i:] if s.base_offset < end]

    def _background_flush(self, offset: int | None) -> None:
        try:
            self.flush(offset)
        except (KafkaStorageError, ValueError):
            pass  # reported through on_io_error (or the log closed); the next flush retries
        except Exception:
            if self._offline is None:
                raise
            # Deleted, or moved to another log dir (log_dir_moves.py): nothing to flush here.

    def _checkpoint(self, now: int) -> None:
        try:
            self._write_state(self._recovery_point, self._log_start_offset, clean=False)
        except OSError as exc:
            raise self._storage_error(exc, "checkpoint") from exc
        self._last_checkpoint_ms = now

    def maybe_flush(self) -> bool:
        """Flushes if flush.ms has passed since the last flush (the flusher thread's check)."""
        with self._lock:
            if self._closed or self._offline is not None or \
                    self._recovery_point >= self._next_offset or \
                    self.clock() - self._last_flush_ms < self.config.flush_ms:
                return False
        self.flush()
        return True

    # ================================================================= reads

    def read(self, offset: int, max_bytes: int = 1 << 20, *, max_offset: int | None = None) -> FileSlice:
        """Whole batches starting at the batch holding `offset`, at most `max_bytes`
        but always at least one batch. Only batches whose last offset is below
        `max_offset` (default: the log end) are included. Raises
        OffsetOutOfRangeError outside [log_start_offset, log_end_offset]; at the
        log end the slice is empty. Never blocks on appends."""
        end = self._next_offset            # read before the segments (see _publish)
        segments = self._segments
        bases = self._bases
        start = self._log_start_offset
        if self._offline is not None:
            raise self._offline_error()
        if self._closed:
            raise ValueError(f"log {self.path} is closed")
        if type(offset) is not int:
            offset = as_offset(offset)
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"{self._name()}: offset {offset} is out of range [{start}, {end}] (log start "
                f"offset {start}, log end offset {end}; {self.path})", offset=offset,
                log_start_offset=start, log_end_offset=end, topic_partition=self.topic_partition)
        limit = end if max_offset is None else min(max_offset, end)
        if offset < end and len(bases) == len(segments):
            i = max(bisect.bisect_right(bases, offset) - 1, 0)
            for j in range(i, len(segments)):
                segment = segments[j]
                try:
                    found = self._read_segment(segment, offset, max_bytes, limit)
                except CorruptRecordError:
                    raise                   # a ValueError too: report it, never as "closed"
                except ValueError:
                    if self._closed:        # the segment was closed under us (shutdown)
                        raise ValueError(f"log {self.path} is closed") from None
                    raise
                except FileNotFoundError as exc:
                    if segment.deleted and self._segments is not segments:
                        # Its files were closed, then deleted under this read: the
                        # current segment list answers (the offset may be gone now).
                        return self.read(offset, max_bytes, max_offset=max_offset)
                    raise self._storage_error(exc, "read") from exc
                except OSError as exc:      # the disk failed: its dir goes offline
                    raise self._storage_error(exc, "read") from exc
                if found is not None:
                    return found
                if j + 1 < len(segments):
                    self._check_hole(segment, segments[j + 1], offset, start)
        last = segments[-1]
        return FileSlice(last.log, last.size, 0, offset, offset - 1)

    def _read_segment(self, segment: LogSegment, offset: int, max_bytes: int, limit: int):
        """segment.read; an index entry found lying is rebuilt, then read again."""
        try:
            return segment.read(offset, max_bytes, limit, self._storage_error)
        except IndexEntryError as exc:
            self._rebuild_indexes(exc)
            return segment.read(offset, max_bytes, limit, self._storage_error)

    def _rebuild_indexes(self, fault: IndexEntryError) -> None:
        """Rebuilds the indexes of the segment whose entry `fault` names, under the log's
        lock (appends to that segment wait), once: a second reader that met the same
        entry finds the new index in place."""
        segment = fault.segment
        with self._lock:
            if self._closed or segment not in self._segments:
                return                  # deleted or replaced: the retry reads the new list
            if segment.offset_index.lookup(fault.offset) != (fault.offset, fault.position):
                return                  # already rebuilt by another reader
            self._begin_writing()       # a repair: an OSError goes to the read's handler
            segment.rebuild_indexes()
        log.warning("%s: %s; rebuilt the indexes of segment %d from its .log", self.path, fault,
                    segment.base_offset)

    def _check_hole(self, segment: LogSegment, following: LogSegment, offset: int,
                    start: int) -> None:
        """After `segment` had nothing at or after `offset`: if the offsets between its
        end and the next segment's base hold `offset`, they are a hole (a .log emptied,
        removed or cut below the recovery point) and the read raises MissingOffsetsError
        rather than skip them. A compacted log's gaps are the cleaner's (Kafka's fetch
        skips them), as are those below where the cleaner got before the topic's
        cleanup.policy lost ``compact``."""
        if segment.next_offset <= offset < following.base_offset and \
                "compact" not in self.config.cleanup_policy and \
                following.base_offset > cleaned_up_to(self.path):
            first = max(segment.next_offset, start)
            raise MissingOffsetsError(
                f"{self.path}: offsets {first}..{following.base_offset - 1} are missing: segment "
                f"{segment.base_offset} ends at offset {segment.next_offset - 1} and the next "
                f"segment starts at {following.base_offset} (its .log was removed, emptied or "
                f"cut); fetch from offset {following.base_offset} to read on",
                offset=offset, first_missing=first, next_offset=following.base_offset)

    def rebuild_indexes(self) -> list[tuple[int, bool, bool]]:
        """Rebuilds every segment's .index and .timeindex from its .log (``pylog recover
        --force``: an entry in the middle of an index is not checked at open). Returns
        (base offset, offset index changed, time index changed) for every segment."""
        out = []
        with self._flush_lock, self._lock:
            self._check_open()
            try:
                self._begin_writing()
            except OSError as exc:
                raise self._storage_error(exc, "index rebuild") from exc
            for segment in self._segments:
                try:
                    old_offsets, old_times = segment.rebuild_indexes()
                except OSError as exc:
                    raise self._storage_error(exc, "index rebuild") from exc
                out.append((segment.base_offset, old_offsets != segment.offset_index.to_list(),
                            old_times != segment.time_index.to_list()))
                if not segment.active:
                    segment.release_handles()
        return out

    def add_listener(self, event: threading.Event) -> None:
        """Sets `event` after every append (consumers wait on it instead of polling)."""
        with self._lock:
            self._listeners = self._listeners + (event,)

    def remove_listener(self, event: threading.Event) -> None:
        with self._lock:
            self._listeners = tuple(e for e in self._listeners if e is not event)

    def _name(self) -> str:
        """How messages name this log: topic-partition, or its dir when it has none."""
        tp = self.topic_partition
        return f"{tp[0]}-{tp[1]}" if tp else self.path

    def read_records(self, offset: int, max_bytes: int = 1 << 20):
        """Records from `offset` (decoded; records before `offset` in the first batch are skipped)."""
        return [r for r in self.read(offset, max_bytes).records() if r.offset >= offset]

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """Kafka's ListOffsets: -2 earliest, -1 latest, -3 the record with the largest
        timestamp, otherwise the first record whose timestamp is >= `timestamp`
        (None if there is none)."""
        segments = self._segments
        start = self._log_start_offset
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampOffset(-1, start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self._next_offset)
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp < 0:
                return None
            return self._record_at_timestamp(best, best.max_timestamp, start, exact=True)
        if timestamp < 0:
            raise ValueError(f"timestamp {timestamp} is neither >= 0 nor -1, -2, -3, -4")
        for segment in segments:
            if segment.max_timestamp >= timestamp and segment.next_offset > start:
                found = self._record_at_timestamp(segment, timestamp, start)
                if found is not None:
                    return found
        return None

    def _record_at_timestamp(self, segment: LogSegment, timestamp: int, start: int,
                             exact: bool = False) -> TimestampOffset | None:
        try:
            batch = segment.find_batch_by_timestamp(timestamp, start)
        except IndexEntryError as exc:
            self._rebuild_indexes(exc)
            batch = segment.find_batch_by_timestamp(timestamp, start)
        if batch is None:
            return None
        position, size = batch[0], batch[1]
        from pylog.record import iter_batches
        for b in iter_batches(segment.log.read(position, size)):
            for record in b.records():
                if record.offset >= start and (record.timestamp == timestamp if exact
                                               else record.timestamp >= timestamp):
                    return TimestampOffset(record.timestamp, record.offset)
        return None

    # ============================================================= cleaning

    def replace_segments(self, old: list[LogSegment], base: int, names: list[str], mtime_ms: int,
                         stage=None) -> bool:
        """The log cleaner's swap (pylog.storage.cleaner): `old` (consecutive inactive
        segments) gives way to the cleaned segment whose files wait as ``<name>.swap``.
        Under the log's locks: the old files are renamed ``.deleted`` first, then the
        ``.swap`` files take their final names (at startup a leftover ``.swap`` replaces
        whatever its offsets cover, so every crash point is recoverable). Returns False,
        touching nothing, when `old` is no longer in the log (retention or a truncation
        got there first)."""
        with self._flush_lock, self._lock:
            self._check_open()
            segments = self._segments
            try:
                i = next(i for i, s in enumerate(segments) if s is old[0])
            except StopIteration:
                return False
            if tuple(segments[i:i + len(old)]) != tuple(old) or i + len(old) >= len(segments):
                return False
            try:
                self._begin_writing()
                doomed = []
                for segment in old:
                    doomed += segment.rename_to_deleted()
                if stage is not None:
                    stage("old-renamed")
                for name in names:
                    os.replace(name + files.SWAP_SUFFIX, name)
                files.fsync_dir(self.path)
                os.utime(names[0], (mtime_ms / 1000, mtime_ms / 1000))
                new, index_problem = LogSegment.open(self.path, base, self.config, self.clock())
                if index_problem is not None:
                    new.recover(truncate=False)
                if os.path.exists(files.txn_index_file(self.path, base)) and \
                        base not in self._aborted_bases:
                    self._aborted_bases = tuple(sorted(self._aborted_bases + (base,)))
                new.flushed_size = new.size
                new.release_handles()
            except OSError as exc:
                raise self._storage_error(exc, "clean") from exc
            self._publish(segments[:i] + (new,) + segments[i + len(old):])
            self._dir_dirty = True
            delay = self.config.file_delete_delay_ms / 1000
            self.scheduler.schedule(delay, lambda paths=doomed: remove_deleted_files(paths))
            return True

    # ============================================================= lifecycle

    def update_config(self, config: LogConfig) -> None:
        """Applies a new topic config (alter configs); affects future segments and checks."""
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.config = config
            self._segments[-1].apply_direct()

    def close(self) -> None:
        """Clean shutdown: trim the active segment, flush everything, persist the
        recovery point and mark the shutdown clean (standalone). A Log that
        changed nothing since it opened only flushes (an fsync changes no file;
        a LogManager's clean-shutdown marker relies on it) and closes its files:
        its dir stays exactly as it was."""
        with self._flush_lock, self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        """close()'s work; the caller holds _flush_lock and _lock (a log-dir move closes
        its source under them)."""
        if self._closed:
            return
        if not self._dirty:
            try:
                self._flush_all_for_close()
            except OSError as exc:
                raise self._storage_error(exc, "close") from exc
            finally:
                self._closed = True
                for segment in self._segments:
                    segment.close_handles()
                self._release_dir_lock()
            return
        try:
            active = self._segments[-1]
            # Trim before the final flush, so the flushed length is the true one.
            if active.active:
                active.time_index.maybe_append(active.max_timestamp, active.offset_of_max_timestamp, True)
                active.offset_index.trim()
                active.time_index.trim()
                active.log.trim()
                active.active = False
            # At the log end, so the next open replays nothing.
            self.producer_state.write_snapshot(self._next_offset)
            self._flush_all_for_close()
            if self.standalone:
                self._write_state(self._next_offset, self._log_start_offset, clean=True)
        except OSError as exc:
            raise self._storage_error(exc, "close") from exc
        finally:
            self._closed = True
            for segment in self._segments:
                segment.close()
            self._release_dir_lock()

    def abandon(self) -> None:
        """Closes the files without trimming or flushing anything (the log dir
        failed, or the log is being deleted). Never raises."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                try:
                    segment.close_handles()
                except Exception:  # noqa: BLE001 - best effort on a failed disk
                    pass
            self._release_dir_lock()

    def _release_dir_lock(self) -> None:
        if self._dir_lock is not None:
            self._dir_lock.release()
            self._dir_lock = None

    def _flush_all_for_close(self) -> None:
        # The caller holds _flush_lock and _lock.
        for segment in self._segments_between(self._recovery_point, self._next_offset + 1):
            segment.flush(self.engine)
        files.fsync_dir(self.path)
        self._recovery_point = self._next_offset

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.path!r}, log_start_offset={self._log_start_offset}, "
                f"log_end_offset={self._next_offset}, segments={len(self._segments)})")
