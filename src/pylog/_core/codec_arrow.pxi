# decode_arrow: batches -> one pyarrow.RecordBatch, without per-record Python objects.
#
# Three passes: (1) with the GIL, walk and validate batch headers,
# decompressing compressed sections and up-converting legacy messages;
# (2) without it, measure every records section; allocate one block from
# Arrow's memory pool for every column's buffers, at the exact sizes; (3)
# without the GIL, fill them. The block is then handed to Arrow as one tree of
# arrays through the C Data Interface (arrow_export.h): one import call.

# HEADER_TYPE, ARROW_SCHEMA and ARROW_SCHEMA_LARGE are module attributes built
# with pyarrow's first import (__getattr__ below).
cdef dict _ARROW_TYPES = None
cdef tuple _SCHEMAS = None            # by 2 * timestamp_type + wide
cdef tuple _ARROW_NARROW = None, _ARROW_WIDE = None
cdef object _import_batch = None


cdef int _load_arrow() except -1:
    """Imports pyarrow and builds the codec's Arrow types (once)."""
    global _pa, _ARROW_TYPES, _SCHEMAS, _ARROW_NARROW, _ARROW_WIDE, _import_batch
    import pyarrow as pa
    header_type = pa.struct([pa.field("key", pa.string(), nullable=False),
                             pa.field("value", pa.binary())])
    schema = pa.schema([
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms"), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("item", header_type, nullable=False)), nullable=False),
    ])
    large = pa.schema([
        schema.field("offset"),
        schema.field("timestamp"),
        pa.field("key", pa.large_binary()),
        pa.field("value", pa.large_binary()),
        pa.field("headers", pa.list_(pa.field("item", pa.struct([
            pa.field("key", pa.large_string(), nullable=False),
            pa.field("value", pa.large_binary())]), nullable=False)), nullable=False),
    ])
    timestamp_type = pa.field("timestamp_type", pa.int32(), nullable=False)
    _ARROW_TYPES = {"HEADER_TYPE": header_type, "ARROW_SCHEMA": schema,
                    "ARROW_SCHEMA_LARGE": large}
    _SCHEMAS = (schema, large, schema.append(timestamp_type), large.append(timestamp_type))
    _ARROW_NARROW = (pa.binary(), pa.string())
    _ARROW_WIDE = (pa.large_binary(), pa.large_string())
    # pyarrow's C Data Interface entry (low-level, public since pyarrow 0.17; the
    # PyCapsule protocol would also need an exported ArrowSchema per call).
    _import_batch = pa.RecordBatch._import_from_c
    _pa = pa                            # last: the types above are set when _pa is
    return 0


def __getattr__(name):
    """HEADER_TYPE, ARROW_SCHEMA, ARROW_SCHEMA_LARGE (PEP 562: importing the codec
    does not import pyarrow)."""
    if name in ("HEADER_TYPE", "ARROW_SCHEMA", "ARROW_SCHEMA_LARGE"):
        _pyarrow()
        return _ARROW_TYPES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


cdef extern from "arrow_export.h":
    enum:
        PYLOG_BX_OFFSETS, PYLOG_BX_TIMESTAMPS, PYLOG_BX_KEY_VALID, PYLOG_BX_KEY_OFFSETS,
        PYLOG_BX_KEY_DATA, PYLOG_BX_VALUE_VALID, PYLOG_BX_VALUE_OFFSETS, PYLOG_BX_VALUE_DATA,
        PYLOG_BX_HEADER_LIST, PYLOG_BX_HKEY_OFFSETS, PYLOG_BX_HKEY_DATA, PYLOG_BX_HVAL_VALID,
        PYLOG_BX_HVAL_OFFSETS, PYLOG_BX_HVAL_DATA, PYLOG_BX_TYPES, PYLOG_BX_COUNT
    struct ArrowArray:
        void (*release)(ArrowArray *)
    ctypedef struct pylog_arrow_tree:
        ArrowArray arrays[1]
    int64_t pylog_arrow_layout(int64_t rows, int64_t headers, int width, int64_t key_bytes,
                               int64_t value_bytes, int64_t hkey_bytes, int64_t hval_bytes,
                               int types, int64_t *at) nogil
    pylog_arrow_tree *pylog_arrow_tree_new(object owner, char *base, const int64_t *at,
                                           int64_t rows, int64_t headers, int64_t key_nulls,
                                           int64_t value_nulls, int64_t hval_nulls, int types)
    void pylog_arrow_root_release(ArrowArray *root)


