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

Where the parts live: this module is the API (Kafka's KafkaProducer names:
send, flush, close, partitions_for, the transaction calls) and the state the
parts share; client/batch_planner.py plans and encodes ``send_batch``;
client/sender.py is the sender and flusher threads (appends, expiry, split,
sequence repair); _core/producer.pyx is the C half (``send``, the accumulator,
partitioning, the direct path).

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
from typing import Any

from pylog._core.producer import (
    Accumulator,
    FastLock,
    ProducerBase,
    ProducerBatch,
    TopicState,
)
from pylog.errors import (
    InvalidTxnStateError,
    KafkaTimeoutError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
)
from pylog.record import encode_batch

from .batch_planner import BatchPlanner, BatchResult
from .config import ClientConfig
from .futures import CompletedFuture, RecordFuture, RecordMetadata, complete_batch
from .partitioner import DefaultPartitioner
from .sender import EncodeFailed, Sender

log = logging.getLogger(__name__)

__all__ = ["Producer", "RecordMetadata", "BatchResult"]


class Producer(BatchPlanner, Sender, ProducerBase):
    """``Producer(store, **config)`` with Kafka's producer config names.

    ``store`` is a :class:`pylog.Store` (or anything with
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
        self._attach(self._acc, _callback_adapter, BatchResult, EncodeFailed, CompletedFuture)
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

    def _encode(self, values, keys, timestamps, headers, base_sequence: int = -1) -> bytes:
        # Without idempotence the producer id and epoch are -1: Kafka's "none".
        return encode_batch(values, keys, timestamps, headers, compression=self._compression,
                            producer_id=self._producer_id, producer_epoch=self._producer_epoch,
                            base_sequence=base_sequence)

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


class _Transaction:
    """The open transaction of a producer: the partitions added to it, the first error
    of one of its appends."""

    __slots__ = ("partitions", "error")

    def __init__(self) -> None:
        self.partitions: set[tuple[str, int]] = set()
        self.error: BaseException | None = None


def _callback_adapter(callback):
    def done(future: RecordFuture) -> None:
        exc = future.exception()
        callback(None if exc is not None else future.result(), exc)
    return done
