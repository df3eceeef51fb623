# Kafka's LogValidator for what a client appends, beyond what append.c checks
# in place: the records inside compressed batches, and the topic's
# compression.type (docs/FORMAT.md, section 10, "Validation of client batches").
#
# A compressed batch is streamed, as Kafka's LogValidator streams it: its
# records section is decompressed a bounded piece at a time
# (compression.decompress_pieces) and each piece's whole records are walked
# in C (pylog_records_walk_piece) before the next piece is decompressed; a
# record a piece cuts is carried into the next. So a batch is never whole in
# memory once decompressed: what is held at once is a piece, the record being
# completed (at most max.message.bytes: a longer one is refused as soon as
# its length is read) and, when the codec changes, the recompressed output
# (at most max.message.bytes). The walk stops at the header's record count:
# one more byte is refused without decompressing further.


def convert_client_batches(buffer, int target_codec, *, bint require_keys=False,
                           int64_t min_timestamp=INT64_MIN, int64_t max_timestamp=INT64_MAX,
                           bint validate=True, int64_t max_message_bytes=INT64_MAX):
    """Validates the records of every compressed v2 batch in ``buffer`` (decompressed:
    framing, record count, offset deltas 0..n-1, keys when ``require_keys``, each
    record's timestamp within [min_timestamp, max_timestamp] for CreateTime) and
    recompresses batches whose codec is not ``target_codec`` (-1: keep the
    producer's). With ``validate`` off (batches pylog's own encoder built), a
    batch is decompressed only to change its codec or to check its keys. A
    CreateTime batch whose maxTimestamp is not its records' maximum gets the
    true one (and a new CRC), as Kafka stores it.

    ``max_message_bytes`` (the topic's ``max.message.bytes``) bounds a single
    decompressed record and a recompressed batch: beyond it,
    MessageTooLargeError, raised as soon as it is known (see the comment at the
    top of storage_validate.pxi for what the walk holds in memory).

    Returns ``buffer`` itself when nothing had to change (uncompressed batches,
    whose records append.c checks in place, and every batch already right), else
    new bytes. Malformed framing is left for prepare_append to report; batches
    of magic 0/1 and control batches are passed through.
    """
    return _convert_client_batches(buffer, target_codec, require_keys, min_timestamp,
                                   max_timestamp, validate, max_message_bytes)


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
    convert_client_batches returns it without acquiring a buffer. Other buffer types, magic 0/1 and
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
                                    int64_t min_timestamp, int64_t max_timestamp, bint validate,
                                    int64_t max_message_bytes):
    """convert_client_batches, called from C without a Python call (append_fast)."""
    cdef Py_buffer view
    cdef pylog_batch_header h
    cdef pylog_status st
    cdef int64_t pos = 0, size, lo, hi
    cdef int codec, new_codec, rc
    cdef const char *b
    cdef list pieces = None                       # created at the first change
    cdef int64_t copied = 0                       # input bytes before pos already in pieces
    cdef bint changed = False, create_time
    cdef _Recompression recompressed
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
            if size > max_message_bytes:
                return buffer                     # prepare_append refuses it, before decompressing
            codec = h.attributes & PYLOG_ATTR_COMPRESSION_MASK
            new_codec = codec if target_codec < 0 else target_codec
            if pylog_batch_check(b + pos, view.len - pos, 1, &h, &st) != PYLOG_OK:
                return buffer                     # a bad CRC: prepare_append reports it
            create_time = not (h.attributes & PYLOG_ATTR_TIMESTAMP_TYPE)
            if mv is None:
                mv = memoryview(buffer).cast("B")     # slices below copy nothing
            stored = mv[pos + PYLOG_RECORDS_OFFSET:pos + size]
            if codec:
                # Walked piece by piece; recompressed as it passes when the codec changes.
                recompressed = _Recompression(new_codec, max_message_bytes, pos) \
                    if new_codec != codec else None
                _walk_compressed(codec, stored, &h, require_keys, max_message_bytes, pos,
                                 recompressed, &lo, &hi)
            else:
                with nogil:
                    rc = pylog_records_validate(b + pos + PYLOG_RECORDS_OFFSET,
                                                size - PYLOG_RECORDS_OFFSET, h.records_count,
                                                h.base_timestamp, require_keys, &lo, &hi, &st)
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
            if new_codec == codec:
                body = stored
            elif codec:
                body = recompressed.finish()
            else:
                body = _compression.compress(new_codec, stored)
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


