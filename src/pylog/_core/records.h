/* Record batch v2 codec in plain C: batch headers, validation, record
 * encoding and decoding. No Python objects here, so every function can run
 * with the GIL released. See docs/FORMAT.md, sections 2-4 and 7.
 *
 * Conventions: functions return PYLOG_OK (0) or a pylog_code; on failure
 * they fill a pylog_status with the byte position and the numbers involved,
 * and the caller (codec.pyx) turns that into an exception. */
#ifndef PYLOG_RECORDS_H
#define PYLOG_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "batch_format.h"

typedef enum {
    PYLOG_OK = 0,
    PYLOG_INCOMPLETE = 1,         /* the buffer ends inside a batch: a torn tail, not corruption */
    PYLOG_ERR_LENGTH = 2,         /* batch length below the minimum for its magic, or negative */
    PYLOG_ERR_MAGIC = 3,          /* magic byte is not 0, 1 or 2 */
    PYLOG_ERR_CRC = 4,            /* stored and computed checksums differ */
    PYLOG_ERR_RECORD = 5,         /* a record inside the batch is malformed */
    PYLOG_ERR_COUNT = 6,          /* records count disagrees with the records section */
    PYLOG_ERR_TOO_LARGE = 7,      /* encoded batch would not fit Kafka's int32 length */
    PYLOG_ERR_HEADER = 8,         /* header fields inconsistent (negative count, ...) */
} pylog_code;

/* Where and why a decode failed. `position` is relative to the buffer the
 * caller passed; `detail` names the field for PYLOG_ERR_RECORD. */
typedef struct {
    int code;
    int64_t position;
    uint32_t stored_crc;
    uint32_t computed_crc;
    int64_t value;           /* the offending number (length, magic, count) */
    int64_t limit;           /* what it was compared with */
    const char *detail;
} pylog_status;

/* Decoded v2 batch header (also filled for legacy messages: see magic). */
typedef struct {
    int64_t base_offset;
    int32_t length;               /* bytes after the 12-byte log overhead */
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;
} pylog_batch_header;

/* ------------------------------------------------------------------ */
/* Validation                                                          */

/* Reads and validates the batch at buf[0 .. avail). On PYLOG_OK, *h holds
 * the header and the batch occupies 12 + h->length bytes. Magic 0 and 1
 * messages are validated with their CRC-32 (not C); for them only
 * base_offset, length, magic, crc and attributes are filled.
 * verify_crc = 0 skips the checksum (used when the caller verified it). */
int pylog_batch_check(const char *buf, int64_t avail, int verify_crc,
                      pylog_batch_header *h, pylog_status *st);

/* Plain header parse for a magic-2 batch known to be complete. */
void pylog_batch_header_read(const char *buf, pylog_batch_header *h);

/* Writes the 61-byte header for a batch of `total` bytes (header included)
 * whose records section is already in place, then computes and stores the
 * CRC-32C. h->length and h->crc are derived here and ignored on input. */
void pylog_batch_header_finish(char *batch, int64_t total, const pylog_batch_header *h);

/* CRC-32 (IEEE, as zlib) used only by legacy magic 0/1 messages. */
uint32_t pylog_crc32_ieee(uint32_t crc, const void *buf, size_t len);

/* ------------------------------------------------------------------ */
/* Encoding                                                            */

/* A column of byte strings (keys or values) in one of the shapes the
 * Python layer can hand over without copying. */
enum {
    PYLOG_COL_NULL = 0,        /* every entry is null */
    PYLOG_COL_PTRS = 1,        /* ptrs[i], lens[i]; lens[i] < 0 means null */
    PYLOG_COL_ARROW32 = 2,     /* Arrow binary/string: int32 offsets, data, validity bitmap */
    PYLOG_COL_ARROW64 = 3,     /* Arrow large_binary/large_string: int64 offsets */
};

typedef struct {
    int kind;
    const char *const *ptrs;
    const int64_t *lens;
    const int32_t *off32;
    const int64_t *off64;
    const char *data;
    const uint8_t *validity;   /* may be NULL: no nulls */
    int64_t array_offset;      /* Arrow slice offset */
} pylog_column;

/* Record headers, flattened: record i owns headers [starts[i], starts[i+1]). */
typedef struct {
    const int64_t *starts;     /* NULL: no record has headers */
    const char *const *key_ptrs;
    const int64_t *key_lens;
    const char *const *value_ptrs;
    const int64_t *value_lens; /* < 0 means a null header value */
} pylog_headers;

