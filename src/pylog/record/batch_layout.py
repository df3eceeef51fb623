"""The record batch v2 header (magic 2): where each field is, for Python code that
reads or patches a header in place. docs/FORMAT.md, section 2.

The C core's definition is ``_core/batch_format.h``; these are the same names without
the ``PYLOG_`` prefix, and tests/record/test_batch_layout.py parses that header and
checks every value here against it.
"""

from __future__ import annotations

import struct

__all__ = [
    "BASE_OFFSET_OFFSET", "LENGTH_OFFSET", "PARTITION_LEADER_EPOCH_OFFSET", "MAGIC_OFFSET",
    "CRC_OFFSET", "ATTRIBUTES_OFFSET", "ATTRIBUTES_LOW_BYTE", "LAST_OFFSET_DELTA_OFFSET",
    "BASE_TIMESTAMP_OFFSET", "MAX_TIMESTAMP_OFFSET", "PRODUCER_ID_OFFSET",
    "PRODUCER_EPOCH_OFFSET", "BASE_SEQUENCE_OFFSET", "RECORDS_COUNT_OFFSET", "RECORDS_OFFSET",
    "RECORD_BATCH_OVERHEAD", "LOG_OVERHEAD", "ATTR_COMPRESSION_MASK", "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL", "ATTR_CONTROL", "ATTR_DELETE_HORIZON", "SEQUENCE_SPACE", "HEADER",
]

BASE_OFFSET_OFFSET = 0              # int64
LENGTH_OFFSET = 8                   # int32: bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = 12  # int32
MAGIC_OFFSET = 16                   # int8: 2
CRC_OFFSET = 17                     # uint32 CRC-32C of ATTRIBUTES_OFFSET..end
ATTRIBUTES_OFFSET = 21              # int16
ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1     # every attribute bit Kafka defines is here
LAST_OFFSET_DELTA_OFFSET = 23       # int32
BASE_TIMESTAMP_OFFSET = 27          # int64
MAX_TIMESTAMP_OFFSET = 35           # int64
PRODUCER_ID_OFFSET = 43             # int64
PRODUCER_EPOCH_OFFSET = 51          # int16
BASE_SEQUENCE_OFFSET = 53           # int32
RECORDS_COUNT_OFFSET = 57           # int32
RECORDS_OFFSET = 61                 # the records (compressed or not) start here
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET          # a batch with no records
LOG_OVERHEAD = LENGTH_OFFSET + 4                # base offset and length: what length excludes

# Attribute bits (of the int16 at ATTRIBUTES_OFFSET).
ATTR_COMPRESSION_MASK = 0x07        # the codec id (pylog.compression)
ATTR_TIMESTAMP_TYPE = 0x08          # 0 CreateTime, 1 LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

#: Idempotent sequence numbers (BASE_SEQUENCE_OFFSET, int32) wrap to 0 after int32 max, as
#: Kafka's DefaultRecordBatch.incrementSequence: arithmetic on them is modulo this.
SEQUENCE_SPACE = 1 << 31

#: The whole header, field by field in the order above (big-endian, as Kafka writes it).
HEADER = struct.Struct(">qiibIhiqqqhii")
