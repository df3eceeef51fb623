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


cdef tuple _legacy_fields(const char *msg, pylog_batch_header *h, Py_ssize_t where):
    """(timestamp, key, value) of the message at msg; its size/CRC are validated."""
    cdef Py_ssize_t end = <Py_ssize_t>h.length + PYLOG_LOG_OVERHEAD
    cdef Py_ssize_t p = PYLOG_MAGIC_OFFSET + 2 + (8 if h.magic == 1 else 0)
    cdef int32_t n
    fields = []
    for name in (u"key", u"value"):
        if p + 4 > end:
            raise CorruptRecordError(f"legacy message at byte {where} ends inside its {name} length",
                                     position=where + p)
        n = _i32(msg + p)
        p += 4
        if n < -1 or n > end - p:
            raise CorruptRecordError(f"legacy message at byte {where} has invalid {name} length {n}",
                                     position=where + p - 4)
        fields.append(None if n < 0 else PyBytes_FromStringAndSize(msg + p, n))
        if n > 0:
            p += n
    if p != end:
        raise CorruptRecordError(f"legacy message at byte {where} has {end - p} bytes after its value",
                                 position=where + p)
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


cdef list _legacy_message_records(_Buffer buf, Py_ssize_t pos, pylog_batch_header *h):
    """Records of the (validated) legacy message at pos: itself, or its inner messages."""
    cdef const char *msg = buf.ptr() + pos
    cdef int codec = h.attributes & PYLOG_ATTR_COMPRESSION_MASK
    ts, key, value = _legacy_fields(msg, h, pos)
    if codec == 0:
        return [Record(h.base_offset, ts, key, value, _EMPTY)]
    if value is None:
        raise CorruptRecordError(f"compressed legacy message at byte {pos} has a null value",
                                 position=pos)
    if codec == 3 and h.magic == 0:
        try:
            inner = _compression.decompress(codec, value)
        except CorruptRecordError:
            inner = _compression.decompress(codec, _fix_kafka08_lz4(value))
    else:
        inner = _compression.decompress(codec, value)
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
            raise CorruptRecordError(
                f"compressed legacy message at byte {pos} holds a truncated inner message "
                f"at byte {ipos} of its decompressed value", position=pos)
        if rc != PYLOG_OK:
            raise _corrupt(&st, ipos, f"inner message of legacy message at byte {pos}:")
        if ih.magic >= 2 or ih.attributes & PYLOG_ATTR_COMPRESSION_MASK:
            raise CorruptRecordError(
                f"compressed legacy message at byte {pos} nests a "
                f"{'v2 batch' if ih.magic >= 2 else 'compressed message'}", position=pos)
        its, ikey, ivalue = _legacy_fields(ib.ptr() + ipos, &ih, ipos)
        inner_msgs.append((ih.base_offset, its, ikey, ivalue))
        ipos += <Py_ssize_t>ih.length + PYLOG_LOG_OVERHEAD
    if not inner_msgs:
        return []
    log_append = h.magic == 1 and (h.attributes & LEGACY_ATTR_TIMESTAMP_TYPE)
    # Magic 1 inner offsets are relative; the wrapper carries the last one's absolute offset.
    shift = h.base_offset - inner_msgs[-1][0] if h.magic == 1 else 0
    return [Record(off + shift, ts if log_append else its, ikey, ivalue, _EMPTY)
            for off, its, ikey, ivalue in inner_msgs]


cdef bytes _v2_from_records(list recs, int codec, object timestamp_type):
    """One v2 batch holding `recs` at their own offsets."""
    base = recs[0].offset
    deltas = [r.offset - base for r in recs]
    if deltas[-1] > INT32_MAX:
        raise InvalidRecordError(f"legacy offsets {base}..{recs[-1].offset} span more than int32")
    return encode_batch([r.value for r in recs], [r.key for r in recs],
                        [r.timestamp for r in recs], base_offset=base, compression=codec,
                        timestamp_type=timestamp_type or CREATE_TIME, offset_deltas=deltas)


cdef bytes _upconvert_message(const char *base, Py_ssize_t pos, pylog_batch_header *h, object owner):
    cdef _Buffer buf = _Buffer(owner)
    recs = _legacy_message_records(buf, pos, h)
    if not recs:
        return b""
    ts_type = LOG_APPEND_TIME if h.magic == 1 and (h.attributes & LEGACY_ATTR_TIMESTAMP_TYPE) \
        else CREATE_TIME
    return _v2_from_records(recs, 0, ts_type)


def upconvert(buffer, compression=None):
    """Converts magic 0/1 message sets in ``buffer`` to record batch v2, as Kafka does.

    Runs of uncompressed messages become one batch each; every compressed
    wrapper becomes one batch, recompressed with its own codec unless
    ``compression`` names another. Offsets and timestamps are kept (magic 0
    has none: -1). v2 batches pass through unchanged. Returns bytes.
    """
    out = []
    run = []
    run_type = None

    def flush():
        if run:
            out.append(_v2_from_records(list(run), 0, run_type))
            run.clear()

    for batch in iter_batches(buffer):
        if batch.magic == 2:
            flush()
            out.append(bytes(batch.raw))
            continue
        recs = batch.records()
        ts_type = batch.timestamp_type or CREATE_TIME
        if batch.compression_type == 0:
            if run and (ts_type != run_type or recs[0].offset <= run[-1].offset):
                flush()
            run_type = ts_type
            run.extend(recs)
        else:
            flush()
            if recs:
                codec = batch.compression_type if compression is None else \
                    _compression.codec_id(compression)
                out.append(_v2_from_records(recs, codec, ts_type))
    flush()
    return b"".join(out)
