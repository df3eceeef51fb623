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
    "upconvert",
]
