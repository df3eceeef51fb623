# decode_arrow: batches -> one pyarrow.RecordBatch, without per-record Python objects.
#
# Three passes: (1) with the GIL, walk and validate batch headers,
# decompressing compressed sections and up-converting legacy messages;
# (2) without it, measure every records section; allocate Arrow buffers of
# the exact sizes; (3) without the GIL, fill them.

HEADER_TYPE = _pa.struct([_pa.field("key", _pa.string(), nullable=False),
                          _pa.field("value", _pa.binary())])
ARROW_SCHEMA = _pa.schema([
    _pa.field("offset", _pa.int64(), nullable=False),
    _pa.field("timestamp", _pa.timestamp("ms"), nullable=False),
    _pa.field("key", _pa.binary()),
    _pa.field("value", _pa.binary()),
    _pa.field("headers", _pa.list_(_pa.field("item", HEADER_TYPE, nullable=False)), nullable=False),
])
ARROW_SCHEMA_LARGE = _pa.schema([
    ARROW_SCHEMA.field("offset"),
    ARROW_SCHEMA.field("timestamp"),
    _pa.field("key", _pa.large_binary()),
    _pa.field("value", _pa.large_binary()),
    _pa.field("headers", _pa.list_(_pa.field("item", _pa.struct([
        _pa.field("key", _pa.large_string(), nullable=False),
        _pa.field("value", _pa.large_binary())]), nullable=False)), nullable=False),
])


cdef tuple _decode_types(schema):
    """The types decode_arrow builds its columns from, looked up once per schema (each
    lookup is a Python call, and decode_arrow's fixed cost is paid with the GIL held)."""
    header_type = schema.field("headers").type.value_type
    return (schema.field("key").type, header_type.field("key").type, list(header_type),
            schema.field("headers").type, _pa.int64(), _pa.timestamp("ms"))


cdef tuple _NARROW_TYPES = _decode_types(ARROW_SCHEMA)
cdef tuple _WIDE_TYPES = _decode_types(ARROW_SCHEMA_LARGE)


cdef struct _Section:
    const char *recs
    int64_t length
    int32_t count
    int64_t base_offset
    int64_t base_timestamp
    bint log_append
    int64_t log_append_time
    int64_t where          # batch position in the caller's buffer, for errors
    bint compressed        # recs points into decompressed data


@cython.final
cdef class _Sections:
    cdef _Section *items
    cdef Py_ssize_t count, capacity
    cdef list keep        # decompressed / up-converted bytes the sections point into

    def __dealloc__(self):
        PyMem_Free(self.items)

    cdef _Section *add(self) except NULL:
        cdef _Section *grown
        if self.count == self.capacity:
            self.capacity = self.capacity * 2 + 16
            grown = <_Section *>PyMem_Realloc(self.items, <size_t>self.capacity * sizeof(_Section))
            if grown == NULL:
                raise MemoryError()
            self.items = grown
        self.count += 1
        return &self.items[self.count - 1]


