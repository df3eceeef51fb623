/* Reading a segment's .log file: walking batch headers and recovery.
 * See docs/FORMAT.md, sections 8-10.
 *
 * Everything here reads with pread(2) through a window buffer, so it never
 * maps the .log and a concurrent truncation cannot fault a reader; every
 * function can run without the GIL. */
#ifndef PYLOG_SEGMENT_IO_H
#define PYLOG_SEGMENT_IO_H

#include <stdint.h>

#include "index.h"
#include "records.h"

/* The header fields a walk needs, for v2 batches and legacy messages. */
typedef struct {
    int64_t position;       /* file position of the batch */
    int64_t size;           /* 12 + length */
    int64_t base_offset;    /* legacy: the message's offset (the last inner offset) */
    int64_t last_offset;
    int64_t max_timestamp;
    int8_t magic;
    int16_t attributes;
    int32_t records_count;  /* legacy: 1 */
    int64_t producer_id;    /* -1: none (and always for legacy messages) */
    int16_t producer_epoch;
    int32_t base_sequence;
} pylog_batch_meta;

typedef struct {
    int fd;
    int64_t end;            /* walk stops here (the segment's logical size) */
    int64_t pos;            /* position of the next batch */
    char *buf;
    int64_t cap;
    int64_t win_pos;        /* file position of buf[0] */
    int64_t win_len;        /* valid bytes in buf */
    int64_t last_size;      /* size of the batch just walked (large: read headers only) */
} pylog_walker;

/* Returns 0 or -ENOMEM. window: read size in bytes (>= 64). */
int pylog_walker_init(pylog_walker *w, int fd, int64_t start, int64_t end, int64_t window);
void pylog_walker_free(pylog_walker *w);

/* Reads the next batch header. Returns 1 with *m filled, 0 at the end (at a
 * partial batch at `end`, or at a zero header: O_DIRECT padding, preallocation), -EILSEQ when the bytes cannot be a batch header
 * (length < 14, unknown magic, or a last offset past INT64_MAX), or -errno
 * from pread. */
int pylog_walker_next(pylog_walker *w, pylog_batch_meta *m);

/* What the segment reader needs to answer Log.read(): from the batch that
 * holds `target` (the first batch with last_offset >= target at or after
 * `start`), whole batches while they fit in max_bytes (at least one) and
 * their last offset is < max_offset. */
typedef struct {
    int64_t start_position;     /* -1: no batch at or after target */
    int64_t end_position;
    int64_t first_offset;       /* base offset of the first batch */
    int64_t last_offset;        /* last offset of the last batch */
    int64_t batches;
} pylog_slice_info;

int pylog_segment_slice(int fd, int64_t start, int64_t end, int64_t target, int64_t max_bytes,
                        int64_t max_offset, pylog_slice_info *out);

/* The first batch at or after `start` whose max timestamp is >= timestamp and
 * whose last offset is >= min_offset. Returns 1 (found, *m filled), 0 (none)
 * or -errno. */
int pylog_segment_find_timestamp(int fd, int64_t start, int64_t end, int64_t timestamp,
                                 int64_t min_offset, pylog_batch_meta *m);

/* Summary of the batches in [start, end): count, last offset, largest
 * timestamp and the last offset of the batch holding it, and the first
 * batch's max timestamp. Used to load a segment without recovering it (the
 * index covers everything before start). Returns 0 or -errno/-EILSEQ. */
typedef struct {
    int64_t batches;
    int64_t end_position;      /* end of the last complete batch */
    int64_t last_offset;       /* -1 when no batch */
    int64_t max_timestamp;     /* -1 when none */
    int64_t offset_of_max_timestamp;
    int64_t first_max_timestamp;
} pylog_segment_summary;

int pylog_segment_summarize(int fd, int64_t start, int64_t end, pylog_segment_summary *out);

/* Why recovery stopped. */
enum {
    PYLOG_RECOVER_CLEAN = 0,       /* reached the end of the file on a batch boundary */
    PYLOG_RECOVER_TORN = 1,        /* a partial batch at the end */
    PYLOG_RECOVER_CORRUPT = 2,     /* a batch failed validation (status says how) */
    PYLOG_RECOVER_OFFSETS = 3,     /* a batch's offsets do not follow the previous batch */
    PYLOG_RECOVER_OUT_OF_RANGE = 4,/* offsets outside [base_offset, base_offset + INT32_MAX] */
    PYLOG_RECOVER_IO = 5,          /* pread failed: errno in io_errno */
    PYLOG_RECOVER_ZERO_FILL = 6,   /* zeros where the next batch would start */
};

typedef struct {
    int64_t valid_bytes;           /* the segment is truncated here */
    int64_t scanned_bytes;
    int64_t batches;
    int64_t records;
    int64_t last_offset;           /* -1 when no valid batch */
    int64_t max_timestamp;         /* -1 when none */
    int64_t offset_of_max_timestamp;
    int64_t first_batch_max_timestamp;  /* -1 when none: drives segment.ms rolls */
    int64_t bytes_since_index_entry;
    int reason;                    /* PYLOG_RECOVER_* */
    int io_errno;
    pylog_status status;           /* for PYLOG_RECOVER_CORRUPT, position relative to the file */
} pylog_recovery;

/* Scans the whole file from position 0 to file_size, validating every batch
 * (length, magic, CRC, offsets increasing from base_offset), and rebuilds both
 * indexes (which must be writable and are reset first) with one entry every
 * index_interval bytes. Does not truncate the file; the caller does that at
 * valid_bytes. Returns 0, or -errno for an allocation failure. */
int pylog_segment_recover(int fd, int64_t file_size, int64_t base_offset, int64_t index_interval,
                          pylog_index *offset_index, pylog_index *time_index, pylog_recovery *r);

/* Reads exactly len bytes at pos unless EOF comes first: bytes read or -errno. */
int64_t pylog_pread_full(int fd, void *buf, int64_t len, int64_t pos);

#endif
