"""``Producer.send_batch``: many records at once, planned and encoded in C.

The plan: one C pass reads each record's size and partition (Kafka's murmur2
of the key, or the sticky partition), groups the rows by partition and cuts
each partition's rows into chunks that fit max.request.size and the topic's
max.message.bytes and segment.bytes (``plan_rows``, ``plan_chunks``,
``batch_limit`` in _core/producer.pyx). Each chunk then goes one of two ways:
the direct path (the caller encodes and appends it itself when its partition
is quiet: ``ProducerBase._append_direct``), or the queue behind the
partition's pending batches (``_queue_chunk``), where the sender appends it
while the caller encodes the next. ``BatchResult`` says where the records
landed.

``BatchPlanner`` is a mixin of ``Producer`` (its lock, accumulator and
encoder are the producer's); the C half of the producer calls
``_encode_chunks`` on the producer itself. Locks: see client/producer.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures._base import FINISHED

import numpy as np

from pylog._core.producer import (
    OVERLAP_BYTES,
    RECORD_OVERHEAD_BYTES,
    SMALL_CALL_BYTES,
    ProducerBatch,
    TopicState,
    batch_limit,
    column_lengths,
    plan_chunks,
    plan_rows,
    take_rows,
)
from pylog.errors import MessageTooLargeError, RecordListTooLargeError, UnknownTopicOrPartitionError
from pylog.record import encode_batch, encode_groups, with_header_fields
from pylog.record.batch_layout import RECORD_BATCH_OVERHEAD

from .futures import RecordFuture
from .partitioner import partition_keys
from .sender import ENCODING, EncodeFailed

__all__ = ["BatchPlanner", "BatchResult"]

# What _core/producer.pyx counts: per-record framing and the batch header, in bytes.
RECORD_OVERHEAD = RECORD_OVERHEAD_BYTES
BATCH_OVERHEAD = RECORD_BATCH_OVERHEAD


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


class BatchPlanner:
    """``send_batch`` and its encoder (a mixin of Producer: see the module's docstring)."""

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
                            RECORD_OVERHEAD)
        if planned is not None:
            sizes, parts, call_bytes = planned
        else:
            sizes = _column_sizes(values) + RECORD_OVERHEAD
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
            max(limit - BATCH_OVERHEAD, 1))
        if too_large >= 0:
            raise self._too_large(state, null_partition, too_large,
                                  int(sizes[too_large]) + BATCH_OVERHEAD)
        work = [(p, order[start:end]) for p, start, end, _ in plan]
        result_future: Future = Future()
        batches: list[ProducerBatch] = []
        row_chunks: list[np.ndarray] = []
        total = 0
        # A call that fits one batch whole has one chunk per partition.
        fits = call_bytes + BATCH_OVERHEAD <= limit
        # Whether a chunk is worth queueing (see below): only big calls have big chunks.
        big = [False] * len(work) if call_bytes < SMALL_CALL_BYTES else \
            [chunk[3] >= OVERLAP_BYTES for chunk in plan]
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
            rows_bytes + BATCH_OVERHEAD
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
            batch.encoded = data if data is not None else ENCODING
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
                batch.encoded = EncodeFailed(exc)
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
