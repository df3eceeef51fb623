# cython: language_level=3, boundscheck=False, wraparound=False
"""Producer hot paths: Kafka's murmur2 partitioning and the accumulator.

``murmur2`` / ``key_partition`` / ``partition_keys`` reproduce the Java
client's default partitioner (murmur2.h), one key or a whole column at once.
``Accumulator.append`` is the per-record step of ``Producer.send``: it adds a
record to its partition's open batch and creates the record's future, with no
Python-level work per record beyond the call itself.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append, PyList_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t

import numpy as np

cdef extern from "murmur2.h" nogil:
    int32_t pylog_murmur2(const void *data, size_t length)
    int32_t pylog_key_partition(const void *key, size_t length, int32_t num_partitions)


def murmur2(data):
    """Kafka's murmur2 hash of a bytes-like object, as a signed 32-bit int
    (org.apache.kafka.common.utils.Utils.murmur2)."""
    cdef Py_buffer view
    cdef int32_t h
    if PyBytes_CheckExact(data):
        return pylog_murmur2(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        h = pylog_murmur2(view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return h


cpdef int32_t key_partition(object key, int32_t num_partitions) except -1:
    """The partition Kafka's default partitioner picks for a non-null key."""
    cdef Py_buffer view
    cdef int32_t p
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    if PyBytes_CheckExact(key):
        return pylog_key_partition(PyBytes_AS_STRING(key), <size_t>PyBytes_GET_SIZE(key), num_partitions)
    if isinstance(key, str):
        raise TypeError("a key is bytes (encode the string first)")
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        p = pylog_key_partition(view.buf, <size_t>view.len, num_partitions)
    finally:
        PyBuffer_Release(&view)
    return p


