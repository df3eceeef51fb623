# Included by producer.pyx: the per-record half of Producer.send. A record joins its
# partition's open ProducerBatch and gets a RecordFutureBase (its batch and index);
# TopicState holds a topic's open batches and sticky partition; the Accumulator, the
# queues the sender takes batches from.

from libc.time cimport timespec

cdef extern from "<time.h>" nogil:
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_REALTIME
    int CLOCK_MONOTONIC

cdef enum:
    # Per-record bytes counted against batch.size and buffer.memory: Kafka's record
    # framing is at most ~21 bytes (attributes, varint deltas and lengths).
    RECORD_OVERHEAD = 21
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
        state.sequences[partition] = (first + records) % PYLOG_SEQUENCE_SPACE
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

    @cython.boundscheck(False)
    @cython.wraparound(False)
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
