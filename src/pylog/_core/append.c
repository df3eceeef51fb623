/* Preparing batches for a Log append (append.h; docs/FORMAT.md, section 10).
 *
 * Validation follows Kafka's LogValidator for magic 2: CRC, size against
 * max.message.bytes, record count against the offset range, no control
 * batches from clients, CreateTime within the configured window. Offsets are
 * assigned in place in a copy of the header; the CRC does not cover
 * baseOffset or partitionLeaderEpoch, so only LogAppendTime (which rewrites
 * attributes and maxTimestamp) recomputes it. */
#include "append.h"

#include <string.h>

#include "batch_format.h"
#include "byteorder.h"
#include "crc32c.h"

int64_t pylog_append_count(const char *buf, int64_t len) {
    int64_t n = 0, pos = 0;
    while (pos < len) {
        n++;
        if (len - pos < PYLOG_LOG_OVERHEAD) break;
        int32_t length = pylog_load_i32(buf + pos + PYLOG_LENGTH_OFFSET);
        if (length <= 0) break;
        pos += (int64_t)length + PYLOG_LOG_OVERHEAD;
    }
    return n;
}

static int reject(pylog_status *st, int rc, int64_t position, int64_t value, int64_t limit,
                  const char *detail) {
    st->position = position;
    st->value = value;
    st->limit = limit;
    st->detail = detail;
    return rc;
}

/* Kafka checks each record; pylog checks the batch's bounds (baseTimestamp
 * is the first record's, maxTimestamp the largest). -1 means "none". */
static int check_timestamp(const pylog_append_params *p, int64_t ts, int64_t position,
                           pylog_status *st) {
    if (ts == PYLOG_NO_TIMESTAMP) return PYLOG_APPEND_OK;
    if (ts < p->min_timestamp)
        return reject(st, PYLOG_APPEND_TIMESTAMP, position, ts, p->min_timestamp, "timestamp");
    if (ts > p->max_timestamp)
        return reject(st, PYLOG_APPEND_TIMESTAMP, position, ts, p->max_timestamp, "timestamp");
    return PYLOG_APPEND_OK;
}