typedef struct {
    int64_t count;
    pylog_column keys;
    pylog_column values;
    pylog_headers headers;
    const int64_t *timestamps; /* NULL: every record has timestamp_const */
    int64_t timestamp_const;
    const int32_t *offset_deltas; /* NULL: record i has offset delta i; else strictly increasing */
} pylog_record_input;

/* Returns the exact size of the encoded records section, or -1 when a
 * single record would exceed int32 (st filled). Also returns the first
 * record's timestamp (the batch's base timestamp) and the largest one. */
int64_t pylog_records_size(const pylog_record_input *in, int64_t *base_ts, int64_t *max_ts,
                           pylog_status *st);

/* Writes the records section (exactly the size computed above) at out.
 * Returns the bytes written. */
int64_t pylog_records_write(const pylog_record_input *in, int64_t base_ts, char *out);

/* The most bytes a record's framing takes besides its key, value and header
 * bytes: length (5), attributes (1), timestamp delta (10), offset delta (5),
 * key and value lengths (5 + 5), header count (5); each header adds 10. */
#define PYLOG_RECORD_MAX_FRAMING 36
#define PYLOG_HEADER_MAX_FRAMING 10

/* An upper bound of the records section of `in`, tighter than
 * PYLOG_RECORD_MAX_FRAMING a record and never above it, from the total bytes
 * of its key, value and header columns (header bytes with their framing):
 * no record's key is longer than all the keys together, so each varint is
 * bounded by its column's total (a length), the record count (default
 * offset deltas) or 1 byte (a column of nulls, one timestamp for all, no
 * headers). It reads no entry of a column: it holds while the entries'
 * lengths stay as gathered, whatever their bytes. 1,000 records of 100 B
 * without keys: 21 bytes of framing a record (121 KB) where 36 gave 136 KB,
 * past the one-pass limit (EXACT_SIZE_BYTES, codec.pyx). */
int64_t pylog_records_bound(const pylog_record_input *in, int64_t key_bytes, int64_t value_bytes,
                            int64_t header_bytes);

/* pylog_records_size and pylog_records_write in one call, for a caller that
 * allocated an upper bound (pylog_records_bound): one pass, returns the bytes written, or -1 (st filled) when
 * a record would exceed int32 (the output is then garbage). */
int64_t pylog_records_encode(const pylog_record_input *in, char *out, int64_t *base_ts,
                             int64_t *max_ts, pylog_status *st);

/* ------------------------------------------------------------------ */
/* Decoding                                                            */

/* One record, as views into the records section. */
typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    int32_t key_len;           /* -1: null */
    int32_t value_len;         /* -1: null */
    int32_t header_count;
    const char *key;
    const char *value;
    const char *headers;       /* header_count encoded headers */
    const char *end;           /* first byte after this record */
} pylog_record;

/* Reads the record at *pp (bounded by end), advancing *pp past it. Checks
 * that every length stays inside the record's declared size. `base` is the
 * start of the records section, for error positions. */
int pylog_record_read(const char **pp, const char *end, const char *base,
                      pylog_record *r, pylog_status *st);

/* Reads one header from *pp within [*pp, end). */
int pylog_header_read(const char **pp, const char *end, const char **key, int32_t *key_len,
                      const char **value, int32_t *value_len);

/* Totals over a records section, to size Arrow buffers before filling. */
typedef struct {
    int64_t records;
    int64_t key_bytes;
    int64_t value_bytes;
    int64_t headers;
    int64_t header_key_bytes;
    int64_t header_value_bytes;
} pylog_records_totals;

/* One record's fields as the measure pass read them (positions from the
 * records section's start: a section is under 2 GiB). */
typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    int32_t key_len;            /* -1: null */
    int32_t value_len;          /* -1: null */
    int32_t header_count;
    uint32_t key_at;
    uint32_t value_at;
    uint32_t headers_at;
    uint32_t end_at;            /* the record's end */
} pylog_parsed_record;

/* Walks `count` records in [recs, recs+len), validating them and adding to
 * *t; with `out` (or NULL), also stores each record's fields in out[0..count),
 * which the fill then copies from instead of reading the varints again. Fails
 * if the section holds more or fewer bytes than the records. */
