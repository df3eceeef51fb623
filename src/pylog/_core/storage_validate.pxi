# Kafka's LogValidator for what a client appends, beyond what append.c checks
# in place: the records inside compressed batches, and the topic's
# compression.type (docs/FORMAT.md, section 10, "Validation of client batches").


def convert_client_batches(buffer, int target_codec, *, bint require_keys=False,
                           int64_t min_timestamp=INT64_MIN, int64_t max_timestamp=INT64_MAX,
                           bint validate=True):
    """Validates the records of every compressed v2 batch in ``buffer`` (decompressed:
    framing, record count, offset deltas 0..n-1, keys when ``require_keys``, each
    record's timestamp within [min_timestamp, max_timestamp] for CreateTime) and
    recompresses batches whose codec is not ``target_codec`` (-1: keep the
    producer's). With ``validate`` off (batches pylog's own encoder built), a
    batch is decompressed only to change its codec or to check its keys. A CreateTime batch whose maxTimestamp is not its records'
    maximum gets the true one (and a new CRC), as Kafka stores it.

    Returns ``buffer`` itself when nothing had to change (uncompressed batches,
    whose records append.c checks in place, and every batch already right), else
    new bytes. Malformed framing is left for prepare_append to report; batches
    of magic 0/1 and control batches are passed through.
    """
    return _convert_client_batches(buffer, target_codec, require_keys, min_timestamp,
                                   max_timestamp, validate)


cdef inline bint _left_as_is(const pylog_batch_header *h, int target_codec, bint require_keys,
                            bint validate) noexcept:
    """Whether convert_client_batches leaves the batch of header `h` as it is:
    a control batch, an empty one, one uncompressed and kept so (append.c
    walks its records in place), or, without validation, one whose codec stays
    and whose keys need no check."""
    cdef int codec = h.attributes & PYLOG_ATTR_COMPRESSION_MASK
    cdef int new_codec = codec if target_codec < 0 else target_codec
    return (h.attributes & PYLOG_ATTR_CONTROL or (codec == 0 and new_codec == 0)
            or h.records_count <= 0 or (not validate and new_codec == codec and not require_keys))


cdef bint _all_left_as_is(object data, int target_codec, bint require_keys, bint validate):
    """True when `data` is bytes whose every batch _left_as_is (by its header):
    convert_client_batches returns it without acquiring a buffer (~250
    instructions of an append's ~3k). Other buffer types, magic 0/1 and
    framing that prepare_append will name take the full pass."""
    if type(data) is not bytes:
        return False
    cdef const char *b = PyBytes_AS_STRING(data)
    cdef int64_t n = PyBytes_GET_SIZE(data), pos = 0
    cdef pylog_batch_header h
    cdef pylog_status st
    while pos + PYLOG_LOG_OVERHEAD <= n:
        if (<const unsigned char *>b)[pos + PYLOG_MAGIC_OFFSET] != 2 \
                or pylog_batch_check(b + pos, n - pos, 0, &h, &st) != PYLOG_OK \
                or not _left_as_is(&h, target_codec, require_keys, validate):
            return False
        pos += <int64_t>h.length + PYLOG_LOG_OVERHEAD
    return True


