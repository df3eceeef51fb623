"""Producer state of one partition: epochs, sequences and open transactions.

Kafka's ProducerStateManager and ProducerAppendInfo. For each producer id the
log remembers its epoch, the metadata of its last five batches (first/last
sequence, first/last offset), the coordinator epoch of its last transaction
marker, and the first offset of its transaction still open in this partition.
An incoming batch that carries a producer id is checked before it is written:

- an epoch older than the producer's current one: ``InvalidProducerEpochError``
  (a newer instance fenced it; Kafka answers INVALID_PRODUCER_EPOCH);
- the same sequence range as one of the last five batches: a *duplicate*,
  a retry of a batch already in the log; the append writes nothing and
  returns the original offsets;
- a first sequence that does not follow the last one (or, for a new epoch,
  is not 0): ``OutOfOrderSequenceError``;
- a non-transactional batch while the producer's transaction is open here, or
  a transactional batch that would open one without the coordinator's word
  (a :class:`VerificationGuard`, Kafka's KIP-890 verification):
  ``InvalidTxnStateError``.

**Transactions.** The first transactional batch of a producer in this
partition opens its transaction: its base offset is the transaction's first
offset (``txn_first_offset``) and the log's *last stable offset* (LSO) cannot
pass it. A transaction marker (a control batch with one COMMIT or ABORT
record, written by the coordinator through :meth:`pylog.storage.Log.write_txn_marker`)
closes it: its epoch must not be older than the producer's
(``InvalidProducerEpochError``) and its coordinator epoch not older than the
last marker's (``TransactionCoordinatorFencedError``). An aborted
transaction's range goes to the ``.txnindex`` of the segment holding its
marker (pylog.storage.transaction_index), so read_committed readers can skip
its records.

The state is snapshotted to ``%020d.snapshot`` files in Kafka's format
(ProducerSnapshot v1: version int16, CRC-32C uint32 of the rest, an int32
count and 46-byte entries, docs/FORMAT.md section 9), named by the log offset
they cover: at every roll and at the close of a Log that wrote (a Log that only
read writes none). A producer whose last record is a
marker is written with last sequence -1 and last offset -1, as Kafka writes
it; an open transaction's first offset and the coordinator epoch are kept, so
a reopened log knows its open transactions and its LSO. On open the newest
snapshot at or below the log end is loaded and the batches after it are
replayed from their headers (markers from their one record).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from itertools import count
from typing import NamedTuple

from pylog._core.crc import crc32c
from pylog.errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pylog.record.batch_layout import ATTR_CONTROL, ATTR_TRANSACTIONAL, SEQUENCE_SPACE

from . import files

__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "CompletedTxn",
           "ProducerInfo", "VerificationGuard", "read_snapshot_file", "replay_batches"]

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
    through object.__setattr__, a NamedTuple's does not."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction a marker closed (Kafka's CompletedTxn): its first offset in this
    partition and its marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerInfo(NamedTuple):
    """One producer as Kafka's DescribeProducers answers it: the last sequence
    and timestamp, the coordinator epoch of its last marker (-1: none) and the
    first offset of its open transaction here (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class VerificationGuard:
    """Kafka's VerificationGuard: a token that lets one transactional append open a
    transaction in a partition. :meth:`pylog.storage.Log.maybe_start_transaction_verification`
    hands one out before the coordinator is asked whether the partition is in the
    producer's transaction; any transactional write or marker of that producer
    retires it, so a verification answered after an abort cannot open a transaction
    the coordinator no longer knows (the ABA case of KIP-890)."""

    __slots__ = ("value",)
    _ids = count(1)

    def __init__(self) -> None:
        self.value = next(self._ids)

    def __repr__(self) -> str:
        return f"VerificationGuard({self.value})"


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=_KEEP_BATCHES))
    coordinator_epoch: int = -1      # of the last transaction marker (-1: none)
    txn_first_offset: int = -1       # the open transaction's first offset here (-1: none)
    marker_timestamp: int = -1       # the last marker's timestamp (-1: none)
    # The last marker this process wrote or replayed (not in snapshots): a retry of it
    # is recognised (Log.write_txn_marker).
    marker_offset: int = -1
    marker_committed: bool = False

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        """Kafka's lastTimestamp: of the latest batch or marker."""
        return max(self.batches[-1].timestamp if self.batches else -1, self.marker_timestamp)

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, deque(self.batches, maxlen=_KEEP_BATCHES),
                             self.coordinator_epoch, self.txn_first_offset, self.marker_timestamp,
                             self.marker_offset, self.marker_committed)


