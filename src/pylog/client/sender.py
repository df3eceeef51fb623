"""The sender and flusher threads of a :class:`~pylog.client.producer.Producer`.

The sender takes rounds of sealed batches off the ready queue (``_next_round``:
linger.ms, batch.size, flush() and close() decide when), appends each
partition's batches under its partition lock (small ones joined into one
write), and completes their futures; with ``acks=all`` it hands each appended
round to the flusher, which fsyncs every log once for all the rounds waiting
(group commit) and completes them. On the way it repairs what failed:
batches older than delivery.timeout.ms expire, a batch the log finds too large
is split (Kafka's splitAndReenqueue), and an idempotent partition's sequence
numbers move down past batches that failed unwritten. A transactional
producer's appends join the partition to the open transaction first.

``Sender`` is a mixin of ``Producer``, not an object of its own: the producer's
lock, queues and accumulator are its state, and the C half of the producer
(``ProducerBase``, _core/producer.pyx) calls ``_give_back``, ``_flush_logs``
and reads ``_round`` on the producer itself. Locks: see client/producer.py.
"""

from __future__ import annotations

import time
from typing import Any

from pylog._core.producer import ProducerBatch
from pylog.errors import (
    InvalidTxnStateError,
    KafkaStorageError,
    KafkaTimeoutError,
    MessageTooLargeError,
    RecordListTooLargeError,
)
from pylog.record import mark_transactional, with_header_fields
from pylog.record.batch_layout import SEQUENCE_SPACE

from .futures import complete_batch

__all__ = ["Sender", "ENCODING", "EncodeFailed"]


class EncodeFailed:
    """In place of a queued batch's bytes when encoding it raised."""
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


ENCODING = object()        # in place of a queued batch's bytes while send_batch encodes it

_JOIN_LIMIT = 1 << 20     # small batches of one partition are joined into writes of about this


