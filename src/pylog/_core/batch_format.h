/* Record batch v2 layout (magic 2). See docs/FORMAT.md, section 2.
 * Each field offset is derived from the previous one, as Kafka's
 * DefaultRecordBatch does, so the 61-byte header cannot drift. */
#ifndef PYLOG_BATCH_FORMAT_H
#define PYLOG_BATCH_FORMAT_H

enum {
    PYLOG_BASE_OFFSET_OFFSET = 0,
    PYLOG_LENGTH_OFFSET = PYLOG_BASE_OFFSET_OFFSET + 8,
    PYLOG_PARTITION_LEADER_EPOCH_OFFSET = PYLOG_LENGTH_OFFSET + 4,
    PYLOG_MAGIC_OFFSET = PYLOG_PARTITION_LEADER_EPOCH_OFFSET + 4,
    PYLOG_CRC_OFFSET = PYLOG_MAGIC_OFFSET + 1,
    PYLOG_ATTRIBUTES_OFFSET = PYLOG_CRC_OFFSET + 4,      /* the CRC covers ATTRIBUTES..end */
    PYLOG_LAST_OFFSET_DELTA_OFFSET = PYLOG_ATTRIBUTES_OFFSET + 2,
    PYLOG_BASE_TIMESTAMP_OFFSET = PYLOG_LAST_OFFSET_DELTA_OFFSET + 4,
    PYLOG_MAX_TIMESTAMP_OFFSET = PYLOG_BASE_TIMESTAMP_OFFSET + 8,
    PYLOG_PRODUCER_ID_OFFSET = PYLOG_MAX_TIMESTAMP_OFFSET + 8,
    PYLOG_PRODUCER_EPOCH_OFFSET = PYLOG_PRODUCER_ID_OFFSET + 8,
    PYLOG_BASE_SEQUENCE_OFFSET = PYLOG_PRODUCER_EPOCH_OFFSET + 2,
    PYLOG_RECORDS_COUNT_OFFSET = PYLOG_BASE_SEQUENCE_OFFSET + 4,
    PYLOG_RECORDS_OFFSET = PYLOG_RECORDS_COUNT_OFFSET + 4,
    PYLOG_RECORD_BATCH_OVERHEAD = PYLOG_RECORDS_OFFSET,   /* 61 */
    PYLOG_LOG_OVERHEAD = PYLOG_LENGTH_OFFSET + 4,          /* 12: baseOffset + length */
    /* Smallest legacy message: offset, size, crc, magic, attributes, key len, value len. */
    PYLOG_LEGACY_V0_OVERHEAD = PYLOG_LOG_OVERHEAD + 4 + 1 + 1 + 4 + 4,  /* 26 */
    PYLOG_LEGACY_V1_OVERHEAD = PYLOG_LEGACY_V0_OVERHEAD + 8,            /* 34: + timestamp */
};

/* Attribute bits (int16). */
enum {
    PYLOG_ATTR_COMPRESSION_MASK = 0x07,
    PYLOG_ATTR_TIMESTAMP_TYPE = 0x08,   /* 0 CreateTime, 1 LogAppendTime */
    PYLOG_ATTR_TRANSACTIONAL = 0x10,
    PYLOG_ATTR_CONTROL = 0x20,
    PYLOG_ATTR_DELETE_HORIZON = 0x40,
};

enum {
    PYLOG_COMPRESSION_NONE = 0,
    PYLOG_COMPRESSION_GZIP = 1,
    PYLOG_COMPRESSION_SNAPPY = 2,
    PYLOG_COMPRESSION_LZ4 = 3,
    PYLOG_COMPRESSION_ZSTD = 4,
};

#define PYLOG_NO_TIMESTAMP (-1LL)

/* Idempotent producers' sequence numbers (base sequence, int32) wrap to 0 after int32 max,
 * as Kafka's DefaultRecordBatch.incrementSequence: arithmetic on them is modulo this. */
#define PYLOG_SEQUENCE_SPACE 2147483648LL

#endif
