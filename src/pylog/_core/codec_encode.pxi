# encode_batch and encode_control_batch (docs/FORMAT.md, sections 2-5).


cdef int _timestamp_type_bit(object timestamp_type) except -1:
    if timestamp_type in (CREATE_TIME, u"CreateTime", 0):
        return 0
    if timestamp_type in (LOG_APPEND_TIME, u"LogAppendTime", 1):
        return PYLOG_ATTR_TIMESTAMP_TYPE
    raise ValueError(f"timestamp_type must be 'create' or 'log_append', not {timestamp_type!r}")


cdef extern from "Python.h":
    PyObject *_bytes_new "PyBytes_FromStringAndSize"(const char *, Py_ssize_t)
    int _bytes_resize "_PyBytes_Resize"(PyObject **, Py_ssize_t)


cdef bytes _encode_into_bound(pylog_record_input *inp, pylog_batch_header *h, int64_t bound,
                              Py_ssize_t head):
    """Encodes inp's records after `head` bytes of a bytes object allocated for
    `bound` record bytes, in one pass with the GIL released once, then trims it
    (_PyBytes_Resize). Sets h's timestamps; returns the bytes with head left for
    the caller."""
    cdef pylog_status st
    cdef int64_t base_ts = 0, max_ts = 0, written
    cdef PyObject *raw = _bytes_new(NULL, head + bound)
    cdef char *buf
    if raw == NULL:
        raise MemoryError()
    buf = PyBytes_AS_STRING(<object>raw)
    memset(&st, 0, sizeof(st))
    if inp.count >= 64:
        with nogil:
            written = pylog_records_encode(inp, buf + head, &base_ts, &max_ts, &st)
            if written >= 0 and head:
                h.base_timestamp = base_ts
                h.max_timestamp = max_ts
                pylog_batch_header_finish(buf, head + written, h)
    else:
        written = pylog_records_encode(inp, buf + head, &base_ts, &max_ts, &st)
        if written >= 0 and head:
            h.base_timestamp = base_ts
            h.max_timestamp = max_ts
            pylog_batch_header_finish(buf, head + written, h)
    if written < 0:
        Py_DECREF(<object>raw)
        raise MessageTooLargeError(
            f"record {st.position} encodes to {st.value} bytes, more than Kafka's int32 limit")
    if written > bound:             # a broken bound (pylog_records_bound): never expected
        raise SystemError(f"encoded {written} record bytes into a bound of {bound}")
    h.base_timestamp = base_ts
    h.max_timestamp = max_ts
    if head + written != head + bound and _bytes_resize(&raw, head + written) < 0:
        raise MemoryError()         # raw was freed
    out = <bytes>raw
    Py_DECREF(out)                  # the new reference of `out` replaces raw's
    return out


cdef bytes _assemble(pylog_record_input *inp, pylog_batch_header *h, int codec, object level,
                     int64_t bound=-1):
    """Encodes inp's records into a finished batch; h carries the fixed fields.
    `bound`, when known and under EXACT_SIZE_BYTES, is an upper bound of the
    records section: one pass with the GIL released once (_encode_into_bound).
    Otherwise the section is sized first and written into an output of its
    exact size (_encode_exact)."""
    if 0 <= bound < EXACT_SIZE_BYTES:
        if codec == 0:
            return _encode_into_bound(inp, h, bound, PYLOG_RECORD_BATCH_OVERHEAD)
        section = _encode_into_bound(inp, h, bound, 0)
        return _finish_compressed(section, h, codec, level)
    cdef const int64_t *caller_ts = inp.timestamps
    cdef const int32_t *caller_deltas = inp.offset_deltas
    cdef int64_t *own_ts = NULL
    cdef int32_t *own_deltas = NULL
    try:
        # The sizing and the writing pass must read the same input, and the
        # writer has no bound: the caller's timestamp and offset-delta arrays,
        # which could change between the passes, are copied (the lengths were
        # captured when the columns were gathered).
        if caller_ts != NULL:
            own_ts = <int64_t *>PyMem_Malloc(<size_t>inp.count * sizeof(int64_t))
            if own_ts == NULL:
                raise MemoryError()
            memcpy(own_ts, caller_ts, <size_t>inp.count * sizeof(int64_t))
            inp.timestamps = own_ts
        if caller_deltas != NULL:
            own_deltas = <int32_t *>PyMem_Malloc(<size_t>inp.count * sizeof(int32_t))
            if own_deltas == NULL:
                raise MemoryError()
            memcpy(own_deltas, caller_deltas, <size_t>inp.count * sizeof(int32_t))
            inp.offset_deltas = own_deltas
        return _encode_exact(inp, h, codec, level)
    finally:
        inp.timestamps = caller_ts
        inp.offset_deltas = caller_deltas
        PyMem_Free(own_ts)
        PyMem_Free(own_deltas)


