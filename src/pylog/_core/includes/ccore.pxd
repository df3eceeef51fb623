# C declarations of pylog's core (crc32c.h, records.h). See docs/FORMAT.md.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t


cdef enum:
    # A CPU pass (encode, decode, an append's CRC and record walk) over fewer
    # bytes keeps the GIL: the release and re-acquire (atomics uncontended, a
    # thread wake when another thread takes it) would cost more than the work.
    NOGIL_MIN_BYTES = 16384


cdef extern from "crc32c.h" nogil:
    void pylog_crc32c_init()
    uint32_t pylog_crc32c_extend(uint32_t crc, const void *buf, size_t length)
    uint32_t pylog_crc32c_extend_sw(uint32_t crc, const void *buf, size_t length)
    const char *pylog_crc32c_implementation()


cdef extern from "batch_format.h" nogil:
    enum:
        PYLOG_BASE_OFFSET_OFFSET
        PYLOG_LENGTH_OFFSET
        PYLOG_PARTITION_LEADER_EPOCH_OFFSET
        PYLOG_MAGIC_OFFSET
        PYLOG_CRC_OFFSET
        PYLOG_ATTRIBUTES_OFFSET
        PYLOG_LAST_OFFSET_DELTA_OFFSET
        PYLOG_BASE_TIMESTAMP_OFFSET
        PYLOG_MAX_TIMESTAMP_OFFSET
        PYLOG_PRODUCER_ID_OFFSET
        PYLOG_PRODUCER_EPOCH_OFFSET
        PYLOG_BASE_SEQUENCE_OFFSET
        PYLOG_RECORDS_COUNT_OFFSET
        PYLOG_RECORDS_OFFSET
        PYLOG_RECORD_BATCH_OVERHEAD
        PYLOG_LOG_OVERHEAD
        PYLOG_LEGACY_V0_OVERHEAD
        PYLOG_LEGACY_V1_OVERHEAD
    enum:
        PYLOG_ATTR_COMPRESSION_MASK
        PYLOG_ATTR_TIMESTAMP_TYPE
        PYLOG_ATTR_TRANSACTIONAL
        PYLOG_ATTR_CONTROL
        PYLOG_ATTR_DELETE_HORIZON
    enum:
        PYLOG_COMPRESSION_NONE
        PYLOG_COMPRESSION_GZIP
        PYLOG_COMPRESSION_SNAPPY
        PYLOG_COMPRESSION_LZ4
        PYLOG_COMPRESSION_ZSTD
    const long long PYLOG_NO_TIMESTAMP
    const long long PYLOG_SEQUENCE_SPACE


