"""TransactionCoordinator: Kafka's transaction coordinator on one node, over a store.

It owns every transactional id's :class:`TransactionMetadata` (producer id, epoch,
timeout, state, partitions) and keeps it in the compacted internal topic
``__transaction_state`` (coordinator/transaction_state.py: Kafka's record schemas), read
back when the store opens. The state machine is Kafka's:

    Empty/CompleteCommit/CompleteAbort --AddPartitions--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, fencing--> PrepareAbort --markers--> CompleteAbort

Invariants:

- **A commit's data is durable before its decision, the decision before any marker.**
  EndTxn(commit) flushes every partition of the transaction (nothing to do after
  acks=all produces), then PrepareCommit/PrepareAbort is appended to
  ``__transaction_state`` and fsync'ed, then the markers are appended into every
  partition, and EndTxn answers: the durable decision is the commit (Kafka answers
  once its Prepare record is replicated, and writes markers after).
- **An id's next state record waits for its markers to be durable.** The markers are
  not fsync'ed before the answer; the CompleteCommit/CompleteAbort record is written
  once they are (:meth:`_finish`, at once on the store's scheduler, and before any
  later record of the id). So the newest durable record of an id is its Prepare record
  for as long as a marker could be lost, and when the store opens every transaction
  found prepared gets its markers written again (a marker already there is a retry the
  partition recognises and skips): a kill -9 or a power loss at any point leaves a
  transaction either wholly committed or wholly aborted, and an answered commit
  committed.
- **Zombies are fenced by epoch.** InitProducerId bumps the id's epoch (aborting a
  transaction left open); a request with an older epoch gets PRODUCER_FENCED, and a
  partition refuses the old epoch's batches (storage/producer_state.py).
- **A transaction opens in a partition only with the coordinator's word.** A
  transactional Produce asks the partition for a verification guard and the
  coordinator whether the partition is in the producer's ongoing transaction
  (:meth:`verify_partition`, KIP-890 part 1) before appending with the guard.
- **No data of a transaction exists before its Ongoing record is durable.**
  AddPartitionsToTxn/AddOffsetsToTxn (v1) answer once the Ongoing record is appended;
  its fsync starts at once on the store's scheduler, and the first append of the
  transaction to each partition waits for it (:meth:`verify_partition`, and
  :meth:`txn_offset_commit` for ``__consumer_offsets``), so the client's linger and
  round trip overlap the fsync. An add that a power loss forgets was answered, but
  nothing of the transaction was written or acknowledged after it: the producer's next
  Produce or TxnOffsetCommit is refused (the partition is not in the transaction) and
  the transaction aborts. The same fsync still makes the id's previous Complete
  record durable before the next transaction's data exists (the rule above).
- Transactions past ``transaction.timeout.ms`` are aborted (with an epoch bump, as
  Kafka) by a periodic task; ids idle in a completed state for
  ``transactional.id.expiration.ms`` are forgotten (a tombstone).

Group commit: a transactional id's changes are serialised by its lock (one of
:data:`LOCK_STRIPES`, by the id's hash), held across the fsync of its record; changes
of other ids run meanwhile, and records that share a ``__transaction_state`` partition
share its fsync (``Log.flush`` returns at once when an earlier flush covered its
offset).

Transactions v2 (KIP-890 part 2, Kafka 4's default; the broker finalizes the feature
``transaction.version`` = 2 in ApiVersions) beside v1, per transaction as Kafka:

- the first transactional Produce (v12+) of a partition adds it to the transaction
  (:meth:`add_partitions` with ``tv2``: no AddPartitionsToTxn from the client), and a
  TxnOffsetCommit v5 adds its group's ``__consumer_offsets`` partition;
- every EndTxn v5 bumps the epoch *before* the decision is written: the markers carry
  the new epoch, so the partitions fence the old one, and the response hands the new
  (producer id, epoch) to the producer (a new producer id at epoch 0 when the epoch runs
  out: ``next_producer_id``, taken once the markers are written);
- an EndTxn whose epoch is one below the coordinator's is the retry of the last one
  (answered with the current id and epoch); an abort with nothing added bumps the epoch
  alone (no markers);
- such a transaction's records are version 1 values (``ClientTransactionVersion`` 2).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from pylog.common.topic_partition import TopicPartition
from pylog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from pylog.record import encode_batch
from pylog.storage import OFFSETS_TOPIC

from .offsets import OffsetAndMetadata
from .replay import internal_batches
from .transaction_state import (
    IDLE,
    PREPARED,
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    partition_for_transactional_id,
)

__all__ = ["TransactionCoordinator", "authorize_transactional_id"]

log = logging.getLogger(__name__)

#: How many locks the transactional ids are spread over (by hash): ids of different
#: stripes change, and fsync their records, concurrently.
LOCK_STRIPES = 64

#: Kafka's Short.MaxValue - 1: an epoch at this bound makes InitProducerId hand out a
#: new producer id (epoch 0) instead of bumping.
MAX_EPOCH = 32766


def authorize_transactional_id(principal, transactional_id: str, operation: str) -> bool:
    """The one place a transactional id is authorized (Kafka's TRANSACTIONAL_ID resource,
    operations WRITE and DESCRIBE). Every transactional handler calls it; it allows all
    until the ACL authorizer takes it over."""
    return True


class TransactionCoordinator:
    """The transaction coordinator of one store: ``TransactionCoordinator(store)``.

    Replays ``__transaction_state``, completes every prepared transaction (its
    markers), and registers the timeout and expiration tasks with the store."""

    def __init__(self, store) -> None:
        self.store = store
        self._stripes = tuple(threading.RLock() for _ in range(LOCK_STRIPES))
        self._txns: dict[str, TransactionMetadata] = {}
        #: Ids whose markers are written but not yet known durable: the markers' logs
        #: and ends, and the Complete record to append once they are (see _finish).
        self._unfinished: dict[str, tuple[list, bytes]] = {}
        #: Ids whose newest state record (an Ongoing one) is appended but not yet known
        #: durable: its log and end (see _make_durable).
        self._undurable: dict[str, tuple[object, int]] = {}
        self._load()
        self._complete_prepared()
        c = store.config
        store.add_periodic_task("abort-timed-out-transactions",
                                c["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                                self.abort_timed_out)
        store.add_periodic_task("remove-expired-transactional-ids",
                                c["transaction.remove.expired.transaction.cleanup.interval.ms"],
                                self.remove_expired)

    # =================================================================== state log

    def _state_log(self, transactional_id: str):
        c = self.store.config
        partitions = self.store.ensure_internal_topic(
            TRANSACTION_STATE_TOPIC, c["transaction.state.log.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": c["transaction.state.log.segment.bytes"],
             "compression.type": "producer"})
        return self.store.log(TRANSACTION_STATE_TOPIC,
                              partition_for_transactional_id(transactional_id, partitions))

    def _locked(self, transactional_id: str) -> threading.RLock:
        """The lock that serialises the changes of `transactional_id` (its stripe's)."""
        return self._stripes[hash(transactional_id) % LOCK_STRIPES]

    def _write(self, meta: TransactionMetadata | None, transactional_id: str,
               durable: bool = True) -> None:
        """Appends the id's state (None: a tombstone) and fsyncs it, after finishing the
        id's last transaction (its markers durable, its Complete record written): the
        newest durable record of an id never gets ahead of its markers. Holds the id's
        lock; records of other ids that share the partition share the fsync.
        `durable=False` (an Ongoing record of AddPartitionsToTxn): the fsync starts on
        the store's scheduler and the id's first data waits for it (_make_durable)."""
        self._finish(transactional_id)
        now = self.store.clock()
        if meta is not None:
            meta.last_update_ms = now
        lg = self._state_log(transactional_id)
        info = lg.append(encode_batch([None if meta is None else meta.record_value()],
                                      [encode_txn_key(transactional_id)], [now]),
                         origin="coordinator")
        end = info.last_offset + 1
        if durable:
            lg.flush(end)
            self._undurable.pop(transactional_id, None)   # the fsync covered it too
            return
        self._undurable[transactional_id] = (lg, end)
        lg.scheduler.schedule(0, lambda: self._flush_in_background(lg, end))

    def _flush_in_background(self, lg, end: int) -> None:
        """The store's scheduler task that starts an Ongoing record's fsync; an error is
        raised again by the flush the id's first data waits on (_make_durable)."""
        if self.store.closed or lg.closed:
            return
        try:
            lg.flush(end)
        except Exception:               # noqa: BLE001 - _make_durable's flush raises it
            pass

    def _make_durable(self, transactional_id: str) -> None:
        """Waits until the id's newest state record is durable (its fsync is under way
        or done, or this does it). Holds the id's lock."""
        pending = self._undurable.get(transactional_id)
        if pending is None:
            return
        lg, end = pending
        lg.flush(end)
        if self._undurable.get(transactional_id) is pending:
            del self._undurable[transactional_id]

    def _finish(self, transactional_id: str) -> None:
        """Finishes the id's last transaction, if its markers are not yet known durable:
        flushes them, then appends its Complete record. The Complete record is not
        fsync'ed: losing it only makes the next open write the markers again (a retry
        each partition recognises). Raises the flush's error (the id stays unfinished,
        and so does every later change of it until a retry succeeds)."""
        with self._locked(transactional_id):
            unfinished = self._unfinished.get(transactional_id)
            if unfinished is None:
                return
            markers, complete = unfinished
            for lg, end in markers:
                try:
                    lg.flush(end)
                except ValueError:
                    if not lg.closed:       # closed: deleted since, nothing to keep
                        raise
            self._state_log(transactional_id).append(
                encode_batch([complete], [encode_txn_key(transactional_id)], [self.store.clock()]),
                origin="coordinator")
            del self._unfinished[transactional_id]

    def _finish_in_background(self, transactional_id: str) -> None:
        """The store's scheduler task that finishes a transaction after EndTxn answered."""
        if self.store.closed:
            return                  # a clean close flushed the markers; the next open finishes
        try:
            self._finish(transactional_id)
        except Exception:               # noqa: BLE001 - the id's next change retries
            if not self.store.closed:
                log.exception("finishing the transaction of %r failed; its next change retries",
                              transactional_id)

    def _load(self) -> None:
        for batch, start in internal_batches(self.store, TRANSACTION_STATE_TOPIC):
            if batch.is_control:
                continue
            for record in batch.records():
                if record.offset < start or record.key is None:
                    continue
                tid = decode_txn_key(record.key)
                if record.value is None:
                    self._txns.pop(tid, None)
                else:
                    self._txns[tid] = decode_txn_value(tid, record.value)

    def _complete_prepared(self) -> None:
        """Recovery: markers for every transaction whose decision was written but not
        its completion (a crash in between). PrepareEpochFence becomes an abort. One
        that fails (a partition's dir offline) stays prepared: the timer's next run
        (abort_timed_out) tries again, and the id answers CONCURRENT_TRANSACTIONS."""
        for meta in list(self._txns.values()):
            with self._locked(meta.transactional_id):
                if meta.state == TxnState.PREPARE_EPOCH_FENCE:
                    meta.state = TxnState.PREPARE_ABORT
                try:
                    if meta.state in PREPARED:
                        log.info("completing transaction %r (producer %d, epoch %d): %s",
                                 meta.transactional_id, meta.producer_id, meta.producer_epoch,
                                 meta.state.kafka_name)
                        self._write_markers(meta)
                    self._finish(meta.transactional_id)
                except Exception:       # noqa: BLE001 - retried by the timer
                    log.exception("completing transaction %r failed; retried later",
                                  meta.transactional_id)

    # ================================================================= operations

    def _get(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata:
        """The id's metadata, checked against the caller's producer id and epoch."""
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} is not mapped to producer id "
                f"{producer_id}: call InitProducerId first")
        if epoch != meta.producer_epoch:
            raise ProducerFencedError(
                f"producer {producer_id} of transactional id {transactional_id!r} has epoch "
                f"{epoch}, the current one is {meta.producer_epoch}: fenced by a newer producer")
        return meta

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        """Kafka's InitProducerId with a transactional id: (producer id, epoch). A new id
        gets a fresh producer id at epoch 0; a known one its epoch bumped (fencing the
        previous producer and aborting a transaction it left open); KIP-360: a producer
        that names its current id and epoch is bumped in place, a retry of the last
        bump answers the same."""
        if not transactional_id:
            raise ValueError("a transactional id must not be empty")
        max_timeout = self.store.config["transaction.max.timeout.ms"]
        if not 0 < timeout_ms <= max_timeout:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} must be in (0, {max_timeout}] "
                f"(transaction.max.timeout.ms)")
        with self._locked(transactional_id):
            meta = self._txns.get(transactional_id)
            if meta is None or meta.state == TxnState.DEAD:
                pid, _ = self.store.init_producer_id()
                meta = TransactionMetadata(transactional_id, pid, 0, timeout_ms)
                self._write(meta, transactional_id)
                self._txns[transactional_id] = meta
                return pid, 0
            if producer_id >= 0:
                previous = (producer_id, producer_epoch) == (meta.last_producer_id,
                                                             meta.last_producer_epoch)
                if previous and meta.state in IDLE:
                    # A retried bump, or the producer whose transaction the coordinator
                    # aborted (timeout): the current epoch is already its next one.
                    return meta.producer_id, meta.producer_epoch
                if not previous and (producer_id != meta.producer_id
                                     or producer_epoch != meta.producer_epoch):
                    raise ProducerFencedError(
                        f"producer {producer_id} epoch {producer_epoch} of transactional id "
                        f"{transactional_id!r} is not the current one ({meta.producer_id}, "
                        f"epoch {meta.producer_epoch})")
            if meta.state in PREPARED:
                self._write_markers(meta)
            if meta.state == TxnState.ONGOING:
                # Fence the old producer and abort what it left open (Kafka returns
                # CONCURRENT_TRANSACTIONS and the client retries; one node does both).
                self._bump(meta)
                self._end(meta, committed=False)
            self._bump(meta)
            meta.timeout_ms = timeout_ms
            meta.state = TxnState.EMPTY
            meta.partitions = set()
            meta.txn_start_ms = -1
            self._write(meta, transactional_id)
            return meta.producer_id, meta.producer_epoch

    def _bump(self, meta: TransactionMetadata) -> None:
        """The next epoch, or a fresh producer id at epoch 0 when epochs run out (memory
        only: the caller writes the state)."""
        meta.last_producer_id, meta.last_producer_epoch = meta.producer_id, meta.producer_epoch
        if meta.producer_epoch >= MAX_EPOCH:
            meta.producer_id, _ = self.store.init_producer_id()
            meta.producer_epoch = 0
        else:
            meta.producer_epoch += 1

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]], tv2: bool = False) -> None:
        """Kafka's AddPartitionsToTxn: the partitions join the producer's transaction
        (which begins with the first). Raises UnknownTopicOrPartitionError naming the
        partitions that do not exist (none is added then). `tv2`: the implicit add of
        transactions v2 (a Produce v12+, a TxnOffsetCommit v5+): the transaction is
        marked v2, so its EndTxn bumps the epoch."""
        wanted = {(t, p) for t, p in partitions}
        missing = [f"{t}-{p}" for t, p in sorted(wanted)
                   if t != OFFSETS_TOPIC and not 0 <= p < (self.store.partition_count(t) or 0)]
        if missing:
            raise UnknownTopicOrPartitionError(f"no such partition: {', '.join(missing)}")
        with self._locked(transactional_id):
            meta = self._get(transactional_id, producer_id, epoch)
            if meta.state in PREPARED or meta.state == TxnState.PREPARE_EPOCH_FENCE:
                raise ConcurrentTransactionsError(
                    f"transaction of {transactional_id!r} is completing: retry")
            if meta.state == TxnState.ONGOING and wanted <= meta.partitions and \
                    (not tv2 or meta.client_tv >= 2):
                return
            if meta.state != TxnState.ONGOING:
                # A transaction begins: its version is its first add's (Kafka's
                # clientTransactionVersion); a v2 add within a v1 one makes it v2.
                meta.txn_start_ms = self.store.clock()
                meta.partitions = set()
                meta.client_tv = 0
            meta.state = TxnState.ONGOING
            meta.partitions |= wanted
            if tv2:
                meta.client_tv = 2
            # v1: the answer does not wait for the fsync, the first data does. v2 (a
            # Produce or TxnOffsetCommit adding its own partition): its data follows now.
            self._write(meta, transactional_id, durable=tv2)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> None:
        """Kafka's AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins
        the transaction (its TxnOffsetCommit is then allowed)."""
        if not group:
            raise ValueError("a group id must not be empty")
        tp = self.store.coordinator.offsets_partition(group)
        self.add_partitions(transactional_id, producer_id, epoch, [tuple(tp)])

    def txn_offset_commit(self, transactional_id: str, group: str, producer_id: int, epoch: int,
                          offsets: dict[TopicPartition, OffsetAndMetadata],
                          tv2: bool = False) -> None:
        """Kafka's TxnOffsetCommit: offsets that become the group's at commit. `tv2`
        (v5+): the group's partition joins the transaction here (no AddOffsetsToTxn)."""
        if not group:
            raise ValueError("a group id must not be empty")
        with self._locked(transactional_id):
            tp = tuple(self.store.coordinator.offsets_partition(group))
            if tv2:
                self.add_partitions(transactional_id, producer_id, epoch, [tp], tv2=True)
            meta = self._get(transactional_id, producer_id, epoch)
            if meta.state != TxnState.ONGOING or tp not in meta.partitions:
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: TxnOffsetCommit for group "
                    f"{group!r} before AddOffsetsToTxn added its partition")
            self._make_durable(transactional_id)    # before the transaction's first data
            self.store.coordinator.txn_commit_offsets(group, producer_id, epoch, offsets)

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, committed: bool,
                tv2: bool = False) -> tuple[int, int]:
        """Kafka's EndTxn: commit or abort; returns once the markers are written, with the
        producer id and epoch the producer goes on with (`tv2`, EndTxn v5+: bumped)."""
        with self._locked(transactional_id):
            meta = self._txns.get(transactional_id)
            if meta is not None and meta.state != TxnState.DEAD and (tv2 or meta.client_tv >= 2):
                return self._end_txn_v2(meta, producer_id, epoch, committed, tv2)
            if meta is not None and meta.producer_id == producer_id and \
                    epoch == meta.last_producer_epoch and not committed and \
                    meta.state == TxnState.COMPLETE_ABORT:
                # the abort of a transaction the coordinator fenced
                return meta.producer_id, meta.producer_epoch
            meta = self._get(transactional_id, producer_id, epoch)
            state = meta.state
            if state == TxnState.ONGOING:
                self._end(meta, committed)
                return meta.producer_id, meta.producer_epoch
            if state in PREPARED or state == TxnState.PREPARE_EPOCH_FENCE:
                raise ConcurrentTransactionsError(
                    f"transaction of {transactional_id!r} is completing: retry")
            done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
            if state == done:
                return meta.producer_id, meta.producer_epoch    # a retry of the EndTxn
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} is {state.kafka_name}: "
                f"{'commit' if committed else 'abort'} needs an ongoing transaction")

    def _end_txn_v2(self, meta: TransactionMetadata, producer_id: int, epoch: int,
                    committed: bool, tv2: bool) -> tuple[int, int]:
        """EndTxn of transactions v2 (Kafka's rules): the epoch names the transaction, so
        the same epoch in a completed state is a new (empty) transaction, and the epoch
        just below the coordinator's is a retry of the EndTxn that bumped it."""
        state = meta.state
        retry_bump = producer_id == meta.producer_id and epoch + 1 == meta.producer_epoch
        retry_overflow = producer_id == meta.last_producer_id != meta.producer_id and \
            epoch == MAX_EPOCH and meta.producer_epoch == 0
        if producer_id != meta.producer_id and not retry_overflow:
            raise InvalidProducerIdMappingError(
                f"transactional id {meta.transactional_id!r} is not mapped to producer id "
                f"{producer_id}: call InitProducerId first")
        if state in PREPARED:
            valid = retry_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry_bump or retry_overflow or epoch == meta.producer_epoch
        else:
            valid = epoch == meta.producer_epoch
        if not valid:
            raise ProducerFencedError(
                f"producer {producer_id} of transactional id {meta.transactional_id!r} has "
                f"epoch {epoch}, the current one is {meta.producer_epoch}: fenced")
        done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        what = "commit" if committed else "abort"
        if state == TxnState.ONGOING:
            self._end(meta, committed, bump=tv2)
            return meta.producer_id, meta.producer_epoch
        if state in PREPARED:
            if state == (TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"transaction of {meta.transactional_id!r} is completing: retry")
        elif retry_bump or retry_overflow:
            if state == done:
                return meta.producer_id, meta.producer_epoch
        elif tv2 and not committed and state in IDLE:
            # Nothing was added (or a Produce that would have failed first): the abort
            # only bumps the epoch, which fences whatever the old one still sends.
            self._bump(meta)
            meta.state, meta.partitions, meta.client_tv = TxnState.COMPLETE_ABORT, set(), 2
            self._write(meta, meta.transactional_id)
            return meta.producer_id, meta.producer_epoch
        raise InvalidTxnStateError(
            f"transactional id {meta.transactional_id!r} is {state.kafka_name}: "
            f"{what} with epoch {epoch} needs an ongoing transaction")

    def _end(self, meta: TransactionMetadata, committed: bool, bump: bool = False) -> None:
        """Ongoing -> Prepare*, durable, then the markers (Complete* in memory; its record
        follows once they are durable: _finish, scheduled here). A commit first makes
        its data durable (acks=1 data is not yet). Holds the id's lock. `bump`
        (transactions v2): the epoch moves first, so the Prepare record and the
        markers carry the new one; when it runs out, the markers take the last epoch
        and the producer id changes once they are written (next_producer_id)."""
        if committed:
            for lg in self._logs_of(meta):
                lg.flush(lg.log_end_offset)
        if bump:
            meta.last_producer_id, meta.last_producer_epoch = meta.producer_id, meta.producer_epoch
            if meta.producer_epoch >= MAX_EPOCH:
                meta.next_producer_id, _ = self.store.init_producer_id()
            meta.producer_epoch += 1
            meta.client_tv = 2
        meta.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        self._write(meta, meta.transactional_id)
        self._write_markers(meta)
        tid = meta.transactional_id
        self._state_log(tid).scheduler.schedule(0, lambda: self._finish_in_background(tid))

    def _logs_of(self, meta: TransactionMetadata) -> list:
        """The logs of the transaction's partitions that still exist (a deleted one has
        nothing to flush or mark: Kafka skips it too)."""
        logs = []
        for topic, partition in sorted(meta.partitions):
            try:
                logs.append(self.store.log(topic, partition))
            except UnknownTopicOrPartitionError:
                continue
        return logs

    def _write_markers(self, meta: TransactionMetadata) -> None:
        """Appends the markers of a prepared transaction (not flushed), and moves it to
        Complete* in memory; its Complete record waits in _unfinished for _finish (after
        the markers are durable). Holds the id's lock."""
        committed = meta.state == TxnState.PREPARE_COMMIT
        written = []
        for lg in self._logs_of(meta):
            info = lg.write_txn_marker(meta.producer_id, meta.producer_epoch,
                                       self._coordinator_epoch(), committed)
            written.append((lg, info.last_offset + 1))
        self.store.coordinator.complete_txn_offsets(meta.producer_id, committed)
        meta.state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        meta.partitions = set()
        if meta.next_producer_id >= 0:         # the epoch ran out: the id the producer got
            meta.last_producer_id, meta.producer_id = meta.producer_id, meta.next_producer_id
            meta.producer_epoch, meta.next_producer_id = 0, -1
        meta.last_update_ms = self.store.clock()
        self._unfinished[meta.transactional_id] = (written, meta.record_value())

    def _coordinator_epoch(self) -> int:
        """Kafka's coordinator epoch is the leader epoch of the state partition: one node,
        one leader, always 0 (never below a marker written before)."""
        return 0

    # ================================================================= produce path

    def verify_partition(self, transactional_id: str, producer_id: int, epoch: int,
                         topic: str, partition: int) -> None:
        """KIP-890 part 1: a transactional batch may open the producer's transaction in
        the partition only if the partition is in its ongoing transaction (durably: the
        id's lock is held while its record is being fsync'ed)."""
        with self._locked(transactional_id):
            meta = self._txns.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"transactional id {transactional_id!r} is not mapped to producer id {producer_id}")
            if epoch != meta.producer_epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id} epoch {epoch} is fenced: the current epoch of "
                    f"{transactional_id!r} is {meta.producer_epoch}")
            if meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
                raise InvalidTxnStateError(
                    f"{topic}-{partition} is not in the ongoing transaction of "
                    f"{transactional_id!r} (AddPartitionsToTxn first)")
            self._make_durable(transactional_id)    # before the transaction's first data

    def verify_only(self, transactional_id: str, producer_id: int, epoch: int,
                    partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Exception | None]:
        """AddPartitionsToTxn verify_only (v4+): per partition, None if it is in the
        transaction, else the error."""
        out: dict[tuple[str, int], Exception | None] = {}
        for t, p in partitions:
            try:
                self.verify_partition(transactional_id, producer_id, epoch, t, p)
                out[(t, p)] = None
            except (InvalidTxnStateError, InvalidProducerEpochError,
                    InvalidProducerIdMappingError) as exc:
                out[(t, p)] = exc
        return out

    # ================================================================= timers

    def abort_timed_out(self, now: int | None = None) -> None:
        """Aborts every ongoing transaction older than its timeout, bumping the epoch
        so its producer is fenced (Kafka's abortTimedOutTransactions)."""
        now = self.store.clock() if now is None else now
        self._complete_prepared()               # any a failure left prepared
        for meta in list(self._txns.values()):
            with self._locked(meta.transactional_id):
                if meta.state != TxnState.ONGOING or meta.txn_start_ms + meta.timeout_ms > now:
                    continue
                log.info("aborting transaction %r (producer %d, epoch %d): past its timeout "
                         "of %d ms", meta.transactional_id, meta.producer_id,
                         meta.producer_epoch, meta.timeout_ms)
                try:
                    self._bump(meta)
                    # v2: the end bumps it again, as Kafka's (so the producer's EndTxn
                    # with its old epoch is no retry: it is fenced).
                    self._end(meta, committed=False, bump=meta.client_tv >= 2)
                except Exception:           # noqa: BLE001 - the next run retries
                    log.exception("aborting transaction %r failed", meta.transactional_id)

    def remove_expired(self, now: int | None = None) -> None:
        """Forgets ids idle longer than transactional.id.expiration.ms (a tombstone)."""
        now = self.store.clock() if now is None else now
        ttl = self.store.config["transactional.id.expiration.ms"]
        for tid, meta in list(self._txns.items()):
            with self._locked(tid):
                if self._txns.get(tid) is meta and meta.state in IDLE and \
                        meta.last_update_ms + ttl <= now:
                    try:
                        self._write(None, tid)
                    except Exception:       # noqa: BLE001 - the next run retries
                        log.exception("expiring transactional id %r failed", tid)
                        continue
                    del self._txns[tid]

    # ================================================================= describing

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        with self._locked(transactional_id):
            meta = self._txns.get(transactional_id)
            if meta is None:
                return None
            return TransactionMetadata(meta.transactional_id, meta.producer_id,
                                       meta.producer_epoch, meta.timeout_ms, meta.state,
                                       set(meta.partitions), meta.txn_start_ms,
                                       meta.last_update_ms, client_tv=meta.client_tv)

    def list(self) -> list[TransactionMetadata]:
        found = (self.describe(t) for t in sorted(list(self._txns)))
        return [meta for meta in found if meta is not None]

    def abort_producer(self, topic: str, partition: int, producer_id: int, epoch: int,
                       coordinator_epoch: int) -> None:
        """WriteTxnMarkers from a tool (``kafka-transactions.sh abort``): an ABORT
        marker for a hanging transaction of `producer_id` in one partition. If the
        coordinator knows the transaction, it is aborted as a whole instead."""
        for meta in list(self._txns.values()):
            with self._locked(meta.transactional_id):
                if meta.producer_id == producer_id and meta.state == TxnState.ONGOING \
                        and (topic, partition) in meta.partitions:
                    self._bump(meta)
                    self._end(meta, committed=False)
                    return
        lg = self.store.log(topic, partition)
        info = lg.write_txn_marker(producer_id, epoch, coordinator_epoch, False)
        lg.flush(info.last_offset + 1)
