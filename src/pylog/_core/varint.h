/* Kafka's varints (docs/FORMAT.md, section 3): protobuf base-128, least
 * significant group first, over the zigzag encoding of a signed value, so
 * -1 (a null length) takes one byte. int32 fields use at most 5 bytes,
 * int64 fields (the timestamp delta) at most 10. */
#ifndef PYLOG_VARINT_H
#define PYLOG_VARINT_H

#include <stdint.h>

#define PYLOG_VARINT_MAX 5
#define PYLOG_VARLONG_MAX 10

static inline uint64_t pylog_zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline uint32_t pylog_zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline int64_t pylog_unzigzag64(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* Bytes needed for the zigzag varint of v. */
static inline int pylog_varlong_size(int64_t v) {
    uint64_t u = pylog_zigzag64(v);
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}

static inline int pylog_varint_size(int32_t v) {
    uint32_t u = pylog_zigzag32(v);
    return u < (1u << 7) ? 1 : u < (1u << 14) ? 2 : u < (1u << 21) ? 3 : u < (1u << 28) ? 4 : 5;
}

/* Writes the zigzag varint of v at p; returns the new end. */
static inline char *pylog_write_varlong(char *p, int64_t v) {
    uint64_t u = pylog_zigzag64(v);
    while (u >= 0x80) { *p++ = (char)(u | 0x80); u >>= 7; }
    *p++ = (char)u;
    return p;
}

static inline char *pylog_write_varint(char *p, int32_t v) {
    uint32_t u = pylog_zigzag32(v);
    /* One or two bytes (lengths and offset deltas of typical records) without a loop. */
    if (u < 0x80) {
        p[0] = (char)u;
        return p + 1;
    }
    if (u < 0x4000) {
        p[0] = (char)(u | 0x80);
        p[1] = (char)(u >> 7);
        return p + 2;
    }
    while (u >= 0x80) { *p++ = (char)(u | 0x80); u >>= 7; }
    *p++ = (char)u;
    return p;
}

/* Reads a zigzag varint of at most `max_bytes` bytes from [*pp, end).
 * Returns 0 and advances *pp, or -1 when the input ends inside the varint
 * or the varint is longer than max_bytes (malformed). */
static inline int pylog_read_varlong(const char **pp, const char *end, int max_bytes, int64_t *out) {
    const unsigned char *p = (const unsigned char *)*pp;
    /* Fast path: one byte (a producer's timestamp deltas are mostly 0). */
    if ((const char *)p < end && !(*p & 0x80)) {
        *pp = (const char *)(p + 1);
        *out = pylog_unzigzag64(*p);
        return 0;
    }
    uint64_t u = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if ((const char *)p >= end) return -1;
        unsigned char b = *p++;
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = (const char *)p;
            *out = pylog_unzigzag64(u);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* int32 flavour: rejects values outside int32 as malformed. */
static inline int pylog_read_varint(const char **pp, const char *end, int32_t *out) {
    const unsigned char *p = (const unsigned char *)*pp;
    /* Fast paths: one byte (values -64..63), two bytes (-8192..8191: record
     * lengths and offset deltas of typical batches). Either fits int32. */
    if ((const char *)p < end && !(*p & 0x80)) {
        uint32_t u = *p;
        *pp = (const char *)(p + 1);
        *out = (int32_t)(u >> 1) ^ -(int32_t)(u & 1);
        return 0;
    }
    if ((const char *)p + 1 < end && !(p[1] & 0x80)) {
        uint32_t u = (uint32_t)(p[0] & 0x7f) | ((uint32_t)p[1] << 7);
        *pp = (const char *)(p + 2);
        *out = (int32_t)(u >> 1) ^ -(int32_t)(u & 1);
        return 0;
    }
    int64_t v;
    if (pylog_read_varlong(pp, end, PYLOG_VARINT_MAX, &v) < 0) return -1;
    if (v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

#endif
