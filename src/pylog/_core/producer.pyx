# cython: language_level=3, boundscheck=False, wraparound=False
"""Producer hot paths: Kafka's murmur2 partitioning and the accumulator.

``murmur2`` / ``key_partition`` / ``partition_keys`` reproduce the Java
client's default partitioner (murmur2.h), one key or a whole column at once.
``Accumulator.append`` is the per-record step of ``Producer.send``: it adds a
record to its partition's open batch and creates the record's future, with no
Python-level work per record beyond the call itself. ``ProducerBase`` holds
send_batch's direct path (the caller appends its own batches) and its common
case in one call.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t
from libc.string cimport memcpy, memset

from concurrent.futures import Future as _Future

from pylog._core.codec import _encode_sealed, encode_batch as _encode_batch
from pylog._core.storage import LogState as _LogState

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


cdef void _group_rows(const int32_t *parts, Py_ssize_t n, int32_t null_partition,
                      int32_t num_partitions, int64_t *order, int64_t *bounds) noexcept nogil:
    """plan_chunks' stable counting sort of rows by partition into order[n] and
    bounds[num_partitions + 1] (rows of partition p: order[bounds[p]:bounds[p + 1]];
    a partition outside 0..num_partitions - 1, -1 for a null key, is null_partition)."""
    cdef Py_ssize_t i
    cdef int32_t p
    memset(bounds, 0, <size_t>(num_partitions + 1) * sizeof(int64_t))
    for i in range(n):
        p = parts[i]
        if p < 0 or p >= num_partitions:
            p = null_partition
        bounds[p + 1] += 1
    for p in range(num_partitions):
        bounds[p + 1] += bounds[p]
    for i in range(n):                  # place rows, reusing bounds[p] as the next slot of p
        p = parts[i]
        if p < 0 or p >= num_partitions:
            p = null_partition
        order[bounds[p]] = i
        bounds[p] += 1
    for p in range(num_partitions, 0, -1):
        bounds[p] = bounds[p - 1]
    bounds[0] = 0


cdef Py_ssize_t _cut_chunks(const int64_t *order, const int64_t *sizes, const int64_t *bounds,
                            int32_t num_partitions, int64_t limit, int64_t *cuts,
                            int64_t *too_large) noexcept nogil:
    """plan_chunks' cut: each partition's rows order[bounds[p]:bounds[p + 1]] in
    runs whose sizes sum to at most `limit` (greedy, as many rows as fit).
    Writes (partition, start, end, bytes) per chunk into `cuts` (room: see
    plan_chunks) and returns the chunk count, or -1 with *too_large the first
    row that does not fit alone."""
    cdef Py_ssize_t k = 0
    cdef int64_t i, start, end, acc, size
    cdef int32_t p
    for p in range(num_partitions):
        start, end = bounds[p], bounds[p + 1]
        if start == end:
            continue
        acc = 0
        for i in range(start, end):
            size = sizes[order[i]]
            if size > limit:
                too_large[0] = order[i]
                return -1
            if acc + size > limit:      # the chunk so far is full: cut before row i
                cuts[4 * k], cuts[4 * k + 1], cuts[4 * k + 2], cuts[4 * k + 3] = p, start, i, acc
                k += 1
                start, acc = i, 0
            acc += size
        cuts[4 * k], cuts[4 * k + 1], cuts[4 * k + 2], cuts[4 * k + 3] = p, start, end, acc
        k += 1
    return k


def plan_chunks(parts, const int64_t[::1] sizes, int32_t null_partition, int32_t num_partitions,
                int64_t limit):
    """send_batch's plan of a call in one C pass: its rows grouped by partition
    (stable; ``parts`` None puts every row in `null_partition`, as -1 does for
    one row) and each partition's rows cut into chunks whose record sizes
    (each >= 0) sum to at most `limit`. Returns ``(order, chunks, too_large)``:
    chunk ``(p, start, end, bytes)`` holds the rows ``order[start:end]`` of
    partition p, in partition order; ``too_large`` is the first row larger than
    `limit` alone (-1 for none), and then `chunks` is empty."""
    cdef Py_ssize_t n = sizes.shape[0], k = 0, c, room
    cdef const int32_t[::1] pv
    if not 0 <= null_partition < num_partitions:
        raise ValueError(f"null_partition {null_partition} is not in 0..{num_partitions - 1}")
    if limit < 1:
        raise ValueError(f"limit {limit} is not positive")
    if parts is not None:
        pv = parts
        if pv.shape[0] != n:
            raise ValueError(f"{pv.shape[0]} partitions for {n} sizes")
    order = np.empty(n, dtype=np.int64)
    bounds = np.zeros(num_partitions + 1, dtype=np.int64)
    cdef int64_t[::1] o = order
    cdef int64_t[::1] b = bounds
    cdef int64_t too_large = -1, total = 0, negative = -1, i
    cdef bint grouped = parts is not None
    with nogil:
        for i in range(n):
            if sizes[i] < 0:
                negative = i
                break
            total += sizes[i]
    if negative >= 0:
        raise ValueError(f"record size {sizes[negative]} at row {negative} is negative")
    if n == 0:
        return order, [], -1
    # Greedy cuts: two neighbouring chunks of a partition hold more than `limit`
    # together, so a partition of B bytes has at most 2 * (B // limit) + 1 chunks.
    room = min(n, 2 * (total // limit) + num_partitions)
    cdef int64_t *cuts = <int64_t *>PyMem_Malloc(<size_t>(4 * room) * sizeof(int64_t))
    if cuts == NULL:
        raise MemoryError()
    try:
        with nogil:
            if not grouped:
                for i in range(n):
                    o[i] = i
                for i in range(null_partition + 1, num_partitions + 1):
                    b[i] = n
            else:
                _group_rows(&pv[0], n, null_partition, num_partitions, &o[0], &b[0])
            k = _cut_chunks(&o[0], &sizes[0], &b[0], num_partitions, limit, cuts, &too_large)
        if k < 0:
            return order, [], too_large
        return order, [(<int32_t>cuts[4 * c], cuts[4 * c + 1], cuts[4 * c + 2], cuts[4 * c + 3])
                       for c in range(k)], -1
    finally:
        PyMem_Free(cuts)


# ---------------------------------------------------------------- accumulator

from cpython.ref cimport Py_INCREF
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.time cimport timespec

cdef extern from "<time.h>" nogil:
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_REALTIME
    int CLOCK_MONOTONIC

from pylog._core.includes.ccore cimport PYLOG_RECORD_BATCH_OVERHEAD as BATCH_OVERHEAD

# Per-record bytes counted against batch.size and buffer.memory: Kafka's record
# framing is at most ~21 bytes (attributes, varint deltas and lengths).
DEF RECORD_OVERHEAD = 21
#: The same count for client/producer.py's planner.
RECORD_OVERHEAD_BYTES = RECORD_OVERHEAD

cdef inline int64_t _wall_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000

cdef int64_t _timestamp_arg(object timestamp) except? -2:
    """send()'s timestamp as int64 ms; one that no int64 holds is named (Python's
    OverflowError says only "int too large")."""
    try:
        return timestamp
    except OverflowError:
        from pylog.errors import InvalidTimestampError
        raise InvalidTimestampError(
            f"timestamp = {timestamp} is invalid: timestamps are milliseconds since the "
            f"epoch, a signed 64-bit integer (at most {(1 << 63) - 1})") from None

cdef inline double _monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


cdef extern from "fastlock.h" nogil:
    int pylog_lock_try(int *word)
    int pylog_lock_wait(int *word, int64_t deadline_ns)
    void pylog_lock_give(int *word)
    int pylog_lock_held(const int *word)
    int64_t pylog_lock_now_ns()

from cpython.exc cimport PyErr_CheckSignals


@cython.final
@cython.auto_pickle(False)                  # a lock is not picklable (threading.Lock is not)
cdef class FastLock:
    """A mutex with ``threading.Lock``'s Python API (``acquire(blocking, timeout)``,
    ``release``, ``locked``, the context manager; usable by ``threading.Condition``)
    whose C callers (the accumulator, once per ``send()``) take it without a
    Python method call. It is one futex word (fastlock.h): an uncontended take
    is a compare-and-swap and a give an exchange; a contended take waits in
    the kernel with the GIL released. Not reentrant; any thread may release it."""

    cdef int _word          # 0 free, 1 held, 2 held with possible waiters

    cdef inline int take(self) except -1:
        """Acquires, blocking with the GIL released if another thread holds it."""
        cdef int r
        if not pylog_lock_try(&self._word):
            while True:
                with nogil:
                    r = pylog_lock_wait(&self._word, -1)
                if r == 1:
                    break
                PyErr_CheckSignals()   # interrupted: run handlers (Ctrl-C), then wait again
        return 0

    cdef inline void give(self) noexcept:
        pylog_lock_give(&self._word)

    def acquire(self, bint blocking=True, double timeout=-1):
        """As ``threading.Lock.acquire``: True once held, False on timeout."""
        cdef int r
        cdef int64_t deadline
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if pylog_lock_try(&self._word):
            return True
        if not blocking:
            return False
        # Past ~285 years (threading.TIMEOUT_MAX is ~292) the nanosecond deadline
        # would overflow: that wait has no deadline.
        deadline = pylog_lock_now_ns() + <int64_t>(timeout * 1e9) if 0 <= timeout < 9e9 else -1
        while True:
            with nogil:
                r = pylog_lock_wait(&self._word, deadline)
            if r == 1:
                return True
            if r == 0:
                return False
            PyErr_CheckSignals()

    def release(self):
        if not pylog_lock_held(&self._word):
            raise RuntimeError("release unlocked lock")
        self.give()

    def locked(self):
        return bool(pylog_lock_held(&self._word))

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.give()

    def __repr__(self):
        return f"<pylog FastLock {'locked' if pylog_lock_held(&self._word) else 'unlocked'}>"


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)


cdef inline list _untracked_list():
    cdef list out = []
    PyObject_GC_UnTrack(out)
    return out


@cython.final
cdef class ProducerBatch:
    """Records bound for one partition, accumulated until the sender appends them.

    ``values``/``keys``/``headers`` are parallel lists (headers stays None
    until a record has some); the timestamps beside them are a C array
    (``timestamps`` gives them as numpy int64, ``timestamp_at(i)`` one), so a
    record costs no int object and the encoder takes them without a
    conversion. A batch built by ``send_batch`` is
    pre-encoded instead (``encoded``, ``count``). After completion the batch
    holds the assigned base offset, or the exception, which its futures read
    (pylog/futures.py); a batch the log refused as too large and the sender
    split (Kafka's splitAndReenqueue) holds ``pieces`` instead: each piece's
    outcome, which the futures of its records read.
    """

    cdef public str topic
    cdef public int32_t partition
    cdef public list values, keys
    cdef int64_t *_ts                    # one per value
    cdef Py_ssize_t _ts_capacity
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
    cdef public tuple pieces             # None, or (start, end, base offset, log append time,
                                         # exception) of each piece of a split batch
    cdef public list watched             # futures to notify one by one; None once complete
    cdef object __weakref__

    def __init__(self, str topic, int32_t partition, double created=-1.0):
        self.topic = topic
        self.partition = partition
        # The record lists hold only the records' bytes-like objects and None,
        # which cannot close a reference cycle: the cyclic GC need not walk them
        # (otherwise every collection does, item by item, while the batch is alive).
        self.values = _untracked_list()
        self.keys = _untracked_list()
        self.headers = None
        self.created = _monotonic() if created < 0 else created
        self.state = u"PENDING"
        self.base_offset = -1
        self.log_append_time = -1
        self.base_sequence = -1
        self.watched = []

    def __dealloc__(self):
        PyMem_Free(self._ts)

    cdef int add_record(self, value, key, int64_t timestamp) except -1:
        """Appends one record's value, key and timestamp (the caller holds the lock)."""
        cdef Py_ssize_t n = PyList_GET_SIZE(self.values)
        cdef Py_ssize_t capacity
        cdef int64_t *grown
        if n >= self._ts_capacity:
            capacity = max(64, 2 * self._ts_capacity)
            grown = <int64_t *>PyMem_Realloc(self._ts, <size_t>capacity * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self._ts = grown
            self._ts_capacity = capacity
        self._ts[n] = timestamp
        self.values.append(value)
        self.keys.append(key)
        return 0

    def add(self, value, key, int64_t timestamp):
        """Appends one record (for batches built outside the accumulator)."""
        self.add_record(value, key, timestamp)

    @property
    def timestamps(self):
        """The records' timestamps, a numpy int64 array (a copy)."""
        cdef Py_ssize_t n = PyList_GET_SIZE(self.values)
        out = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] o = out
        if n:
            memcpy(&o[0], self._ts, <size_t>n * sizeof(int64_t))
        return out

    cpdef int64_t timestamp_at(self, Py_ssize_t i) except? -2:
        if not 0 <= i < PyList_GET_SIZE(self.values):
            raise IndexError(i)
        return self._ts[i]

    @property
    def record_count(self):
        return self.count if self.encoded is not None else len(self.values)

    def encode(self, compression, int64_t producer_id, int producer_epoch):
        """This sealed batch's records as one record batch v2 (encode_batch's
        bytes, at its base_sequence). Lists of bytes/None without headers are
        read in place with the batch's own timestamp array (codec's
        _encode_sealed: no copies into tuples or a numpy array); anything else
        takes encode_batch."""
        if self.values is None:
            raise ValueError("a pre-encoded batch (send_batch's) has no records to encode")
        cdef Py_ssize_t n = PyList_GET_SIZE(self.values)
        if self.headers is None and n:
            data = _encode_sealed(self.values, self.keys, <uintptr_t>self._ts, compression,
                                  producer_id, producer_epoch, self.base_sequence)
            if data is not None:
                return data
        return _encode_batch(self.values, self.keys, self.timestamps, self.headers,
                             compression=compression, producer_id=producer_id,
                             producer_epoch=producer_epoch, base_sequence=self.base_sequence)


cdef extern from *:
    """
    static PyObject *pylog_tp_new(PyObject *type, PyObject *args, PyObject *kwds) {
        return ((PyTypeObject *)type)->tp_new((PyTypeObject *)type, args, kwds);
    }
    """
    object _tp_new "pylog_tp_new"(object type, object args, void *kwds)


cdef class RecordFutureBase:
    """The C half of ``pylog.client.futures.RecordFuture`` (which adds
    ``concurrent.futures.Future`` as a second base and the Future protocol).

    A record's future is two references, its batch and its index in it, so
    ``send()`` allocates one small object and no lock; the condition, waiter
    list and callbacks exist only once somebody waits (see futures.py).
    """

    cdef public ProducerBatch _batch
    cdef public Py_ssize_t _index
    cdef public object _cond, _waiter_list, _callbacks, _own_state

    def __init__(self, ProducerBatch batch, Py_ssize_t index):
        self._batch = batch
        self._index = index
        self._own_state = u"PENDING"

    def add_done_callback(self, fn):
        """Calls fn(future) once the record is complete (the subclass's Future
        protocol; ProducerBase.send registers a send() callback through it)."""
        raise NotImplementedError(f"{type(self).__name__} does not provide add_done_callback")


cdef inline RecordFutureBase new_future(type cls, ProducerBatch batch, Py_ssize_t index):
    """A future of `cls` (a RecordFutureBase subclass) through its tp_new slot: no
    ``__new__``/``__init__`` method calls."""
    cdef RecordFutureBase f = <RecordFutureBase>_tp_new(cls, (), NULL)
    f._batch = batch
    f._index = index
    f._own_state = u"PENDING"
    return f


@cython.final
cdef class TopicState:
    """Partition count, open batches and the sticky partition of one topic."""

    cdef public str name
    cdef public int32_t num_partitions
    cdef public list open                # ProducerBatch or None per partition
    cdef public int32_t sticky           # partition for null-key records (KIP-480/794)
    cdef public list sequences           # idempotence: next sequence per partition
    cdef public list logs                # send_batch's direct path: each partition's Log, once seen
    cdef public list locks               # the producer's partition locks of the topic, once asked
    cdef int64_t sticky_bytes
    cdef int64_t batch_size
    cdef object rng

    def __init__(self, str name, int32_t num_partitions, int64_t batch_size, rng):
        self.name = name
        self.num_partitions = num_partitions
        self.open = [None] * num_partitions
        self.sequences = [0] * num_partitions
        self.logs = [None] * num_partitions
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

    cdef public FastLock lock
    cdef public object wakeup, space
    cdef public dict topics
    cdef public object ready, lingering
    cdef public int64_t buffered, buffer_memory, batch_size, max_request, seq
    cdef public bint closing, ignore_keys
    cdef public bint idempotent          # stamp sequences when batches are sealed
    cdef public object partitioner       # None: Kafka's default rule
    cdef public object store             # its topic_epoch tells of topic changes
    cdef public int64_t metadata_epoch   # the store's topic epoch of the partition counts
    cdef const int64_t[::1] epoch_cell   # a view of store.topic_epoch_cell, when it has one
    # send()'s last topic: its str object, its state, and the metadata epoch it
    # was found under (a topic's state is replaced or dropped only by a metadata
    # refresh, which moves metadata_epoch on).
    cdef str last_topic
    cdef TopicState last_state
    cdef int64_t last_epoch
    cdef type future_cls
    cdef object wait_for_space, fail, refresh_metadata, topic_state

    def __init__(self, FastLock lock, wakeup, space, ready, lingering, int64_t batch_size,
                 int64_t buffer_memory, int64_t max_request, bint ignore_keys, partitioner,
                 type future_cls, wait_for_space, fail, store, refresh_metadata, topic_state):
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
        self.store = store
        self.metadata_epoch = store.topic_epoch
        cell = getattr(store, "topic_epoch_cell", None)
        if cell is not None:
            self.epoch_cell = cell
        self.refresh_metadata = refresh_metadata
        self.topic_state = topic_state

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

    cpdef send(self, str topic, value=None, key=None, headers=None, partition=None,
               timestamp=None):
        """Producer.send without the callback: the topic's state (metadata refreshed
        first if the store's topics changed), then :meth:`append`."""
        cdef int64_t epoch
        if self.epoch_cell is not None:
            epoch = self.epoch_cell[0]
        else:
            epoch = self.store.topic_epoch
        if epoch != self.metadata_epoch:
            self.refresh_metadata()
        cdef int64_t seen = self.metadata_epoch
        if topic is self.last_topic and self.last_epoch == seen:
            state = self.last_state
        else:
            state = self.topics.get(topic)
            if state is None:
                state = self.topic_state(topic)     # Python: a refresh may run meanwhile
            # Remembered under the epoch seen before the lookup: if a refresh ran
            # during it, the next send() looks the topic up again.
            self.last_topic = topic
            self.last_state = <TopicState?>state
            self.last_epoch = seen
        return self.append(<TopicState>state, value, key, headers, partition, timestamp)

    cpdef append(self, TopicState state, value, key, headers, partition, timestamp):
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
        ts = _wall_ms() if timestamp is None else _timestamp_arg(timestamp)
        cdef ProducerBatch batch
        self.lock.take()
        try:
            if self.closing:
                raise RuntimeError("send() on a closed Producer")
            if self.buffered + size > self.buffer_memory:
                self.wait_for_space(size)
            batch = state.open[p]
            if batch is None:
                batch = self.open_batch(state, p)
            future = new_future(self.future_cls, batch, len(batch.values))
            batch.add_record(value, key, ts)
            if headers is not None or batch.headers is not None:
                if batch.headers is None:
                    batch.headers = [None] * (len(batch.values) - 1)
                batch.headers.append(headers)
            batch.size += size
            self.buffered += size
            if batch.size >= self.batch_size:
                self.seal(state, batch)
        finally:
            self.lock.give()
        return future


DEF SMALL_CALL_BYTES = 2 * 65536   # twice Producer._OVERLAP_BYTES: no chunk of such a call is queued
DEF READY_SCAN_LIMIT = 64          # a longer ready queue is not scanned: its partitions count as busy


cdef object _busy_partitions(Accumulator acc, str topic):
    """The partitions of `topic` with batches in the ready queue (lock held), or
    None when the queue is too long to scan (every partition counts as busy)."""
    cdef ProducerBatch b
    ready = acc.ready
    if not ready:
        return ()
    if len(ready) > READY_SCAN_LIMIT:
        return None
    return {b.partition for b in ready if b.topic == topic}


cdef class ProducerBase:
    """The C half of ``pylog.Producer``: ``send()``, the per-record path, is one
    C call (no Python frame between the caller and the accumulator), and so is
    a common ``send_batch`` (``_send_small``); ``_direct`` is send_batch's
    direct path for both.

    The core's contract with its subclass: ``_attach`` hands over the
    accumulator and the classes the direct path makes; the subclass keeps
    ``_round`` (the sender's round being appended: (topic, partition) -> its
    batches, or empty) and overrides the four hooks below, which the direct
    path calls and nothing else of the subclass."""

    cdef Accumulator _accumulator
    cdef object _adapt_callback
    cdef object _batch_result_cls, _encode_failed_cls
    cdef type _completed_future_cls
    cdef public object _round

    def _topic_locks(self, topic, count):
        """The producer's `count` partition locks (FastLock) of `topic`."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _topic_locks")

    def _encode_chunks(self, values, keys, timestamps, headers, chunks, sequences):
        """The chunks' records (rows of the columns) encoded as one batch each,
        at their base sequences: a list of bytes-like, one per chunk."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _encode_chunks")

    def _give_back(self, topic, p, failed):
        """Gives back the sequences of `failed`, a batch that was not written."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _give_back")

    def _flush_logs(self, appended):
        """fsyncs the logs of ``(batches, log, info)`` entries (acks=all); returns
        id(log) -> the error of a log that failed, or None."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _flush_logs")

    def _attach(self, Accumulator accumulator, adapt_callback, batch_result_cls,
                encode_failed_cls, type completed_future_cls):
        self._accumulator = accumulator
        self._adapt_callback = adapt_callback
        self._batch_result_cls = batch_result_cls
        self._encode_failed_cls = encode_failed_cls
        self._completed_future_cls = completed_future_cls

    def send(self, str topic, value=None, key=None, headers=None, partition=None,
             timestamp=None, callback=None):
        """Queues one record; returns a Future of its RecordMetadata.

        ``key`` picks the partition (Kafka's murmur2) unless ``partition`` is
        given; keyless records go to a sticky partition. ``headers`` is a list
        of ``(str, bytes | None)``; ``timestamp`` is ms since the epoch (now by
        default). ``callback(metadata, exception)`` runs on the producer's
        sender thread when the record is appended (on its flusher thread once
        fsynced, with acks=all), or failed."""
        future = self._accumulator.send(topic, value, key, headers, partition, timestamp)
        if callback is not None:
            future.add_done_callback(self._adapt_callback(callback))
        return future

    def _send_small(self, TopicState state, list values, keys, int64_t timestamp,
                    int32_t partition):
        """send_batch's common case in one C call: lists of bytes/None, one
        timestamp, no headers, the whole call within max.request.size and under
        SMALL_CALL_BYTES (so no chunk is worth queueing: see
        Producer.send_batch) and the topic's batch_limit. The records go to `partition` if it is >= 0, or
        are partitioned as send_batch partitions them (murmur2 by key, else the
        sticky partition); each partition's rows become one batch, appended by
        this thread (:meth:`_direct`).

        Returns the Future of the call's BatchResult, or None when the call
        must take the general path, before anything was reserved, encoded or
        written: an item that is not bytes or None (the general path names it),
        a call too big, or a partition with records queued, open or being
        appended by the sender."""
        cdef Accumulator acc = self._accumulator
        cdef Py_ssize_t g, n = PyList_GET_SIZE(values)
        cdef int32_t p, nparts = state.num_partitions
        cdef bint by_key = keys is not None and not acc.ignore_keys and partition < 0
        cdef int64_t total = 0
        if n == 0 or n * RECORD_OVERHEAD >= SMALL_CALL_BYTES or partition >= nparts or \
                (keys is not None and (type(keys) is not list or PyList_GET_SIZE(keys) != n)):
            return None
        cdef list work = []                # (partition, rows), ascending partitions
        # Per record: its size (unused here) and partition; then the rows of
        # each partition, stable, and where each partition's rows start.
        cdef int64_t *scratch = <int64_t *>PyMem_Malloc(
            <size_t>(n + (n + 1) // 2 + nparts + 1) * sizeof(int64_t))
        if scratch == NULL:
            raise MemoryError()
        cdef int64_t *bounds = scratch + n
        cdef int32_t *parts = <int32_t *>(bounds + nparts + 1)
        cdef int64_t[::1] rows_of
        try:
            # No Python code runs during the pass, so the item arrays stay valid.
            if pylog_plan_bytes(PySequence_Fast_ITEMS(values),
                                PySequence_Fast_ITEMS(keys) if keys is not None else NULL,
                                n, nparts, RECORD_OVERHEAD, scratch,
                                parts if by_key else NULL, &total) < n:
                return None
            if total >= SMALL_CALL_BYTES or total + BATCH_OVERHEAD > batch_limit(
                    state, acc.store, state.sticky if partition < 0 else partition,
                    acc.max_request):
                return None
            order = np.empty(n, dtype=np.int64)
            rows_of = order
            if by_key:
                _group_rows(parts, n, state.sticky, nparts, &rows_of[0], bounds)
                for p in range(nparts):
                    if bounds[p + 1] > bounds[p]:
                        work.append((p, order[bounds[p]:bounds[p + 1]]))
            else:
                for g in range(n):
                    rows_of[g] = g
                work.append((state.sticky if partition < 0 else partition, order))
        finally:
            PyMem_Free(scratch)
        cdef list out = self._direct(state, work, values, keys, timestamp, None, True)
        if out is None:
            return None
        cdef ProducerBatch batch
        for batch, _ in out:
            if batch.exception is not None:
                future = _Future()
                future.set_exception(batch.exception)
                return future
        ranges = {}
        placed = {}
        total = 0
        for g in range(len(work)):
            p, rows = work[g]
            batch = out[g][0]
            ranges[p] = [(batch.base_offset, batch.count)]
            placed[p] = rows
            total += batch.size
        if keys is None and partition < 0:
            state.produced(total)
        # A CompletedFuture (client/futures.py) through its tp_new slot, no __init__.
        future = _tp_new(self._completed_future_cls, (), NULL)
        future._result = self._batch_result_cls(state.name, ranges, placed)
        return future

    def _append_direct(self, TopicState state, list work, values, keys, timestamps, headers):
        """send_batch's direct path (see :meth:`_direct`), chunk by chunk: a
        chunk whose partition is busy gets None (the caller queues it)."""
        return self._direct(state, work, values, keys, timestamps, headers, False)

    cdef list _direct(self, TopicState state, list work, values, keys, timestamps, headers,
                      bint all_or_none):
        """send_batch's direct path: the calling thread encodes and appends each
        chunk (partition, rows) of `work` itself (and fsyncs it for acks=all),
        so threads sending to different partitions append at once instead of
        queueing behind the one sender thread, and a call pays no hand-off to
        it. `work` holds at most one chunk per partition, in ascending
        partition order (the order its partition locks are taken in). A chunk
        goes this way only when nothing of its partition is open, queued or
        being appended by the sender, so its order holds (the partition lock
        keeps the sender off it meanwhile). Returns per chunk (batch, bytes),
        or None: that chunk must be queued; with `all_or_none`, returns None
        instead of doing anything when any chunk must be queued.

        Callers that wait for each call gain (no hand-off to the sender); a
        single thread that never waits loses the overlap of its encoding with
        the sender's appends. The locks are taken once for all of a call's
        chunks and the chunks encoded in one C call (bench/RESULTS.md, "send_batch";
        its history in bench/history/)."""
        cdef Accumulator acc = self._accumulator
        cdef str topic = state.name
        if state.locks is None or len(state.locks) < state.num_partitions:
            state.locks = self._topic_locks(topic, state.num_partitions)
        cdef list topic_locks = state.locks
        cdef list locks = [topic_locks[w[0]] for w in work]
        cdef list batches = []              # per chunk: its batch, or None (queue it)
        cdef list chosen = []               # the chunks appended here
        cdef list appended = []
        cdef list out = [None] * len(work)
        cdef ProducerBatch batch
        cdef Py_ssize_t i, taken = 0
        cdef int32_t p
        try:
            for i in range(len(locks)):
                (<FastLock>locks[i]).take()
                taken += 1
            acc.lock.take()
            try:
                if acc.closing:
                    raise RuntimeError("send_batch() on a closed Producer")
                queued = _busy_partitions(acc, topic)
                round_ = self._round
                busy = [_is_busy(queued, state, topic, w[0], round_) for w in work]
                if all_or_none and any(busy):
                    return None             # nothing reserved yet
                for i in range(len(work)):
                    if busy[i]:
                        batches.append(None)
                        continue
                    p, rows = work[i]
                    batch = _direct_batch(topic, p, len(rows))
                    if acc.idempotent:
                        batch.base_sequence = acc.reserve_sequence(state, p, batch.count)
                    chosen.append(len(batches))
                    batches.append(batch)
            finally:
                acc.lock.give()
            try:
                encoded = self._encode_chunks(values, keys, timestamps, headers,
                                              [work[i][1] for i in chosen],
                                              [(<ProducerBatch>batches[i]).base_sequence
                                               for i in chosen])
            except BaseException as exc:
                # Nothing is written: every chosen chunk gives its sequences back.
                for i in chosen:
                    batch = batches[i]
                    batch.encoded = self._encode_failed_cls(exc)   # its count, for the give-back
                    self._give_back(topic, work[i][0], batch)
                raise
            store = acc.store
            for i, data in zip(chosen, encoded):
                p = work[i][0]
                batch = batches[i]
                batch.encoded = data
                batch.size = len(data)
                out[i] = (batch, batch.size)
                try:
                    log = _partition_log(state, store, p)
                    info = log.append(data, origin=u"producer")
                except Exception as exc:
                    _complete_unwatched(batch, None, exc)
                    self._give_back(topic, p, batch)
                    continue
                appended.append(([batch], log, info))
        finally:
            for i in range(taken - 1, -1, -1):
                (<FastLock>locks[i]).give()
            # fsync (acks=all), then complete. No RecordFuture watches these
            # batches (send_batch reads them once this returns), so they are
            # completed without complete_batch's lock.
            errors = self._flush_logs(appended) if appended else None
            for group, log, info in appended:
                _complete_unwatched(group[0], info, errors.get(id(log)) if errors else None)
        return out


cdef ProducerBatch _direct_batch(str topic, int32_t partition, int64_t count):
    """A sealed batch of `count` records for send_batch's direct path, to be
    encoded and appended by its caller: it never waits in a queue (no creation
    time or sequence number in it) and gets no record lists, and nothing watches
    it until it is complete."""
    cdef ProducerBatch batch = ProducerBatch.__new__(ProducerBatch)
    batch.topic = topic
    batch.partition = partition
    batch.count = count
    batch.sealed = True
    batch.state = u"PENDING"
    batch.base_offset = -1
    batch.log_append_time = -1
    batch.base_sequence = -1
    return batch


cdef object _partition_log(TopicState state, store, int32_t p):
    """store.log(topic, p), remembered in `state` while the Log stays open and
    online: one is taken offline (its dir failed, its topic was deleted) or
    closed before another can take its place, so a log that is neither is
    still the partition's."""
    log = state.logs[p]
    if log is None or log._offline is not None or log._closed:
        log = store.log(state.name, p)
        state.logs[p] = log if isinstance(log, _LogState) else None
    return log


def batch_limit(TopicState state, store, int32_t partition, int64_t max_request):
    """The most bytes one of send_batch's batches to the topic may take:
    max.request.size, and the topic's max.message.bytes and segment.bytes, past
    which its Log refuses a batch (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE).
    send_batch cuts its chunks to fit all three (Kafka's producer sends batches
    that fit, and splits one refused as too large). Topic configs are the same
    for every partition, so `partition`'s Log tells; while it cannot be had
    (offline, gone), max.request.size: the append reports why."""
    try:
        config = _partition_log(state, store, partition).config
        return min(max_request, <int64_t>config.max_message_bytes,
                   <int64_t>config.segment_bytes)
    except Exception:
        return max_request


cdef bint _is_busy(queued, TopicState state, str topic, int32_t p, round_) except -1:
    return queued is None or p in queued or state.open[p] is not None or \
        bool(round_ and (topic, p) in round_)


cdef void _complete_unwatched(ProducerBatch batch, info, exc) except *:
    """Completes a batch of send_batch's direct path, which no future watches:
    at info's offsets, or failed with exc."""
    batch.base_offset = info.first_offset if info is not None else -1
    batch.log_append_time = info.log_append_time if info is not None else -1
    batch.exception = exc
    batch.state = u"FINISHED"


def take_rows(list column, const int64_t[::1] rows):
    """column[rows] as a new tuple (the records of one partition, in order). A
    tuple, because the encoder keeps a tuple as it is and copies anything else."""
    cdef Py_ssize_t i, n = rows.shape[0], size = len(column)
    cdef tuple out = PyTuple_New(n)
    for i in range(n):
        if rows[i] < 0 or rows[i] >= size:
            raise IndexError(rows[i])
        item = column[rows[i]]
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    return out


cdef extern from "gather.h":
    Py_ssize_t pylog_plan_bytes(PyObject **values, PyObject **keys, Py_ssize_t n,
                                int32_t num_partitions, int64_t overhead, int64_t *sizes,
                                int32_t *parts, int64_t *total_bytes)
    PyObject **PySequence_Fast_ITEMS(object)


def plan_rows(values, keys, int32_t num_partitions, int64_t overhead):
    """send_batch's one pass over list columns of bytes/None: returns ``(sizes,
    parts, total)``, each record's key + value bytes + ``overhead`` (int64),
    its partition by Kafka's default partitioner (int32, -1 for a null key;
    None without keys or when ``num_partitions`` is 0) and the sum of sizes.
    Returns None when a column is not a list or holds another type: the caller
    then takes the general path (Arrow arrays, bytearrays, memoryviews)."""
    if type(values) is not list or (keys is not None and type(keys) is not list):
        return None
    cdef Py_ssize_t n = PyList_GET_SIZE(values)
    if keys is not None and PyList_GET_SIZE(keys) != n:
        return None
    sizes = np.empty(n, dtype=np.int64)
    parts = np.empty(n, dtype=np.int32) if keys is not None and num_partitions > 0 else None
    cdef int64_t[::1] s = sizes
    cdef int32_t[::1] o
    cdef int32_t *parts_out = NULL
    if parts is not None:
        o = parts
        parts_out = &o[0] if n else NULL
    cdef int64_t total = 0
    if n == 0:
        return sizes, parts, 0
    # No Python code runs from here on, so the item arrays stay valid.
    cdef Py_ssize_t done = pylog_plan_bytes(
        PySequence_Fast_ITEMS(values), PySequence_Fast_ITEMS(keys) if keys is not None else NULL,
        n, num_partitions, overhead, &s[0], parts_out, &total)
    if done < n:
        return None
    return sizes, parts, total


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
