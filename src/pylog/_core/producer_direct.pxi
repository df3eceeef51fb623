# Included by producer.pyx: ProducerBase, the C half of pylog.Producer: send() in one
# C call and send_batch's direct path (the calling thread encodes and appends its own
# chunks under the partitions' locks).

cdef enum:
    QUEUED_CHUNK_MIN = 64 << 10           # send_batch queues a chunk from this size on
    SMALL_CALL_MAX = 2 * QUEUED_CHUNK_MIN  # no chunk of a call below this is queued
    READY_SCAN_LIMIT = 64          # a longer ready queue is not scanned: its partitions count as busy

# The Python planner (client/batch_planner.py) reads both from here.
OVERLAP_BYTES = QUEUED_CHUNK_MIN
SMALL_CALL_BYTES = SMALL_CALL_MAX


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

    @cython.boundscheck(False)
    @cython.wraparound(False)
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
        if n == 0 or n * RECORD_OVERHEAD >= SMALL_CALL_MAX or partition >= nparts or \
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
            if total >= SMALL_CALL_MAX or total + BATCH_OVERHEAD > batch_limit(
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
