"""Kafka record batches: encode, iterate, decode to Python or Arrow.

This is the public face of the C codec (``pylog._core.codec``). The bytes are
Kafka's record batch v2 (magic 2); magic 0 and 1 message sets are read and
can be up-converted. See docs/FORMAT.md.
"""

from pylog._core.codec import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchIterator,
    Record,
    RecordBatch,
    ScanResult,
    decode_arrow,
    encode_batch,
    encode_control_batch,
    encode_groups,
    iter_batches,
    scan_batches,
    upconvert,
)

from .aborted import AbortedBatches


def __getattr__(name):
    """ARROW_SCHEMA, built when first asked for: importing pylog.record does not
    import pyarrow (PEP 562)."""
    if name == "ARROW_SCHEMA":
        from pylog._core import codec
        return codec.ARROW_SCHEMA
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def with_header_fields(data, *, base_sequence: int | None = None,
                       last_offset_delta: int | None = None, producer_id: int | None = None,
                       producer_epoch: int | None = None, transactional: bool = False) -> bytes:
    """One encoded v2 batch with its baseSequence (bytes 53-56), lastOffsetDelta
    (bytes 23-26), producerId (43-50) and/or producerEpoch (51-52) replaced, the
    transactional attribute set if asked, and its CRC (bytes 17-20, over 21..end) made
    right again: a producer moving a queued batch's sequences or stamping its identity
    on a batch encoded without one, the cleaner keeping a batch's last offset (Kafka's
    overrideLastOffset). docs/FORMAT.md, section 2."""
    import struct

    from pylog._core.crc import crc32c

    from . import batch_layout as at
    out = bytearray(data)
    if producer_id is not None:
        struct.pack_into(">q", out, at.PRODUCER_ID_OFFSET, producer_id)
    if producer_epoch is not None:
        struct.pack_into(">h", out, at.PRODUCER_EPOCH_OFFSET, producer_epoch)
    if transactional:
        out[at.ATTRIBUTES_LOW_BYTE] |= at.ATTR_TRANSACTIONAL
    if base_sequence is not None:
        struct.pack_into(">i", out, at.BASE_SEQUENCE_OFFSET, base_sequence)
    if last_offset_delta is not None:
        struct.pack_into(">i", out, at.LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
    struct.pack_into(">I", out, at.CRC_OFFSET, crc32c(memoryview(out)[at.ATTRIBUTES_OFFSET:]))
    return bytes(out)


def mark_transactional(data) -> bytes:
    """Encoded v2 batches (one or more, back to back) with the transactional attribute
    (bit 4) set in each header and each CRC made right again: a transactional producer's
    batches, encoded as idempotent ones. One pass over the headers; the CRC in C."""
    import struct

    from pylog._core.crc import crc32c

    from . import batch_layout as at
    out = bytearray(data)
    view = memoryview(out)
    pos, size = 0, len(out)
    while pos + at.RECORD_BATCH_OVERHEAD <= size:
        end = pos + at.LOG_OVERHEAD + struct.unpack_from(">i", out, pos + at.LENGTH_OFFSET)[0]
        out[pos + at.ATTRIBUTES_LOW_BYTE] |= at.ATTR_TRANSACTIONAL
        struct.pack_into(">I", out, pos + at.CRC_OFFSET, crc32c(view[pos + at.ATTRIBUTES_OFFSET:end]))
        pos = end
    view.release()
    return bytes(out)


def slice_offsets(rows, start: int, end: int):
    """The rows of a ``decode_arrow`` batch with start <= offset < end (offsets ascend,
    so this is a zero-copy slice found by binary search)."""
    import numpy as np
    offsets = rows.column(0).to_numpy()
    lo, hi = np.searchsorted(offsets, [start, end])
    return rows if (lo, hi) == (0, len(offsets)) else rows.slice(lo, hi - lo)


__all__ = [
    "AbortedBatches",
    "ARROW_SCHEMA",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "BatchIterator",
    "Record",
    "RecordBatch",
    "ScanResult",
    "decode_arrow",
    "encode_batch",
    "encode_control_batch",
    "encode_groups",
    "iter_batches",
    "mark_transactional",
    "scan_batches",
    "slice_offsets",
    "upconvert",
    "with_header_fields",
]