cdef int _walk_compressed(int codec, object stored, pylog_batch_header *h, bint require_keys,
                          int64_t max_record_bytes, int64_t batch_pos, _Recompression out,
                          int64_t *lo, int64_t *hi) except -1:
    """Walks the records of the compressed section `stored` of the batch of
    header `h` at `batch_pos` as it is decompressed, piece by piece (see the
    comment at the top); hands each walked run of records to `out` (when
    the codec changes); sets [*lo, *hi] to the records' timestamps."""
    cdef pylog_records_walk w
    cdef int64_t walked = 0                   # section bytes walked before `pending`
    cdef int64_t used, size, offset, n
    pylog_records_walk_init(&w, h.records_count, h.base_timestamp, require_keys, max_record_bytes)
    pending = b""                             # the start of a record the last piece cut
    pieces = _compression.decompress_pieces(codec, stored)
    try:
        for piece in pieces:
            n = len(piece)                    # bytes (every piece is a buffer of bytes)
            offset = 0
            view = None
            # First the record the last piece cut, completed from no more of this one than it needs.
            while len(pending) and offset < n:
                if view is None:
                    view = memoryview(piece)
                size = _record_size(pending)
                size = (size if size > 0 else len(pending) + 5) - len(pending)
                pending += view[offset:offset + size]
                offset += min(size, n - offset)
                used = _walk_piece(&w, pending, False, walked, batch_pos)
                if used:
                    if out is not None:
                        out.add(pending[:used])
                    walked += used
                    pending = pending[used:]
            if offset < n:
                rest = piece if offset == 0 else view[offset:]
                used = _walk_piece(&w, rest, False, walked, batch_pos)
                if used and out is not None:
                    out.add(rest if used == n - offset else memoryview(rest)[:used])
                walked += used
                pending = bytes(memoryview(rest)[used:]) if used < n - offset else b""
    except CorruptRecordError as exc:
        if exc.position is not None:
            raise                             # the walk's, which names the batch
        raise CorruptRecordError(f"record batch at byte {batch_pos}: {exc}",
                                 position=batch_pos) from None
    finally:
        pieces.close()                        # the decompressor's memory goes now
    _walk_piece(&w, pending, True, walked, batch_pos)     # every record, and nothing after
    if len(pending) and out is not None:
        out.add(pending)
    lo[0] = w.min_timestamp
    hi[0] = w.max_timestamp
    return 0


cdef int64_t _record_size(bytes start):
    """The size of the record that starts `start` (its length varint
    included), from that varint; 0 while the varint is not whole in it (a
    malformed one the walk names)."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(start)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(start), i
    cdef uint64_t u = 0
    for i in range(min(n, 5)):
        u |= <uint64_t>(p[i] & 0x7F) << (7 * i)
        if not p[i] & 0x80:
            return i + 1 + <int64_t>((u >> 1) ^ (-(u & 1)))
    return 0


cdef int64_t _walk_piece(pylog_records_walk *w, object piece, bint last, int64_t walked,
                         int64_t batch_pos) except -1:
    """pylog_records_walk_piece over `piece` (any buffer), the section's bytes
    from `walked` on: the bytes of the whole records walked."""
    cdef Py_buffer view
    cdef pylog_status st
    cdef int64_t used = 0
    cdef int rc
    PyObject_GetBuffer(piece, &view, PyBUF_SIMPLE)
    try:
        if view.len >= NOGIL_MIN_BYTES:
            with nogil:
                rc = pylog_records_walk_piece(w, <const char *>view.buf, view.len, last, &used, &st)
        else:
            rc = pylog_records_walk_piece(w, <const char *>view.buf, view.len, last, &used, &st)
    finally:
        PyBuffer_Release(&view)
    if rc != PYLOG_OK:
        st.position += walked
        raise _invalid_records(rc, &st, batch_pos, 1)
    return used


@cython.final
cdef class _Recompression:
    """A batch's records recompressed to another codec as the walk passes
    them. A section that arrives in one piece is compressed at once
    (compression.compress: the bytes pylog has always written); from a
    second piece on, as a stream (compression.compressor). Output beyond
    max.message.bytes raises MessageTooLargeError at once, as Kafka refuses
    a batch that recompression made too large."""

    cdef int codec
    cdef int64_t limit, size, batch_pos, max_message_bytes
    cdef object held, writer
    cdef list parts

    def __cinit__(self, int codec, int64_t max_message_bytes, int64_t batch_pos):
        self.codec = codec
        self.max_message_bytes = max_message_bytes
        self.limit = max_message_bytes - PYLOG_RECORDS_OFFSET
        self.batch_pos = batch_pos
        self.size = 0

    cdef int add(self, data) except -1:
        if self.writer is None:
            if self.held is None:
                self.held = data
                return 0
            self.writer = _compression.compressor(self.codec)
            self.parts = []
            self._out(self.writer.compress(self.held))
            self.held = None
        self._out(self.writer.compress(data))
        return 0

    cdef object finish(self):
        if self.writer is None:
            body = _compression.compress(self.codec, b"" if self.held is None else self.held)
            self.held = None
            self._out(body)
            return body
        self._out(self.writer.flush())
        return b"".join(self.parts)

    cdef int _out(self, bytes part) except -1:
        self.size += len(part)
        if self.size > self.limit:
            raise MessageTooLargeError(
                f"record batch at byte {self.batch_pos}: recompressed to "
                f"{_compression.codec_name(self.codec)}, its records take more than "
                f"{self.limit} bytes, beyond max.message.bytes ({self.max_message_bytes})")
        if self.parts is not None:
            self.parts.append(part)
        return 0


cdef object _invalid_records(int rc, pylog_status *st, int64_t batch_pos, int codec):
    cdef str detail = st.detail.decode() if st.detail != NULL else u""
    where = f"record batch at byte {batch_pos}" + (f" (decompressed)" if codec else u"")
    if rc == PYLOG_ERR_TOO_LARGE:
        return MessageTooLargeError(
            f"{where}: the record at byte {st.position} of the records takes {st.value} bytes, "
            f"more than max.message.bytes ({st.limit})")
    if detail == u"records count (trailing bytes)":
        return CorruptRecordError(f"{where}: bad records count: bytes left after its {st.limit} "
                                  f"records, from byte {st.position} of the records", position=batch_pos)
    if detail == u"null key":
        return InvalidRecordError(
            f"{where}: record {st.value} has no key; a compacted topic needs a key on every record")
    if detail == u"offset delta":
        return InvalidRecordError(
            f"{where}: record at byte {st.position} of the records has offset delta "
            f"{st.value}, expected {st.limit}")
    return CorruptRecordError(f"{where}: bad {detail} at byte {st.position} of the records "
                              f"({st.value})", position=batch_pos)
