/* Preparing batches for a Log append (docs/FORMAT.md, section 10).
 *
 * The incoming buffer is never modified: every batch is validated, given
 * its offsets and leader epoch in a rewritten copy of its 61-byte header,
 * and written as two iovecs (new header, original records), so an append of
 * any number of batches is one write with no copy of the payload. */
#ifndef PYLOG_APPEND_H
#define PYLOG_APPEND_H

#include <stdint.h>
#include <sys/uio.h>

#include "records.h"

typedef struct {
    int64_t next_offset;        /* base offset for the first batch */
    int32_t leader_epoch;       /* stamped into partitionLeaderEpoch */
    int64_t log_append_time;    /* >= 0: apply LogAppendTime with this time (ms) */
    int64_t max_batch_size;     /* max.message.bytes: largest batch accepted */
    int64_t min_timestamp;      /* CreateTime timestamps must lie in [min, max] */
    int64_t max_timestamp;
    int allow_control;          /* control batches come from the coordinator only */
    int validate_records;       /* walk the records of uncompressed batches */
    int require_keys;           /* a compacted topic: every record needs a key */
} pylog_append_params;

/* One validated batch. */
typedef struct {
    int64_t in_position;        /* where it starts in the caller's buffer */
    int64_t size;
    int64_t base_offset;        /* as assigned */
    int64_t last_offset;
    int64_t max_timestamp;      /* after LogAppendTime */
    int32_t records;
    int16_t attributes;         /* after LogAppendTime */
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
} pylog_append_batch;

enum {
    PYLOG_APPEND_OK = 0,
    PYLOG_APPEND_CORRUPT = 1,       /* length/magic/CRC/records: status says which */
    PYLOG_APPEND_TOO_LARGE = 2,     /* a batch exceeds max_batch_size */
    PYLOG_APPEND_INVALID = 3,       /* well formed but not acceptable (detail names the rule) */
    PYLOG_APPEND_TIMESTAMP = 4,     /* a CreateTime timestamp outside [min, max] */
    PYLOG_APPEND_LEGACY = 5,        /* magic 0/1: the caller up-converts first */
    PYLOG_APPEND_INCOMPLETE = 6,    /* the buffer ends inside a batch */
};

/* Counts the batches by their length fields (no validation). */
int64_t pylog_append_count(const char *buf, int64_t len);

/* Validates every batch of buf[0..len) and fills out[0..n) (the caller sized
 * it with pylog_append_count) and header patches (61 bytes per batch). On
 * failure returns a PYLOG_APPEND_* code; st->position is the byte position
 * in buf. Never writes to buf. */
int pylog_append_prepare(const char *buf, int64_t len, const pylog_append_params *p,
                         pylog_append_batch *out, int64_t n, char *patches, pylog_status *st);

/* iov[2i] = patch i, iov[2i+1] = records of batch i. */
void pylog_append_iovecs(const char *buf, const pylog_append_batch *batches, int64_t n,
                         char *patches, struct iovec *iov);

#endif
