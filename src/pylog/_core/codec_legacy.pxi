# Legacy message sets, magic 0 and 1 (docs/FORMAT.md, section 6).
#
# Read-only: pylog writes v2 only. A legacy message is
#   offset:int64 size:int32 crc:uint32 magic:int8 attributes:int8
#   [timestamp:int64, magic 1 only] key:bytes value:bytes
# with CRC-32 (IEEE, not C) over magic..end. A compressed message (a
# "wrapper") holds a whole inner message set, compressed, as its value.
# This path is cold (old data only), so it builds Python objects freely.

cdef enum:
    LEGACY_ATTR_TIMESTAMP_TYPE = 0x08


cdef int32_t _i32(const char *p):
    return <int32_t>((<uint32_t>(<uint8_t>p[0]) << 24) | (<uint32_t>(<uint8_t>p[1]) << 16) |
                     (<uint32_t>(<uint8_t>p[2]) << 8) | <uint32_t>(<uint8_t>p[3]))


cdef tuple _legacy_fields(const char *msg, pylog_batch_header *h, Py_ssize_t batch_pos,
                          Py_ssize_t msg_pos, str inside):
    """(timestamp, key, value) of the message at msg; its size/CRC are validated.

    Errors name the top-level message at `batch_pos`; `msg_pos` is this
    message's position (in the decompressed value named by `inside`, for an
    inner message, else in the caller's buffer).
    """
    cdef Py_ssize_t end = <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
    cdef Py_ssize_t p = PYLOG_MAGIC_OFFSET + 2 + (8 if h.magic == 1 else 0)
    cdef int32_t n
    cdef str what = u"legacy message" if inside is None else \
        f"inner legacy message at byte {msg_pos} {inside}"
    cdef str at
    fields = []
    for name in (u"key", u"value"):
        at = f"byte {msg_pos + p}" if inside is None else f"byte {msg_pos + p} {inside}"
        if p + 4 > end:
            raise _batch_error(batch_pos, f"{what} ends inside its {name} length at {at}")
        n = _i32(msg + p)
        p += 4
        if n < -1 or n > end - p:
            raise _batch_error(batch_pos, f"{what} has invalid {name} length {n} at {at}")
        fields.append(None if n < 0 else PyBytes_FromStringAndSize(msg + p, n))
        if n > 0:
            p += n
    if p != end:
        raise _batch_error(batch_pos, f"{what} has {end - p} bytes after its value")
    return (h.base_timestamp, fields[0], fields[1])


def _xxh32(data: bytes) -> int:
    """xxHash32 (seed 0) of a short input: LZ4 frame header checksums only."""
    p1, p2, p3, p4, p5, m = 2654435761, 2246822519, 3266489917, 668265263, 374761393, 0xFFFFFFFF
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & m
    if len(data) >= 16:
        raise ValueError("_xxh32 handles inputs shorter than 16 bytes")
    h = (p5 + len(data)) & m
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i:i + 4], "little") * p3) & m, 17) * p4) & m
        i += 4
    for b in data[i:]:
        h = (rotl((h + b * p5) & m, 11) * p1) & m
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def _fix_kafka08_lz4(data: bytes) -> bytes:
    """Kafka 0.8-0.9 (magic 0) wrote LZ4 frame headers with a wrong checksum
    (KAFKA-3160); recompute it so a standard decoder accepts the frame."""
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return data
    flg = data[4]
    hc_at = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if hc_at >= len(data):
        return data
    hc = (_xxh32(data[4:hc_at]) >> 8) & 0xFF
    return data[:hc_at] + bytes([hc]) + data[hc_at + 1:]


