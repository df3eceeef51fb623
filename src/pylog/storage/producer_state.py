"""Producer state of one partition: idempotent producers' epochs and sequences.

Kafka's ProducerStateManager, for idempotence (no transactions yet). For each
producer id the log remembers its epoch and the metadata of its last five
batches (first/last sequence, first/last offset). An incoming batch that
carries a producer id is checked before it is written:

- an epoch older than the producer's current one: ``InvalidProducerEpochError``;
- the same sequence range as one of the last five batches: a *duplicate*,
  a retry of a batch already in the log; the append writes nothing and
  returns the original offsets;
- a first sequence that does not follow the last one (or, for a new epoch,
  is not 0): ``OutOfOrderSequenceError``.

The state is snapshotted to ``%020d.snapshot`` files in Kafka's format
(ProducerSnapshot v1: version int16, CRC-32C uint32 of the rest, an int32
count and 46-byte entries), named by the log offset they cover: at every roll
and at close. On open the newest snapshot at or below the log end is loaded
and the batches after it are replayed from their headers.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from pylog._core.crc import crc32c
from pylog.errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)

from . import files

__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata"]

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")          # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")      # Kafka's ProducerSnapshot.ProducerEntry
_ENTRIES_OFFSET = 6                      # the CRC covers everything after version and crc
_KEEP_BATCHES = 5                        # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
INT32_MAX = 2**31 - 1


class BatchMetadata(NamedTuple):
    """A batch a producer wrote, as the table remembers it. A NamedTuple, not a
    frozen dataclass: one is made for every idempotent batch appended (twice:
    checked, then written), and a frozen dataclass's __init__ sets each field
    through object.__setattr__: 925 ns a construction on the bench VM, 365 ns
    for this."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=_KEEP_BATCHES))
    # A transactional producer's fields, as a snapshot Kafka wrote holds them: pylog
    # writes no transaction markers, so it keeps them as read (-1 when none).
    coordinator_epoch: int = -1
    txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _last_seq(first_seq: int, records: int) -> int:
    """Sequences wrap at int32 max, as Kafka's DefaultRecordBatch.incrementSequence."""
    return (first_seq + records - 1) % (INT32_MAX + 1)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """The producer table of one Log. The Log serialises every call."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

    # ------------------------------------------------------------ appends

    def check(self, producer_id: int, epoch: int, first_seq: int, records: int) -> BatchMetadata | None:
        """Validates an incoming batch; returns the original batch if it is a duplicate."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None          # a new producer (or one whose state expired): any sequence
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} has epoch {epoch}, older than its current epoch "
                f"{entry.epoch} (a newer instance fenced it)")
        last_seq = _last_seq(first_seq, records)
        if epoch == entry.epoch:
            for b in entry.batches:
                if b.first_seq == first_seq and b.last_seq == last_seq:
                    return b
            if entry.batches and not _in_sequence(entry.last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} (epoch {epoch}) sent sequence {first_seq}, expected "
                    f"{(entry.last_seq + 1) % (INT32_MAX + 1)}: a batch is missing or out of order")
        elif first_seq != 0:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} starts epoch {epoch} at sequence {first_seq}, not 0")
        return None

    def check_append(self, batches) -> list[BatchMetadata] | None:
        """Checks the batches of one append, (producer_id, epoch, base_sequence,
        records) each, in order, as if each earlier one had been written.

        Returns None when none is a duplicate, or the originals when every batch
        is one (a retry of a whole append: it then writes nothing). An append
        that mixes duplicates with new batches (or with batches that carry no
        producer id) raises DuplicateSequenceError and writes nothing: a whole
        append is written or not, so a retry can never be part old, part new.
        Raises on a fenced epoch or a sequence gap. Changes nothing."""
        saved = {}
        duplicates: list[BatchMetadata] = []
        fresh = 0
        try:
            for pid, epoch, seq, records in batches:
                if pid < 0 or seq < 0:
                    fresh += 1
                    continue
                duplicate = self.check(pid, epoch, seq, records)
                if duplicate is not None:
                    duplicates.append(duplicate)
                    continue
                fresh += 1
                if pid not in saved:
                    entry = self.producers.get(pid)
                    saved[pid] = None if entry is None else ProducerEntry(
                        entry.producer_id, entry.epoch, deque(entry.batches, maxlen=_KEEP_BATCHES),
                        entry.coordinator_epoch, entry.txn_first_offset)
                self.update(pid, epoch, seq, records, -1, -1, -1)
            if not duplicates:
                return None
            if fresh:
                first = duplicates[0]
                raise DuplicateSequenceError(
                    f"an append of {len(duplicates) + fresh} batches holds {len(duplicates)} "
                    f"already written (sequences {first.first_seq}..{first.last_seq} at offsets "
                    f"{first.first_offset}..{first.last_offset}) and {fresh} new ones: nothing "
                    f"was written; send each idempotent batch in its own append")
            return duplicates
        finally:
            for pid, entry in saved.items():
                if entry is None:
                    self.producers.pop(pid, None)
                else:
                    self.producers[pid] = entry

    def update(self, producer_id: int, epoch: int, first_seq: int, records: int,
               first_offset: int, last_offset: int, timestamp: int) -> None:
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch != entry.epoch:       # a new epoch: its batches start over
            entry = self.producers[producer_id] = ProducerEntry(
                producer_id, epoch, coordinator_epoch=entry.coordinator_epoch,
                txn_first_offset=entry.txn_first_offset)
        entry.batches.append(BatchMetadata(first_seq, _last_seq(first_seq, records), first_offset,
                                           last_offset, timestamp))

    def replay(self, batches) -> None:
        """Applies (base_offset, last_offset, max_ts, pid, epoch, base_seq) tuples
        read from the log, without checks (they are already in the log)."""
        for base, last, ts, pid, epoch, seq in batches:
            if seq >= 0:
                self.update(pid, epoch, seq, last - base + 1, base, last, ts)

    # ----------------------------------------------------------- snapshots

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX):
                offset = files.offset_from_filename(name)
                if offset is not None:
                    out.append(offset)
        return sorted(out)

    def write_snapshot(self, offset: int, *, sync: bool = True) -> None:
        """Writes the table as of `offset` (tmp, fsync unless not `sync`, rename).
        Kafka's byte layout: the last batch of each producer is what a snapshot keeps,
        with a transactional producer's coordinator epoch and transaction start as read
        (a snapshot Kafka wrote and pylog rewrites unchanged keeps its bytes)."""
        body = bytearray(_HEADER.size)
        count = 0
        for entry in self.producers.values():
            if not entry.batches:
                continue
            b = entry.batches[-1]
            body += _ENTRY.pack(entry.producer_id, entry.epoch, b.last_seq, b.last_offset,
                                b.last_offset - b.first_offset, b.timestamp,
                                entry.coordinator_epoch, entry.txn_first_offset)
            count += 1
        struct.pack_into(">i", body, _ENTRIES_OFFSET, count)
        crc = crc32c(bytes(body[_ENTRIES_OFFSET:]))
        struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
        # Its directory entry is made durable by the Log's next flush (a roll
        # marks the dir dirty).
        files.write_file_atomically(self.snapshot_path(offset), bytes(body), sync=sync,
                                    sync_dir=False)

    def read_snapshot(self, offset: int) -> None:
        """Replaces the table with the snapshot at `offset`; CorruptRecordError if bad."""
        path = self.snapshot_path(offset)
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _HEADER.size:
            raise CorruptRecordError(f"{path}: {len(data)} bytes, shorter than the 10-byte header")
        version, crc, count = _HEADER.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise CorruptRecordError(f"{path}: unknown snapshot version {version}")
        computed = crc32c(data[_ENTRIES_OFFSET:])
        if computed != crc:
            raise CorruptRecordError(f"{path}: stored crc = 0x{crc:08x}, computed crc = "
                                     f"0x{computed:08x}")
        if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
            raise CorruptRecordError(f"{path}: {count} entries do not fit its {len(data)} bytes")
        self.producers = {}
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, ts, coordinator_epoch, txn_first = \
                _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
            first_seq = (last_seq - delta) % (INT32_MAX + 1)
            entry = self.producers[pid] = ProducerEntry(pid, epoch, coordinator_epoch=coordinator_epoch,
                                                        txn_first_offset=txn_first)
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta,
                                               last_offset, ts))

    def load(self, log_end_offset: int) -> int:
        """Loads the newest valid snapshot at or below the log end (deleting newer or
        corrupt ones); returns its offset, or -1 with an empty table."""
        self.producers = {}
        for offset in reversed(self.snapshot_offsets()):
            if offset > log_end_offset:
                os.remove(self.snapshot_path(offset))     # stale: the log was truncated
                continue
            try:
                self.read_snapshot(offset)
                return offset
            except (CorruptRecordError, OSError):
                os.remove(self.snapshot_path(offset))
                self.producers = {}
        return -1

    def truncate(self, log_end_offset: int) -> None:
        """After a truncation: forget batches at or after the new end, drop newer snapshots."""
        for offset in self.snapshot_offsets():
            if offset > log_end_offset:
                os.remove(self.snapshot_path(offset))
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < log_end_offset]
            if kept:
                entry.batches = deque(kept, maxlen=_KEEP_BATCHES)
            else:
                del self.producers[pid]

    def delete_snapshots_below(self, offset: int) -> None:
        """Snapshots of segments that retention deleted (the newest one stays)."""
        offsets = self.snapshot_offsets()
        for o in offsets[:-1]:
            if o < offset:
                os.remove(self.snapshot_path(o))