cdef bytes _encode_exact(pylog_record_input *inp, pylog_batch_header *h, int codec, object level):
    """_assemble's two passes: the records section sized, then written into an
    output of exactly that size. Big outputs take this path, not a bound
    trimmed afterwards: glibc maps a block that big afresh, and its dynamic
    mmap threshold follows the trimmed size, which the next bound exceeds
    again, so every call met new pages (a page fault per page, unless the
    process raised the threshold as pylog.common.memory.tune_malloc does)."""
    cdef pylog_status st
    cdef int64_t base_ts = 0, max_ts = 0, records_size, total, written
    cdef bytes out, section
    cdef char *buf
    cdef bint release = inp.count >= 64
    memset(&st, 0, sizeof(st))
    if release:
        with nogil:
            records_size = pylog_records_size(inp, &base_ts, &max_ts, &st)
    else:
        records_size = pylog_records_size(inp, &base_ts, &max_ts, &st)
    if records_size < 0:
        raise MessageTooLargeError(
            f"record {st.position} encodes to {st.value} bytes, more than Kafka's int32 limit")
    h.base_timestamp = base_ts
    h.max_timestamp = max_ts
    if codec == 0:
        total = PYLOG_RECORD_BATCH_OVERHEAD + records_size
        if total - PYLOG_LOG_OVERHEAD > INT32_MAX:
            raise MessageTooLargeError(
                f"batch of {inp.count} records encodes to {total} bytes, more than Kafka's "
                f"int32 batch length allows")
        out = PyBytes_FromStringAndSize(NULL, total)
        buf = PyBytes_AS_STRING(out)
        if total >= NOGIL_MIN_BYTES:
            with nogil:
                written = pylog_records_write(inp, base_ts, buf + PYLOG_RECORD_BATCH_OVERHEAD)
                pylog_batch_header_finish(buf, total, h)
        else:
            written = pylog_records_write(inp, base_ts, buf + PYLOG_RECORD_BATCH_OVERHEAD)
            pylog_batch_header_finish(buf, total, h)
        if written != records_size:
            raise SystemError(f"wrote {written} record bytes where {records_size} were sized")
        return out
    section = PyBytes_FromStringAndSize(NULL, records_size)
    buf = PyBytes_AS_STRING(section)
    with nogil:
        written = pylog_records_write(inp, base_ts, buf)
    if written != records_size:
        raise SystemError(f"wrote {written} record bytes where {records_size} were sized")
    return _finish_compressed(section, h, codec, level)


cdef bytes _finish_compressed(bytes section, pylog_batch_header *h, int codec, object level):
    """Compresses a records section and frames it as a batch (h's timestamps set)."""
    cdef int64_t total
    cdef bytes out
    cdef char *buf
    compressed = _compression.compress(codec, section, level)
    del section
    cdef Py_ssize_t clen = len(compressed)
    total = PYLOG_RECORD_BATCH_OVERHEAD + clen
    if total - PYLOG_LOG_OVERHEAD > INT32_MAX:
        raise MessageTooLargeError(f"compressed batch of {total} bytes exceeds Kafka's int32 length")
    out = PyBytes_FromStringAndSize(NULL, total)
    buf = PyBytes_AS_STRING(out)
    cdef const unsigned char[::1] cview = compressed
    with nogil:
        if clen:
            memcpy(buf + PYLOG_RECORD_BATCH_OVERHEAD, &cview[0], <size_t>clen)
        pylog_batch_header_finish(buf, total, h)
    return out


