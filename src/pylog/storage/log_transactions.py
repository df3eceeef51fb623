"""A Log's producers and transactions: the producer state, the markers, the
aborted-transaction index, and the read side of read_committed.

The producer state (producer_state.py) is rebuilt at open from the newest
snapshot and the batches after it (``_load_producer_state``, which also checks
each recovered segment's ``.txnindex`` against the markers), and kept current
by every append (``_update_producers``: data batches remembered, transactions
opened, each marker's transaction closed, an aborted one indexed in its
segment's ``.txnindex``). The coordinator's side: ``maybe_start_transaction_
verification`` (KIP-890) and ``write_txn_marker``; the read side:
``last_stable_offset``, ``aborted_transactions``, ``read_committed``,
``describe_producers``. docs/FORMAT.md sections 5 and 8.

``LogTransactions`` is a mixin of :class:`~pylog.storage.log.Log` (its segments,
lock and offsets are the Log's); the C append path reads ``producer_state`` on
the Log itself.
"""

from __future__ import annotations

import bisect
import logging

from pylog.errors import CorruptRecordError
from pylog.record.batch_layout import ATTR_CONTROL, ATTR_TRANSACTIONAL

from .info import AppendInfo, CommittedRead
from .producer_state import (CompletedTxn, ProducerInfo, ProducerStateManager, VerificationGuard,
                             replay_batches)
from .segment import LogSegment
from .transaction_index import AbortedTxn

log = logging.getLogger("pylog.storage.log")   # the Log's own logger: one name for its messages

__all__ = ["LogTransactions"]


