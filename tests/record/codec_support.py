"""Helpers shared by the record codec tests: byte surgery and hand-built messages.

In the spirit of LevelDB's log_test.cc (increment_byte, set_byte, fix_crc):
edit a batch's bytes, then optionally make its checksum valid again so the
edit reaches the parser behind the CRC.
"""

from __future__ import annotations

import struct
import zlib

import crc32c as _crc32c_pkg  # independent CRC-32C, not pylog's

from pylog import records

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Record batch v2 field offsets (Kafka DefaultRecordBatch), written out
# independently of pylog's batch_format.h so a drift there is caught.
BASE_OFFSET, LENGTH, LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES = 0, 8, 12, 16, 17, 21
LAST_OFFSET_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP = 23, 27, 35
PRODUCER_ID, PRODUCER_EPOCH, BASE_SEQUENCE, RECORDS_COUNT, RECORDS = 43, 51, 53, 57, 61

ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_FIELD_FORMATS = {
    BASE_OFFSET: ">q", LENGTH: ">i", LEADER_EPOCH: ">i", CRC: ">I", ATTRIBUTES: ">h",
    LAST_OFFSET_DELTA: ">i", BASE_TIMESTAMP: ">q", MAX_TIMESTAMP: ">q", PRODUCER_ID: ">q",
    PRODUCER_EPOCH: ">h", BASE_SEQUENCE: ">i", RECORDS_COUNT: ">i",
}


def crc32c(data) -> int:
    return _crc32c_pkg.crc32c(bytes(data))


def fix_crc(batch: bytes | bytearray) -> bytes:
    """Recomputes a v2 batch's CRC-32C (attributes..end) after an edit."""
    b = bytearray(batch)
    struct.pack_into(">I", b, CRC, crc32c(b[ATTRIBUTES:]))
    return bytes(b)


def set_field(batch: bytes, offset: int, value: int, *, recrc: bool = True) -> bytes:
    """Overwrites one v2 header field (by its offset), fixing the CRC unless told not to."""
    b = bytearray(batch)
    struct.pack_into(_FIELD_FORMATS[offset], b, offset, value)
    return fix_crc(b) if recrc else bytes(b)


def get_field(batch: bytes, offset: int) -> int:
    return struct.unpack_from(_FIELD_FORMATS[offset], batch, offset)[0]


def flip_bit(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def v2_batch(records_section: bytes, *, count: int, base_offset: int = 0, attributes: int = 0,
             last_offset_delta: int | None = None, base_timestamp: int = 0,
             max_timestamp: int = 0, producer_id: int = -1, producer_epoch: int = -1,
             base_sequence: int = -1, leader_epoch: int = -1) -> bytes:
    """A v2 batch around an arbitrary records section (possibly garbage), with a valid CRC."""
    if last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    header = struct.pack(">qiibIhiqqqhii", base_offset, 49 + len(records_section), leader_epoch,
                         2, 0, attributes, last_offset_delta, base_timestamp, max_timestamp,
                         producer_id, producer_epoch, base_sequence, count)
    return fix_crc(header + records_section)


def legacy_message(magic: int, offset: int, key: bytes | None, value: bytes | None, *,
                   attributes: int = 0, timestamp: int = -1) -> bytes:
    """One magic 0/1 message with a valid CRC-32 (IEEE), built by hand."""
    body = bytes([magic, attributes & 0xFF])
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1 if field is None else len(field)) + (field or b"")
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def decoded(buffer, **kw) -> list[tuple]:
    """Every record of every complete batch, as (offset, timestamp, key, value, headers) tuples."""
    return [tuple(r) for b in records.iter_batches(buffer, **kw) for r in b.records()]


def arrow_rows(buffer, **kw) -> list[tuple]:
    """decode_arrow's rows in the same tuple shape as decoded()."""
    import pyarrow as pa

    table = records.decode_arrow(buffer, **kw)
    # Arrow's own full check of the arrays decode_arrow hands over (offsets in
    # range and ascending, UTF-8 header keys, null counts against the bitmaps).
    table.validate(full=True)
    offsets = table.column("offset").to_pylist()
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    headers = table.column("headers").to_pylist()
    return [(o, t, k, v, tuple((h["key"], h["value"]) for h in hs))
            for o, t, k, v, hs in zip(offsets, stamps, keys, values, headers)]
