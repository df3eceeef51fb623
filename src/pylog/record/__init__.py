"""Kafka record batches: encode, iterate, decode to Python or Arrow.

This is the public face of the C codec (``pylog._core.codec``). The bytes are
Kafka's record batch v2 (magic 2); magic 0 and 1 message sets are read and
can be up-converted. See docs/FORMAT.md.
"""

from pylog._core.codec import (
    ARROW_SCHEMA,
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
    iter_batches,
    scan_batches,
    upconvert,
)


def slice_offsets(rows, start: int, end: int):
    """The rows of a ``decode_arrow`` batch with start <= offset < end (offsets ascend,
    so this is a zero-copy slice found by binary search)."""
    import numpy as np
    offsets = rows.column(0).to_numpy()
    lo, hi = np.searchsorted(offsets, [start, end])
    return rows if (lo, hi) == (0, len(offsets)) else rows.slice(lo, hi - lo)


__all__ = [
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
    "iter_batches",
    "scan_batches",
    "slice_offsets",
    "upconvert",
]