class LogTransactions:
    """The producers and transactions of a Log (a mixin: see the module)."""

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset not yet decided, the first offset of the
        oldest transaction still open here (not below the log start), else the high
        watermark. A read_committed reader reads below it only."""
        end = self._next_offset
        first = self.producer_state.first_unstable_offset
        if first < 0:
            return end
        return min(max(first, self._log_start_offset), end)

    def _load_producer_state(self, txn_rebuild=()) -> None:
        """The newest snapshot at or below the log end, then the batches after it
        (from the log start when there is no snapshot: a crash between a first
        roll and its snapshot, or a log written without them). The segments of
        `txn_rebuild` (possibly unflushed, or with a torn .txnindex) get their
        .txnindex checked against the markers: the snapshot is then one at or below
        the first of them, and the aborted transactions whose markers the replay
        meets in them are what their .txnindex must hold (Kafka's
        LogSegment.recover). A .txnindex that holds them already is left as it is
        (reading writes nothing); any other is rewritten, after marking the dir.

        The state is built aside and swapped in whole: a reader of the last stable
        offset meanwhile sees the old state, never an empty one."""
        state = ProducerStateManager(self.path)
        rebuild = {s.base_offset: s for s in self._segments if s.base_offset in set(txn_rebuild)}
        aborted: dict[int, list[AbortedTxn]] = {base: [] for base in rebuild}
        start = state.load(self._next_offset, min(rebuild) if rebuild else None, self._mark_dirty)
        if start < 0:
            start = self._log_start_offset
        for segment in self._segments:
            if segment.next_offset > start and segment.size:
                on_complete = None
                if segment.base_offset in rebuild:
                    def on_complete(done, lso, found=aborted[segment.base_offset]):
                        if done.aborted:
                            found.append(AbortedTxn(done.producer_id, done.first_offset,
                                                    done.last_offset, lso))
                try:
                    state.replay(replay_batches(segment.log, segment.size, start), on_complete)
                except CorruptRecordError as exc:
                    # Damage kept below the recovery point (see log_loader): the
                    # batches before it were replayed; reads report the rest.
                    log.warning("%s: producer state replay stopped in segment %d: %s",
                                self.path, segment.base_offset, exc)
        for base, segment in rebuild.items():
            index = segment.txn_index
            if not segment.txn_index_whole() or index.entries() != tuple(aborted[base]):
                self._mark_dirty()
                index.reset()
                for txn in aborted[base]:
                    self._append_aborted(segment, txn)
            elif aborted[base]:
                self._note_aborted(segment)
        self.producer_state = state

    def _index_aborted(self, segment: LogSegment, done: CompletedTxn, lso: int) -> None:
        """Appends an aborted transaction to the .txnindex of `segment` (its marker's)."""
        self._append_aborted(segment, AbortedTxn(done.producer_id, done.first_offset,
                                                 done.last_offset, lso))

    def _append_aborted(self, segment: LogSegment, txn: AbortedTxn) -> None:
        index = segment.txn_index
        index.append(txn)
        if index.created:
            self._dir_dirty = True
        self._note_aborted(segment)

    def _note_aborted(self, segment: LogSegment) -> None:
        """Lists `segment` among those whose .txnindex has entries (reads consult them)."""
        if segment.base_offset not in self._aborted_bases:
            self._aborted_bases = tuple(sorted(self._aborted_bases + (segment.base_offset,)))

    def _check_markers(self, batches, prepared) -> dict[int, tuple[bool, int]]:
        """The transaction markers of a coordinator append, by batch index: (committed,
        coordinator epoch), each checked against its producer's epochs (Kafka's
        appendEndTxnMarker: InvalidProducerEpochError, TransactionCoordinatorFencedError)."""
        from pylog.record import iter_batches
        markers = {}
        wanted = [i for i in range(prepared.batch_count)
                  if prepared.batch(i)[8] & ATTR_CONTROL and prepared.batch(i)[5] >= 0]
        if not wanted:
            return markers
        for i, batch in enumerate(iter_batches(batches, validate=False)):
            if i in wanted:
                kind = batch.control_type
                if kind in ("commit", "abort"):
                    self.producer_state.check_marker(batch.producer_id, batch.producer_epoch,
                                                     batch.coordinator_epoch)
                    markers[i] = (kind == "commit", batch.coordinator_epoch)
        return markers

    def _update_producers(self, prepared, segment: LogSegment, markers) -> None:
        """The producer state after an append was written (in batch order): data
        batches remembered, transactions opened, and each marker's transaction
        closed (an aborted one indexed in `segment`'s .txnindex)."""
        state = self.producer_state
        for i in range(prepared.batch_count):
            base, last, max_ts, records, _, pid, epoch, seq, attributes = prepared.batch(i)
            if pid < 0:
                continue
            if attributes & ATTR_CONTROL:
                marker = markers.get(i) if markers else None
                if marker is None:
                    continue
                done = state.end_transaction(pid, epoch, marker[1], marker[0], base, max_ts)
                if done is not None:
                    if done.aborted:
                        try:
                            self._index_aborted(segment, done, state.last_stable_offset_after(done))
                        except OSError as exc:
                            raise self._storage_error(exc, "transaction index append") from exc
                    state.complete(done)
            elif seq >= 0 or attributes & ATTR_TRANSACTIONAL:
                state.update(pid, epoch, seq, records, base, last, max_ts,
                             bool(attributes & ATTR_TRANSACTIONAL))

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int = 0,
                                             epoch: int = 0) -> VerificationGuard | None:
        """Kafka's maybeStartTransactionVerification: a guard for the transactional
        append that opens `producer_id`'s transaction in this partition, or None when
        one is open here (later batches need none). The coordinator's side verifies
        the partition is in the producer's transaction (AddPartitionsToTxn, verify
        only) and then appends with ``verification_guard=`` the guard; a marker or
        any transactional write of the producer in between retires it, and the append
        fails with InvalidTxnStateError (the client retries)."""
        with self._lock:
            self._check_open()
            return self.producer_state.start_verification(producer_id)

    def write_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         committed: bool, *, timestamp: int | None = None) -> AppendInfo:
        """Writes a transaction marker (Kafka's WriteTxnMarkers for one partition): a
        control batch of one COMMIT or ABORT record (Kafka's EndTransactionMarker,
        docs/FORMAT.md section 2) for `producer_id` at `producer_epoch` (TV2: the bumped
        epoch), and closes the producer's transaction here: the last stable offset
        passes it; an aborted one goes to this segment's .txnindex.

        Refused (nothing written): InvalidProducerEpochError for an epoch older than
        the producer's, TransactionCoordinatorFencedError for a coordinator epoch older
        than its last marker's. A retry (the same marker again, nothing of the producer
        since) writes nothing and returns the first one's offsets with size 0. A marker
        for a producer with no transaction open here (an empty transaction) is written
        and moves only its epochs. Durable as any append: by flush.messages and
        flush.ms; a caller that acknowledges only durable markers (Kafka's acks=all)
        calls ``flush(info.last_offset + 1)``."""
        from pylog.record import encode_control_batch
        with self._lock:
            self._check_open()
            entry = self.producer_state.producers.get(producer_id)
            if entry is not None and entry.txn_first_offset < 0 and entry.epoch == producer_epoch \
                    and entry.coordinator_epoch == coordinator_epoch \
                    and entry.marker_committed is committed and entry.marker_offset >= 0 \
                    and (not entry.batches or entry.batches[-1].last_offset < entry.marker_offset):
                o = entry.marker_offset
                return AppendInfo(o, o, entry.marker_timestamp, o, -1, self._log_start_offset,
                                  1, 1, 0, self._recovery_point > o)
            data = encode_control_batch("commit" if committed else "abort",
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        coordinator_epoch=coordinator_epoch,
                                        timestamp=self.clock() if timestamp is None else timestamp,
                                        partition_leader_epoch=self.leader_epoch)
            info = self._append_locked(data, "coordinator", None)
        for event in self._listeners:
            event.set()
        if info.flushed:
            self.flush(info.last_offset + 1)
        return info

    def describe_producers(self) -> list[ProducerInfo]:
        """Every producer this partition knows (Kafka's DescribeProducers): epoch, last
        sequence and timestamp, coordinator epoch, open transaction's first offset."""
        with self._lock:
            return self.producer_state.describe()

    def ongoing_transactions(self) -> list[ProducerInfo]:
        """The producers whose transaction is open here, oldest first (Kafka's
        find-hanging transactions: ``current_txn_start_offset`` below the last stable
        offset for long means a transaction nobody ends)."""
        return sorted((p for p in self.describe_producers() if p.current_txn_start_offset >= 0),
                      key=lambda p: p.current_txn_start_offset)

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTransactions: the aborted transactions overlapping
        [start, upper_bound), from the .txnindex of the segment holding `start` on,
        up to the first entry whose last stable offset reaches `upper_bound`. Never
        locks (segments with no entries are skipped without a look)."""
        aborted = self._aborted_bases
        if not aborted:
            return []
        segments, bases = self._segments, self._bases
        if len(bases) != len(segments):
            return self.aborted_transactions(start, upper_bound)   # replaced meanwhile
        floor = bases[max(bisect.bisect_right(bases, start) - 1, 0)]
        out: list[AbortedTxn] = []
        for base in aborted[bisect.bisect_left(aborted, floor):]:
            i = bisect.bisect_left(bases, base)
            if i == len(bases) or bases[i] != base:
                continue                        # deleted or merged by the cleaner
            found, complete = segments[i].txn_index.collect(start, upper_bound)
            out += found
            if complete:
                break
        return out

    def read_committed(self, offset: int, max_bytes: int = 1 << 20) -> CommittedRead:
        """A read_committed read (Kafka's FetchIsolation.TXN_COMMITTED): whole batches
        from `offset` below the last stable offset (an empty slice at or past it), and
        the aborted transactions that overlap them. Raises as :meth:`read`."""
        lso = self.last_stable_offset
        part = self.read(offset, max_bytes, max_offset=lso)
        aborted = self.aborted_transactions(offset, part.last_offset + 1) if part.size else []
        return CommittedRead(part, aborted, lso)
