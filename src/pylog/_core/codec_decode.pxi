# Reading batches back: iter_batches, RecordBatch, Record, scan_batches (docs/FORMAT.md, sections 2, 3 and 7).


@cython.final
@cython.freelist(1024)
cdef class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``key``, ``value`` (bytes or None)
    and ``headers`` (a tuple of ``(str, bytes | None)`` pairs).

    Unpacks like a tuple: ``offset, timestamp, key, value, headers = record``.
    """

    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly tuple headers

    def __init__(self, int64_t offset, int64_t timestamp, key, value, headers=()):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = tuple(headers)

    def __iter__(self):
        return iter((self.offset, self.timestamp, self.key, self.value, self.headers))

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        cdef Record o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp and self.key == o.key
                and self.value == o.value and self.headers == o.headers)

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value, self.headers))

    def __reduce__(self):
        return (Record, (self.offset, self.timestamp, self.key, self.value, self.headers))

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={_short(self.value)}, headers={self.headers!r})")


cdef str _short(object value):
    if value is not None and len(value) > 40:
        return repr(value[:40])[:-1] + f"...' ({len(value)} bytes)"
    return repr(value)


cdef inline object _bytes_or_none(const char *p, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(p, n)


cdef tuple _read_headers(const char *p, const char *end, int32_t count):
    """Headers of one record (already validated by pylog_record_read)."""
    cdef const char *hk
    cdef const char *hv
    cdef int32_t hkl, hvl, k
    cdef int64_t clean_len
    cdef list out = []
    for k in range(count):
        pylog_header_read(&p, end, &hk, &hkl, &hv, &hvl)
        clean_len = pylog_utf8_sanitized_len(hk, hkl)
        if clean_len == hkl:
            key = PyUnicode_DecodeUTF8(hk, hkl, NULL)
        else:
            fixed = PyBytes_FromStringAndSize(NULL, clean_len)
            pylog_utf8_sanitize(PyBytes_AS_STRING(fixed), hk, hkl)
            key = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(fixed), clean_len, NULL)
        out.append((key, _bytes_or_none(hv, hvl)))
    return tuple(out)


cdef list _decode_records(const char *recs, int64_t length, int32_t count, int64_t base_offset,
                          int64_t base_timestamp, bint log_append, int64_t log_append_time,
                          Py_ssize_t where, bint compressed):
    """Builds Record objects for one records section; raises CorruptRecordError.

    `where` is the batch's position in the caller's buffer. With `log_append`
    every record's timestamp is `log_append_time` (the batch's maxTimestamp),
    as Kafka reads LogAppendTime batches, negative or not.
    """
    cdef const char *p = recs
    cdef const char *end = recs + length
    cdef pylog_record r
    cdef pylog_status st
    cdef Record rec
    cdef int32_t i
    cdef list out = []
    memset(&st, 0, sizeof(st))
    for i in range(count):
        if p >= end:
            raise _batch_error(
                where, f"declares {count} records but its "
                f"{'decompressed ' if compressed else ''}records section ends after {i}")
        if pylog_record_read(&p, end, recs, &r, &st) != PYLOG_OK:
            if compressed:
                raise _corrupt(&st, where, 0, u"of the decompressed records section")
            raise _corrupt(&st, where, where + PYLOG_RECORDS_OFFSET)
        rec = Record.__new__(Record)
        rec.offset = <int64_t>(<uint64_t>base_offset + <uint64_t>r.offset_delta)
        rec.timestamp = log_append_time if log_append else \
            <int64_t>(<uint64_t>base_timestamp + <uint64_t>r.timestamp_delta)
        rec.key = _bytes_or_none(r.key, r.key_len)
        rec.value = _bytes_or_none(r.value, r.value_len)
        rec.headers = _EMPTY if r.header_count == 0 else _read_headers(r.headers, r.end, r.header_count)
        out.append(rec)
    if p != end:
        raise _batch_error(where, f"{end - p} bytes left after its {count} records"
                                  f"{' (decompressed)' if compressed else ''}")
    return out


@cython.final
cdef class RecordBatch:
    """One batch in a buffer: its header fields, without decoding the records.

    ``records()`` decodes (and decompresses) them. ``raw`` is a memoryview of
    the batch's bytes. Magic 0/1 messages appear as batches too (one per
    top-level message, as Kafka's legacy batches do); see ``magic``.
    """

    cdef _Buffer _buf
    cdef readonly Py_ssize_t position
    cdef pylog_batch_header h
    cdef object _legacy_cache

    def __init__(self):
        raise TypeError("RecordBatch is not supposed to be instantiated from Python; "
                        "use iter_batches()")

    @staticmethod
    cdef RecordBatch _new(_Buffer buf, Py_ssize_t position, pylog_batch_header *h):
        cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
        b._buf = buf
        b.position = position
        b.h = h[0]
        return b

    @property
    def magic(self):
        return self.h.magic

    @property
    def base_offset(self):
        if self.h.magic < 2:
            return self._legacy()[0].offset if self.compression_type and self._legacy() else \
                self.h.base_offset
        return self.h.base_offset

    @property
    def last_offset(self):
        if self.h.magic < 2:
            return self.h.base_offset
        return self.h.base_offset + self.h.last_offset_delta

    @property
    def next_offset(self):
        return self.last_offset + 1

    @property
    def last_offset_delta(self):
        return self.h.last_offset_delta

    @property
    def length(self):
        """The batch length field: bytes after the 12-byte offset and length."""
        return self.h.length

    @property
    def size_in_bytes(self):
        return <Py_ssize_t>self.h.length + PYLOG_LOG_OVERHEAD

    @property
    def partition_leader_epoch(self):
        return self.h.partition_leader_epoch

    @property
    def crc(self):
        return self.h.crc

    @property
    def attributes(self):
        return self.h.attributes

    @property
    def compression_type(self):
        """Codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return self.h.attributes & PYLOG_ATTR_COMPRESSION_MASK

    @property
    def compression(self):
        return _compression.codec_name(self.h.attributes & PYLOG_ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self):
        if self.h.magic == 0:
            return None
        return LOG_APPEND_TIME if self.h.attributes & PYLOG_ATTR_TIMESTAMP_TYPE else CREATE_TIME

    @property
    def is_transactional(self):
        return self.h.magic >= 2 and bool(self.h.attributes & PYLOG_ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return self.h.magic >= 2 and bool(self.h.attributes & PYLOG_ATTR_CONTROL)

    @property
    def has_delete_horizon(self):
        return self.h.magic >= 2 and bool(self.h.attributes & PYLOG_ATTR_DELETE_HORIZON)

    @property
    def base_timestamp(self):
        return self.h.base_timestamp

    @property
    def max_timestamp(self):
        return self.h.max_timestamp

    @property
    def producer_id(self):
        return self.h.producer_id

    @property
    def producer_epoch(self):
        return self.h.producer_epoch

    @property
    def base_sequence(self):
        return self.h.base_sequence

    @property
    def last_sequence(self):
        if self.h.base_sequence < 0:
            return -1
        return (self.h.base_sequence + self.h.last_offset_delta) & 0x7fffffff

    @property
    def records_count(self):
        if self.h.magic < 2:
            return len(self._legacy())
        return self.h.records_count

    @property
    def raw(self):
        """The batch's bytes, as a memoryview into the decoded buffer."""
        return memoryview(self._buf.obj).cast("B")[self.position:self.position + self.size_in_bytes]

    def is_valid(self):
        """Recomputes the checksum: True if it matches the stored CRC."""
        cdef pylog_batch_header h
        cdef pylog_status st
        return pylog_batch_check(self._buf.ptr() + self.position, self.size_in_bytes, 1,
                                 &h, &st) == PYLOG_OK

    @property
    def control_type(self):
        """For a control batch: ``"commit"`` or ``"abort"`` (None otherwise)."""
        if not self.is_control:
            return None
        recs = self.records()
        if not recs or recs[0].key is None or len(recs[0].key) < 4:
            raise _batch_error(self.position, u"control batch has no valid control record")
        kind = int.from_bytes(recs[0].key[2:4], "big", signed=True)
        return u"commit" if kind == CONTROL_COMMIT else u"abort" if kind == CONTROL_ABORT else kind

    @property
    def coordinator_epoch(self):
        """For a transaction marker: the coordinator epoch in its value (Kafka's
        EndTransactionMarker: version int16, coordinatorEpoch int32); None otherwise."""
        if not self.is_control:
            return None
        recs = self.records()
        if not recs or recs[0].value is None or len(recs[0].value) < 6:
            raise _batch_error(self.position, u"control batch has no valid end transaction marker")
        return int.from_bytes(recs[0].value[2:6], "big", signed=True)

    cdef bytes _section(self):
        """The records section, decompressed (a copy) when the batch is compressed."""
        cdef Py_ssize_t start = self.position + PYLOG_RECORDS_OFFSET
        cdef Py_ssize_t stop = self.position + self.size_in_bytes
        return _decompress_at(self.h.attributes & PYLOG_ATTR_COMPRESSION_MASK,
                              memoryview(self._buf.obj).cast("B")[start:stop], self.position)

    cdef list _legacy(self):
        if self._legacy_cache is None:
            self._legacy_cache = _legacy_message_records(self._buf, self.position, &self.h)
        return self._legacy_cache

    def records(self):
        """Decodes every record of the batch into a list of Record."""
        cdef bytes section
        cdef bint lat = (self.h.attributes & PYLOG_ATTR_TIMESTAMP_TYPE) != 0
        if self.h.magic < 2:
            return list(self._legacy())
        if self.h.attributes & PYLOG_ATTR_COMPRESSION_MASK:
            section = self._section()
            return _decode_records(PyBytes_AS_STRING(section), PyBytes_GET_SIZE(section),
                                   self.h.records_count, self.h.base_offset, self.h.base_timestamp,
                                   lat, self.h.max_timestamp, self.position, True)
        return _decode_records(self._buf.ptr() + self.position + PYLOG_RECORDS_OFFSET,
                               self.h.length + PYLOG_LOG_OVERHEAD - PYLOG_RECORDS_OFFSET,
                               self.h.records_count, self.h.base_offset, self.h.base_timestamp,
                               lat, self.h.max_timestamp, self.position, False)

    def __iter__(self):
        return iter(self.records())

    def __len__(self):
        return self.records_count

    def __repr__(self):
        return (f"RecordBatch(magic={self.h.magic}, base_offset={self.base_offset}, "
                f"last_offset={self.last_offset}, count={self.records_count}, "
                f"size={self.size_in_bytes}, compression={self.compression!r}, "
                f"position={self.position})")


@cython.final
cdef class BatchIterator:
    """Iterates the complete batches of a buffer.

    Stops at the end of the buffer or at a trailing partial batch (a torn
    tail: ``incomplete_bytes`` then says how many bytes it had, and
    ``position`` where it starts). Raises CorruptRecordError for anything
    that cannot be a batch (bad length, magic or CRC), naming the position.
    """

    cdef _Buffer _buf
    cdef readonly Py_ssize_t position
    cdef readonly Py_ssize_t incomplete_bytes
    cdef bint _validate

    def __iter__(self):
        return self

    def __next__(self):
        cdef pylog_batch_header h
        cdef pylog_status st
        cdef Py_ssize_t avail = self._buf.size() - self.position
        cdef int rc
        if avail <= 0:
            raise StopIteration
        memset(&st, 0, sizeof(st))
        if avail >= NOGIL_MIN_BYTES and self._validate:
            with nogil:
                rc = pylog_batch_check(self._buf.ptr() + self.position, avail, 1, &h, &st)
        else:
            rc = pylog_batch_check(self._buf.ptr() + self.position, avail, self._validate, &h, &st)
        if rc == PYLOG_INCOMPLETE:
            self.incomplete_bytes = avail
            raise StopIteration
        if rc != PYLOG_OK:
            raise _corrupt(&st, self.position)
        batch = RecordBatch._new(self._buf, self.position, &h)
        self.position += <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
        return batch


def iter_batches(buffer, *, bint validate=True):
    """Iterates the batches in ``buffer`` (bytes, bytearray, memoryview, mmap...).

    Each batch's length, magic and CRC are checked unless ``validate=False``.
    Returns a BatchIterator; see its ``incomplete_bytes`` for a torn tail.
    """
    cdef BatchIterator it = BatchIterator.__new__(BatchIterator)
    it._buf = _Buffer(buffer)
    it._validate = validate
    return it


class ScanResult(tuple):
    """What scan_batches found: the valid prefix of a buffer and why it ended."""

    __slots__ = ()
    _fields = ("valid_bytes", "batches", "records", "first_offset", "last_offset",
               "max_timestamp", "incomplete_bytes", "error")

    def __new__(cls, valid_bytes, batches, records, first_offset, last_offset, max_timestamp,
                incomplete_bytes, error):
        return tuple.__new__(cls, (valid_bytes, batches, records, first_offset, last_offset,
                                   max_timestamp, incomplete_bytes, error))

    valid_bytes = property(lambda self: self[0], doc="bytes of complete, valid batches from the start")
    batches = property(lambda self: self[1])
    records = property(lambda self: self[2], doc="sum of the batches' record counts")
    first_offset = property(lambda self: self[3], doc="base offset of the first batch, or -1")
    last_offset = property(lambda self: self[4], doc="last offset of the last valid batch, or -1")
    max_timestamp = property(lambda self: self[5])
    incomplete_bytes = property(lambda self: self[6], doc="bytes of a trailing partial batch")
    error = property(lambda self: self[7], doc="CorruptRecordError that stopped the scan, or None")

    def __repr__(self):
        return "ScanResult(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self)) + ")"