cdef object _convert_client_batches(buffer, int target_codec, bint require_keys,
                                    int64_t min_timestamp, int64_t max_timestamp, bint validate):
    """convert_client_batches, called from C without a Python call (append_fast)."""
    cdef Py_buffer view
    cdef pylog_batch_header h
    cdef pylog_status st
    cdef int64_t pos = 0, size, lo, hi
    cdef int codec, new_codec, rc
    cdef const char *b
    cdef const char *section
    cdef Py_ssize_t section_len
    cdef list pieces = None                       # created at the first change
    cdef int64_t copied = 0                       # input bytes before pos already in pieces
    cdef bint changed = False, create_time
    if _all_left_as_is(buffer, target_codec, require_keys, validate):
        return buffer
    mv = None
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        b = <const char *>view.buf
        while pos + PYLOG_LOG_OVERHEAD <= view.len:
            if (<const unsigned char *>b)[pos + PYLOG_MAGIC_OFFSET] != 2:
                return buffer                     # legacy: up-converted, then checked again
            # Headers only here: the CRC of a batch left as it is gets checked once,
            # by prepare_append (the uncompressed fast path stays one pass).
            rc = pylog_batch_check(b + pos, view.len - pos, 0, &h, &st)
            if rc != PYLOG_OK:
                return buffer                     # prepare_append names the problem
            size = <int64_t>h.length + PYLOG_LOG_OVERHEAD
            if _left_as_is(&h, target_codec, require_keys, validate):
                pos += size
                continue
            codec = h.attributes & PYLOG_ATTR_COMPRESSION_MASK
            new_codec = codec if target_codec < 0 else target_codec
            if pylog_batch_check(b + pos, view.len - pos, 1, &h, &st) != PYLOG_OK:
                return buffer                     # a bad CRC: prepare_append reports it
            create_time = not (h.attributes & PYLOG_ATTR_TIMESTAMP_TYPE)
            if mv is None:
                mv = memoryview(buffer).cast("B")     # slices below copy nothing
            stored = mv[pos + PYLOG_RECORDS_OFFSET:pos + size]
            if codec:
                try:
                    records = _compression.decompress(codec, stored)
                except CorruptRecordError as exc:
                    raise CorruptRecordError(f"record batch at byte {pos}: {exc}", position=pos) from None
                section = records
                section_len = len(records)
            else:
                records = stored
                section = b + pos + PYLOG_RECORDS_OFFSET
                section_len = size - PYLOG_RECORDS_OFFSET
            with nogil:
                rc = pylog_records_validate(section, section_len, h.records_count, h.base_timestamp,
                                            require_keys, &lo, &hi, &st)
            if rc != PYLOG_OK:
                raise _invalid_records(rc, &st, pos, codec)
            if create_time:
                for ts in (lo, hi):
                    if ts != PYLOG_NO_TIMESTAMP and not min_timestamp <= ts <= max_timestamp:
                        raise InvalidTimestampError(
                            f"record batch at byte {pos} holds a record with timestamp {ts}, "
                            f"outside the accepted range [{min_timestamp}, {max_timestamp}] (see "
                            f"message.timestamp.before/after.max.ms)")
            if new_codec == codec and (not create_time or hi == h.max_timestamp):
                pos += size
                continue
            if new_codec != codec:
                body = _compression.compress(new_codec, records) if new_codec else records
            else:
                body = stored
            h.attributes = (h.attributes & ~PYLOG_ATTR_COMPRESSION_MASK) | new_codec
            if create_time:
                h.max_timestamp = hi
            batch = bytearray(PYLOG_RECORDS_OFFSET)
            batch += body
            pylog_batch_header_finish(<char *>batch, len(batch), &h)
            if pieces is None:
                pieces = []
            if pos > copied:
                pieces.append(mv[copied:pos])
            pieces.append(batch)
            pos += size
            copied = pos
            changed = True
        if not changed:
            return buffer
        if view.len > copied:
            pieces.append(mv[copied:view.len])
        return b"".join(pieces)
    finally:
        PyBuffer_Release(&view)


cdef object _invalid_records(int rc, pylog_status *st, int64_t batch_pos, int codec):
    cdef str detail = st.detail.decode() if st.detail != NULL else u""
    where = f"record batch at byte {batch_pos}" + (f" (decompressed)" if codec else u"")
    if detail == u"null key":
        return InvalidRecordError(
            f"{where}: record {st.value} has no key; a compacted topic needs a key on every record")
    if detail == u"offset delta":
        return InvalidRecordError(
            f"{where}: record at byte {st.position} of the records has offset delta "
            f"{st.value}, expected {st.limit}")
    return CorruptRecordError(f"{where}: bad {detail} at byte {st.position} of the records "
                              f"({st.value})", position=batch_pos)