cdef list _legacy_message_records(_Buffer buf, Py_ssize_t pos, pylog_batch_header *h,
                                  Py_ssize_t where=-1, object max_inner_bytes=None):
    """Records of the (validated) legacy message at pos: itself, or its inner messages.

    Follows Kafka's AbstractLegacyRecordBatch: a compressed wrapper must hold
    at least one uncompressed inner message, zstd needs magic 2, and a magic 1
    wrapper's offset is the last inner message's absolute offset (inner
    offsets are relative), except that a wrapper offset of 0 (as some old
    producers wrote) leaves the inner offsets as they are. Errors name the
    message at `where` (default: pos) in the caller's buffer. A wrapper whose
    inner messages take more than `max_inner_bytes` decompressed raises
    MessageTooLargeError, decompressing no further.
    """
    cdef const char *msg = buf.ptr() + pos
    cdef int codec = h.attributes & PYLOG_ATTR_COMPRESSION_MASK
    if where < 0:
        where = pos
    ts, key, value = _legacy_fields(msg, h, where, where, None)
    if codec == 0:
        return [Record(h.base_offset, ts, key, value, _EMPTY)]
    if codec == PYLOG_COMPRESSION_ZSTD:
        raise _batch_error(where, f"magic {h.magic} message uses zstd compression, which needs "
                                  f"magic 2")
    if value is None:
        raise _batch_error(where, u"compressed legacy message has a null value")
    if codec == 3 and h.magic == 0:
        try:
            inner = _decompress_at(codec, value, where, max_inner_bytes)
        except CorruptRecordError:
            inner = _decompress_at(codec, _fix_kafka08_lz4(value), where, max_inner_bytes)
    else:
        inner = _decompress_at(codec, value, where, max_inner_bytes)
    cdef _Buffer ib = _Buffer(inner)
    cdef Py_ssize_t ipos = 0, isize = ib.size()
    cdef pylog_batch_header ih
    cdef pylog_status st
    cdef int rc
    memset(&st, 0, sizeof(st))
    inner_msgs = []
    while ipos < isize:
        rc = pylog_batch_check(ib.ptr() + ipos, isize - ipos, 1, &ih, &st)
        if rc == PYLOG_INCOMPLETE:
            raise _batch_error(where, f"compressed legacy message holds a truncated inner message "
                                      f"at byte {ipos} of its decompressed value")
        if rc != PYLOG_OK:
            raise _corrupt(&st, where, ipos, u"of the decompressed value (inner message)")
        if ih.magic >= 2 or ih.attributes & PYLOG_ATTR_COMPRESSION_MASK:
            raise _batch_error(where, f"compressed legacy message nests a "
                                      f"{'v2 batch' if ih.magic >= 2 else 'compressed message'} "
                                      f"at byte {ipos} of its decompressed value")
        its, ikey, ivalue = _legacy_fields(ib.ptr() + ipos, &ih, where, ipos,
                                           u"of the decompressed value")
        inner_msgs.append((ih.base_offset, its, ikey, ivalue))
        ipos += <Py_ssize_t>ih.length + PYLOG_LOG_OVERHEAD
    if not inner_msgs:
        raise _batch_error(where, u"compressed legacy message holds no inner messages")
    log_append = h.magic == 1 and (h.attributes & LEGACY_ATTR_TIMESTAMP_TYPE)
    shift = 0
    if h.magic == 1 and h.base_offset != 0:
        last_inner = inner_msgs[-1][0]
        if h.base_offset < last_inner:
            raise _batch_error(where, f"compressed magic 1 message has wrapper offset "
                                      f"{h.base_offset}, less than its last inner offset "
                                      f"{last_inner}, and not 0")
        shift = h.base_offset - last_inner
    return [Record(off + shift, ts if log_append else its, ikey, ivalue, _EMPTY)
            for off, its, ikey, ivalue in inner_msgs]


cdef object _unconvertible(Py_ssize_t where, str problem):
    """Readable legacy data that a v2 batch cannot hold: InvalidRecordError, "batch at byte N: ..."."""
    return InvalidRecordError(f"batch at byte {where}: {problem}; cannot up-convert to v2")