def partition_keys(keys, int32_t num_partitions):
    """Partitions of a column of keys: a list/tuple of bytes-like or None, or a
    pyarrow binary/string array (chunked too). Returns a numpy int32 array;
    -1 marks a null key (the caller's null-key policy decides those)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    if isinstance(keys, (list, tuple)):
        return _partition_sequence(keys, num_partitions)
    import pyarrow as pa
    if isinstance(keys, pa.ChunkedArray):
        if keys.num_chunks == 0:
            return np.empty(0, dtype=np.int32)
        return np.concatenate([partition_keys(c, num_partitions) for c in keys.chunks])
    if isinstance(keys, pa.Array):
        return _partition_arrow(keys, num_partitions)
    return _partition_sequence(list(keys), num_partitions)


cdef object _partition_sequence(object keys, int32_t n):
    cdef Py_ssize_t i, count = len(keys)
    out = np.empty(count, dtype=np.int32)
    cdef int32_t[::1] o = out
    for i in range(count):
        k = keys[i]
        o[i] = -1 if k is None else key_partition(k, n)
    return out


cdef object _partition_arrow(object arr, int32_t n):
    import pyarrow as pa
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        wide = False
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        wide = True
    else:
        raise TypeError(f"keys must be a binary or string Arrow array, not {t}")
    cdef Py_ssize_t i, count = len(arr), start = arr.offset
    out = np.empty(count, dtype=np.int32)
    cdef int32_t[::1] o = out
    bufs = arr.buffers()
    cdef const uint8_t[::1] validity = None
    if bufs[0] is not None and arr.null_count:
        validity = np.frombuffer(bufs[0], dtype=np.uint8)
    cdef const uint8_t[::1] data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None \
        else np.zeros(1, dtype=np.uint8)
    cdef const int32_t[::1] off32
    cdef const int64_t[::1] off64
    cdef const uint8_t *base = &data[0] if data.shape[0] else NULL
    cdef int64_t a, b
    if wide:
        off64 = np.frombuffer(bufs[1], dtype=np.int64)
    else:
        off32 = np.frombuffer(bufs[1], dtype=np.int32)
    with nogil:
        for i in range(count):
            if validity is not None and not (validity[(start + i) >> 3] >> ((start + i) & 7)) & 1:
                o[i] = -1
                continue
            if wide:
                a = off64[start + i]
                b = off64[start + i + 1]
            else:
                a = off32[start + i]
                b = off32[start + i + 1]
            o[i] = pylog_key_partition(base + a, <size_t>(b - a), n)
    return out


# ---------------------------------------------------------------- accumulator

from cpython.list cimport PyList_New
from cpython.ref cimport Py_INCREF
from cpython.list cimport PyList_SET_ITEM
from libc.time cimport timespec

cdef extern from "<time.h>" nogil:
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_REALTIME
    int CLOCK_MONOTONIC

# Per-record bytes counted against batch.size and buffer.memory: Kafka's record
# framing is at most ~21 bytes (attributes, varint deltas and lengths).
DEF RECORD_OVERHEAD = 21
DEF BATCH_OVERHEAD = 61

cdef inline int64_t _wall_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000

cdef inline double _monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


@cython.final
cdef class ProducerBatch:
    """Records bound for one partition, accumulated until the sender appends them.

    ``values``/``keys``/``timestamps``/``headers`` are parallel lists (headers
    stays None until a record has some). A batch built by ``send_batch`` is
    pre-encoded instead (``encoded``, ``count``). After completion the batch
    holds the assigned base offset, or the exception, which its futures read
    (pylog/futures.py).
    """

    cdef public str topic
    cdef public int32_t partition
    cdef public list values, keys, timestamps
    cdef public object headers
    cdef public int64_t size
    cdef public double created
    cdef public int64_t seq              # creation order within its producer
    cdef public bint sealed              # no more records join it
    cdef public int32_t base_sequence    # idempotence: assigned when sealed, else -1
    cdef public object encoded
    cdef public int64_t count
    cdef public str state
    cdef public int64_t base_offset
    cdef public int64_t log_append_time
    cdef public object exception
    cdef public list watched             # futures to notify one by one; None once complete
    cdef object __weakref__

    def __init__(self, str topic, int32_t partition, double created=-1.0):
        self.topic = topic
        self.partition = partition
        self.values = []
        self.keys = []
        self.timestamps = []
        self.headers = None
        self.created = _monotonic() if created < 0 else created
        self.state = u"PENDING"
        self.base_offset = -1
        self.log_append_time = -1
        self.base_sequence = -1
        self.watched = []

    @property
    def record_count(self):
        return self.count if self.encoded is not None else len(self.values)


@cython.final
cdef class TopicState:
    """Partition count, open batches and the sticky partition of one topic."""

    cdef public str name
    cdef public int32_t num_partitions
    cdef public list open                # ProducerBatch or None per partition
    cdef public int32_t sticky           # partition for null-key records (KIP-480/794)
    cdef public list sequences           # idempotence: next sequence per partition
    cdef int64_t sticky_bytes
    cdef int64_t batch_size
    cdef object rng

    def __init__(self, str name, int32_t num_partitions, int64_t batch_size, rng):
        self.name = name
        self.num_partitions = num_partitions
        self.open = [None] * num_partitions
        self.sequences = [0] * num_partitions
        self.batch_size = max(batch_size, 1)
        self.rng = rng
        self.sticky = rng.randrange(num_partitions)

    cpdef produced(self, int64_t nbytes):
        """Counts null-key bytes sent to the sticky partition; after batch.size of
        them, switches to another partition chosen at random (KIP-794)."""
        self.sticky_bytes += nbytes
        if self.sticky_bytes >= self.batch_size:
            self.sticky_bytes = 0
            if self.num_partitions > 1:
                nxt = self.rng.randrange(self.num_partitions - 1)
                self.sticky = nxt if nxt < self.sticky else nxt + 1


@cython.final
cdef class Accumulator:
    """The per-record half of Producer.send: partition, batch, future.

    Shared state (open batches, the ready and lingering queues, buffered
    bytes, the creation sequence) is guarded by ``lock``, the same lock the
    Producer's conditions use; ``append`` holds it only around the list
    appends, never while calling user code.
    """

    cdef public object lock, wakeup, space
    cdef public dict topics
    cdef public object ready, lingering
    cdef public int64_t buffered, buffer_memory, batch_size, max_request, seq
    cdef public bint closing, ignore_keys
    cdef public bint idempotent          # stamp sequences when batches are sealed
    cdef public object partitioner       # None: Kafka's default rule
    cdef object future_cls, wait_for_space, fail

    def __init__(self, lock, wakeup, space, ready, lingering, int64_t batch_size,
                 int64_t buffer_memory, int64_t max_request, bint ignore_keys, partitioner,
                 future_cls, wait_for_space, fail):
        self.lock = lock
        self.wakeup = wakeup
        self.space = space
        self.topics = {}
        self.ready = ready
        self.lingering = lingering
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.max_request = max_request
        self.ignore_keys = ignore_keys
        self.partitioner = partitioner
        self.future_cls = future_cls
        self.wait_for_space = wait_for_space
        self.fail = fail

    cdef ProducerBatch open_batch(self, TopicState state, int32_t partition):
        cdef ProducerBatch batch = ProducerBatch(state.name, partition)
        batch.seq = self.seq
        self.seq += 1
        state.open[partition] = batch
        self.lingering.append(batch)
        if len(self.lingering) == 1:
            self.wakeup.notify()         # the sender starts its linger timer
        return batch

    cpdef int32_t reserve_sequence(self, TopicState state, int32_t partition, int64_t records):
        """The next `records` sequence numbers of a partition (lock held); they wrap
        at int32 max as Kafka's do."""
        cdef int64_t first = state.sequences[partition]
        state.sequences[partition] = (first + records) % 2147483648
        return <int32_t>first

    cpdef seal(self, TopicState state, ProducerBatch batch):
        """Moves a batch to the ready queue (lock held). Sequences are assigned
        here, in queue order, which is the order the sender appends in."""
        if state.open[batch.partition] is batch:
            state.open[batch.partition] = None
        if self.idempotent and batch.encoded is None:
            batch.base_sequence = self.reserve_sequence(state, batch.partition, len(batch.values))
        batch.sealed = True
        self.ready.append(batch)
        self.wakeup.notify()

    def append(self, TopicState state, value, key, headers, partition, timestamp):
        """Adds one record; returns its RecordFuture (or a failed one)."""
        cdef int64_t size = RECORD_OVERHEAD
        cdef int32_t p
        cdef int64_t ts
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            for hk, hv in headers:
                size += len(hk) + (len(hv) if hv is not None else 0) + 4
        if size + BATCH_OVERHEAD > self.max_request:
            return self.fail(state.name, partition, size + BATCH_OVERHEAD)
        if partition is None:
            p = -1
            if self.partitioner is not None:
                chosen = self.partitioner.partition(state.name, key, value, state.num_partitions)
                if chosen is not None:
                    p = chosen
                    if not 0 <= p < state.num_partitions:
                        raise ValueError(f"partitioner returned {p} for topic {state.name!r} with "
                                         f"{state.num_partitions} partitions")
            if p < 0:
                if key is not None and not self.ignore_keys:
                    p = key_partition(key, state.num_partitions)
                else:
                    p = state.sticky
                    state.produced(size)
        else:
            p = partition
            if not 0 <= p < state.num_partitions:
                return self.fail(state.name, partition, -1)
        ts = _wall_ms() if timestamp is None else timestamp
        cdef ProducerBatch batch
        self.lock.acquire()
        try:
            if self.closing:
                raise RuntimeError("send() on a closed Producer")
            if self.buffered + size > self.buffer_memory:
                self.wait_for_space(size)
            batch = state.open[p]
            if batch is None:
                batch = self.open_batch(state, p)
            future = self.future_cls(batch, len(batch.values))
            batch.values.append(value)
            batch.keys.append(key)
            batch.timestamps.append(ts)
            if headers is not None or batch.headers is not None:
                if batch.headers is None:
                    batch.headers = [None] * (len(batch.values) - 1)
                batch.headers.append(headers)
            batch.size += size
            self.buffered += size
            if batch.size >= self.batch_size:
                self.seal(state, batch)
        finally:
            self.lock.release()
        return future


def take_list(list column, const int64_t[::1] rows):
    """column[rows] as a new list (the records of one partition, in order)."""
    cdef Py_ssize_t i, n = rows.shape[0], size = len(column)
    cdef list out = PyList_New(n)
    for i in range(n):
        if rows[i] < 0 or rows[i] >= size:
            raise IndexError(rows[i])
        item = column[rows[i]]
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out


def column_lengths(column):
    """Byte length of each entry of a list of bytes-like/None (0 for None), as int64."""
    cdef Py_ssize_t i, n = len(column)
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    for i in range(n):
        item = column[i]
        if PyBytes_CheckExact(item):
            o[i] = PyBytes_GET_SIZE(item)
        elif item is None:
            o[i] = 0
        else:
            o[i] = len(item)
    return out