cdef extern from "varint.h":
    int pylog_read_varlong(const char **pp, const char *end, int max_bytes, int64_t *out) nogil


cdef struct _Aborted:
    # read_committed (Kafka's consumer, CompletedFetch): the aborted transactions of
    # the fetched range by first offset, and the producers whose aborted transaction
    # is being read: their transactional batches are skipped until their ABORT marker.
    int64_t *pids
    int64_t *firsts
    Py_ssize_t count
    Py_ssize_t next              # the first transaction not reached yet
    int64_t *open_pids
    Py_ssize_t open_count


cdef int _control_type(const char *recs, int64_t length) noexcept nogil:
    """The type of a control batch's first record (its key: version int16, type
    int16; 0 ABORT, 1 COMMIT), or -1 when the record cannot be read."""
    cdef const char *p = recs
    cdef const char *end = recs + length
    cdef int64_t v
    if pylog_read_varlong(&p, end, 5, &v) < 0 or p >= end:      # length
        return -1
    p += 1                                                      # attributes
    if pylog_read_varlong(&p, end, 10, &v) < 0 or pylog_read_varlong(&p, end, 5, &v) < 0:
        return -1                                               # timestamp, offset deltas
    if pylog_read_varlong(&p, end, 5, &v) < 0 or v < 4 or end - p < 4:
        return -1                                               # key length
    return ((<uint8_t>p[2]) << 8) | <uint8_t>p[3]


cdef bint _in_aborted(_Aborted *ab, const pylog_batch_header *h, const char *batch) noexcept nogil:
    """Whether the batch at `batch` belongs to an aborted transaction (Kafka's
    consumeAbortedTransactionsUpTo, containsAbortMarker, isBatchAborted). A
    producer's ABORT marker ends its transaction: it is not skipped here (control
    batches are dropped as ever)."""
    cdef int64_t last = _last_offset(h)
    cdef Py_ssize_t i
    cdef bint found
    while ab.next < ab.count and ab.firsts[ab.next] <= last:
        found = False
        for i in range(ab.open_count):
            found = found or ab.open_pids[i] == ab.pids[ab.next]
        if not found:
            ab.open_pids[ab.open_count] = ab.pids[ab.next]
            ab.open_count += 1
        ab.next += 1
    if h.attributes & PYLOG_ATTR_CONTROL:
        if _control_type(batch + PYLOG_RECORDS_OFFSET,
                         <int64_t>h.length + PYLOG_LOG_OVERHEAD - PYLOG_RECORDS_OFFSET) == 0:
            for i in range(ab.open_count):
                if ab.open_pids[i] == h.producer_id:
                    ab.open_count -= 1
                    ab.open_pids[i] = ab.open_pids[ab.open_count]
                    break
        return False
    if not (h.attributes & PYLOG_ATTR_TRANSACTIONAL):
        return False
    for i in range(ab.open_count):
        if ab.open_pids[i] == h.producer_id:
            return True
    return False


cdef tuple _first_and_producer(object txn):
    """(first_offset, producer_id) of an aborted transaction: an object with those
    attributes (a Fetch response's AbortedTransaction, storage's AbortedTxn) or a
    (producer_id, first_offset) pair."""
    pid = getattr(txn, "producer_id", None)
    if pid is None:
        return (int(txn[1]), int(txn[0]))
    return (int(txn.first_offset), int(pid))