int pylog_records_measure(const char *recs, int64_t len, int32_t count,
                          pylog_records_totals *t, pylog_status *st, pylog_parsed_record *out);

/* What Kafka's LogValidator checks of each record of a batch a client appends,
 * over a decompressed records section: framing (as measure), offset deltas
 * 0, 1, ..., count-1, and a key on every record when `require_keys` (a
 * compacted topic). Sets the smallest and largest record timestamp
 * (base_timestamp + delta). Errors: PYLOG_ERR_RECORD (framing, "offset delta",
 * "null key"), PYLOG_ERR_COUNT. */
int pylog_records_validate(const char *recs, int64_t len, int32_t count, int64_t base_timestamp,
                           int require_keys, int64_t *min_timestamp, int64_t *max_timestamp,
                           pylog_status *st);

/* The same walk over a records section that arrives in pieces (a compressed
 * batch decompressed a bounded chunk at a time), so that it never has to be
 * whole in memory. The state one piece leaves for the next: */
typedef struct {
    int32_t count;              /* records the batch header declares */
    int32_t next;               /* records walked so far (the next one's offset delta) */
    int64_t base_timestamp;
    int require_keys;
    int64_t max_record_bytes;   /* the largest record accepted, its length varint included */
    int64_t min_timestamp;      /* of the records walked: INT64_MAX, INT64_MIN before any */
    int64_t max_timestamp;
} pylog_records_walk;

void pylog_records_walk_init(pylog_records_walk *w, int32_t count, int64_t base_timestamp,
                             int require_keys, int64_t max_record_bytes);

/* Walks the whole records at the start of [recs, recs+len), the section's
 * bytes from the end of the pieces before; *used: the bytes they take. The
 * rest (a record the piece cuts) must start the next piece, with more bytes
 * after it. Positions in errors are from `recs`. Fails as
 * pylog_records_validate does, and as early as the piece shows it: a
 * record whose length exceeds max_record_bytes (PYLOG_ERR_TOO_LARGE, "record
 * size", before its bytes are there), bytes after record count-1
 * (PYLOG_ERR_COUNT). With `last` (the section ends with this piece) the
 * piece must hold every record left and nothing after them. */
int pylog_records_walk_piece(pylog_records_walk *w, const char *recs, int64_t len, int last,
                             int64_t *used, pylog_status *st);

/* Destination columns for decode_arrow; *_pos are running cursors. Offsets
 * arrays hold (records + 1) entries and start with 0. Validity bitmaps are
 * zero-initialised by the caller; bits are set for non-null entries. */
typedef struct {
    int64_t *offsets;
    int64_t *timestamps;
    int wide;                   /* 1: int64 binary offsets (large_binary) */
    void *key_offsets;
    char *key_data;
    uint8_t *key_validity;
    void *value_offsets;
    char *value_data;
    uint8_t *value_validity;
    int32_t *header_list_offsets;
    void *header_key_offsets;
    char *header_key_data;
    void *header_value_offsets;
    char *header_value_data;
    uint8_t *header_value_validity;
    /* cursors */
    int64_t row;
    int64_t key_pos;
    int64_t value_pos;
    int64_t header_row;
    int64_t header_key_pos;
    int64_t header_value_pos;
    int64_t key_nulls;
    int64_t value_nulls;
    int64_t header_value_nulls;
    /* Capacities the caller allocated (from the measure pass). The fill
     * runs without the GIL over a buffer another thread may change after it
     * was measured: it never writes past these, and sets `overflow` (and
     * stops) when the records no longer read back as measured. */
    int64_t rows_cap;
    int64_t key_cap;
    int64_t value_cap;
    int64_t headers_cap;
    int64_t header_key_cap;
    int64_t header_value_cap;
    int overflow;
} pylog_arrow_out;

/* Appends one measured section's records to *out, from the fields
 * pylog_records_measure stored for it (`recs` is that section; header
 * bytes are read from it again). Record timestamps are base_timestamp + delta,
 * or, when log_append is non-zero, log_append_time (the batch's maxTimestamp,
 * whatever its sign), as Kafka's DefaultRecordBatch does for LogAppendTime. */
void pylog_records_fill_parsed(const char *recs, const pylog_parsed_record *parsed, int32_t count,
                               int64_t base_offset, int64_t base_timestamp, int log_append,
                               int64_t log_append_time, pylog_arrow_out *out);

#endif