int pylog_append_prepare(const char *buf, int64_t len, const pylog_append_params *p,
                         pylog_append_batch *out, int64_t n, char *patches, pylog_status *st) {
    memset(st, 0, sizeof(*st));
    if (len == 0) return reject(st, PYLOG_APPEND_INVALID, 0, 0, 0, "empty append");
    int64_t pos = 0, i = 0, next_offset = p->next_offset;
    while (pos < len) {
        const char *b = buf + pos;
        int64_t avail = len - pos;
        if (i >= n) return reject(st, PYLOG_APPEND_INVALID, pos, i, n, "batch count");
        if (avail > PYLOG_MAGIC_OFFSET && b[PYLOG_MAGIC_OFFSET] != 2 &&
            (b[PYLOG_MAGIC_OFFSET] == 0 || b[PYLOG_MAGIC_OFFSET] == 1))
            return reject(st, PYLOG_APPEND_LEGACY, pos, b[PYLOG_MAGIC_OFFSET], 2, "magic");
        pylog_batch_header h;
        int code = pylog_batch_check(b, avail, 1, &h, st);
        if (code == PYLOG_INCOMPLETE)
            return reject(st, PYLOG_APPEND_INCOMPLETE, pos, avail, st->limit, "batch");
        if (code != PYLOG_OK) {
            st->position += pos;
            return PYLOG_APPEND_CORRUPT;
        }
        int64_t size = (int64_t)h.length + PYLOG_LOG_OVERHEAD;
        if (size > p->max_batch_size)
            return reject(st, PYLOG_APPEND_TOO_LARGE, pos, size, p->max_batch_size, "size");
        if ((h.attributes & PYLOG_ATTR_CONTROL) && !p->allow_control)
            return reject(st, PYLOG_APPEND_INVALID, pos, h.attributes, 0, "control batch from a client");
        if (h.records_count <= 0)
            return reject(st, PYLOG_APPEND_INVALID, pos, h.records_count, 1, "records count");
        if ((int64_t)h.last_offset_delta + 1 != h.records_count)
            return reject(st, PYLOG_APPEND_INVALID, pos, h.records_count,
                          (int64_t)h.last_offset_delta + 1, "records count");
        int walked = p->validate_records && (h.attributes & PYLOG_ATTR_COMPRESSION_MASK) == 0;
        int64_t rec_min_ts = h.base_timestamp, rec_max_ts = h.max_timestamp;
        if (walked) {
            /* LogValidator's per-record checks: framing, offset deltas 0..n-1,
             * keys on a compacted topic; and the records' own timestamps. */
            code = pylog_records_validate(b + PYLOG_RECORDS_OFFSET, size - PYLOG_RECORDS_OFFSET,
                                          h.records_count, h.base_timestamp, p->require_keys,
                                          &rec_min_ts, &rec_max_ts, st);
            if (code != PYLOG_OK) {
                st->position += pos + PYLOG_RECORDS_OFFSET;
                return PYLOG_APPEND_CORRUPT;
            }
        }

        char *patch = patches + i * PYLOG_RECORD_BATCH_OVERHEAD;
        memcpy(patch, b, PYLOG_RECORD_BATCH_OVERHEAD);
        pylog_store_i64(patch + PYLOG_BASE_OFFSET_OFFSET, next_offset);
        pylog_store_i32(patch + PYLOG_PARTITION_LEADER_EPOCH_OFFSET, p->leader_epoch);
        int16_t attributes = h.attributes;
        int64_t max_ts = h.max_timestamp;
        int rewrite = 0;
        if (p->log_append_time >= 0) {
            attributes |= PYLOG_ATTR_TIMESTAMP_TYPE;
            max_ts = p->log_append_time;
            rewrite = 1;
        } else {
            if ((code = check_timestamp(p, rec_min_ts, pos, st)) != PYLOG_APPEND_OK) return code;
            if ((code = check_timestamp(p, rec_max_ts, pos, st)) != PYLOG_APPEND_OK) return code;
            if (walked && !(h.attributes & PYLOG_ATTR_TIMESTAMP_TYPE) && rec_max_ts != h.max_timestamp) {
                /* Kafka stores the records' true maximum as the batch's maxTimestamp. */
                max_ts = rec_max_ts;
                rewrite = 1;
            }
        }
        if (rewrite) {
            pylog_store_i16(patch + PYLOG_ATTRIBUTES_OFFSET, attributes);
            pylog_store_i64(patch + PYLOG_MAX_TIMESTAMP_OFFSET, max_ts);
            uint32_t crc = pylog_crc32c_extend(0, patch + PYLOG_ATTRIBUTES_OFFSET,
                                               PYLOG_RECORD_BATCH_OVERHEAD - PYLOG_ATTRIBUTES_OFFSET);
            crc = pylog_crc32c_extend(crc, b + PYLOG_RECORDS_OFFSET,
                                      (size_t)(size - PYLOG_RECORDS_OFFSET));
            pylog_store_u32(patch + PYLOG_CRC_OFFSET, crc);
        }

        pylog_append_batch *o = &out[i];
        o->in_position = pos;
        o->size = size;
        o->base_offset = next_offset;
        o->last_offset = next_offset + h.last_offset_delta;
        o->max_timestamp = max_ts;
        o->records = h.records_count;
        o->attributes = attributes;
        o->producer_id = h.producer_id;
        o->producer_epoch = h.producer_epoch;
        o->base_sequence = h.base_sequence;
        next_offset = o->last_offset + 1;
        pos += size;
        i++;
    }
    st->value = i;
    return PYLOG_APPEND_OK;
}

void pylog_append_iovecs(const char *buf, const pylog_append_batch *batches, int64_t n,
                         char *patches, struct iovec *iov) {
    for (int64_t i = 0; i < n; i++) {
        iov[2 * i].iov_base = patches + i * PYLOG_RECORD_BATCH_OVERHEAD;
        iov[2 * i].iov_len = PYLOG_RECORD_BATCH_OVERHEAD;
        iov[2 * i + 1].iov_base = (char *)buf + batches[i].in_position + PYLOG_RECORDS_OFFSET;
        iov[2 * i + 1].iov_len = (size_t)(batches[i].size - PYLOG_RECORDS_OFFSET);
    }
}
