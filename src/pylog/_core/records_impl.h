/* The record codec's shared inside (records.h is its contract): the status
 * setter every check returns through, and the record reader that the loops over
 * records inline (decoding, measuring, validating). Included by records_batch.c,
 * records_encode.c, records_decode.c and records_validate.c only.
 */
#ifndef PYLOG_RECORDS_IMPL_H
#define PYLOG_RECORDS_IMPL_H

#include "records.h"

#include <string.h>

#include "byteorder.h"
#include "crc32c.h"
#include "utf8.h"
#include "varint.h"

static inline int fail(pylog_status *st, int code, int64_t position, int64_t value, int64_t limit,
                const char *detail) {
    st->code = code;
    st->position = position;
    st->value = value;
    st->limit = limit;
    st->detail = detail;
    return code;
}

/* Timestamp deltas wrap modulo 2^64 exactly as Java's long arithmetic does,
 * so base + (ts - base) == ts for every pair of int64 timestamps. */
static inline int64_t ts_delta(int64_t ts, int64_t base) { return (int64_t)((uint64_t)ts - (uint64_t)base); }
static inline int64_t ts_add(int64_t base, int64_t delta) { return (int64_t)((uint64_t)base + (uint64_t)delta); }

static inline int record_fail(pylog_status *st, int64_t position, int64_t value, const char *detail) {
    return fail(st, PYLOG_ERR_RECORD, position, value, 0, detail);
}

/* Reads a length-prefixed byte string bounded by end; -1 length is null. */
static inline int read_bytes(const char **pp, const char *end, const char **ptr, int32_t *len) {
    if (pylog_read_varint(pp, end, len) < 0) return -1;
    if (*len < -1 || *len > end - *pp) return -1;
    *ptr = *pp;
    if (*len > 0) *pp += *len;
    return 0;
}

/* The body of pylog_record_read, inlined into the loops over records. */
static inline __attribute__((always_inline)) int record_read(const char **pp, const char *end,
                                                             const char *base, pylog_record *r,
                                                             pylog_status *st) {
    const char *start = *pp, *p = *pp;
    int32_t len;
    if (pylog_read_varint(&p, end, &len) < 0) return record_fail(st, start - base, 0, "record length varint");
    if (len < 1 || len > end - p) return record_fail(st, start - base, len, "record length");
    const char *rend = p + len;
    p++; /* attributes */
    if (pylog_read_varlong(&p, rend, PYLOG_VARLONG_MAX, &r->timestamp_delta) < 0)
        return record_fail(st, start - base, 0, "timestamp delta");
    if (pylog_read_varint(&p, rend, &r->offset_delta) < 0)
        return record_fail(st, start - base, 0, "offset delta");
    if (read_bytes(&p, rend, &r->key, &r->key_len) < 0) return record_fail(st, start - base, 0, "key length");
    if (read_bytes(&p, rend, &r->value, &r->value_len) < 0)
        return record_fail(st, start - base, 0, "value length");
    if (pylog_read_varint(&p, rend, &r->header_count) < 0)
        return record_fail(st, start - base, 0, "header count");
    if (r->header_count < 0)
        return record_fail(st, start - base, r->header_count, "header count");
    r->headers = p;
    for (int32_t k = 0; k < r->header_count; k++) {
        const char *hk, *hv;
        int32_t hkl, hvl;
        if (pylog_header_read(&p, rend, &hk, &hkl, &hv, &hvl) < 0)
            return record_fail(st, start - base, k, "header");
    }
    if (p != rend) return record_fail(st, start - base, rend - p, "record size (trailing bytes)");
    r->end = rend;
    *pp = rend;
    return PYLOG_OK;
}

/* The common record, read with a fraction of record_read's instructions (the
 * walks over every record of an append, a fetch and a decode are bounded by
 * them). Common: each varint of one or two
 * bytes (the timestamp delta too), no headers, and at least
 * PYLOG_COMMON_SLACK bytes of the section after the record, so that a varint
 * read past the record's end cannot leave the section: such reads are then
 * caught by the checks after them (a length beyond the record, the record
 * not ending exactly where its length says) instead of before each byte.
 * Returns 0 and advances *pp, or 1 having changed nothing: record_read then
 * reads the same record, and reports what is wrong with it, if anything. */
#define PYLOG_COMMON_SLACK 16

static inline __attribute__((always_inline)) const unsigned char *
common_varint(const unsigned char *p, int64_t *out) {
    uint32_t b0 = p[0];
    if (b0 < 0x80) {
        *out = (int64_t)(b0 >> 1) ^ -(int64_t)(b0 & 1);
        return p + 1;
    }
    uint32_t b1 = p[1];
    if (b1 < 0x80) {
        uint32_t u = (b0 & 0x7f) | (b1 << 7);
        *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
        return p + 2;
    }
    return NULL;
}

static inline __attribute__((always_inline)) int record_read_common(const char **pp,
                                                                    const char *end,
                                                                    pylog_record *r) {
    const unsigned char *p = (const unsigned char *)*pp, *e = (const unsigned char *)end;
    int64_t len, ts, od, kl, vl, hc;
    if (e - p < PYLOG_COMMON_SLACK || !(p = common_varint(p, &len))) return 1;
    if (len < 1 || len > (e - p) - PYLOG_COMMON_SLACK) return 1;
    const unsigned char *rend = p + len;
    if (!(p = common_varint(p + 1, &ts)) || !(p = common_varint(p, &od)) ||
        !(p = common_varint(p, &kl)))
        return 1;
    /* p is at most 8 bytes past the record's end here: inside the slack. */
    if (kl < -1 || kl > rend - p) return 1;
    const unsigned char *key = p;
    p += kl > 0 ? kl : 0;
    if (!(p = common_varint(p, &vl)) || vl < -1 || vl > rend - p) return 1;
    const unsigned char *value = p;
    p += vl > 0 ? vl : 0;
    if (!(p = common_varint(p, &hc)) || hc != 0 || p != rend) return 1;
    r->timestamp_delta = ts;
    r->offset_delta = (int32_t)od;
    r->key_len = (int32_t)kl;
    r->value_len = (int32_t)vl;
    r->header_count = 0;
    r->key = (const char *)key;
    r->value = (const char *)value;
    r->headers = (const char *)rend;
    r->end = (const char *)rend;
    *pp = (const char *)rend;
    return 0;
}

/* A record: the common one quickly, any other by the full rules; *common
 * (when not NULL) says which read took it. */
static inline __attribute__((always_inline)) int record_read_any(const char **pp, const char *end,
                                                                 const char *base, pylog_record *r,
                                                                 pylog_status *st, int *common) {
    int quick = record_read_common(pp, end, r) == 0;
    if (common) *common = quick;
    return quick ? PYLOG_OK : record_read(pp, end, base, r, st);
}

#endif
