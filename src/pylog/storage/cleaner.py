"""Log compaction: Kafka's LogCleaner for topics whose ``cleanup.policy`` includes
``compact`` (seeds: design 4.8; ``../shared/reference/kafka-storage.md`` 1.9).

One cleaning of one log:

1. **Dirty section**: from the log's ``cleaner-offset-checkpoint`` entry (or its log
   start) to the end of the last inactive segment older than ``min.compaction.lag.ms``;
   the active segment is never cleaned.
2. **Offset map** (:class:`OffsetMap`): the latest offset of every key of the dirty
   section, built segment by segment with Arrow's hash group-by (C++, GIL released; no
   per-record Python). It is bounded as Kafka's SkimpyOffsetMap is: a 24-byte slot per
   distinct key, at most 90% of ``log.cleaner.dedupe.buffer.size``; when the next
   segment's keys do not fit, the cleaning stops there and the rest waits for the next
   pass (the first dirty segment is always taken, so every pass makes progress).
3. **Rewrite**: every segment below the end of the mapped section, in groups as Kafka's
   groupSegmentsBySize makes them (at most ``segment.bytes`` of .log and
   ``segment.index.bytes`` of each index together; clean and dirty segments never share
   a group, so a group's mtime stays the time its records were last cleaned; a group
   whose cleaning leaves nothing joins the next group's file, which starts at its base
   offset, instead of staying an empty segment), is copied into ``<base>.log.cleaned``
   keeping a record when it is the latest of its key (records without a key are
   dropped, as Kafka's cleaner drops them), and a tombstone (null value) while its
   segment was cleaned less than ``delete.retention.ms`` ago. Batches are kept whole
   when nothing of them goes (their bytes are copied); a batch that loses records is
   re-encoded with its own base offset, last offset, producer id, epoch, base sequence
   and codec (Kafka's ``overrideLastOffset``: an idempotent producer's sequences stay
   valid); an emptied batch that is its producer's last one stays as an empty header.
   Offsets never change.

   **Transactions** (Kafka's rules, LogCleaner.scala's header): nothing at or past the
   log's last stable offset is cleaned (every transaction the cleaner sees is decided,
   so the ``.txnindex`` names the aborted ones ahead of time); an aborted transaction's
   records are dropped at once, whatever their keys (and never enter the offset map);
   a marker stays while records of its transaction are still in the log, and goes once
   they are all gone and its segment was cleaned more than ``delete.retention.ms`` ago
   (the tombstones' horizon); the last batch of each producer the log knows is kept (as
   an empty header when it loses every record), and so is its last marker when that is
   its last record (it holds the producer's epoch, for fencing). An aborted
   transaction's ``.txnindex`` entry follows its marker into the cleaned segment while
   records of it were still read in that pass (Kafka's CleanedTransactionMetadata).
4. **Swap**, crash-safe at every step: the ``.cleaned`` files and their indexes are
   fsynced and renamed ``.swap``; then, under the log's lock, the old segments' files
   are renamed ``.deleted`` and the ``.swap`` files take their final names. At startup
   (:func:`pylog.storage.log_loader.remove_temporary_files`) ``.cleaned`` files are
   dropped, and a ``.swap`` replaces every segment its offsets cover: a crash anywhere
   leaves either the old segments or the cleaned one, never both, never neither.

Readers holding the old segments' files keep reading them (renamed, not closed); the
``.deleted`` files go after ``file.delete.delay.ms``, as retention's do.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pylog._core.crc import crc32c
from pylog._core.storage import LogFile, OffsetIndex, TimeIndex
from pylog.record import batch_layout as at
from pylog.record import decode_arrow, encode_batch, iter_batches, with_header_fields

from . import files
from .segment import INT32_MAX
from .transaction_index import AbortedTxn

OFFSET_ENTRY_BYTES = 8      # an offset index entry: relative offset, position
TIME_ENTRY_BYTES = 12       # a time index entry: timestamp, relative offset

log = logging.getLogger(__name__)

__all__ = ["CleanerStats", "OffsetMap", "clean_log", "cleanable_range", "dirty_ratio"]

SLOT_BYTES = 24          # Kafka's SkimpyOffsetMap: a 16-byte MD5 of the key and an 8-byte offset
LOAD_FACTOR = 0.9


@dataclass
class CleanerStats:
    """What one cleaning did (logged, and returned to the caller)."""

    topic_partition: str
    first_dirty: int                 # where the dirty section began
    end_offset: int                  # cleaned up to here (the new checkpoint)
    segments_before: int
    segments_after: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    tombstones_removed: int
    keys_mapped: int
    map_fill: float                  # distinct keys mapped / map capacity
    dirty_ratio_before: float
    seconds: float

    def summary(self) -> str:
        mb = 1 << 20
        return (f"cleaned {self.topic_partition} offsets up to {self.end_offset} (dirty from "
                f"{self.first_dirty}, ratio {self.dirty_ratio_before:.2f}): read "
                f"{self.bytes_read / mb:.1f} MiB, {self.records_read} records; wrote "
                f"{self.bytes_written / mb:.1f} MiB, {self.records_kept} records "
                f"({100 * (1 - self.bytes_written / max(self.bytes_read, 1)):.0f}% smaller); "
                f"{self.tombstones_removed} tombstones removed; {self.keys_mapped} keys, map "
                f"{100 * self.map_fill:.0f}% full; {self.segments_before} -> "
                f"{self.segments_after} segments in {self.seconds:.2f} s "
                f"({self.bytes_read / mb / max(self.seconds, 1e-9):.0f} MB/s)")


class OffsetMap:
    """Key -> latest offset over a dirty section, bounded like Kafka's map: at most
    90% of ``buffer_bytes`` in 24-byte slots, one slot per distinct key.

    Each segment is grouped on its own (distinct keys, latest offsets); the sum of
    those counts bounds the distinct keys from above, and only when that bound passes
    the capacity are the parts merged to count exactly (so repeated keys across
    segments do not cost a pass, and the map is not regrouped per segment)."""

    def __init__(self, buffer_bytes: int) -> None:
        self.capacity = max(int(buffer_bytes * LOAD_FACTOR) // SLOT_BYTES, 1)
        self.records = 0                       # records mapped (every key seen, repeats too)
        self._parts: list[pa.Table] = []       # grouped (key, offset_max), one per segment
        self._bound = 0                        # sum of the parts' sizes >= distinct keys
        self.keys: pa.Array = pa.array([], pa.binary())
        self.latest: np.ndarray = np.empty(0, np.int64)
        self._sorted: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.keys)

    @staticmethod
    def _group(table: pa.Table) -> pa.Table:
        return table.group_by("key").aggregate([("offset", "max")]).rename_columns(["key", "offset"])

    def add(self, keys: pa.Array, offsets: np.ndarray, must: bool = False) -> bool:
        """Adds one segment's keys (nulls skipped). Refuses (returns False, nothing
        added) when the distinct keys would exceed the capacity, unless `must`."""
        import pyarrow.compute as pc  # here, not at the top: too slow for every `import pylog`
        valid = pc.is_valid(keys)
        part = self._group(pa.table({"key": pc.filter(keys, valid).cast(pa.binary()),
                                     "offset": pa.array(offsets[np.asarray(valid)])}))
        if self._bound + part.num_rows > self.capacity:
            merged = self._group(pa.concat_tables(self._parts + [part]))
            if merged.num_rows > self.capacity and not must:
                return False
            self._parts, self._bound = [merged], merged.num_rows
        else:
            self._parts.append(part)
            self._bound += part.num_rows
        self.records += len(keys)
        return True

    def finish(self) -> None:
        """Merges the parts: the lookups below need one key set."""
        merged = self._group(pa.concat_tables(self._parts)) if self._parts else None
        if merged is not None:
            self.keys = merged.column("key").combine_chunks()
            self.latest = merged.column("offset").to_numpy()
        self._parts = []

    def kept(self, keys: pa.Array, offsets: np.ndarray, clean: bool) -> np.ndarray:
        """Which records survive: in the mapped (dirty) section, those that are their
        key's latest (a sorted search of the offsets: no key hashing); in the clean
        section (older than every mapped record), those whose key was not written
        again. Records without a key never survive (Kafka's cleaner drops them)."""
        if clean:
            import pyarrow.compute as pc
            return np.asarray(pc.is_valid(keys)) & ~np.asarray(pc.is_in(keys, value_set=self.keys))
        if self._sorted is None:
            self._sorted = np.sort(self.latest)
        if not len(self._sorted):
            return np.zeros(len(offsets), dtype=bool)
        at = np.minimum(np.searchsorted(self._sorted, offsets), len(self._sorted) - 1)
        return self._sorted[at] == offsets


def cleanable_range(segments, first_dirty: int, now: int, min_lag_ms: int,
                    last_stable_offset: int | None = None):
    """(clean segments, dirty segments) below the active one: clean ones end at
    `first_dirty`; dirty ones stop at the first segment younger than the lag, and at
    the segment holding the last stable offset (Kafka never cleans past the LSO)."""
    clean, dirty = [], []
    for segment in segments[:-1]:                      # never the active segment
        if segment.next_offset <= first_dirty:
            clean.append(segment)
        elif min_lag_ms > 0 and now - segment.largest_timestamp < min_lag_ms:
            break                                      # (as Kafka: no check when the lag is 0)
        elif last_stable_offset is not None and segment.next_offset > last_stable_offset:
            break                                      # holds undecided records
        else:
            dirty.append(segment)
    return clean, dirty


def dirty_ratio(clean, dirty) -> float:
    dirty_bytes = sum(s.size for s in dirty)
    total = dirty_bytes + sum(s.size for s in clean)
    return dirty_bytes / total if total else 0.0


def _groups(segments, max_bytes: int, max_index_bytes: int):
    """Consecutive segments cleaned into one (Kafka's groupSegmentsBySize): their
    .log sizes sum to at most `max_bytes` (segment.bytes), their offset index
    entries and their time index entries each to at most `max_index_bytes`
    (segment.index.bytes), and their offsets fit one segment's int32 relative
    offsets (an empty segment adds none)."""
    group: list = []
    size = offset_entries = time_entries = 0
    for segment in segments:
        offsets, times = segment.offset_index.entries, segment.time_index.entries
        if group and (size + segment.size > max_bytes or
                      (offset_entries + offsets) * OFFSET_ENTRY_BYTES > max_index_bytes or
                      (time_entries + times) * TIME_ENTRY_BYTES > max_index_bytes or
                      segment.size and segment.next_offset - 1 - group[0].base_offset > INT32_MAX):
            yield group
            group, size, offset_entries, time_entries = [], 0, 0, 0
        group.append(segment)
        size += segment.size
        offset_entries += offsets
        time_entries += times
    if group:
        yield group


class _CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: the transactions a cleaning pass is inside
    as it reads the log in offset order, carried from segment to segment. It decides
    which batches belong to aborted transactions (dropped) and which markers may go,
    and collects the ``.txnindex`` entries of the group being written."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, int, AbortedTxn]] = []   # (first offset, pid, entry)
        self.known: set[tuple[int, int]] = set()
        self.aborted_open: dict[int, list] = {}     # pid -> [entry, last batch offset read]
        self.committed_open: set[int] = set()       # pids whose committed records were read
        self.index: list[AbortedTxn] = []           # the group's cleaned .txnindex

    def add(self, aborted) -> None:
        for txn in aborted:
            if (txn.producer_id, txn.first_offset) not in self.known:
                self.known.add((txn.producer_id, txn.first_offset))
                self.pending.append((txn.first_offset, txn.producer_id, txn))
        self.pending.sort(reverse=True)             # the next to start last: pop() takes it

    def _reach(self, offset: int) -> None:
        while self.pending and self.pending[-1][0] <= offset:
            _, pid, txn = self.pending.pop()
            self.aborted_open.setdefault(pid, [txn, None])

    def on_batch(self, batch) -> bool:
        """True when `batch` (data) belongs to an aborted transaction."""
        self._reach(batch.last_offset)
        if not batch.is_transactional:
            return False
        state = self.aborted_open.get(batch.producer_id)
        if state is not None:
            state[1] = batch.last_offset
            return True
        self.committed_open.add(batch.producer_id)
        return False

    def on_control(self, batch) -> bool:
        """True when the marker `batch` may be discarded: no record of its transaction
        was read in this pass (they are all gone). A kept ABORT marker keeps its entry."""
        self._reach(batch.last_offset)
        if batch.records_count == 0:
            return True                             # emptied by an earlier cleaning
        pid = batch.producer_id
        kind = batch.control_type
        if kind == "abort":
            state = self.aborted_open.pop(pid, None)
            if state is not None and state[1] is not None:
                self.index.append(state[0])
                return False
            return True
        if kind == "commit":
            if pid in self.committed_open:
                self.committed_open.discard(pid)
                return False
            return True
        return False


def _empty_batch(batch) -> bytes:
    """An emptied v2 batch kept for its producer state: Kafka's writeEmptyHeader."""
    last_delta = batch.last_offset - batch.base_offset
    ts = batch.max_timestamp
    attributes = batch.attributes & ~at.ATTR_COMPRESSION_MASK     # no compression: no records
    body = at.HEADER.pack(batch.base_offset, at.RECORD_BATCH_OVERHEAD - at.LOG_OVERHEAD,
                          batch.partition_leader_epoch, 2, 0, attributes,
                          last_delta, ts, ts, batch.producer_id, batch.producer_epoch,
                          batch.base_sequence, 0)
    crc = crc32c(body[at.ATTRIBUTES_OFFSET:])
    return body[:at.CRC_OFFSET] + crc.to_bytes(4, "big") + body[at.ATTRIBUTES_OFFSET:]


class _Survivors:
    """A segment's surviving records, filtered once (columns as the encoder takes
    them), so re-encoding a batch is zero-copy slices and one C call."""

    def __init__(self, rows: pa.RecordBatch, keep: np.ndarray) -> None:
        import pyarrow.compute as pc
        kept = rows.filter(pa.array(keep))
        self.values = kept.column("value")
        self.keys = kept.column("key")
        self.offsets = kept.column("offset").to_numpy()
        self.timestamps = kept.column("timestamp").cast(pa.int64()).to_numpy()
        headers = kept.column("headers")
        self.headers = headers if headers.null_count < len(headers) and \
            pc.sum(pc.list_value_length(headers)).as_py() else None
        # Row i of the segment is survivor ends[i] - 1 when kept (a running count).
        self.ends = np.cumsum(keep)

    def encode(self, batch, first_row: int, count: int) -> bytes:
        """The survivors among rows [first_row, first_row + count) (one batch) as one
        batch with the original's base and last offsets, producer fields and codec."""
        lo = int(self.ends[first_row - 1]) if first_row else 0
        hi = int(self.ends[first_row + count - 1])
        headers = None
        if self.headers is not None:
            headers = [[(h["key"], h["value"]) for h in r or ()]
                       for r in self.headers.slice(lo, hi - lo).to_pylist()]
        data = encode_batch(
            self.values.slice(lo, hi - lo), self.keys.slice(lo, hi - lo), self.timestamps[lo:hi],
            headers, base_offset=batch.base_offset,
            offset_deltas=self.offsets[lo:hi] - batch.base_offset,
            compression=batch.compression,
            timestamp_type=batch.timestamp_type, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            transactional=batch.is_transactional,
            partition_leader_epoch=batch.partition_leader_epoch)
        # Kafka's overrideLastOffset: the last offset (and so the last sequence) stays.
        return with_header_fields(data, last_offset_delta=batch.last_offset - batch.base_offset)


class _Throttle:
    """log.cleaner.io.max.bytes.per.second over the bytes read."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.done = 0

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        if self.rate <= 0 or self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


def _with_segment(segment, fn):
    """fn(memoryview of the segment's .log), mapped read-only for the call only (fn
    keeps no reference to the view: the mapping closes on return)."""
    size = segment.size
    if size == 0:
        return fn(memoryview(b""))
    with open(segment.path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        view = memoryview(mapped)
        try:
            return fn(view)
        finally:
            view.release()
    finally:
        mapped.close()


def _map_segment(view, offset_map: OffsetMap, have_some: bool, aborted) -> bool:
    """Adds a segment's keys to the map, an aborted transaction's records left out;
    False (nothing added) when they do not fit (the first segment of a pass always goes
    in, so every pass makes progress)."""
    if not len(view):
        return True
    # The rewrite pass checks every CRC.
    rows = decode_arrow(view, validate=False, aborted_transactions=aborted)
    return offset_map.add(rows.column("key"), rows.column("offset").to_numpy(), must=not have_some)


def _producer_last(batch, producers: dict[int, tuple[int, int]]) -> bool:
    """Kafka's isBatchLastRecordOfProducer: the batch holding a producer's last data
    offset, or, for a producer whose last record is a marker, that marker."""
    last = producers.get(batch.producer_id)
    if last is None:
        return False
    if last[0] >= 0:
        return batch.last_offset == last[0]
    return batch.is_control and batch.producer_epoch == last[1]


def _rewrite_segment(view, out, offset_map: OffsetMap, producers: dict[int, tuple[int, int]],
                     clean: bool, tombstones_expire: bool, stats: CleanerStats,
                     txns: _CleanedTransactions) -> None:
    """Writes the batches of one segment that keep records (see the module docs)."""
    if not len(view):
        return
    rows = decode_arrow(view)
    offsets = rows.column("offset").to_numpy()
    keep = offset_map.kept(rows.column("key"), offsets, clean)
    # Transactions first, batch by batch in offset order (a header walk): an aborted
    # transaction's records go whatever their keys; each marker's fate.
    batches = list(iter_batches(view))
    fates: dict[int, bool] = {}                  # control batch index -> discardable
    row = 0
    for i, batch in enumerate(batches):
        if batch.is_control:
            fates[i] = txns.on_control(batch)
            continue
        n = batch.records_count
        if batch.producer_id >= 0 and txns.on_batch(batch):
            keep[row:row + n] = False
        row += n
    if tombstones_expire:
        import pyarrow.compute as pc
        tomb = np.asarray(pc.is_null(rows.column("value")))
        stats.tombstones_removed += int((keep & tomb).sum())
        keep &= ~tomb
    stats.records_read += len(offsets)
    stats.records_kept += int(keep.sum())
    survivors = None
    row = 0
    for i, batch in enumerate(batches):
        if batch.is_control:
            # Kept while its transaction has records here, else until the horizon.
            if not (fates[i] and tombstones_expire):
                out.write(batch.raw)
            elif _producer_last(batch, producers):
                out.write(_empty_batch(batch))       # the producer's epoch, for fencing
            continue
        n = batch.records_count
        k = keep[row:row + n]
        if n and k.all():
            out.write(batch.raw)
        elif k.any():
            if survivors is None:
                survivors = _Survivors(rows, keep)
            out.write(survivors.encode(batch, row, n))
        elif batch.producer_id >= 0 and _producer_last(batch, producers):
            out.write(_empty_batch(batch))           # the producer's last batch: its state
        row += n


def clean_log(lg, first_dirty: int, now: int, dedupe_bytes: int, io_rate: float = 0.0,
              stage=None) -> CleanerStats | None:
    """Cleans `lg` once (see the module docs). Returns the stats, or None when there
    was nothing dirty to clean. `stage(name)` is called between the steps of each
    swap (tests kill the process there)."""
    started = time.monotonic()
    config = lg.config
    first_dirty = max(first_dirty, lg.log_start_offset)
    segments = lg.segments
    clean, dirty = cleanable_range(segments, first_dirty, now, config.min_compaction_lag_ms,
                                   lg.last_stable_offset)
    if not dirty:
        return None
    ratio = dirty_ratio(clean, dirty)
    throttle = _Throttle(io_rate)
    # 1. The offset map over as much of the dirty section as fits.
    offset_map = OffsetMap(dedupe_bytes)
    mapped = []
    for segment in dirty:
        aborted = lg.aborted_transactions(segment.base_offset, segment.next_offset)
        if not _with_segment(segment, lambda view: _map_segment(view, offset_map, bool(mapped),
                                                                aborted)):
            break                                       # the rest waits for the next pass
        mapped.append(segment)
        throttle(segment.size)
    offset_map.finish()
    end_offset = mapped[-1].next_offset
    # Kafka's lastRecordsOfActiveProducers: (last data offset or -1, epoch) per producer.
    producers = {pid: (entry.batches[-1].last_offset if entry.batches else -1, entry.epoch)
                 for pid, entry in lg.producer_state.producers.items()}
    txns = _CleanedTransactions()
    stats = CleanerStats(os.path.basename(lg.path), first_dirty, end_offset, len(clean) + len(mapped),
                         0, 0, 0, 0, 0, 0, offset_map.size, offset_map.size / offset_map.capacity,
                         ratio, 0.0)
    retention = config.delete_retention_ms
    # 2. Rewrite: clean groups and dirty groups apart (a group's mtime is its clean time).
    groups = [(group, is_clean) for section, is_clean in ((clean, True), (mapped, False))
              for group in _groups(section, config.segment_bytes, config.segment_index_bytes)]
    carried: list = []      # segments whose cleaning wrote nothing, for the next group's file
    for i, (group, is_clean) in enumerate(groups):
        if stage is not None:
            stage("group")
        mtime = max(s.last_modified_ms for s in group) if is_clean else now
        tombstones_expire = is_clean and mtime + retention < now
        base = (carried or group)[0].base_offset
        written, size = _rewrite_group(lg, base, group, offset_map, producers, is_clean,
                                       tombstones_expire, stats, throttle, txns)
        following = groups[i + 1][0] if i + 1 < len(groups) else None
        if size == 0 and following is not None and \
                following[-1].next_offset - 1 - base <= INT32_MAX:
            # Nothing survived: no segment of its own (Kafka would merge it at the next
            # pass). The next group's cleaned segment starts at its base instead; it
            # holds no record, so no tombstone's clock moves.
            _remove_cleaned(lg, base)
            carried += group
            continue
        _swap(lg, carried + group, written, mtime, stage)
        carried = []
    stats.segments_after = sum(1 for s in lg.segments if s.base_offset < end_offset)
    stats.seconds = time.monotonic() - started
    return stats


def _rewrite_group(lg, base: int, group, offset_map: OffsetMap,
                   producers: dict[int, tuple[int, int]], clean: bool, tombstones_expire: bool,
                   stats: CleanerStats, throttle, txns: _CleanedTransactions) -> tuple[str, int]:
    """Writes the kept records of `group` to ``<base>.log.cleaned`` with its indexes
    (``.index.cleaned``, ``.timeindex.cleaned``, and ``.txnindex.cleaned`` when an
    aborted transaction's marker stays), fsynced (`base`: the group's first base
    offset, or an earlier one whose segments left nothing). Returns the base path of
    the cleaned files and the bytes written."""
    target = files.log_file(lg.path, base) + files.CLEANED_SUFFIX
    txn_path = files.txn_index_file(lg.path, base) + files.CLEANED_SUFFIX
    txns.index = []
    try:
        with open(target, "wb") as out:
            for segment in group:
                stats.bytes_read += segment.size
                throttle(segment.size)
                # Kafka collects them over the whole segment: the cleaned index is rebuilt.
                txns.add(lg.aborted_transactions(segment.base_offset, segment.next_offset))
                _with_segment(segment, lambda view: _rewrite_segment(
                    view, out, offset_map, producers, clean, tombstones_expire, stats, txns))
            out.flush()
            os.fsync(out.fileno())
            written = out.tell()
            stats.bytes_written += written
        if txns.index:
            with open(txn_path, "wb") as f:
                f.write(b"".join(t.pack() for t in txns.index))
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for path in (target, txn_path):
            with contextlib.suppress(OSError):
                os.remove(path)               # (a crash leaves it to the next open instead)
        raise
    # Its indexes, built outside the log's lock.
    config = lg.config
    index_path = files.index_file(lg.path, base) + files.CLEANED_SUFFIX
    time_path = files.time_index_file(lg.path, base) + files.CLEANED_SUFFIX
    lf = LogFile(target)
    oi = OffsetIndex.open(index_path, base, config.segment_index_bytes)
    ti = TimeIndex.open(time_path, base, config.segment_index_bytes)
    try:
        result = lf.recover(base, config.index_interval_bytes, oi, ti)
        if result["error"] is not None:
            raise result["error"]
        # Kafka's onBecomeInactiveSegment (none for an empty file: no timestamp).
        ti.maybe_append(result["max_timestamp"], result["offset_of_max_timestamp"], True)
        oi.trim()
        ti.trim()
        oi.flush()
        ti.flush()
    finally:
        oi.close()
        ti.close()
        lf.close()
    return target[: -len(files.CLEANED_SUFFIX)], written


def _remove_cleaned(lg, base: int) -> None:
    """Drops the ``.cleaned`` files of segment `base` (a crash leaves them to the next
    open, which drops every ``.cleaned`` file)."""
    for name in (files.log_file(lg.path, base), files.index_file(lg.path, base),
                 files.time_index_file(lg.path, base), files.txn_index_file(lg.path, base)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name + files.CLEANED_SUFFIX)


def _swap(lg, group, log_path: str, mtime: int, stage) -> None:
    """``.cleaned`` -> ``.swap`` -> the final names, replacing `group` in `lg`."""
    base = group[0].base_offset
    names = [log_path, files.index_file(lg.path, base), files.time_index_file(lg.path, base)]
    if os.path.exists(files.txn_index_file(lg.path, base) + files.CLEANED_SUFFIX):
        names.append(files.txn_index_file(lg.path, base))
    if stage is not None:
        stage("cleaned-written")
    for name in names:
        os.replace(name + files.CLEANED_SUFFIX, name + files.SWAP_SUFFIX)
    files.fsync_dir(lg.path)
    if stage is not None:
        stage("swap-written")
    if not lg.replace_segments(group, base, names, mtime, stage):
        for name in names:                   # retention or a truncation got there first
            if os.path.exists(name + files.SWAP_SUFFIX):
                os.remove(name + files.SWAP_SUFFIX)