def encode_batch(values, keys=None, timestamps=None, headers=None, *,
                 int64_t base_offset=0, compression="none", timestamp_type=CREATE_TIME,
                 int64_t producer_id=-1, int producer_epoch=-1, int base_sequence=-1,
                 bint transactional=False, int partition_leader_epoch=-1,
                 compression_level=None, offset_deltas=None):
    """Encodes records into one Kafka record batch v2 and returns its bytes.

    ``values`` and ``keys`` are sequences of bytes-like objects or ``None``
    (a null), or pyarrow binary/string arrays; ``keys=None`` makes every key
    null. ``timestamps`` are milliseconds since the epoch: one int for all,
    a sequence or numpy int64 array, or None for now. ``headers`` holds per
    record a list of ``(str, bytes | None)`` pairs (or None).

    ``compression`` is ``"none"``, ``"gzip"``, ``"snappy"``, ``"lz4"`` or
    ``"zstd"``. Offsets are ``base_offset + i`` unless ``offset_deltas``
    gives them. Encoding and checksumming run with the GIL released.

    Raises ValueError for no records (Kafka never writes an empty batch of
    records) and for ``transactional=True`` without a ``producer_id``, and
    InvalidTimestampError (a ValueError) for a timestamp below -1.
    """
    return _encode_batch(values, keys, timestamps, headers, base_offset, compression,
                         timestamp_type, producer_id, producer_epoch, base_sequence, transactional,
                         partition_leader_epoch, compression_level, offset_deltas, True)


cdef bytes _encode_batch(values, keys, timestamps, headers, int64_t base_offset, compression,
                         timestamp_type, int64_t producer_id, int producer_epoch, int base_sequence,
                         bint transactional, int partition_leader_epoch, compression_level,
                         offset_deltas, bint check_timestamps):
    """encode_batch; without check_timestamps, timestamps below -1 are written as they are
    (decode_arrow's view of legacy messages, which may hold any int64)."""
    cdef Py_ssize_t n = len(values)
    cdef pylog_record_input inp
    cdef pylog_batch_header h
    # "none" (the producer's default) without a Python call.
    cdef int codec = 0 if compression == "none" else _compression.codec_id(compression)
    if n == 0:
        raise ValueError("encode_batch needs at least one record: Kafka never writes a batch "
                         "of records with none")
    if n > INT32_MAX:
        raise MessageTooLargeError(f"{n} records do not fit one batch (at most {INT32_MAX})")
    if not -32768 <= producer_epoch <= 32767:
        raise ValueError(f"producer_epoch {producer_epoch} is outside int16")
    if transactional and producer_id < 0:
        raise ValueError(f"a transactional batch needs a producer id >= 0, not "
                         f"producer_id={producer_id}")
    memset(&inp, 0, sizeof(inp))
    memset(&h, 0, sizeof(h))
    inp.count = n
    cdef _Column value_col = _column(values, n, u"values")
    cdef _Column key_col = _column(keys, n, u"keys")
    cdef _Headers header_col = _headers(headers, n)
    ts_keep = _timestamps(timestamps, n, &inp, check_timestamps)
    delta_keep = _offset_deltas(offset_deltas, n, &inp)
    inp.values = value_col.col
    inp.keys = key_col.col
    inp.headers = header_col.h
    h.base_offset = base_offset
    h.partition_leader_epoch = partition_leader_epoch
    h.attributes = <int16_t>(codec | _timestamp_type_bit(timestamp_type) |
                             (PYLOG_ATTR_TRANSACTIONAL if transactional else 0))
    if n == 0:
        h.last_offset_delta = 0
    elif inp.offset_deltas != NULL:
        h.last_offset_delta = inp.offset_deltas[n - 1]
    else:
        h.last_offset_delta = <int32_t>(n - 1)
    h.producer_id = producer_id
    h.producer_epoch = <int16_t>producer_epoch
    h.base_sequence = base_sequence
    h.records_count = <int32_t>n
    cdef int64_t bound = pylog_records_bound(&inp, key_col.data_bytes, value_col.data_bytes,
                                             header_col.data_bytes)
    return _assemble(&inp, &h, codec, compression_level, bound)


cdef extern from "Python.h":
    Py_ssize_t _list_size "PyList_GET_SIZE"(object)
    PyObject *_list_item "PyList_GET_ITEM"(object, Py_ssize_t)
    object _tuple_new "PyTuple_New"(Py_ssize_t)
    void _tuple_set "PyTuple_SET_ITEM"(object, Py_ssize_t, PyObject *)
    void _incref "Py_INCREF"(PyObject *)