@cython.final
cdef class _AbortedList:
    """The C arrays of decode_arrow's `aborted_transactions`, sorted by first offset."""
    cdef _Aborted ab

    def __dealloc__(self):
        PyMem_Free(self.ab.pids)

    @staticmethod
    cdef _AbortedList make(object aborted):
        cdef _AbortedList out = _AbortedList.__new__(_AbortedList)
        cdef list items = sorted([_first_and_producer(t) for t in aborted])
        cdef Py_ssize_t n = len(items), i
        out.ab.pids = <int64_t *>PyMem_Malloc(<size_t>(3 * n + 1) * sizeof(int64_t))
        if out.ab.pids == NULL:
            raise MemoryError()
        out.ab.firsts = out.ab.pids + n
        out.ab.open_pids = out.ab.pids + 2 * n
        out.ab.count = n
        for i in range(n):
            out.ab.firsts[i], out.ab.pids[i] = items[i]
        return out


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
    const char *crc_batch  # an uncompressed batch whose CRC is still to check, or NULL
    int64_t crc_size       # its bytes


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
                  bint converted=False, _Aborted *aborted=NULL) except -1:
    """Pass 1: adds the records section of every complete batch in base[0:size].

    Batch positions are where_base + pos; for an up-converted legacy message
    (`converted`) every batch is reported at where_base, the message itself.
    The CRC of an uncompressed v2 batch is left to pass 2 (`crc_batch`), which
    checks every one in the same GIL-free section as the measure: one GIL
    release a call, where each batch of 16 KiB or more released it once. A
    compressed batch is checked here, before it is inflated. An error here
    first checks the CRCs left so far: the earliest bad batch is the one named.
    """
    cdef Py_ssize_t pos = 0, where
    cdef pylog_batch_header h
    cdef pylog_status st
    cdef _Section *s
    cdef int rc
    cdef bytes section, up
    memset(&st, 0, sizeof(st))
    try:
        while pos < size:
            where = where_base if converted else where_base + pos
            rc = pylog_batch_check(base + pos, size - pos, 0, &h, &st)
            if rc == PYLOG_INCOMPLETE:
                break
            if rc == PYLOG_OK and validate and (h.magic < 2 or (
                    h.attributes & PYLOG_ATTR_COMPRESSION_MASK) != 0 or (
                    h.attributes & PYLOG_ATTR_CONTROL and not include_control)):
                # Checked now: a legacy message (its CRC-32), a compressed batch (before
                # it is inflated), a control batch that is skipped.
                if <int64_t>h.length + PYLOG_LOG_OVERHEAD >= NOGIL_MIN_BYTES:
                    with nogil:
                        rc = pylog_batch_check(base + pos, size - pos, 1, &h, &st)
                else:
                    rc = pylog_batch_check(base + pos, size - pos, 1, &h, &st)
            if rc != PYLOG_OK:
                raise _corrupt(&st, where)
            if aborted != NULL and h.magic >= 2 and h.producer_id >= 0 and \
                    _in_aborted(aborted, &h, base + pos):
                # An aborted transaction's batch: not decoded, its CRC checked here.
                if validate and pylog_batch_check(base + pos, size - pos, 1, &h, &st) != PYLOG_OK:
                    raise _corrupt(&st, where)
                pos += <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
                continue
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
                s.crc_batch = NULL
                s.crc_size = 0
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
                    if validate:
                        s.crc_batch = base + pos
                        s.crc_size = <int64_t>h.length + PYLOG_LOG_OVERHEAD
            pos += <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
    except Exception:
        _check_crcs(sections)       # an earlier batch's bad CRC, if any, is the error
        raise
    return 0


cdef int _check_crcs_nogil(_Sections sections, pylog_status *st) noexcept nogil:
    """Checks the CRCs pass 1 left, in batch order: the index of the first that
    fails (and clears every one checked), or -1."""
    cdef pylog_batch_header h
    cdef Py_ssize_t i
    for i in range(sections.count):
        if sections.items[i].crc_batch != NULL:
            if pylog_batch_check(sections.items[i].crc_batch, sections.items[i].crc_size, 1,
                                 &h, st) != PYLOG_OK:
                return <int>i
            sections.items[i].crc_batch = NULL
    return -1


cdef int _check_crcs(_Sections sections) except -1:
    """Raises the CorruptRecordError of the first batch whose CRC (left by pass 1) fails."""
    cdef pylog_status st
    cdef int bad
    memset(&st, 0, sizeof(st))
    with nogil:
        bad = _check_crcs_nogil(sections, &st)
    if bad >= 0:
        raise _corrupt(&st, sections.items[bad].where)
    return 0