class Sender:
    """The Producer's sender and flusher threads: rounds, appends, expiry, split
    and sequence repair (a mixin: see the module's docstring)."""


    def _give_back(self, topic: str, p: int, failed: ProducerBatch) -> None:
        """A direct batch failed unwritten (partition lock held): later batches of the
        partition move down past its sequences, also those the sender has already
        taken into its round (they wait for this partition lock, so none is written)."""
        with self._lock:
            later = list(self._round.get((topic, p), ()))
        self._forget_sequences(topic, p, [failed], later)

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    batches, upto = self._next_round()
                    if batches is None:
                        self._unsynced.append(None)     # the flusher stops after the rest
                        self._synced.notify_all()
                        return
                    by_partition: dict[tuple[str, int], list[ProducerBatch]] = {}
                    for b in batches:
                        by_partition.setdefault((b.topic, b.partition), []).append(b)
                    self._round = dict(by_partition)
                appended: list = []
                try:
                    self._append_round(by_partition, appended)
                finally:
                    with self._lock:        # what an error left in the round
                        for group in self._round.values():
                            self._acc.buffered -= sum(b.size for b in group)
                        self._round = {}
                        self._space.notify_all()
                if self._flusher is not None:
                    self._hand_to_flusher(appended, upto)
                    continue
                self._complete_round(appended)
                with self._lock:
                    if upto is not None:
                        self._flushed_upto = max(self._flushed_upto, upto)
                    self._done.notify_all()
        except BaseException as exc:   # noqa: BLE001 - reported to flush()/close()
            with self._lock:
                self._error = exc
                self._done.notify_all()
                if self._flusher is not None:
                    self._unsynced.append(None)     # the flusher finishes what it has
                    self._synced.notify_all()
            raise

    def _hand_to_flusher(self, appended: list, upto: int | None) -> None:
        """Queues an appended round for the flusher (acks=all). At most one round
        waits while it fsyncs another: a slower disk holds the sender back here,
        so the rounds written and not yet fsynced stay bounded."""
        with self._lock:
            while self._unsynced and self._error is None:
                self._synced.wait()
            if upto is not None:
                self._handed_upto = max(self._handed_upto, upto)
            self._unsynced.append((appended, upto))
            self._synced.notify_all()

    def _run_flusher(self) -> None:
        """The flusher thread (acks=all): takes every round queued, fsyncs each log
        once for all of them (group commit), completes their futures in queue
        order, then moves flush()'s mark."""
        try:
            while True:
                with self._lock:
                    while not self._unsynced:
                        self._synced.wait()
                    taken = []
                    while self._unsynced and self._unsynced[0] is not None:
                        taken.append(self._unsynced.popleft())
                    stop = not taken
                    self._syncing = bool(taken)
                    self._synced.notify_all()       # room for the sender's next round
                if stop:
                    return
                self._complete_round([entry for appended, _ in taken for entry in appended])
                with self._lock:
                    self._syncing = False
                    for _, upto in taken:
                        if upto is not None:
                            self._flushed_upto = max(self._flushed_upto, upto)
                    self._done.notify_all()
                    self._synced.notify_all()
        except BaseException as exc:   # noqa: BLE001 - reported to flush()/close()
            with self._lock:
                self._error = exc
                self._syncing = False
                self._done.notify_all()
                self._synced.notify_all()
            raise

    def _next_round(self) -> tuple[list[ProducerBatch] | None, int | None]:
        """Waits for work (lock held); returns the batches to send and, when every
        batch created so far is among them, that creation count."""
        acc = self._acc
        while True:
            force = acc.closing or self._flush_wanted > self._flushed_upto or \
                acc.buffered >= self._buffer_memory
            now = time.monotonic()
            while self._lingering and self._lingering[0].sealed:
                self._lingering.popleft()
            if force or (self._lingering and now - self._lingering[0].created >= self._linger):
                for state in self._topics.values():
                    for batch in state.open:
                        if batch is not None and (force or now - batch.created >= self._linger):
                            acc.seal(state, batch)
                while self._lingering and self._lingering[0].sealed:
                    self._lingering.popleft()
            ready = 0               # the queue up to a batch still being encoded
            for batch in self._ready:
                if batch.encoded is ENCODING:
                    break
                ready += 1
            if ready:
                batches = [self._ready.popleft() for _ in range(ready)]
                return batches, (acc.seq if not self._lingering and not self._ready else None)
            if self._ready:         # its sender thread notifies once it is encoded
                self._wakeup.wait()
                continue
            # Nothing lingers or waits: every batch made so far (up to acc.seq) is
            # complete, or queued for the flusher, which moves the mark itself.
            if acc.closing:
                self._mark_flushed(acc.seq)
                return None, None
            if self._flush_wanted > self._flushed_upto and not self._lingering and \
                    self._handed_upto < acc.seq:
                self._mark_flushed(acc.seq)
                continue
            timeout = None
            if self._lingering:
                timeout = max(self._lingering[0].created + self._linger - now, 0.0005)
            self._wakeup.wait(timeout)

    def _mark_flushed(self, upto: int) -> None:
        """Moves flush()'s mark to `upto` once every round before it is complete
        (lock held): at once when none waits for the flusher, else through a
        marker queued behind them."""
        if self._flusher is None or (not self._unsynced and not self._syncing):
            self._flushed_upto = max(self._flushed_upto, upto)
            self._done.notify_all()
        else:
            self._unsynced.append(([], upto))
            self._synced.notify_all()
        self._handed_upto = max(self._handed_upto, upto)

    def _expire(self, topic: str, partition: int, group: list[ProducerBatch]) -> list[ProducerBatch]:
        """Fails the batches older than delivery.timeout.ms (Kafka's batch expiry) and
        returns the rest; an idempotent partition's sequences move past them."""
        now = time.monotonic()
        # A batch whose encoding failed (send_batch raised it) fails here, in queue
        # order: only the batches after it give back its sequences.
        while any(isinstance(b.encoded, EncodeFailed) for b in group):
            i = next(i for i, b in enumerate(group) if isinstance(b.encoded, EncodeFailed))
            failed = group[i]
            complete_batch(failed, -1, exception=failed.encoded.error)
            group = group[:i] + group[i + 1:]
            self._forget_sequences(topic, partition, [failed], group[i:])
        expired = [b for b in group if now - b.created > self._delivery_timeout]
        if not expired:
            return list(group)
        fresh = [b for b in group if now - b.created <= self._delivery_timeout]
        for b in expired:
            complete_batch(b, -1, exception=KafkaTimeoutError(
                f"expiring {b.record_count} record(s) for {topic}-{partition}: "
                f"{(now - b.created) * 1000:.0f} ms have passed since the batch was created, "
                f"more than delivery.timeout.ms ({self._delivery_timeout * 1000:.0f})"))
        self._forget_sequences(topic, partition, expired, fresh)
        return fresh

    def _append_run(self, log, run: list[ProducerBatch]):
        compression, pid, epoch = self._compression, self._producer_id, self._producer_epoch
        payload = [b.encoded if b.encoded is not None else b.encode(compression, pid, epoch)
                   for b in run]
        return self._append(log, payload[0] if len(payload) == 1 else b"".join(payload))

    def _append_split(self, log, batch: ProducerBatch) -> _SplitAppend | None:
        """A batch over the topic's max.message.bytes (or segment.bytes), split as
        Kafka's producer splits one the broker refuses as too large
        (RecordAccumulator.splitAndReenqueue): halved until each piece fits or
        holds one record, the pieces appended in order, consecutive ones that fit
        joined into writes within segment.bytes (their records keep consecutive
        offsets). A record too large on its own fails alone; the others are
        written. None when it cannot be split (one record, or already encoded by
        send_batch, which cuts its batches to fit): then it fails as a whole."""
        if batch.encoded is not None or batch.record_count < 2:
            return None
        config = log.config
        limit = min(config.max_message_bytes, config.segment_bytes)
        pieces: list[tuple[int, int, bytes]] = []

        def encode(start: int, end: int) -> None:
            data = self._encode(batch.values[start:end], batch.keys[start:end],
                                batch.timestamps[start:end],
                                batch.headers[start:end] if batch.headers else None,
                                self._sequence(batch, start))
            if len(data) <= limit or end - start == 1:
                pieces.append((start, end, data))
                return
            middle = (start + end) // 2
            encode(start, middle)
            encode(middle, end)
        encode(0, batch.record_count)
        outcome = _SplitAppend()
        skipped = 0         # records failed so far: an idempotent batch's later sequences move down
        for run in _split_runs(pieces, limit, config.segment_bytes):
            first, last = run[0][0], run[-1][1]
            if skipped and batch.base_sequence >= 0:
                run = [(a, b, with_header_fields(
                    data, base_sequence=self._sequence(batch, a, skipped))) for a, b, data in run]
            try:
                info = self._append(log, b"".join(data for _, _, data in run))
            except Exception as exc:    # noqa: BLE001 - the piece's records fail alone
                outcome.pieces.append((first, last, -1, -1, exc))
                skipped += last - first
            else:
                outcome.pieces.append((first, last, info.first_offset, info.log_append_time, None))
                outcome.last_offset = info.last_offset
        outcome.failed = skipped
        return outcome

    def _append(self, log, data: bytes):
        """Appends encoded batches; a transactional producer's are marked transactional
        (attribute bit 4, per batch header) after their partition joined the open
        transaction, with the partition's verification guard (KIP-890)."""
        if self._transactional_id is None:
            return log.append(data, origin="producer")
        txn = self._txn
        if txn is None:
            raise InvalidTxnStateError(
                f"transactional producer {self._transactional_id!r}: a record sent outside a "
                f"transaction (call begin_transaction() before send())")
        try:
            tp = tuple(log.topic_partition)
            coordinator = self.store.transactions
            if tp not in txn.partitions:
                coordinator.add_partitions(self._transactional_id, self._producer_id,
                                           self._producer_epoch, [tp])
                txn.partitions.add(tp)
            guard = log.maybe_start_transaction_verification(self._producer_id)
            if guard is not None:
                coordinator.verify_partition(self._transactional_id, self._producer_id,
                                             self._producer_epoch, *tp)
            return log.append(mark_transactional(data), origin="producer",
                              verification_guard=guard)
        except BaseException as exc:
            txn.error = txn.error or exc        # the transaction can only be aborted now
            raise

    def _sequence(self, batch: ProducerBatch, index: int, skipped: int = 0) -> int:
        """The sequence of record `index` of an idempotent batch once `skipped` of its
        records before it failed; -1 without idempotence."""
        if batch.base_sequence < 0:
            return -1
        return (batch.base_sequence + index - skipped) % SEQUENCE_SPACE

    def _forget_sequences(self, topic: str, partition: int, failed: list[ProducerBatch],
                          later: list[ProducerBatch]) -> None:
        """After batches of an idempotent producer failed without being written, the
        log still expects the first failed sequence: every later batch of the
        partition (the rest of this round and those queued) and every future
        reservation moves down by the failed records, so the partition is not
        wedged by OutOfOrderSequenceError (Kafka's producer resets the
        partition's sequence for the same reason)."""
        self._shift_sequences(topic, partition,
                              sum(b.record_count for b in failed if b.base_sequence >= 0), later)

    def _shift_sequences(self, topic: str, partition: int, shift: int,
                         later: list[ProducerBatch]) -> None:
        """_forget_sequences for `shift` records that failed unwritten."""
        if not self._acc.idempotent or not shift:
            return
        with self._lock:
            state = self._topics.get(topic)
            if state is not None and partition < len(state.sequences):
                state.sequences[partition] = (state.sequences[partition] - shift) % SEQUENCE_SPACE
            queued = [b for b in self._ready if b.topic == topic and b.partition == partition]
            for b in later + queued:
                if b.base_sequence < 0:
                    continue
                b.base_sequence = (b.base_sequence - shift) % SEQUENCE_SPACE
                if isinstance(b.encoded, bytes):   # not while encoding (it re-reads) or failed
                    b.encoded = with_header_fields(b.encoded, base_sequence=b.base_sequence)

    def _append_round(self, by_partition: dict[tuple[str, int], list[ProducerBatch]],
                      appended: list[tuple[list[ProducerBatch], Any, Any]]) -> None:
        """Appends the round's batches (one write per partition) and adds (batches,
        log, AppendInfo) of each write to `appended`; failed batches are completed
        here. :meth:`_complete_round` then fsyncs and completes the rest.

        Once a partition's batches are written (or failed) they leave the round
        and buffer.memory: send() fills it again while the rest of the round is
        written and fsynced."""
        self._add_round_to_txn(by_partition)
        for (topic, partition), group in by_partition.items():
            try:
                log = self.store.log(topic, partition)
            except Exception as exc:    # noqa: BLE001 - delivered through the futures
                for b in group:
                    complete_batch(b, -1, exception=exc)
            else:
                with self._partition_lock(topic, partition):
                    self._append_partition(topic, partition, log, group, appended)
            with self._lock:
                del self._round[topic, partition]
                self._acc.buffered -= sum(b.size for b in group)
                self._space.notify_all()

    def _add_round_to_txn(self, by_partition) -> None:
        """A transactional producer's partitions that the round writes first in the open
        transaction join it together: one AddPartitionsToTxn, one Ongoing record and its
        fsync, not one each. If the coordinator refuses them (a partition that does not
        exist: none is added then), :meth:`_append` adds each partition alone, so only
        the refused partition's batches fail."""
        txn = self._txn
        if self._transactional_id is None or txn is None or txn.error is not None:
            return
        new = [tp for tp in by_partition if tp not in txn.partitions]
        if len(new) < 2:
            return                      # one partition: _append adds it as before
        try:
            self.store.transactions.add_partitions(self._transactional_id, self._producer_id,
                                                   self._producer_epoch, new)
        except Exception:               # noqa: BLE001 - each partition's own add says why
            return
        txn.partitions.update(new)

    def _append_partition(self, topic: str, partition: int, log, group: list[ProducerBatch],
                          appended: list) -> None:
        """Appends one partition's batches of a round (its partition lock held)."""
        pending = self._expire(topic, partition, group)
        while pending:
            run = next(_append_runs(pending))
            del pending[:len(run)]
            try:
                info = self._append_run(log, run)
            except Exception as exc:    # noqa: BLE001 - delivered through the futures
                if len(run) > 1 and not isinstance(exc, KafkaStorageError):
                    # One batch was refused: the log wrote nothing of the joined
                    # append. Each batch goes alone, so only the offending one fails.
                    pending[:0] = run[1:]
                    run = run[:1]
                    try:
                        appended.append((run, log, self._append_run(log, run)))
                        continue
                    except Exception as single:  # noqa: BLE001
                        exc = single
                if isinstance(exc, (MessageTooLargeError, RecordListTooLargeError)) and \
                        len(run) == 1:
                    # Kafka's producer splits a batch the broker finds too large;
                    # only a record too large on its own fails.
                    try:
                        split = self._append_split(log, run[0])
                    except Exception as split_error:  # noqa: BLE001
                        exc = split_error
                    else:
                        if split is not None:
                            appended.append((run, log, split))
                            if run[0].base_sequence >= 0:
                                self._shift_sequences(topic, partition, split.failed, pending)
                            continue
                for b in run:
                    complete_batch(b, -1, exception=exc)
                self._forget_sequences(topic, partition, run, pending)
                continue
            appended.append((run, log, info))

    def _flush_logs(self, appended: list) -> dict[int, BaseException | None] | None:
        """fsyncs each log of a round once when acks=all: the error (or None) of each
        by id(log); None for other acks."""
        if self._acks != "all":
            return None
        # Each log up to its last append here: a flush that ran between two of
        # them (another thread's) may cover the first and not the last.
        ends: dict[int, tuple[Any, int]] = {}
        for _, log, info in appended:
            if info.last_offset < 0:        # a split batch with nothing written
                continue
            ends[id(log)] = (log, max(info.last_offset + 1, ends.get(id(log), (log, 0))[1]))
        flushed: dict[int, BaseException | None] = {}
        for key, (log, end) in ends.items():
            try:
                log.flush(end)
                flushed[key] = None
            except Exception as exc:  # noqa: BLE001
                flushed[key] = exc
        return flushed

    def _complete_round(self, appended: list) -> None:
        """fsyncs each log once when acks=all, then completes the round's futures."""
        errors = self._flush_logs(appended)
        for group, log, info in appended:
            error = errors.get(id(log)) if errors else None
            if isinstance(info, _SplitAppend):
                complete_batch(group[0], -1, pieces=tuple(
                    (a, b, offset, append_time, exc if exc is not None else error)
                    for a, b, offset, append_time, exc in info.pieces))
                continue
            offset = info.first_offset
            for b in group:
                complete_batch(b, offset, info.log_append_time, error)
                offset += b.record_count