cdef int _int64_rows(object rows, Py_buffer *view) except -1:
    """Exports a contiguous int64 array of row numbers (numpy's own buffer export:
    a Cython typed memoryview costs ten times more, for groups of a few rows)."""
    try:
        PyObject_GetBuffer(rows, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except (TypeError, ValueError, BufferError) as exc:
        raise TypeError(f"each group of rows must be a contiguous one-dimensional int64 "
                        f"array ({exc})") from None
    if view.itemsize != 8 or view.ndim != 1 or view.format == NULL or \
            view.format[0] in (b'>', b'!') or view.format[len(view.format) - 1] not in (b'l', b'q'):
        PyBuffer_Release(view)
        raise TypeError("each group of rows must be a contiguous one-dimensional int64 "
                        "array")
    return 0


cdef _Column _rows_column(list column, const Py_buffer *groups, Py_ssize_t ngroups,
                          Py_ssize_t n, str name):
    """The column of the items column[r] for r in each group in turn (exported
    int64 row arrays), gathered in one pass: each item into a new tuple (which
    keeps it alive while the encoder reads it without the GIL) and its pointer
    and length (bytes and None directly, other bytes-likes through the buffer
    protocol). An item that is not bytes-like or None is refused here, named by
    its row."""
    cdef tuple keep = _tuple_new(n)
    cdef _Column c = _pointer_column(keep, n)
    cdef Py_ssize_t g, i, count, j = 0, size = _list_size(column)
    cdef const int64_t *rows
    cdef PyObject *item
    cdef int64_t data_bytes = 0
    cdef Py_ssize_t fast
    for g in range(ngroups):
        rows = <const int64_t *>groups[g].buf
        count = groups[g].shape[0]
        if j + count > n:
            raise ValueError("the groups changed while they were read")
        # bytes and None in one C loop (gather.h); the rest item by item below.
        fast = pylog_gather_rows_keep(PySequence_Fast_ITEMS(column), size, rows, count,
                                      <PyObject *>keep, j, c.ptrs, c.lens, &data_bytes)
        j += fast
        for i in range(fast, count):
            if not 0 <= rows[i] < size or j >= n:
                raise IndexError(f"row {rows[i]} is outside the {size} records")
            item = _list_item(column, rows[i])
            _incref(item)
            _tuple_set(keep, j, item)
            if PyBytes_CheckExact(<object>item):
                c.ptrs[j] = PyBytes_AS_STRING(<object>item)
                c.lens[j] = PyBytes_GET_SIZE(<object>item)
                data_bytes += c.lens[j]
            elif item == <PyObject *>None:
                c.ptrs[j] = NULL
                c.lens[j] = -1
            elif PyObject_CheckBuffer(<object>item):
                _bytes_like(<object>item, c.views, &c.ptrs[j], &c.lens[j], name, rows[i])
                data_bytes += c.lens[j]
            else:
                raise TypeError(
                    f"{name}[{rows[i]}] is a {type(<object>item).__name__}, not bytes-like "
                    f"or None" + (f" (encode the string first)"
                                  if isinstance(<object>item, str) else ""))
            j += 1
    if j != n:
        raise ValueError("the groups changed while they were read")
    c.data_bytes = data_bytes
    return c


cdef int64_t _span_bytes(_Column c, Py_ssize_t start, Py_ssize_t count):
    """Key or value bytes of entries start .. start+count of a pointer column."""
    cdef int64_t total = 0
    cdef Py_ssize_t i
    if c.col.kind != PYLOG_COL_PTRS:
        return 0
    for i in range(start, start + count):
        if c.lens[i] > 0:
            total += c.lens[i]
    return total


def encode_groups(list values, keys, int64_t timestamp, list groups, *, compression="none",
                  int64_t producer_id=-1, int producer_epoch=-1, base_sequences=None):
    """One record batch v2 per group of row numbers: the batch of ``groups[g]`` (an
    int64 array) holds the records ``values[r]``, ``keys[r]`` for each row r of it,
    in its order, all with ``timestamp`` (ms), and ``base_sequences[g]`` when given.

    The bytes are those of ``encode_batch`` on the same rows (a test checks). It
    is send_batch's encoder for the small batches of one call: the rows of every
    group are gathered in one pass, with no tuple and no call per batch.
    ``values`` is a list of bytes-like/None; ``keys`` such a list, or None.
    """
    cdef Py_ssize_t g, n = 0, start = 0, count, ngroups = len(groups), exported = 0
    cdef int codec = 0 if compression == "none" else _compression.codec_id(compression)
    if keys is not None and (type(keys) is not list or len(keys) != len(values)):
        raise ValueError("keys must be None or a list as long as values")
    if timestamp < NO_TIMESTAMP:
        raise InvalidTimestampError(
            f"timestamp {timestamp} is invalid: timestamps are milliseconds since the epoch, "
            f">= 0, or -1 for none")
    if not -32768 <= producer_epoch <= 32767:
        raise ValueError(f"producer_epoch {producer_epoch} is outside int16")
    if base_sequences is not None and len(base_sequences) != ngroups:
        raise ValueError(f"{len(base_sequences)} base sequences for {ngroups} groups")
    # Each group's rows are exported once, for both columns, and held until its
    # batch is built (the batches are cut by their counts).
    cdef Py_buffer *views = <Py_buffer *>PyMem_Malloc(<size_t>max(ngroups, 1) * sizeof(Py_buffer))
    if views == NULL:
        raise MemoryError()
    cdef _Column value_col, key_col
    out = []
    try:
        for g in range(ngroups):
            _int64_rows(groups[g], &views[g])
            exported += 1
            count = views[g].shape[0]
            if count == 0:
                raise ValueError(f"group {g} is empty: Kafka never writes a batch of records "
                                 f"with none")
            if count > INT32_MAX:
                raise MessageTooLargeError(f"{count} records do not fit one batch")
            n += count
        value_col = _rows_column(values, views, ngroups, n, u"values")
        key_col = _column(None, n, u"keys") if keys is None else \
            _rows_column(keys, views, ngroups, n, u"keys")
        for g in range(ngroups):
            count = views[g].shape[0]
            out.append(_group_batch(value_col, key_col, start, count, timestamp, codec,
                                    producer_id, producer_epoch,
                                    -1 if base_sequences is None else base_sequences[g]))
            start += count
    finally:
        for g in range(exported):
            PyBuffer_Release(&views[g])
        PyMem_Free(views)
    return out


cdef bytes _group_batch(_Column value_col, _Column key_col, Py_ssize_t start, Py_ssize_t count,
                        int64_t timestamp, int codec, int64_t producer_id, int producer_epoch,
                        int32_t base_sequence):
    """encode_groups' batch of the gathered entries start .. start+count."""
    cdef pylog_record_input inp
    cdef pylog_batch_header h
    memset(&inp, 0, sizeof(inp))
    memset(&h, 0, sizeof(h))
    inp.count = count
    inp.values = value_col.col
    inp.values.ptrs = value_col.ptrs + start
    inp.values.lens = value_col.lens + start
    inp.keys = key_col.col
    if key_col.col.kind == PYLOG_COL_PTRS:
        inp.keys.ptrs = key_col.ptrs + start
        inp.keys.lens = key_col.lens + start
    inp.timestamps = NULL
    inp.timestamp_const = timestamp
    h.partition_leader_epoch = -1
    h.attributes = <int16_t>codec
    h.last_offset_delta = <int32_t>(count - 1)
    h.producer_id = producer_id
    h.producer_epoch = <int16_t>producer_epoch
    h.base_sequence = base_sequence
    h.records_count = <int32_t>count
    cdef int64_t bound = pylog_records_bound(&inp, _span_bytes(key_col, start, count),
                                             _span_bytes(value_col, start, count), 0)
    return _assemble(&inp, &h, codec, None, bound)


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def encode_control_batch(marker, *, int64_t producer_id, int producer_epoch,
                         int64_t base_offset=0, timestamp=None, int coordinator_epoch=0,
                         int partition_leader_epoch=-1):
    """Encodes a transaction marker: a control batch with one control record.

    ``marker`` is ``"commit"`` or ``"abort"``. The record key is
    ``version:int16=0, type:int16`` and the value is Kafka's
    EndTransactionMarker ``version:int16=0, coordinator_epoch:int32``.
    """
    if marker in (u"commit", CONTROL_COMMIT):
        kind = CONTROL_COMMIT
    elif marker in (u"abort", CONTROL_ABORT):
        kind = CONTROL_ABORT
    else:
        raise ValueError(f"marker must be 'commit' or 'abort', not {marker!r}")
    if producer_id < 0:
        raise ValueError(f"a control batch needs a producer id >= 0, not producer_id={producer_id}")
    if not -32768 <= producer_epoch <= 32767:
        raise ValueError(f"producer_epoch {producer_epoch} is outside int16")
    key = (0).to_bytes(2, "big") + kind.to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + coordinator_epoch.to_bytes(4, "big", signed=True)
    cdef pylog_record_input inp
    cdef pylog_batch_header h
    memset(&inp, 0, sizeof(inp))
    memset(&h, 0, sizeof(h))
    inp.count = 1
    cdef _Column value_col = _column((value,), 1, u"values")
    cdef _Column key_col = _column((key,), 1, u"keys")
    _timestamps(timestamp, 1, &inp)
    inp.values = value_col.col
    inp.keys = key_col.col
    h.base_offset = base_offset
    h.partition_leader_epoch = partition_leader_epoch
    h.attributes = PYLOG_ATTR_TRANSACTIONAL | PYLOG_ATTR_CONTROL
    h.producer_id = producer_id
    h.producer_epoch = <int16_t>producer_epoch
    h.base_sequence = -1
    h.records_count = 1
    return _assemble(&inp, &h, 0, None)


cdef _Column _list_column(list items, Py_ssize_t n):
    """A pointer column read in place from a list of bytes/None (no tuple copy:
    see _encode_sealed), or None when an item is another type."""
    cdef _Column c = _pointer_column(items, n)
    cdef int64_t data_bytes = 0
    if pylog_gather_bytes(PySequence_Fast_ITEMS(items), n, c.ptrs, c.lens, &data_bytes) < n:
        return None
    c.data_bytes = data_bytes
    return c


def _encode_sealed(list values not None, list keys, uintptr_t timestamps_at, compression,
                   int64_t producer_id, int producer_epoch, int base_sequence):
    """encode_batch of a Producer's sealed batch (``_core/producer.pyx``,
    ProducerBatch): the same bytes, without its copies. ``values`` and
    ``keys`` (lists of one length; keys None: all null) are read in place, not copied into tuples:
    nothing changes a sealed batch, and the caller holds it while this runs.
    Its len(values) timestamps are read at ``timestamps_at``, the batch's own
    int64 array. Returns None, having done nothing, when an item is not bytes
    or None (the caller then takes encode_batch, which reads any bytes-like
    and names what it cannot). Raises as encode_batch does for a timestamp
    below -1 or a record too large."""
    cdef Py_ssize_t n = PyList_GET_SIZE(values)
    cdef pylog_record_input inp
    cdef pylog_batch_header h
    cdef const int64_t *ts = <const int64_t *>timestamps_at
    if n == 0 or n > INT32_MAX or (keys is not None and PyList_GET_SIZE(keys) != n) or ts == NULL or \
            not -32768 <= producer_epoch <= 32767:
        return None
    cdef int codec = 0 if compression == "none" else _compression.codec_id(compression)
    cdef _Column value_col = _list_column(values, n)
    if value_col is None:
        return None
    cdef _Column key_col = _column(None, n, u"keys") if keys is None else _list_column(keys, n)
    if key_col is None:
        return None
    _check_timestamps(ts, n)
    memset(&inp, 0, sizeof(inp))
    memset(&h, 0, sizeof(h))
    inp.count = n
    inp.values = value_col.col
    inp.keys = key_col.col
    inp.timestamps = ts
    h.partition_leader_epoch = -1
    h.attributes = <int16_t>codec       # CreateTime, not transactional
    h.last_offset_delta = <int32_t>(n - 1)
    h.producer_id = producer_id
    h.producer_epoch = <int16_t>producer_epoch
    h.base_sequence = base_sequence
    h.records_count = <int32_t>n
    return _assemble(&inp, &h, codec, None,
                     pylog_records_bound(&inp, key_col.data_bytes, value_col.data_bytes, 0))