def _last_seq(first_seq: int, records: int) -> int:
    """Sequences wrap at int32 max, as Kafka's DefaultRecordBatch.incrementSequence."""
    return (first_seq + records - 1) % SEQUENCE_SPACE


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """The producer table of one Log. The Log serialises every call that changes
    it; the transaction fields a reader looks at (``first_unstable_offset``) are
    replaced whole, never half-updated."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}        # open transactions: first offset -> producer id
        self.first_unstable_offset = -1          # the smallest key of `ongoing` (-1: none)
        self.verifications: dict[int, VerificationGuard] = {}

    # ------------------------------------------------------------ appends

    def check(self, producer_id: int, epoch: int, first_seq: int, records: int) -> BatchMetadata | None:
        """Validates an incoming batch's epoch and sequence; returns the original
        batch if it is a duplicate."""
        return _check(self.producers.get(producer_id), producer_id, epoch, first_seq, records)

    def check_append(self, batches, verification_guard: VerificationGuard | None = None
                     ) -> list[BatchMetadata] | None:
        """Checks the batches of one append, (producer_id, epoch, base_sequence,
        records, transactional) each (a fifth field may be left out: not
        transactional), in order, as if each earlier one had been written.

        Returns None when none is a duplicate, or the originals when every batch
        is one (a retry of a whole append: it then writes nothing). An append
        that mixes duplicates with new batches (or with batches that carry no
        producer id) raises DuplicateSequenceError and writes nothing: a whole
        append is written or not, so a retry can never be part old, part new.
        Raises on a fenced epoch, a sequence gap or a transaction state the
        batch does not fit (see the module doc). Changes nothing."""
        staged: dict[int, ProducerEntry | None] = {}
        duplicates: list[BatchMetadata] = []
        fresh = 0
        for batch in batches:
            pid, epoch, seq, records = batch[:4]
            transactional = len(batch) > 4 and batch[4]
            if pid < 0 or (seq < 0 and not transactional):
                fresh += 1
                continue
            if pid not in staged:
                current = self.producers.get(pid)
                staged[pid] = current.copy() if current is not None else None
            entry = staged[pid]
            if seq < 0:                     # a transactional batch without sequences
                if entry is not None and epoch < entry.epoch:
                    raise _fenced(pid, epoch, entry.epoch)
                duplicate = None
            else:
                duplicate = _check(entry, pid, epoch, seq, records)
            if duplicate is not None:
                duplicates.append(duplicate)
                continue
            fresh += 1
            ongoing = entry is not None and entry.txn_first_offset >= 0
            if transactional and not ongoing:
                guard = self.verifications.get(pid)
                if guard is None or guard is not verification_guard:
                    raise InvalidTxnStateError(
                        f"producer {pid} (epoch {epoch}) wrote a transactional batch to "
                        f"{self._where()} with no transaction open here, and the coordinator "
                        f"did not verify the partition is in its transaction (Kafka: Record "
                        f"was not part of an ongoing transaction)")
            elif ongoing and not transactional:
                raise InvalidTxnStateError(
                    f"producer {pid} (epoch {epoch}) wrote a non-transactional batch to "
                    f"{self._where()} while its transaction from offset "
                    f"{entry.txn_first_offset} is open (Kafka: Expected transactional write)")
            # Offsets are not assigned yet: 0 stands in (it never leaves this check).
            staged[pid] = _with_batch(entry, pid, epoch, seq, records, 0, 0, -1, transactional)
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

    def update(self, producer_id: int, epoch: int, first_seq: int, records: int,
               first_offset: int, last_offset: int, timestamp: int,
               transactional: bool = False) -> None:
        """Records a batch written at [first_offset, last_offset]; a transactional one
        opens its producer's transaction here unless one is open."""
        entry = self.producers.get(producer_id)
        opened = transactional and (entry is None or entry.txn_first_offset < 0)
        self.producers[producer_id] = _with_batch(entry, producer_id, epoch, first_seq, records,
                                                  first_offset, last_offset, timestamp,
                                                  transactional)
        if opened:
            self._set_ongoing(first_offset, producer_id)
        if transactional:
            self.verifications.pop(producer_id, None)

    # ------------------------------------------------------- transactions

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Kafka's appendEndTxnMarker checks: the marker's producer epoch not older than
        the producer's, its coordinator epoch not older than the last marker's."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise _fenced(producer_id, epoch, entry.epoch, "a transaction marker")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"a transaction marker for producer {producer_id} in {self._where()} carries "
                f"coordinator epoch {coordinator_epoch}, older than the last marker's "
                f"{entry.coordinator_epoch}: a zombie coordinator")

    def end_transaction(self, producer_id: int, epoch: int, coordinator_epoch: int,
                        committed: bool, offset: int, timestamp: int) -> CompletedTxn | None:
        """Applies a marker written at `offset` (checked, or replayed from the log):
        returns the transaction it closes, or None when none was open here (an empty
        transaction, or a retry). The caller indexes an aborted one and then calls
        :meth:`complete`."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif entry.epoch != epoch:       # Kafka's maybeUpdateProducerEpoch: batches start over
            entry = self.producers[producer_id] = ProducerEntry(
                producer_id, epoch, coordinator_epoch=entry.coordinator_epoch,
                txn_first_offset=entry.txn_first_offset, marker_timestamp=entry.marker_timestamp)
        done = None
        if entry.txn_first_offset >= 0:
            done = CompletedTxn(producer_id, entry.txn_first_offset, offset, not committed)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = -1
        entry.marker_timestamp = timestamp
        entry.marker_offset = offset
        entry.marker_committed = committed
        self.verifications.pop(producer_id, None)
        return done

    def last_stable_offset_after(self, done: CompletedTxn) -> int:
        """The LSO once `done` completes (Kafka's lastStableOffset(completedTxn)): the
        first offset of the oldest transaction of another producer still open, else
        one past the marker. An aborted transaction's .txnindex entry records it."""
        others = [first for first, pid in self.ongoing.items() if pid != done.producer_id]
        return min(others) if others else done.last_offset + 1

    def complete(self, done: CompletedTxn) -> None:
        """Removes `done` from the open transactions: the LSO may pass it now."""
        if self.ongoing.get(done.first_offset) == done.producer_id:
            del self.ongoing[done.first_offset]
            self.first_unstable_offset = min(self.ongoing) if self.ongoing else -1

    def _set_ongoing(self, first_offset: int, producer_id: int) -> None:
        self.ongoing[first_offset] = producer_id
        if self.first_unstable_offset < 0 or first_offset < self.first_unstable_offset:
            self.first_unstable_offset = first_offset

    def start_verification(self, producer_id: int) -> VerificationGuard | None:
        """A guard for a transactional append that may open a transaction (None: one
        is open here already). The same guard until a transactional write or a marker
        of the producer retires it."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset >= 0:
            return None
        guard = self.verifications.get(producer_id)
        if guard is None:
            guard = self.verifications[producer_id] = VerificationGuard()
        return guard

    def describe(self) -> list[ProducerInfo]:
        """Every producer of the table, by id (Kafka's DescribeProducers)."""
        return [ProducerInfo(pid, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                             e.txn_first_offset) for pid, e in sorted(self.producers.items())]

    # ------------------------------------------------------------ replay

    def replay(self, batches, on_complete=None) -> None:
        """Applies batches read from the log, without checks (they are already in
        it): (base_offset, last_offset, max_ts, pid, epoch, base_seq, transactional,
        marker) tuples, `marker` None for a data batch, else (committed,
        coordinator_epoch). A marker that closes a transaction calls
        ``on_complete(completed_txn, last_stable_offset)`` before completing it."""
        for base, last, ts, pid, epoch, seq, transactional, marker in batches:
            if marker is not None:
                done = self.end_transaction(pid, epoch, marker[1], marker[0], base, ts)
                if done is not None:
                    if on_complete is not None:
                        on_complete(done, self.last_stable_offset_after(done))
                    self.complete(done)
            elif seq >= 0 or transactional:
                self.update(pid, epoch, seq, last - base + 1, base, last, ts, transactional)

    def _where(self) -> str:
        return os.path.basename(self.directory)

    # ----------------------------------------------------------- snapshots

    def snapshot_path(self, offset: int) -> str:
        return files.snapshot_file(self.directory, offset)

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.directory):
            if name.endswith(files.SNAPSHOT_SUFFIX):
                offset = files.offset_from_filename(name)
                if offset is not None:
                    out.append(offset)
        return sorted(out)

    def write_snapshot(self, offset: int, *, sync: bool = True) -> None:
        """Writes the table as of `offset` (tmp, fsync unless not `sync`, rename).
        Kafka's byte layout: the last batch of each producer is what a snapshot keeps
        (last sequence and offset -1 when its last record is a marker), with its
        coordinator epoch and open transaction's first offset."""
        body = bytearray(_HEADER.size)
        n = 0
        for entry in self.producers.values():
            if entry.batches:
                b = entry.batches[-1]
                last_seq, last_offset, delta = b.last_seq, b.last_offset, b.last_offset - b.first_offset
            elif entry.epoch >= 0 or entry.txn_first_offset >= 0:
                last_seq, last_offset, delta = -1, -1, 0
            else:
                continue
            body += _ENTRY.pack(entry.producer_id, entry.epoch, last_seq, last_offset, delta,
                                entry.last_timestamp, entry.coordinator_epoch,
                                entry.txn_first_offset)
            n += 1
        struct.pack_into(">i", body, _ENTRIES_OFFSET, n)
        crc = crc32c(bytes(body[_ENTRIES_OFFSET:]))
        struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
        # Its directory entry is made durable by the Log's next flush (a roll
        # marks the dir dirty).
        files.write_file_atomically(self.snapshot_path(offset), bytes(body), sync=sync,
                                    sync_dir=False)

    def read_snapshot(self, offset: int) -> None:
        """Replaces the table with the snapshot at `offset`; CorruptRecordError if bad."""
        producers = read_snapshot_file(self.snapshot_path(offset))
        self.producers = {}
        self.ongoing = {}
        self.first_unstable_offset = -1
        for entry in producers:
            self.producers[entry.producer_id] = entry
            if entry.txn_first_offset >= 0:
                self._set_ongoing(entry.txn_first_offset, entry.producer_id)

    def clear(self) -> None:
        self.producers = {}
        self.ongoing = {}
        self.first_unstable_offset = -1
        self.verifications = {}

    def load(self, log_end_offset: int, at_most: int | None = None, before_change=None) -> int:
        """Loads the newest valid snapshot at or below the log end (deleting newer or
        corrupt ones, after ``before_change()``) and at or below `at_most` (newer ones
        kept); returns its offset, or -1 with an empty table. Reads only, when every
        snapshot is valid and none is past the log end."""
        self.clear()
        for offset in reversed(self.snapshot_offsets()):
            if offset > log_end_offset:
                if before_change is not None:
                    before_change()
                os.remove(self.snapshot_path(offset))     # stale: the log was truncated
                continue
            if at_most is not None and offset > at_most:
                continue
            try:
                self.read_snapshot(offset)
                return offset
            except (CorruptRecordError, OSError):
                if before_change is not None:
                    before_change()
                os.remove(self.snapshot_path(offset))
                self.clear()
        return -1

    def delete_snapshots_above(self, offset: int) -> None:
        """After a truncation to `offset`: snapshots past the new end go."""
        for o in self.snapshot_offsets():
            if o > offset:
                os.remove(self.snapshot_path(o))

    def delete_snapshots_below(self, offset: int) -> None:
        """Snapshots of segments that retention deleted (the newest one stays)."""
        offsets = self.snapshot_offsets()
        for o in offsets[:-1]:
            if o < offset:
                os.remove(self.snapshot_path(o))


def replay_batches(log_file, end: int, start: int):
    """The producer batches of a segment's .log (`log_file`, a LogFile, up to byte `end`)
    from offset `start` on, as :meth:`ProducerStateManager.replay` takes them: headers,
    and each transaction marker's type and coordinator epoch from its one record.
    Reads only."""
    from pylog.record import iter_batches
    for base, last, ts, pid, epoch, seq, attributes, position, size in \
            log_file.producer_batches(0, end):
        if base < start:
            continue
        marker = None
        if attributes & ATTR_CONTROL:
            batch = next(iter(iter_batches(log_file.read(position, size))))
            kind = batch.control_type if batch.records_count else None
            if kind not in ("commit", "abort"):
                continue            # emptied by the cleaner, or KRaft's: no transaction
            marker = (kind == "commit", batch.coordinator_epoch)
        yield base, last, ts, pid, epoch, seq, bool(attributes & ATTR_TRANSACTIONAL), marker


def read_snapshot_file(path: str) -> list[ProducerEntry]:
    """The entries of one ``.snapshot`` file; CorruptRecordError if it is not one.
    Reads only (read-only tools call it beside a live owner)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER.size:
        raise CorruptRecordError(f"{path}: {len(data)} bytes, shorter than the 10-byte header")
    version, crc, n = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptRecordError(f"{path}: unknown snapshot version {version}")
    computed = crc32c(data[_ENTRIES_OFFSET:])
    if computed != crc:
        raise CorruptRecordError(f"{path}: stored crc = 0x{crc:08x}, computed crc = "
                                 f"0x{computed:08x}")
    if n < 0 or len(data) != _HEADER.size + n * _ENTRY.size:
        raise CorruptRecordError(f"{path}: {n} entries do not fit its {len(data)} bytes")
    out = []
    for i in range(n):
        pid, epoch, last_seq, last_offset, delta, ts, coordinator_epoch, txn_first = \
            _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
        entry = ProducerEntry(pid, epoch, coordinator_epoch=coordinator_epoch,
                              txn_first_offset=txn_first if txn_first >= 0 else -1)
        if last_offset >= 0:
            first_seq = (last_seq - delta) % (INT32_MAX + 1)
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta,
                                               last_offset, ts))
        else:
            entry.marker_timestamp = ts         # its last record was a marker
        out.append(entry)
    return out


def _fenced(pid: int, epoch: int, current: int, what: str = "a batch") -> InvalidProducerEpochError:
    return InvalidProducerEpochError(
        f"producer {pid} sent {what} with epoch {epoch}, older than its current epoch "
        f"{current} (a newer instance fenced it)")


def _check(entry: ProducerEntry | None, producer_id: int, epoch: int, first_seq: int,
           records: int) -> BatchMetadata | None:
    if entry is None:
        return None          # a new producer (or one whose state expired): any sequence
    if epoch < entry.epoch:
        raise _fenced(producer_id, epoch, entry.epoch)
    last_seq = _last_seq(first_seq, records)
    if epoch == entry.epoch:
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        # No batch of this epoch yet (a marker bumped it): the next sequence is 0.
        if not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} (epoch {epoch}) sent sequence {first_seq}, expected "
                f"{(entry.last_seq + 1) % (INT32_MAX + 1)}: a batch is missing or out of order")
    elif first_seq != 0:
        raise OutOfOrderSequenceError(
            f"producer {producer_id} starts epoch {epoch} at sequence {first_seq}, not 0")
    return None


def _with_batch(entry: ProducerEntry | None, producer_id: int, epoch: int, first_seq: int,
                records: int, first_offset: int, last_offset: int, timestamp: int,
                transactional: bool) -> ProducerEntry:
    """`entry` (changed in place, or a new one when None or of another epoch) after a
    data batch: its sequences remembered, a transactional batch opening its
    transaction at `first_offset` unless one is open."""
    if entry is None:
        entry = ProducerEntry(producer_id, epoch)
    elif epoch != entry.epoch:       # a new epoch: its batches start over
        entry = ProducerEntry(producer_id, epoch, coordinator_epoch=entry.coordinator_epoch,
                              txn_first_offset=entry.txn_first_offset,
                              marker_timestamp=entry.marker_timestamp)
    if first_seq >= 0:
        entry.batches.append(BatchMetadata(first_seq, _last_seq(first_seq, records),
                                           first_offset, last_offset, timestamp))
    if transactional and entry.txn_first_offset < 0:
        entry.txn_first_offset = first_offset
    return entry