cdef int _collect(_Sections sections, const char *base, Py_ssize_t size, object owner,
                  bint validate, bint include_control, Py_ssize_t where_base,
                  bint converted=False) except -1:
    """Pass 1: adds the records section of every complete batch in base[0:size].

    Batch positions are where_base + pos; for an up-converted legacy message
    (`converted`) every batch is reported at where_base, the message itself.
    """
    cdef Py_ssize_t pos = 0, where
    cdef pylog_batch_header h
    cdef pylog_status st
    cdef _Section *s
    cdef int rc
    cdef bytes section, up
    memset(&st, 0, sizeof(st))
    while pos < size:
        where = where_base if converted else where_base + pos
        if validate and size - pos >= NOGIL_MIN_BYTES:
            with nogil:
                rc = pylog_batch_check(base + pos, size - pos, 1, &h, &st)
        else:
            rc = pylog_batch_check(base + pos, size - pos, validate, &h, &st)
        if rc == PYLOG_INCOMPLETE:
            break
        if rc != PYLOG_OK:
            raise _corrupt(&st, where)
        if h.magic < 2:
            up = _upconvert_message(base, pos, &h, owner, where)
            sections.keep.append(up)
            _collect(sections, PyBytes_AS_STRING(up), PyBytes_GET_SIZE(up), up,
                     False, include_control, where, True)
        elif include_control or not (h.attributes & PYLOG_ATTR_CONTROL):
            s = sections.add()
            s.count = h.records_count
            s.base_offset = h.base_offset
            s.base_timestamp = h.base_timestamp
            s.log_append = (h.attributes & PYLOG_ATTR_TIMESTAMP_TYPE) != 0
            s.log_append_time = h.max_timestamp
            s.where = where
            s.compressed = (h.attributes & PYLOG_ATTR_COMPRESSION_MASK) != 0
            if s.compressed:
                section = _decompress_at(
                    h.attributes & PYLOG_ATTR_COMPRESSION_MASK,
                    memoryview(owner).cast("B")[pos + PYLOG_RECORDS_OFFSET:pos + h.length + PYLOG_LOG_OVERHEAD],
                    where)
                sections.keep.append(section)
                s.recs = PyBytes_AS_STRING(section)
                s.length = PyBytes_GET_SIZE(section)
            else:
                s.recs = base + pos + PYLOG_RECORDS_OFFSET
                s.length = <int64_t>h.length + PYLOG_LOG_OVERHEAD - PYLOG_RECORDS_OFFSET
        pos += <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
    return 0


cdef object _arrow_buffer(int64_t nbytes, void **address, bint zero):
    buf = _pa.allocate_buffer(max(nbytes, 1))
    address[0] = <void *><uintptr_t>buf.address
    if zero:
        memset(address[0], 0, <size_t>max(nbytes, 1))
    return buf