def scan_batches(buffer):
    """Validates every batch of ``buffer`` in C without building Python objects.

    Stops at the first invalid batch (returned as ``error``, not raised) or
    at a torn tail; ``valid_bytes`` is where a log would be truncated.
    """
    cdef _Buffer buf = _Buffer(buffer)
    cdef const char *base = buf.ptr()
    cdef Py_ssize_t size = buf.size(), pos = 0
    cdef pylog_batch_header h
    cdef pylog_status st
    cdef int rc = PYLOG_OK
    cdef int64_t batches = 0, records = 0, first = -1, last = -1, max_ts = -1
    memset(&st, 0, sizeof(st))
    with nogil:
        while pos < size:
            rc = pylog_batch_check(base + pos, size - pos, 1, &h, &st)
            if rc != PYLOG_OK:
                break
            if batches == 0:
                first = h.base_offset
            last = h.base_offset + (h.last_offset_delta if h.magic == 2 else 0)
            records += h.records_count if h.magic == 2 else 1
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
            batches += 1
            pos += <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
    error = None
    incomplete = 0
    if rc == PYLOG_INCOMPLETE:
        incomplete = size - pos
    elif rc != PYLOG_OK:
        error = _corrupt(&st, pos)
    return ScanResult(pos, batches, records, first, last, max_ts, incomplete, error)