class _SplitAppend:
    """What the append of a split batch did: each piece's (start, end, first offset,
    log append time, exception), the last offset written (-1: none) and how many
    records failed."""
    __slots__ = ("pieces", "last_offset", "failed")

    def __init__(self) -> None:
        self.pieces: list[tuple] = []
        self.last_offset = -1
        self.failed = 0


def _split_runs(pieces: list[tuple[int, int, bytes]], limit: int, append_limit: int):
    """A split batch's pieces in appends: consecutive ones within `limit` joined into
    writes of at most `append_limit` bytes (segment.bytes bounds one append), one
    too large (a single record) alone, where it fails."""
    run: list[tuple[int, int, bytes]] = []
    size = 0
    for piece in pieces:
        too_large = len(piece[2]) > limit
        if run and (too_large or size + len(piece[2]) > append_limit):
            yield run
            run, size = [], 0
        if too_large:
            yield [piece]
            continue
        run.append(piece)
        size += len(piece[2])
    if run:
        yield run


def _append_runs(group: list[ProducerBatch]):
    """Consecutive batches of one partition, grouped into appends: small ones
    joined (one write for many), a big pre-encoded one on its own (no copy)."""
    run: list[ProducerBatch] = []
    size = 0
    for b in group:
        if run and size + b.size > _JOIN_LIMIT:
            yield run
            run, size = [], 0
        run.append(b)
        size += b.size
    if run:
        yield run
