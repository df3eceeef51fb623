# Append preparation (append.h; docs/FORMAT.md, section 10) and the index rule for appends.


@cython.final
@cython.freelist(4)                 # one a Log.append: reused, not reallocated
cdef class PreparedAppend:
    """Validated batches with their assigned offsets, ready to be written.

    Holds the caller's buffer (never modified), one rewritten batch header
    per batch and the iovecs that interleave them, so the write copies nothing.
    """

    cdef Py_buffer view
    cdef bint has_view
    cdef pylog_append_batch *batches
    cdef int64_t count
    cdef char *patches
    cdef iovec *iov
    cdef readonly int64_t first_offset
    cdef readonly int64_t last_offset
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t offset_of_max_timestamp
    cdef readonly int64_t records
    cdef readonly int64_t size
    cdef readonly bint has_producer_ids     # some batch carries a producer id (idempotence)
    # The common append of one batch uses these instead of three allocations.
    cdef pylog_append_batch one_batch
    cdef char one_patch[PYLOG_RECORD_BATCH_OVERHEAD]
    cdef iovec one_iov[2]

    def __init__(self):
        raise TypeError("use prepare_append()")

    def __dealloc__(self):
        if self.batches != &self.one_batch:
            PyMem_Free(self.batches)
            PyMem_Free(self.patches)
            PyMem_Free(self.iov)
        if self.has_view:
            PyBuffer_Release(&self.view)

    @property
    def batch_count(self):
        return self.count

    def batch(self, int64_t i):
        """(base_offset, last_offset, max_timestamp, records, size, producer_id,
        producer_epoch, base_sequence, attributes) of batch i."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        cdef pylog_append_batch *b = &self.batches[i]
        return (b.base_offset, b.last_offset, b.max_timestamp, b.records, b.size, b.producer_id,
                b.producer_epoch, b.base_sequence, b.attributes)

    def first_batch_max_timestamp(self):
        return self.batches[0].max_timestamp if self.count else -1

    def to_bytes(self):
        """The bytes that will be written (a copy; for tests and tooling)."""
        out = bytearray()
        cdef int64_t i
        for i in range(2 * self.count):
            out += (<char *>self.iov[i].iov_base)[:self.iov[i].iov_len]
        return bytes(out)


def prepare_append(buffer, int64_t next_offset, *, int32_t leader_epoch=0,
                   int64_t log_append_time=-1, int64_t max_batch_size=INT64_MAX,
                   int64_t min_timestamp=INT64_MIN, int64_t max_timestamp=INT64_MAX,
                   bint allow_control=False, bint validate_records=True,
                   bint require_keys=False):
    """Validates the v2 batches in ``buffer`` and assigns offsets from ``next_offset``.

    The records of uncompressed batches are walked (unless ``validate_records``
    is off): framing, offset deltas 0..n-1, a key on each when ``require_keys``,
    each record's timestamp in range; a CreateTime batch's maxTimestamp is set
    to its records' maximum. Compressed batches: see convert_client_batches.

    Raises CorruptRecordError (bad length/magic/CRC/records), MessageTooLargeError
    (a batch above ``max_batch_size``), InvalidRecordError (empty, offset range
    and count disagree, a client control batch, a partial batch, magic 0/1) or
    InvalidTimestampError. The buffer is not modified.
    """
    cdef pylog_append_params params
    memset(&params, 0, sizeof(params))
    params.next_offset = next_offset
    params.leader_epoch = leader_epoch
    params.log_append_time = log_append_time
    params.max_batch_size = max_batch_size
    params.min_timestamp = min_timestamp
    params.max_timestamp = max_timestamp
    params.allow_control = allow_control
    params.validate_records = validate_records or require_keys
    params.require_keys = require_keys
    return _prepare_append(buffer, &params)


cdef PreparedAppend _prepare_append(object buffer, const pylog_append_params *params):
    """prepare_append with its parameters in C (the Log's fast path calls this)."""
    cdef PreparedAppend p = PreparedAppend.__new__(PreparedAppend)
    cdef pylog_status st
    cdef int rc
    cdef int64_t n, i
    PyObject_GetBuffer(buffer, &p.view, PyBUF_SIMPLE)
    p.has_view = True
    cdef const char *buf = <const char *>p.view.buf
    cdef int64_t length = p.view.len
    n = pylog_append_count(buf, length)
    if n <= 1:
        p.batches = &p.one_batch
        p.patches = p.one_patch
        p.iov = p.one_iov
    else:
        p.batches = <pylog_append_batch *>PyMem_Malloc(<size_t>n * sizeof(pylog_append_batch))
        p.patches = <char *>PyMem_Malloc(<size_t>n * PYLOG_RECORD_BATCH_OVERHEAD)
        p.iov = <iovec *>PyMem_Malloc(<size_t>(2 * n) * sizeof(iovec))
        if p.batches == NULL or p.patches == NULL or p.iov == NULL:
            raise MemoryError()
    if length >= NOGIL_MIN_BYTES and _gil_wanted_elsewhere():
        with nogil:
            rc = pylog_append_prepare(buf, length, params, p.batches, n, p.patches, &st)
    else:
        rc = pylog_append_prepare(buf, length, params, p.batches, n, p.patches, &st)
    if rc != PYLOG_APPEND_OK:
        raise _append_rejection(rc, &st)
    p.count = st.value
    pylog_append_iovecs(buf, p.batches, p.count, p.patches, p.iov)
    p.first_offset = p.batches[0].base_offset
    p.last_offset = p.batches[p.count - 1].last_offset
    p.max_timestamp = -1
    p.offset_of_max_timestamp = p.first_offset
    for i in range(p.count):
        if p.batches[i].producer_id >= 0:
            p.has_producer_ids = True
        p.records += p.batches[i].records
        p.size += p.batches[i].size
        if p.batches[i].max_timestamp > p.max_timestamp:
            p.max_timestamp = p.batches[i].max_timestamp
            p.offset_of_max_timestamp = p.batches[i].last_offset
    return p


class LegacyBatchError(InvalidRecordError):
    """prepare_append met a magic 0/1 message set: the caller up-converts it
    (pylog.record.upconvert) and prepares again, as Log.append does."""


cdef object _append_rejection(int rc, pylog_status *st):
    cdef str detail = st.detail.decode() if st.detail != NULL else u""
    if rc == PYLOG_APPEND_TOO_LARGE:
        return MessageTooLargeError(
            f"record batch at byte {st.position} is {st.value} bytes, larger than "
            f"max.message.bytes ({st.limit})")
    if rc == PYLOG_APPEND_TIMESTAMP:
        return InvalidTimestampError(
            f"record batch at byte {st.position} has timestamp {st.value}, outside the accepted "
            f"range (limit {st.limit}; see message.timestamp.before/after.max.ms)")
    if rc == PYLOG_APPEND_LEGACY:
        return LegacyBatchError(f"record batch at byte {st.position} has magic {st.value}; "
                                  f"up-convert magic 0/1 message sets first")
    if rc == PYLOG_APPEND_INCOMPLETE:
        return InvalidRecordError(
            f"the appended bytes end inside a batch at byte {st.position}: {st.value} bytes of "
            f"{st.limit}")
    if rc == PYLOG_APPEND_INVALID:
        if detail == u"empty append":
            return InvalidRecordError("nothing to append: the buffer is empty")
        return InvalidRecordError(
            f"record batch at byte {st.position} has an invalid {detail}: {st.value} "
            f"(expected {st.limit})" if detail != u"control batch from a client" else
            f"record batch at byte {st.position} is a control batch; clients cannot append those")
    if detail == u"null key":
        return InvalidRecordError(
            f"record at byte {st.position} of the appended bytes (record {st.value} of its "
            f"batch) has no key; a compacted topic needs a key on every record")
    if detail == u"offset delta":
        return InvalidRecordError(
            f"record at byte {st.position} of the appended bytes has offset delta {st.value}, "
            f"expected {st.limit}")
    if st.code == PYLOG_ERR_CRC_CODE:
        return CorruptRecordError(
            f"corrupt record batch in the appended bytes at byte {st.position}: stored crc = "
            f"0x{st.stored_crc:08x}, computed crc = 0x{st.computed_crc:08x}",
            position=st.position, stored_crc=st.stored_crc, computed_crc=st.computed_crc)
    return CorruptRecordError(
        f"corrupt record batch in the appended bytes at byte {st.position}: bad {detail} "
        f"({st.value})", position=st.position)


cdef struct IndexCursor:
    int64_t since_entry              # bytes appended since the last offset index entry
    int64_t max_timestamp            # the segment's largest timestamp so far
    int64_t offset_of_max_timestamp


cdef int _index_append(OffsetIndex oi, TimeIndex ti, PreparedAppend p, int64_t start_position,
                       int64_t index_interval, IndexCursor *c) except -1:
    cdef int64_t i, position = start_position
    cdef pylog_append_batch *b
    cdef int rc
    oi._check()
    ti._check()
    for i in range(p.count):
        b = &p.batches[i]
        if b.max_timestamp > c.max_timestamp:
            c.max_timestamp = b.max_timestamp
            c.offset_of_max_timestamp = b.last_offset
        if c.since_entry > index_interval:
            # segment.bytes is a Kafka INT and a segment never grows past it, so
            # positions fit an index entry; anything else is a bug, never a wrap.
            if position > INT32_MAX:
                raise OverflowError(f"position {position} of {oi.path} does not fit an index entry")
            rc = pylog_offset_index_append(&oi.ix, b.last_offset, <int32_t>position)
            if rc == PYLOG_INDEX_OK:
                rc = pylog_time_index_append(&ti.ix, c.max_timestamp, c.offset_of_max_timestamp, 0)
                if rc == PYLOG_INDEX_IO:
                    raise _append_error(ti, rc, c.offset_of_max_timestamp)
            elif rc == PYLOG_INDEX_IO:
                raise _append_error(oi, rc, b.last_offset)
            c.since_entry = 0
        c.since_entry += b.size
        position += b.size
    return 0