cdef bytes _v2_from_records(list recs, int codec, object timestamp_type, Py_ssize_t where,
                            bint strict=True):
    """V2 batch(es) holding `recs` (from the legacy message(s) at `where`) at their own offsets.

    strict (upconvert, whose output may be stored): offsets must increase and
    span at most int32, timestamps must be >= -1, as Kafka's builder demands;
    the result is one batch. Not strict (decode_arrow, which only reads):
    what records() returns is kept as it is, split into as many batches as
    the offsets need.
    """
    cdef Py_ssize_t i, start = 0
    base = recs[0].offset
    for i in range(1, len(recs)):
        prev, off = (<Record>recs[i - 1]).offset, (<Record>recs[i]).offset
        if off <= prev or off - recs[start].offset > INT32_MAX:
            if strict:
                if off <= prev:
                    raise _unconvertible(where, f"legacy offsets do not increase ({prev} then {off})")
                raise _unconvertible(where, f"legacy offsets {base}..{off} span more than int32")
            return _v2_from_records(recs[:i], codec, timestamp_type, where, False) + \
                _v2_from_records(recs[i:], codec, timestamp_type, where, False)
    if strict:
        for r in recs:
            if r.timestamp < NO_TIMESTAMP:
                raise _unconvertible(where, f"legacy message at offset {r.offset} has invalid "
                                            f"timestamp {r.timestamp}")
    return _encode_batch([r.value for r in recs], [r.key for r in recs],
                         [r.timestamp for r in recs], None, base, codec,
                         timestamp_type or CREATE_TIME, -1, -1, -1, False, -1, None,
                         [r.offset - base for r in recs], strict)


cdef bytes _upconvert_message(const char *base, Py_ssize_t pos, pylog_batch_header *h, object owner,
                              Py_ssize_t where):
    """decode_arrow's view of one legacy message: v2 batches with exactly its records."""
    cdef _Buffer buf = _Buffer(owner)
    recs = _legacy_message_records(buf, pos, h, where)
    # CreateTime: the records already carry a LogAppendTime wrapper's timestamp,
    # which a v2 LogAppendTime batch could not hold if it were below -1.
    return _v2_from_records(recs, 0, CREATE_TIME, where, False)


def upconvert(buffer, compression=None, *, max_bytes=None, max_inner_bytes=None):
    """Converts magic 0/1 message sets in ``buffer`` to record batch v2, as Kafka does.

    Runs of uncompressed messages become one batch each; every compressed
    wrapper becomes one batch, recompressed with its own codec unless
    ``compression`` names another. Offsets and timestamps are kept (magic 0
    has none: -1). v2 batches pass through unchanged. A trailing partial
    batch is left out. Returns bytes.

    Up-converted batches can be much larger than their input (each wrapper
    is decompressed whole, as Kafka does): ``max_bytes`` caps the output,
    raising RecordListTooLargeError as soon as it would be exceeded, and
    ``max_inner_bytes`` caps each wrapper's decompressed inner messages,
    raising MessageTooLargeError while decompressing. Give both when the
    input is untrusted. Corrupt input raises CorruptRecordError.
    """
    cdef RecordBatch rb
    out = []
    run = []
    run_type = None
    run_pos = 0
    total = 0

    def emit(bytes part):
        nonlocal total
        total += len(part)
        if max_bytes is not None and total > max_bytes:
            raise RecordListTooLargeError(
                f"up-converted batches exceed max_bytes = {max_bytes} ({total} bytes so far)")
        out.append(part)

    def flush():
        if run:
            emit(_v2_from_records(list(run), 0, run_type, run_pos))
            run.clear()

    for batch in iter_batches(buffer):
        if batch.magic == 2:
            flush()
            emit(bytes(batch.raw))
            continue
        rb = batch
        recs = _legacy_message_records(rb._buf, rb.position, &rb.h, -1, max_inner_bytes)
        ts_type = batch.timestamp_type or CREATE_TIME
        if batch.compression_type == 0:
            if run and (ts_type != run_type or recs[0].offset <= run[-1].offset):
                flush()
            if not run:
                run_pos = batch.position
            run_type = ts_type
            run.extend(recs)
        else:
            flush()
            codec = batch.compression_type if compression is None else \
                _compression.codec_id(compression)
            emit(_v2_from_records(recs, codec, ts_type, batch.position))
    flush()
    return b"".join(out)
