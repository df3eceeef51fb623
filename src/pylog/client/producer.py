"""Producer: Kafka's producer API over an embedded store.

``send`` adds a record to its partition's open batch in the accumulator and
returns a future; a background sender thread appends batches to the logs
when they fill up (``batch.size``) or have waited ``linger.ms``, and
completes the futures. With ``acks=all`` it hands each appended round to a
flusher thread instead, which fsyncs it (one flush per log for every round
waiting: group commit) and completes its futures while the sender appends
the next round; a round's bytes leave ``buffer.memory`` once written. ``send_batch`` takes whole columns
(lists or Arrow arrays), partitions and encodes them in C, and queues the
encoded batches behind the partition's pending records, so ordering per
partition always holds.

Thread-safe: any number of threads may send through one Producer. Locks
(what each protects, for the day pylog builds for free-threaded CPython):

- ``_lock`` (one per Producer, a ``FastLock``: threading.Lock's API, taken
  from C by ``send()`` without a Python call; with its conditions ``_wakeup``,
  ``_space``, ``_done``): the accumulator (open batches, sequence numbers, ``buffered``),
  the ready queue, the sender's in-flight counts, the flusher's queue and the
  flush/close bookkeeping. Held for queue operations only: ``send_batch`` encodes outside
  it (an idempotent batch is queued as a placeholder with its sequences first,
  and the sender waits for it).
- A partition lock per (topic, partition): held by whoever appends that
  partition's batches, the sender thread or a ``send_batch`` caller on the
  direct path (a quiet partition: nothing open, queued or in flight; the caller
  encodes and appends itself, so threads on different partitions append at
  once). Taken before ``_lock``, never under it.
- Each Log's own ``_lock`` serialises appends per partition; fsyncs run under
  none of these.
- Futures complete on the sender thread, the flusher thread with ``acks=all``
  (or the direct path's caller); their callbacks run there.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures._base import FINISHED
from typing import Any

import numpy as np

from pylog._core.producer import (
    RECORD_OVERHEAD_BYTES,
    Accumulator,
    FastLock,
    ProducerBase,
    ProducerBatch,
    TopicState,
    batch_limit,
    column_lengths,
    plan_chunks,
    plan_rows,
    take_rows,
)
from pylog.errors import (
    InvalidTxnStateError,
    KafkaStorageError,
    KafkaTimeoutError,
    MessageTooLargeError,
    RecordListTooLargeError,
    UnknownTopicOrPartitionError,
)
from pylog.record import encode_batch, encode_groups, mark_transactional, with_header_fields
from pylog.record.batch_layout import RECORD_BATCH_OVERHEAD

from .config import ClientConfig
from .futures import CompletedFuture, RecordFuture, RecordMetadata, complete_batch
from .partitioner import DefaultPartitioner, partition_keys

log = logging.getLogger(__name__)

__all__ = ["Producer", "RecordMetadata", "BatchResult"]

# What _core/producer.pyx counts: per-record framing and the batch header, in bytes.
_RECORD_OVERHEAD = RECORD_OVERHEAD_BYTES
_BATCH_OVERHEAD = RECORD_BATCH_OVERHEAD


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BatchResult:
    """Where the records of one ``send_batch`` call landed.

    ``ranges`` maps partition -> list of (base_offset, count) in send order;
    ``partitions`` and ``offsets`` are numpy arrays aligned with the input rows.
    """

    __slots__ = ("topic", "ranges", "_rows")

    def __init__(self, topic: str, ranges: dict[int, list[tuple[int, int]]],
                 rows: dict[int, np.ndarray]) -> None:
        self.topic = topic
        self.ranges = ranges
        self._rows = rows

    @property
    def count(self) -> int:
        return sum(n for chunks in self.ranges.values() for _, n in chunks)

    @property
    def partitions(self) -> np.ndarray:
        out = np.empty(self.count, dtype=np.int32)
        for p, rows in self._rows.items():
            out[rows] = p
        return out

    @property
    def offsets(self) -> np.ndarray:
        out = np.empty(self.count, dtype=np.int64)
        for p, rows in self._rows.items():
            offs = np.concatenate([np.arange(b, b + n, dtype=np.int64) for b, n in self.ranges[p]])
            out[rows] = offs
        return out

    def __repr__(self) -> str:
        return f"BatchResult({self.topic!r}, {self.count} records, partitions={sorted(self.ranges)})"


class Producer(ProducerBase):
    """``Producer(store, **config)`` with Kafka's producer config names.

    ``store`` is a :class:`pylog.LogManager` (or anything with
    ``log(topic, partition)`` and ``describe_topic(topic)``). Config keys:
    ``batch.size``, ``linger.ms``, ``compression.type``, ``acks``,
    ``max.request.size``, ``buffer.memory``, ``max.block.ms``,
    ``enable.idempotence``, ``partitioner`` (an object with
    ``partition(topic, key, value, num_partitions)`` or such a callable),
    also as Python keywords (``batch_size=...``).
    """

    def __init__(self, store: Any, config: dict | None = None, *,
                 partitioner: Any = None, **kwargs: Any) -> None:
        self.store = store
        self.config = ClientConfig("producer", config, **kwargs)
        c = self.config
        self._batch_size = c.batch_size
        self._linger = c.linger_ms / 1000
        self._compression = c.compression_type
        self._acks = c.acks
        self._max_request = c.max_request_size
        self._buffer_memory = c.buffer_memory
        self._max_block = c.max_block_ms / 1000
        self._delivery_timeout = c.delivery_timeout_ms / 1000
        self._ignore_keys = c.partitioner_ignore_keys
        if partitioner is not None and not hasattr(partitioner, "partition"):
            fn = partitioner
            partitioner = type("CallablePartitioner", (), {"partition": staticmethod(fn)})()
        if isinstance(partitioner, DefaultPartitioner):
            partitioner = None
        self._lock = FastLock()    # threading.Lock's API; the accumulator takes it from C
        self._wakeup = threading.Condition(self._lock)     # sender waits for work
        self._space = threading.Condition(self._lock)      # send() waits for buffer memory
        self._done = threading.Condition(self._lock)       # flush() waits for rounds
        self._ready: deque[ProducerBatch] = deque()        # sealed batches, in send order
        self._lingering: deque[ProducerBatch] = deque()    # open batches, oldest first
        self._acc = Accumulator(self._lock, self._wakeup, self._space, self._ready,
                                self._lingering, self._batch_size, self._buffer_memory,
                                self._max_request, self._ignore_keys, partitioner, RecordFuture,
                                self._wait_for_space, self._failed, store,
                                self._refresh_metadata, self._topic_state)
        self._topics: dict[str, TopicState] = self._acc.topics
        self._attach(self._acc, _callback_adapter, BatchResult, _EncodeFailed, CompletedFuture)
        self._producer_id = self._producer_epoch = -1
        # Transactions (Kafka's names): init_transactions() takes the producer id and
        # epoch from the store's transaction coordinator; each partition a transaction
        # writes to is added to it before its first append (_append).
        self._transactional_id = c.transactional_id or None
        self._txn: _Transaction | None = None
        self._txn_ready = False
        if self._transactional_id is not None:
            self._acc.idempotent = True       # ids and epoch come in init_transactions()
        elif c.enable_idempotence:
            # Every batch carries (producer id, epoch, sequence); the log writes a
            # retried batch once and answers with its original offsets.
            self._producer_id, self._producer_epoch = store.init_producer_id()
            self._acc.idempotent = True
        self._rng = random.Random()
        # Partition locks order the appends of one partition between the sender and
        # callers appending directly (send_batch's direct path); lock order: a
        # partition lock, then _lock.
        self._partition_locks: dict[str, list[FastLock]] = {}
        # The sender's current round by partition: taken off the ready queue, not yet
        # appended (a direct append waits behind them).
        self._round: dict[tuple[str, int], list[ProducerBatch]] = {}
        self._flushed_upto = 0     # every batch created before this seq is complete
        self._flush_wanted = 0     # a flush() waits for batches up to this seq
        self._closed = False
        self._error: BaseException | None = None
        # acks=all: the sender hands each appended round to the flusher thread,
        # which fsyncs and completes it while the sender appends the next one.
        # Entries are (appended, upto); a None entry tells the flusher to stop.
        self._unsynced: deque[tuple[list, int | None] | None] = deque()
        self._syncing = False      # the flusher holds entries taken off _unsynced
        self._handed_upto = 0      # the largest `upto` handed to the flusher
        self._synced = threading.Condition(self._lock)     # the flusher's queue moved
        self._sender = threading.Thread(target=self._run, name="pylog-producer-sender", daemon=True)
        self._flusher: threading.Thread | None = None
        if self._acks == "all":
            self._flusher = threading.Thread(target=self._run_flusher,
                                             name="pylog-producer-flusher", daemon=True)
            self._flusher.start()
        self._sender.start()

    # ================================================================ send
    # send() itself is ProducerBase.send (_core/producer.pyx): one C call per record.

    def _wait_for_space(self, size: int) -> None:
        """Blocks send() until buffer.memory has room (lock held), up to max.block.ms."""
        acc = self._acc
        deadline = time.monotonic() + self._max_block
        while acc.buffered + size > self._buffer_memory and acc.buffered > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"failed to allocate {size} bytes within max.block.ms "
                    f"({int(self._max_block * 1000)}): buffer.memory ({self._buffer_memory}) is "
                    f"full with {acc.buffered} bytes waiting to be sent")
            self._wakeup.notify()
            self._space.wait(remaining)

    def _failed(self, topic: str, partition: int | None, size: int) -> Future:
        """A future that failed at send(): a record too large, or a bad partition."""
        if size >= 0:
            exc: BaseException = MessageTooLargeError(
                f"the record is {size} bytes when serialized, larger than max.request.size "
                f"({self._max_request})")
        else:
            count = self._topics[topic].num_partitions
            exc = UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
        batch = ProducerBatch(topic, -1 if partition is None else partition)
        batch.add(None, None, -1)
        complete_batch(batch, -1, exception=exc)
        return RecordFuture(batch, 0)

    # ========================================================== send_batch

    def send_batch(self, topic: str, values, keys=None, timestamps=None, headers=None, *,
                   partition: int | None = None) -> Future:
        """Queues many records at once (the fast path): ``values``/``keys`` are lists
        of bytes or Arrow binary arrays, ``timestamps`` ints (ms) or a numpy array.
        Records are partitioned by key (Kafka's murmur2) or, without keys, go to
        one sticky partition; each partition's records are encoded in C into
        batches that fit max.request.size and the topic's max.message.bytes and
        segment.bytes (a record that fits none of them fails the call before
        anything is written). Returns a Future of a BatchResult.
        A value or key that is not bytes-like or None raises TypeError; a call of
        less than 128 KiB within max.request.size has then written nothing (a
        bigger one may have queued the partitions before that record's)."""
        if self.store.topic_epoch != self._acc.metadata_epoch:
            self._refresh_metadata()
        state = self._topics.get(topic) or self._topic_state(topic)
        if timestamps is None and headers is None and type(values) is list and \
                self._transactional_id is None and (
                partition is None or type(partition) is int and
                0 <= partition < state.num_partitions):
            # The common case, whole in C (ProducerBase._send_small); None: it
            # did nothing, and the call takes the general path below.
            done = self._send_small(state, values, keys, _now_ms(),
                                    -1 if partition is None else partition)
            if done is not None:
                return done
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if timestamps is None:
            timestamps = _now_ms()              # one int for all: the encoder takes it as is
        else:
            try:
                timestamps = np.asarray(timestamps, dtype=np.int64)
            except OverflowError:
                # The encoder's conversion names the first value no int64 holds.
                encode_batch([None] * len(timestamps), None, list(timestamps))
                raise
            if len(timestamps) != n:
                raise ValueError(f"{len(timestamps)} timestamps for {n} values")
        by_key = partition is None and keys is not None and not self._ignore_keys
        # Lists of bytes/None (the common case) are read once, in C, for each
        # record's size and partition; other columns take a pass for each.
        planned = plan_rows(values, keys, state.num_partitions if by_key else 0,
                            _RECORD_OVERHEAD)
        if planned is not None:
            sizes, parts, call_bytes = planned
        else:
            sizes = _column_sizes(values) + _RECORD_OVERHEAD
            if keys is not None:
                sizes += _column_sizes(keys)
            parts = partition_keys(keys, state.num_partitions) if by_key else None
            call_bytes = int(sizes.sum())
        if partition is not None and not 0 <= partition < state.num_partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{state.num_partitions - 1}, "
                f"not {partition}")
        # One C pass groups the rows by partition (null keys and unkeyed calls
        # go to the sticky partition) and cuts each partition's rows into chunks
        # that fit max.request.size and the topic's max.message.bytes and
        # segment.bytes (batch_limit).
        null_partition = partition if partition is not None else state.sticky
        limit = batch_limit(state, self.store, null_partition, self._max_request)
        order, plan, too_large = plan_chunks(
            parts if by_key else None, sizes, null_partition, state.num_partitions,
            max(limit - _BATCH_OVERHEAD, 1))
        if too_large >= 0:
            raise self._too_large(state, null_partition, too_large,
                                  int(sizes[too_large]) + _BATCH_OVERHEAD)
        work = [(p, order[start:end]) for p, start, end, _ in plan]
        result_future: Future = Future()
        batches: list[ProducerBatch] = []
        row_chunks: list[np.ndarray] = []
        total = 0
        # A call that fits one batch whole has one chunk per partition.
        fits = call_bytes + _BATCH_OVERHEAD <= limit
        # Whether a chunk is worth queueing (see below): only big calls have big chunks.
        big = [False] * len(work) if call_bytes < 2 * _OVERLAP_BYTES else \
            [chunk[3] >= _OVERLAP_BYTES for chunk in plan]
        try:
            # A call that fits one request with no big chunk (one chunk per
            # partition) is appended by this thread in one pass: its partitions'
            # locks and the producer's lock are taken once for all of them.
            # A transactional producer's batches all go through the sender (its
            # _append adds each partition to the transaction first).
            transactional = self._transactional_id is not None
            direct = self._append_direct(state, work, values, keys, timestamps, headers) \
                if fits and not any(big) and not transactional else None
            for i, (p, chunk) in enumerate(work):
                # A small chunk, or the last of the call, may go the direct path
                # (the caller appends it: no hand-off when it waits). A big chunk
                # followed by others queues instead, so the sender appends it
                # while this thread encodes the next: encoding and appending
                # overlap (chunks below OVERLAP_BYTES lose more to the hand-off
                # than they gain).
                if direct is not None:
                    done = direct[i]
                elif not transactional and (i == len(work) - 1 or not big[i]):
                    done = self._append_direct(state, [(p, chunk)], values, keys, timestamps,
                                               headers)[0]
                else:
                    done = None
                if done is None:        # its partition is busy, or the chunk is big
                    done = self._queue_chunk(state, p, chunk, plan[i][3], values, keys,
                                            timestamps, headers)
                batches.append(done[0])
                row_chunks.append(chunk)
                total += done[1]
        finally:
            # Whatever was queued is delivered; the result reports the first error.
            _gather(topic, batches, row_chunks, result_future)
        if keys is None and partition is None:
            state.produced(total)
        return result_future

    def _too_large(self, state: TopicState, partition: int, row: int, size: int) -> Exception:
        """send_batch's error for a record no batch can hold (nothing is written): the
        first of the limits batch_limit takes that it exceeds."""
        if size > self._max_request:
            return MessageTooLargeError(
                f"record {row} is {size} bytes when serialized, larger than max.request.size "
                f"({self._max_request})")
        config = self.store.log(state.name, partition).config
        if size > config.max_message_bytes:
            return MessageTooLargeError(
                f"record {row} is {size} bytes when serialized, larger than max.message.bytes "
                f"({config.max_message_bytes}) of topic {state.name!r}")
        return RecordListTooLargeError(
            f"record {row} is {size} bytes when serialized, larger than segment.bytes "
            f"({config.segment_bytes}) of topic {state.name!r}")

    def _partition_lock(self, topic: str, partition: int) -> FastLock:
        return self._topic_locks(topic, partition + 1)[partition]

    def _topic_locks(self, topic: str, count: int) -> list[FastLock]:
        """The partition locks of a topic, at least `count` of them (a list that is
        replaced, never changed, when the topic grows: its locks stay the same)."""
        locks = self._partition_locks.get(topic)
        if locks is None or len(locks) < count:
            with self._lock:
                locks = self._partition_locks.get(topic) or []
                if len(locks) < count:
                    locks = locks + [FastLock() for _ in range(count - len(locks))]
                    self._partition_locks[topic] = locks
        return locks

    def _queue_chunk(self, state: TopicState, p: int, rows: np.ndarray, rows_bytes: int, values,
                     keys, timestamps, headers) -> tuple[ProducerBatch, int]:
        """send_batch's queued path: the chunk is encoded by this thread (GIL
        released in C) outside the lock, so threads sending to different
        partitions encode at once, and the sender appends it while the next one
        is encoded. An idempotent batch's sequence numbers must follow the queue
        order: it is queued first, under the lock, as a placeholder the sender
        waits for, and encoded after. `rows_bytes` (the rows' framed sizes) is
        the placeholder's room in buffer.memory. Returns (batch, bytes)."""
        acc = self._acc
        data = None if acc.idempotent else \
            self._encode_chunks(values, keys, timestamps, headers, [rows], [-1])[0]
        need = len(data) if data is not None else \
            rows_bytes + _BATCH_OVERHEAD
        with self._lock:
            if acc.closing:
                raise RuntimeError("send_batch() on a closed Producer")
            # Wait first: the wait releases the lock, and nothing may
            # be sealed between the sequence reservation and the queue.
            if acc.buffered + need > self._buffer_memory:
                self._wait_for_space(need)
            open_batch = state.open[p]
            if open_batch is not None:
                acc.seal(state, open_batch)      # earlier records of p go first
            batch = ProducerBatch(state.name, p)
            batch.base_sequence = -1 if data is not None else \
                acc.reserve_sequence(state, p, len(rows))
            batch.encoded = data if data is not None else _ENCODING
            batch.count = len(rows)
            batch.size = need
            batch.seq = acc.seq
            batch.sealed = True
            acc.seq += 1
            acc.buffered += need
            self._ready.append(batch)
            self._wakeup.notify()
        if data is None:
            data = self._encode_placeholder(batch, need, values, keys, timestamps, headers, rows)
        return batch, len(data)

    def _give_back(self, topic: str, p: int, failed: ProducerBatch) -> None:
        """A direct batch failed unwritten (partition lock held): later batches of the
        partition move down past its sequences, also those the sender has already
        taken into its round (they wait for this partition lock, so none is written)."""
        with self._lock:
            later = list(self._round.get((topic, p), ()))
        self._forget_sequences(topic, p, [failed], later)

    def _encode_placeholder(self, batch: ProducerBatch, need: int, values, keys, timestamps,
                            headers, rows: np.ndarray) -> bytes:
        """Encodes a queued idempotent batch outside the lock, then hands it to the
        sender (which waits for it: it keeps the queue order). If encoding fails,
        the batch fails alone and its sequences are given back, as for an
        expired batch; the error is raised here too."""
        sequence = batch.base_sequence
        try:
            data = self._encode_chunks(values, keys, timestamps, headers, [rows], [sequence])[0]
        except BaseException as exc:
            with self._lock:
                batch.encoded = _EncodeFailed(exc)
                self._wakeup.notify()
            raise
        with self._lock:
            if batch.base_sequence != sequence:     # moved by _forget_sequences meanwhile
                data = with_header_fields(data, base_sequence=batch.base_sequence)
            batch.encoded = data
            batch.size = len(data)
            self._acc.buffered += len(data) - need
            self._wakeup.notify()
        return data

    def _encode(self, values, keys, timestamps, headers, base_sequence: int = -1) -> bytes:
        # Without idempotence the producer id and epoch are -1: Kafka's "none".
        return encode_batch(values, keys, timestamps, headers, compression=self._compression,
                            producer_id=self._producer_id, producer_epoch=self._producer_epoch,
                            base_sequence=base_sequence)

    def _encode_chunks(self, values, keys, timestamps, headers, chunks: list[np.ndarray],
                       sequences: list[int]) -> list[bytes]:
        """send_batch's encoder: one batch per chunk of rows (with its base sequence,
        -1 for none). Lists of records with one timestamp and no headers (the common
        case) are encoded in one C call for all the chunks (encode_groups); other
        columns chunk by chunk."""
        if type(values) is list and (keys is None or type(keys) is list) and \
                type(timestamps) is int and headers is None:
            return encode_groups(values, keys, timestamps, chunks, compression=self._compression,
                                 producer_id=self._producer_id,
                                 producer_epoch=self._producer_epoch, base_sequences=sequences)
        return [self._encode_rows(values, keys, timestamps, headers, rows, sequence)
                for rows, sequence in zip(chunks, sequences)]

    def _encode_rows(self, values, keys, timestamps, headers, rows: np.ndarray,
                     base_sequence: int = -1) -> bytes:
        first, last = int(rows[0]), int(rows[-1])
        one_time = isinstance(timestamps, int)
        if first == 0 and last + 1 == len(values) == len(rows):     # the whole call
            v, k, t, h = values, keys, timestamps, headers
        elif last - first + 1 == len(rows):        # contiguous rows: slices
            v = _slice(values, rows)
            k = None if keys is None else _slice(keys, rows)
            t = timestamps if one_time else timestamps[first:last + 1]
            h = None if headers is None else headers[first:last + 1]
        else:
            v = _take(values, rows)
            k = None if keys is None else _take(keys, rows)
            t = timestamps if one_time else timestamps[rows]
            h = None if headers is None else [headers[i] for i in rows]
        return self._encode(v, k, t, h, base_sequence)

    # ======================================================== flush, close

    def flush(self, timeout: float | None = None) -> None:
        """Sends everything queued so far and waits until it completed.

        Not from a send callback: callbacks run on the producer's own threads,
        which flush() would wait for (Kafka's producer refuses it the same way)."""
        if self._on_own_thread():
            raise RuntimeError("Producer.flush() invocation inside a callback is not permitted "
                               "because it may lead to deadlock: the callback runs on a "
                               "producer thread that flush() waits for")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._acc.seq
            self._flush_wanted = max(self._flush_wanted, target)
            self._wakeup.notify()
            while self._flushed_upto < target:
                if self._error is not None:
                    raise RuntimeError("the producer's sender thread failed") from self._error
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise KafkaTimeoutError(f"flush() did not complete within {timeout} s")
                self._done.wait(remaining)

    def close(self, timeout: float | None = None) -> None:
        """Delivers everything pending, then stops the sender thread.

        From a send callback (the sender or flusher thread) it cannot wait for
        that thread: as Kafka's producer, it then behaves as
        ``close(timeout=0)``: no new sends are taken, and the sender delivers
        what is pending and stops."""
        with self._lock:
            if self._closed:
                return
            self._acc.closing = True
            self._wakeup.notify()
        if self._on_own_thread():
            if timeout:
                log.warning("Producer.close() called from a send callback: closing without "
                            "waiting (timeout 0) instead of %s s", timeout)
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        self._sender.join(timeout)
        if self._flusher is not None:
            self._flusher.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        self._closed = not self._sender.is_alive() and \
            (self._flusher is None or not self._flusher.is_alive())

    def _on_own_thread(self) -> bool:
        """Whether the caller is the sender or the flusher (a send callback)."""
        me = threading.current_thread()
        return me is self._sender or me is self._flusher

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of `topic` (its metadata is cached on first use)."""
        if self.store.topic_epoch != self._acc.metadata_epoch:
            self._refresh_metadata()
        state = self._topics.get(topic) or self._topic_state(topic)
        return list(range(state.num_partitions))

    # ============================================================ metadata

    def _refresh_metadata(self) -> None:
        """The store's topics changed since the partition counts were cached (Kafka's
        producer refreshes its metadata on UNKNOWN_TOPIC_OR_PARTITION and after
        metadata.max.age.ms; the store tells at once, through its topic epoch).
        A topic deleted or re-created with another partition count gets a fresh
        state: its open batches are sealed and sent (they fail if their partition
        is gone), keys hash over the new count, and the sequences of partitions
        that still exist continue."""
        epoch = self.store.topic_epoch
        with self._lock:
            for topic, state in list(self._topics.items()):
                count = self.store.partition_count(topic)
                if count == state.num_partitions:
                    continue
                for batch in state.open:
                    if batch is not None:
                        self._acc.seal(state, batch)
                if not count:
                    del self._topics[topic]
                    continue
                fresh = TopicState(topic, count, self._batch_size, self._rng)
                keep = min(count, state.num_partitions)
                fresh.sequences[:keep] = state.sequences[:keep]
                self._topics[topic] = fresh
            self._acc.metadata_epoch = epoch

    def _topic_state(self, topic: str) -> TopicState:
        try:
            count = len(self.store.describe_topic(topic).partitions)
        except UnknownTopicOrPartitionError:
            auto = getattr(self.store, "auto_create_topic", None)
            if auto is None:
                raise
            count = len(auto(topic).partitions)
        with self._lock:
            state = self._topics.get(topic)
            if state is None:
                state = self._topics[topic] = TopicState(topic, count, self._batch_size, self._rng)
        return state

    # ============================================================== sender

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
                if batch.encoded is _ENCODING:
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
        while any(isinstance(b.encoded, _EncodeFailed) for b in group):
            i = next(i for i, b in enumerate(group) if isinstance(b.encoded, _EncodeFailed))
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

    # ========================================================== transactions

    def _check_transactional(self, what: str) -> None:
        if self._transactional_id is None:
            raise InvalidTxnStateError(f"{what}: this producer has no transactional.id")
        if not self._txn_ready:
            raise InvalidTxnStateError(f"{what}: call init_transactions() first")

    def init_transactions(self, timeout: float | None = None) -> None:
        """Registers the transactional id with the store's transaction coordinator
        (Kafka's initTransactions): a producer id and a new epoch, which fences any
        earlier producer of the id and aborts a transaction it left open. Before any
        send."""
        if self._transactional_id is None:
            raise InvalidTxnStateError("init_transactions(): this producer has no transactional.id")
        if self._acc.seq:
            raise InvalidTxnStateError("init_transactions() must come before any send()")
        self._producer_id, self._producer_epoch = self.store.transactions.init_producer_id(
            self._transactional_id, self.config.transaction_timeout_ms,
            self._producer_id, self._producer_epoch)
        self._txn_ready = True

    def begin_transaction(self) -> None:
        """Starts a transaction: the records sent until commit or abort belong to it."""
        self._check_transactional("begin_transaction()")
        if self._txn is not None:
            raise InvalidTxnStateError("begin_transaction(): a transaction is already open")
        self._txn = _Transaction()

    def send_offsets_to_transaction(self, offsets, group_id) -> None:
        """Commits consumer offsets as part of the transaction (Kafka's
        sendOffsetsToTransaction): ``{(topic, partition): next offset}`` for the group
        `group_id` (a str, or a Consumer's ``group_metadata()``); the group sees them
        only if the transaction commits."""
        from pylog.coordinator import OffsetAndMetadata
        self._check_transactional("send_offsets_to_transaction()")
        if self._txn is None:
            raise InvalidTxnStateError("send_offsets_to_transaction(): no transaction is open")
        group = getattr(group_id, "group_id", group_id)
        coordinator = self.store.transactions
        coordinator.add_offsets(self._transactional_id, self._producer_id, self._producer_epoch, group)
        coordinator.txn_offset_commit(
            self._transactional_id, group, self._producer_id, self._producer_epoch,
            {(t, p): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
             for (t, p), o in offsets.items()})

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Sends what is pending, then commits: the records become visible to
        read_committed consumers, the offsets to the group. If a send of the
        transaction failed, raises it (the transaction must then be aborted)."""
        self._check_transactional("commit_transaction()")
        txn = self._txn
        if txn is None:
            raise InvalidTxnStateError("commit_transaction(): no transaction is open")
        self.flush(timeout)
        if txn.error is not None:
            raise InvalidTxnStateError(f"commit_transaction(): a send of the transaction failed "
                                       f"({txn.error}); abort_transaction() it") from txn.error
        self.store.transactions.end_txn(self._transactional_id, self._producer_id,
                                        self._producer_epoch, True)
        self._txn = None

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Aborts the open transaction: what it wrote stays in the log, marked aborted,
        never seen by read_committed consumers."""
        self._check_transactional("abort_transaction()")
        if self._txn is None:
            raise InvalidTxnStateError("abort_transaction(): no transaction is open")
        try:
            self.flush(timeout)
        except KafkaTimeoutError:
            raise
        except Exception:           # noqa: BLE001 - a failed send is what an abort is for
            pass
        if self._txn.partitions:
            self.store.transactions.end_txn(self._transactional_id, self._producer_id,
                                            self._producer_epoch, False)
        self._txn = None

    def _sequence(self, batch: ProducerBatch, index: int, skipped: int = 0) -> int:
        """The sequence of record `index` of an idempotent batch once `skipped` of its
        records before it failed; -1 without idempotence."""
        if batch.base_sequence < 0:
            return -1
        return (batch.base_sequence + index - skipped) % _SEQUENCE_SPACE

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
                state.sequences[partition] = (state.sequences[partition] - shift) % _SEQUENCE_SPACE
            queued = [b for b in self._ready if b.topic == topic and b.partition == partition]
            for b in later + queued:
                if b.base_sequence < 0:
                    continue
                b.base_sequence = (b.base_sequence - shift) % _SEQUENCE_SPACE
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


class _Transaction:
    """The open transaction of a producer: the partitions added to it, the first error
    of one of its appends."""

    __slots__ = ("partitions", "error")

    def __init__(self) -> None:
        self.partitions: set[tuple[str, int]] = set()
        self.error: BaseException | None = None


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


class _EncodeFailed:
    """In place of a queued batch's bytes when encoding it raised."""
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_ENCODING = object()       # in place of a queued batch's bytes while it is encoded

_JOIN_LIMIT = 1 << 20     # small batches of one partition are joined into writes of about this
_OVERLAP_BYTES = 64 << 10  # send_batch queues chunks from this size on (see send_batch)
_SEQUENCE_SPACE = 1 << 31  # idempotent sequence numbers wrap at int32 max, as Kafka's


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


def _callback_adapter(callback):
    def done(future: RecordFuture) -> None:
        exc = future.exception()
        callback(None if exc is not None else future.result(), exc)
    return done


def _column_sizes(column) -> np.ndarray:
    """Byte length of each entry of a list or Arrow binary column (0 for null)."""
    if type(column) is list:
        return column_lengths(column)
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        return pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return column_lengths(column)


def _take(column, rows: np.ndarray):
    """column[rows] for a list or Arrow column; `rows` are int64 (send_batch's
    np.arange, group_by_partition's output and slices of them). A list gives a
    tuple, which the encoder uses as it is."""
    if type(column) is list:
        return take_rows(column, rows)
    import pyarrow as pa
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        return column.take(pa.array(rows))
    return take_rows(column if isinstance(column, list) else list(column),
                     np.ascontiguousarray(rows, dtype=np.int64))


def _slice(column, rows: np.ndarray):
    """column[rows] for contiguous `rows`: an Arrow column's zero-copy slice, a
    list's tuple in one copy (a list slice would be copied again by the encoder)."""
    if type(column) is list:
        return take_rows(column, rows)
    return column[int(rows[0]):int(rows[-1]) + 1]


def _gather(topic: str, batches: list[ProducerBatch], rows: list[np.ndarray], out: Future) -> None:
    """Completes `out` with a BatchResult once every batch completed (at once when the
    direct path completed them all in the caller)."""
    if all(b.state == FINISHED for b in batches):
        _finish_gather(topic, batches, rows, out)
        return
    remaining = [len(batches)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        _finish_gather(topic, batches, rows, out)

    for b in batches:
        RecordFuture(b, 0).add_done_callback(one_done)


def _finish_gather(topic: str, batches: list[ProducerBatch], rows: list[np.ndarray],
                   out: Future) -> None:
    errors = [b.exception for b in batches if b.exception is not None]
    if errors:
        out.set_exception(errors[0])
        return
    ranges: dict[int, list[tuple[int, int]]] = {}
    row_map: dict[int, list[np.ndarray]] = {}
    for b, r in zip(batches, rows):
        ranges.setdefault(b.partition, []).append((b.base_offset, b.count))
        row_map.setdefault(b.partition, []).append(r)
    out.set_result(BatchResult(topic, ranges, {p: rs[0] if len(rs) == 1 else np.concatenate(rs)
                                               for p, rs in row_map.items()}))