cdef extern from "records.h" nogil:
    enum:
        PYLOG_OK
        PYLOG_INCOMPLETE
        PYLOG_ERR_LENGTH
        PYLOG_ERR_MAGIC
        PYLOG_ERR_CRC
        PYLOG_ERR_RECORD
        PYLOG_ERR_COUNT
        PYLOG_ERR_TOO_LARGE
        PYLOG_ERR_HEADER
    enum:
        PYLOG_COL_NULL
        PYLOG_COL_PTRS
        PYLOG_COL_ARROW32
        PYLOG_COL_ARROW64

    ctypedef struct pylog_status:
        int code
        int64_t position
        uint32_t stored_crc
        uint32_t computed_crc
        int64_t value
        int64_t limit
        const char *detail

    ctypedef struct pylog_batch_header:
        int64_t base_offset
        int32_t length
        int32_t partition_leader_epoch
        int8_t magic
        uint32_t crc
        int16_t attributes
        int32_t last_offset_delta
        int64_t base_timestamp
        int64_t max_timestamp
        int64_t producer_id
        int16_t producer_epoch
        int32_t base_sequence
        int32_t records_count

    int pylog_batch_check(const char *buf, int64_t avail, int verify_crc,
                          pylog_batch_header *h, pylog_status *st)
    void pylog_batch_header_read(const char *buf, pylog_batch_header *h)
    void pylog_batch_header_finish(char *batch, int64_t total, const pylog_batch_header *h)
    uint32_t pylog_crc32_ieee(uint32_t crc, const void *buf, size_t length)

    ctypedef struct pylog_column:
        int kind
        const char *const *ptrs
        const int64_t *lens
        const int32_t *off32
        const int64_t *off64
        const char *data
        const uint8_t *validity
        int64_t array_offset

    ctypedef struct pylog_headers:
        const int64_t *starts
        const char *const *key_ptrs
        const int64_t *key_lens
        const char *const *value_ptrs
        const int64_t *value_lens

    ctypedef struct pylog_record_input:
        int64_t count
        pylog_column keys
        pylog_column values
        pylog_headers headers
        const int64_t *timestamps
        int64_t timestamp_const
        const int32_t *offset_deltas

    int64_t pylog_records_size(const pylog_record_input *inp, int64_t *base_ts, int64_t *max_ts,
                               pylog_status *st)
    int64_t pylog_records_write(const pylog_record_input *inp, int64_t base_ts, char *out)
    int64_t pylog_records_encode(const pylog_record_input *inp, char *out, int64_t *base_ts,
                                 int64_t *max_ts, pylog_status *st)
    int64_t pylog_records_bound(const pylog_record_input *inp, int64_t key_bytes,
                                int64_t value_bytes, int64_t header_bytes)
    enum: PYLOG_RECORD_MAX_FRAMING
    enum: PYLOG_HEADER_MAX_FRAMING

    ctypedef struct pylog_record:
        int64_t timestamp_delta
        int32_t offset_delta
        int32_t key_len
        int32_t value_len
        int32_t header_count
        const char *key
        const char *value
        const char *headers
        const char *end

    int pylog_record_read(const char **pp, const char *end, const char *base,
                          pylog_record *r, pylog_status *st)
    int pylog_header_read(const char **pp, const char *end, const char **key, int32_t *key_len,
                          const char **value, int32_t *value_len)

    ctypedef struct pylog_records_totals:
        int64_t records
        int64_t key_bytes
        int64_t value_bytes
        int64_t headers
        int64_t header_key_bytes
        int64_t header_value_bytes

    int pylog_records_validate(const char *recs, int64_t len, int32_t count, int64_t base_timestamp,
                               int require_keys, int64_t *min_timestamp, int64_t *max_timestamp,
                               pylog_status *st)
    ctypedef struct pylog_records_walk:
        int32_t count
        int32_t next
        int64_t min_timestamp
        int64_t max_timestamp
    void pylog_records_walk_init(pylog_records_walk *w, int32_t count, int64_t base_timestamp,
                                 int require_keys, int64_t max_record_bytes)
    int pylog_records_walk_piece(pylog_records_walk *w, const char *recs, int64_t len, int last,
                                 int64_t *used, pylog_status *st)
    ctypedef struct pylog_parsed_record:
        pass
    int pylog_records_measure(const char *recs, int64_t length, int32_t count,
                              pylog_records_totals *t, pylog_status *st,
                              pylog_parsed_record *out)

    ctypedef struct pylog_arrow_out:
        int64_t *offsets
        int64_t *timestamps
        int wide
        void *key_offsets
        char *key_data
        uint8_t *key_validity
        void *value_offsets
        char *value_data
        uint8_t *value_validity
        int32_t *header_list_offsets
        void *header_key_offsets
        char *header_key_data
        void *header_value_offsets
        char *header_value_data
        uint8_t *header_value_validity
        int64_t row
        int64_t key_pos
        int64_t value_pos
        int64_t header_row
        int64_t header_key_pos
        int64_t header_value_pos
        int64_t key_nulls
        int64_t value_nulls
        int64_t header_value_nulls
        int64_t rows_cap
        int64_t key_cap
        int64_t value_cap
        int64_t headers_cap
        int64_t header_key_cap
        int64_t header_value_cap
        int overflow

    void pylog_records_fill_parsed(const char *recs, const pylog_parsed_record *parsed,
                                   int32_t count, int64_t base_offset, int64_t base_timestamp,
                                   int log_append, int64_t log_append_time, pylog_arrow_out *out)


cdef extern from "utf8.h" nogil:
    int64_t pylog_utf8_sanitized_len(const char *s, int64_t length)
    int64_t pylog_utf8_sanitize(char *dst, const char *s, int64_t length)