def decode_arrow(buffer, *, bint validate=True, bint include_control=False,
                 bint timestamp_type=False):
    """Decodes every complete batch in ``buffer`` into one ``pyarrow.RecordBatch``.

    Columns: ``offset`` int64, ``timestamp`` timestamp[ms], ``key`` and
    ``value`` binary (null for null), ``headers`` list<struct<key: string,
    value: binary>>; with ``timestamp_type``, a last column ``timestamp_type``
    int32 (0 CreateTime, 1 LogAppendTime: Kafka's TimestampType ids, from each
    batch's attributes). Binary columns switch to large_binary/large_string when
    a column exceeds 2 GiB. Control batches (transaction markers) are skipped
    unless ``include_control``. A trailing partial batch is ignored, as the
    next read will return it whole; corrupt data raises CorruptRecordError.
    """
    cdef _Buffer buf = _Buffer(buffer)
    cdef _Sections sections = _Sections.__new__(_Sections)
    cdef pylog_records_totals t
    cdef pylog_status st
    cdef pylog_arrow_out o
    cdef Py_ssize_t i
    cdef int rc = PYLOG_OK
    cdef int wide
    cdef int64_t n, width, row, j
    cdef int32_t *types
    cdef void *addr
    sections.keep = []
    _collect(sections, buf.ptr(), buf.size(), buf.obj, validate, include_control, 0)

    memset(&t, 0, sizeof(t))
    memset(&st, 0, sizeof(st))
    with nogil:
        for i in range(sections.count):
            rc = pylog_records_measure(sections.items[i].recs, sections.items[i].length,
                                       sections.items[i].count, &t, &st)
            if rc != PYLOG_OK:
                break
    if rc != PYLOG_OK:
        if sections.items[i].compressed:
            raise _corrupt(&st, sections.items[i].where, 0, u"of the decompressed records section")
        raise _corrupt(&st, sections.items[i].where, sections.items[i].where + PYLOG_RECORDS_OFFSET)

    n = t.records
    wide = max(t.key_bytes, t.value_bytes, t.header_key_bytes, t.header_value_bytes) > INT32_MAX
    width = 8 if wide else 4
    memset(&o, 0, sizeof(o))
    o.wide = wide
    o.rows_cap = n
    o.key_cap = t.key_bytes
    o.value_cap = t.value_bytes
    o.headers_cap = t.headers
    o.header_key_cap = t.header_key_bytes
    o.header_value_cap = t.header_value_bytes
    offsets_buf = _arrow_buffer(n * 8, &addr, False); o.offsets = <int64_t *>addr
    ts_buf = _arrow_buffer(n * 8, &addr, False); o.timestamps = <int64_t *>addr
    key_off = _arrow_buffer((n + 1) * width, &o.key_offsets, True)
    key_data = _arrow_buffer(t.key_bytes, &addr, False); o.key_data = <char *>addr
    key_valid = _arrow_buffer((n + 7) // 8, &addr, True); o.key_validity = <uint8_t *>addr
    value_off = _arrow_buffer((n + 1) * width, &o.value_offsets, True)
    value_data = _arrow_buffer(t.value_bytes, &addr, False); o.value_data = <char *>addr
    value_valid = _arrow_buffer((n + 7) // 8, &addr, True); o.value_validity = <uint8_t *>addr
    hlist_off = _arrow_buffer((n + 1) * 4, &addr, True); o.header_list_offsets = <int32_t *>addr
    hkey_off = _arrow_buffer((t.headers + 1) * width, &o.header_key_offsets, True)
    hkey_data = _arrow_buffer(t.header_key_bytes, &addr, False); o.header_key_data = <char *>addr
    hval_off = _arrow_buffer((t.headers + 1) * width, &o.header_value_offsets, True)
    hval_data = _arrow_buffer(t.header_value_bytes, &addr, False); o.header_value_data = <char *>addr
    hval_valid = _arrow_buffer((t.headers + 7) // 8, &addr, True); o.header_value_validity = <uint8_t *>addr

    with nogil:
        for i in range(sections.count):
            pylog_records_fill_ex(sections.items[i].recs, sections.items[i].length,
                                  sections.items[i].count, sections.items[i].base_offset,
                                  sections.items[i].base_timestamp, sections.items[i].log_append,
                                  sections.items[i].log_append_time, &o)
    if o.overflow or o.row != n or o.header_row != t.headers or o.key_pos != t.key_bytes \
            or o.value_pos != t.value_bytes or o.header_key_pos != t.header_key_bytes \
            or o.header_value_pos != t.header_value_bytes:
        raise BufferError("decode_arrow: the buffer changed while it was being decoded "
                          "(decode an immutable copy, e.g. bytes(buffer))")

    schema = ARROW_SCHEMA_LARGE if wide else ARROW_SCHEMA
    binary, header_key_type, header_fields, headers_type, int64_type, ts_type = \
        _WIDE_TYPES if wide else _NARROW_TYPES
    keys = _pa.Array.from_buffers(binary, n, [key_valid if o.key_nulls else None, key_off, key_data],
                                  null_count=o.key_nulls)
    values = _pa.Array.from_buffers(binary, n, [value_valid if o.value_nulls else None, value_off,
                                                value_data], null_count=o.value_nulls)
    header_keys = _pa.Array.from_buffers(header_key_type, t.headers,
                                         [None, hkey_off, hkey_data], null_count=0)
    header_values = _pa.Array.from_buffers(
        binary, t.headers, [hval_valid if o.header_value_nulls else None, hval_off, hval_data],
        null_count=o.header_value_nulls)
    header_structs = _pa.StructArray.from_arrays([header_keys, header_values],
                                                 fields=header_fields)
    headers = _pa.Array.from_buffers(headers_type, n, [None, hlist_off],
                                     null_count=0, children=[header_structs])
    columns = [
        _pa.Array.from_buffers(int64_type, n, [None, offsets_buf], null_count=0),
        _pa.Array.from_buffers(ts_type, n, [None, ts_buf], null_count=0),
        keys, values, headers,
    ]
    if timestamp_type:
        # One value per batch, spread over its records: a C loop, no objects.
        types_buf = _arrow_buffer(n * 4, &addr, False)
        types = <int32_t *>addr
        row = 0
        with nogil:
            for i in range(sections.count):
                for j in range(sections.items[i].count):
                    types[row + j] = 1 if sections.items[i].log_append else 0
                row += sections.items[i].count
        columns.append(_pa.Array.from_buffers(_pa.int32(), n, [None, types_buf], null_count=0))
        schema = schema.append(_pa.field("timestamp_type", _pa.int32(), nullable=False))
    return _pa.RecordBatch.from_arrays(columns, schema=schema)