def decode_arrow(buffer, *, bint validate=True, bint include_control=False,
                 bint timestamp_type=False, aborted_transactions=None):
    """Decodes every complete batch in ``buffer`` into one ``pyarrow.RecordBatch``.

    Columns: ``offset`` int64, ``timestamp`` timestamp[ms], ``key`` and
    ``value`` binary (null for null), ``headers`` list<struct<key: string,
    value: binary>>; with ``timestamp_type``, a last column ``timestamp_type``
    int32 (0 CreateTime, 1 LogAppendTime: Kafka's TimestampType ids, from each
    batch's attributes). Binary columns switch to large_binary/large_string when
    a column exceeds 2 GiB. Control batches (transaction markers) are skipped
    unless ``include_control``. A trailing partial batch is ignored, as the
    next read will return it whole; corrupt data raises CorruptRecordError.

    ``aborted_transactions`` (read_committed, as Kafka's consumer reads a fetch
    response): the aborted transactions of the partition's range these batches
    come from: objects with ``producer_id`` and ``first_offset`` (a Fetch response's
    ``aborted_transactions``, pylog.storage's AbortedTxn) or ``(producer_id,
    first_offset)`` pairs. From a transaction's first offset on, its producer's
    transactional batches are skipped until that producer's ABORT marker: their
    records are not decoded.
    The batches must be one partition's.
    """
    cdef _Buffer buf = _Buffer(buffer)
    cdef _Sections sections = _Sections.__new__(_Sections)
    cdef Py_ssize_t i
    cdef _AbortedList aborted = _AbortedList.make(aborted_transactions) \
        if aborted_transactions else None
    sections.keep = []
    _collect(sections, buf.ptr(), buf.size(), buf.obj, validate, include_control, 0, False,
             &aborted.ab if aborted is not None else NULL)

    # The measure pass keeps each record's fields (40 bytes a record) for the
    # fill, which then copies instead of reading every varint again. A section claiming more
    # records than its bytes can hold (a record takes at least 7) is measured
    # without room for them, and fails there.
    cdef pylog_parsed_record *parsed = NULL
    cdef int64_t rows = 0
    for i in range(sections.count):
        if sections.items[i].count < 0 or sections.items[i].count > sections.items[i].length // 7:
            rows = -1
            break
        rows += sections.items[i].count
    if rows > 0:
        parsed = <pylog_parsed_record *>PyMem_RawMalloc(<size_t>rows * sizeof(pylog_parsed_record))
        if parsed == NULL:
            raise MemoryError()
    try:
        return _decode_sections(sections, parsed, timestamp_type)
    finally:
        PyMem_RawFree(parsed)


cdef object _decode_sections(_Sections sections, pylog_parsed_record *parsed,
                             bint timestamp_type):
    """decode_arrow's passes 2 and 3 over the collected sections; `parsed`
    (or NULL) has room for every record's fields."""
    cdef pylog_records_totals t
    cdef pylog_status st
    cdef pylog_arrow_out o
    cdef Py_ssize_t i
    cdef int rc = PYLOG_OK
    cdef int wide
    cdef int64_t n, row, j
    cdef int32_t *types
    cdef int bad
    memset(&t, 0, sizeof(t))
    memset(&st, 0, sizeof(st))
    with nogil:
        bad = _check_crcs_nogil(sections, &st)
        row = 0
        for i in range(sections.count if bad < 0 else 0):
            rc = pylog_records_measure(sections.items[i].recs, sections.items[i].length,
                                       sections.items[i].count, &t, &st,
                                       parsed + row if parsed != NULL else NULL)
            if rc != PYLOG_OK:
                break
            row += sections.items[i].count
    if bad >= 0:
        raise _corrupt(&st, sections.items[bad].where)
    if rc != PYLOG_OK:
        if sections.items[i].compressed:
            raise _corrupt(&st, sections.items[i].where, 0, u"of the decompressed records section")
        raise _corrupt(&st, sections.items[i].where, sections.items[i].where + PYLOG_RECORDS_OFFSET)

    n = t.records
    if n and parsed == NULL:      # measured without room: it cannot have passed
        raise SystemError("decode_arrow: records measured without their fields")
    wide = max(t.key_bytes, t.value_bytes, t.header_key_bytes, t.header_value_bytes) > INT32_MAX
    cdef int64_t at[PYLOG_BX_COUNT]
    cdef int64_t total = pylog_arrow_layout(n, t.headers, 8 if wide else 4, t.key_bytes,
                                            t.value_bytes, t.header_key_bytes,
                                            t.header_value_bytes, timestamp_type, at)
    block = _pyarrow().allocate_buffer(total)
    cdef char *base = <char *><uintptr_t>block.address
    memset(&o, 0, sizeof(o))
    o.wide = wide
    o.rows_cap = n
    o.key_cap = t.key_bytes
    o.value_cap = t.value_bytes
    o.headers_cap = t.headers
    o.header_key_cap = t.header_key_bytes
    o.header_value_cap = t.header_value_bytes
    o.offsets = <int64_t *>(base + at[PYLOG_BX_OFFSETS])
    o.timestamps = <int64_t *>(base + at[PYLOG_BX_TIMESTAMPS])
    o.key_offsets = base + at[PYLOG_BX_KEY_OFFSETS]
    o.key_data = base + at[PYLOG_BX_KEY_DATA]
    o.key_validity = <uint8_t *>(base + at[PYLOG_BX_KEY_VALID])
    o.value_offsets = base + at[PYLOG_BX_VALUE_OFFSETS]
    o.value_data = base + at[PYLOG_BX_VALUE_DATA]
    o.value_validity = <uint8_t *>(base + at[PYLOG_BX_VALUE_VALID])
    o.header_list_offsets = <int32_t *>(base + at[PYLOG_BX_HEADER_LIST])
    o.header_key_offsets = base + at[PYLOG_BX_HKEY_OFFSETS]
    o.header_key_data = base + at[PYLOG_BX_HKEY_DATA]
    o.header_value_offsets = base + at[PYLOG_BX_HVAL_OFFSETS]
    o.header_value_data = base + at[PYLOG_BX_HVAL_DATA]
    o.header_value_validity = <uint8_t *>(base + at[PYLOG_BX_HVAL_VALID])

    with nogil:
        # The fill ORs validity bits and writes each offset after the first.
        memset(o.key_validity, 0, <size_t>(n + 7) // 8)
        memset(o.value_validity, 0, <size_t>(n + 7) // 8)
        memset(o.header_value_validity, 0, <size_t>(t.headers + 7) // 8)
        memset(o.key_offsets, 0, 8)
        memset(o.value_offsets, 0, 8)
        memset(o.header_key_offsets, 0, 8)
        memset(o.header_value_offsets, 0, 8)
        o.header_list_offsets[0] = 0
        row = 0
        for i in range(sections.count):
            pylog_records_fill_parsed(sections.items[i].recs, parsed + row,
                                      sections.items[i].count, sections.items[i].base_offset,
                                      sections.items[i].base_timestamp,
                                      sections.items[i].log_append,
                                      sections.items[i].log_append_time, &o)
            row += sections.items[i].count
        if timestamp_type:
            # One value per batch, spread over its records.
            types = <int32_t *>(base + at[PYLOG_BX_TYPES])
            row = 0
            for i in range(sections.count):
                for j in range(sections.items[i].count):
                    types[row + j] = 1 if sections.items[i].log_append else 0
                row += sections.items[i].count
    if o.overflow or o.row != n or o.header_row != t.headers or o.key_pos != t.key_bytes \
            or o.value_pos != t.value_bytes or o.header_key_pos != t.header_key_bytes \
            or o.header_value_pos != t.header_value_bytes:
        raise BufferError("decode_arrow: the buffer changed while it was being decoded "
                          "(decode an immutable copy, e.g. bytes(buffer))")

    cdef pylog_arrow_tree *tree = pylog_arrow_tree_new(
        block, base, at, n, t.headers, o.key_nulls, o.value_nulls, o.header_value_nulls,
        timestamp_type)
    if tree == NULL:
        raise MemoryError()
    # The root goes in a copy on this stack: Arrow moves it out (marking the
    # copy released) and from then on owns the tree, even if the import then
    # fails; a copy still unreleased afterwards was never taken, and is freed here.
    cdef ArrowArray root = tree.arrays[0]
    try:
        return _import_batch(<uintptr_t>&root, _SCHEMAS[2 * timestamp_type + wide])
    finally:
        if root.release != NULL:
            pylog_arrow_root_release(&root)
