/* Record batch v2 codec: see records.h and docs/FORMAT.md. */
#include "records.h"

#include <pthread.h>

#include <string.h>

#include "byteorder.h"
#include "crc32c.h"
#include "utf8.h"
#include "varint.h"

/* ================================================================== */
/* Legacy CRC-32 (IEEE 802.3, reflected 0xEDB88320): magic 0/1 only.   */

static uint32_t crc32_table[256];
static pthread_once_t crc32_once = PTHREAD_ONCE_INIT;

static void crc32_build(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc32_table[n] = c;
    }
}

uint32_t pylog_crc32_ieee(uint32_t crc, const void *buf, size_t len) {
    /* Built once, on first use, by whichever thread gets here first: the
     * others wait for it (callers run without the GIL). */
    pthread_once(&crc32_once, crc32_build);
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t c = ~crc;
    while (len--) c = crc32_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* ================================================================== */
/* Batch headers and validation                                        */

static int fail(pylog_status *st, int code, int64_t position, int64_t value, int64_t limit,
                const char *detail) {
    st->code = code;
    st->position = position;
    st->value = value;
    st->limit = limit;
    st->detail = detail;
    return code;
}

void pylog_batch_header_read(const char *buf, pylog_batch_header *h) {
    h->base_offset = pylog_load_i64(buf + PYLOG_BASE_OFFSET_OFFSET);
    h->length = pylog_load_i32(buf + PYLOG_LENGTH_OFFSET);
    h->partition_leader_epoch = pylog_load_i32(buf + PYLOG_PARTITION_LEADER_EPOCH_OFFSET);
    h->magic = (int8_t)buf[PYLOG_MAGIC_OFFSET];
    h->crc = pylog_load_u32(buf + PYLOG_CRC_OFFSET);
    h->attributes = pylog_load_i16(buf + PYLOG_ATTRIBUTES_OFFSET);
    h->last_offset_delta = pylog_load_i32(buf + PYLOG_LAST_OFFSET_DELTA_OFFSET);
    h->base_timestamp = pylog_load_i64(buf + PYLOG_BASE_TIMESTAMP_OFFSET);
    h->max_timestamp = pylog_load_i64(buf + PYLOG_MAX_TIMESTAMP_OFFSET);
    h->producer_id = pylog_load_i64(buf + PYLOG_PRODUCER_ID_OFFSET);
    h->producer_epoch = pylog_load_i16(buf + PYLOG_PRODUCER_EPOCH_OFFSET);
    h->base_sequence = pylog_load_i32(buf + PYLOG_BASE_SEQUENCE_OFFSET);
    h->records_count = pylog_load_i32(buf + PYLOG_RECORDS_COUNT_OFFSET);
}

int pylog_batch_check(const char *buf, int64_t avail, int verify_crc,
                      pylog_batch_header *h, pylog_status *st) {
    st->code = PYLOG_OK;
    /* Order follows Kafka's FileLogInputStream: a size too small to be any
     * message is corruption; a size that runs past the buffer is a torn tail. */
    if (avail < PYLOG_LOG_OVERHEAD)
        return fail(st, PYLOG_INCOMPLETE, 0, avail, PYLOG_LOG_OVERHEAD, "log overhead");
    int32_t length = pylog_load_i32(buf + PYLOG_LENGTH_OFFSET);
    if (length < PYLOG_LEGACY_V0_OVERHEAD - PYLOG_LOG_OVERHEAD)
        return fail(st, PYLOG_ERR_LENGTH, PYLOG_LENGTH_OFFSET, length,
                    PYLOG_LEGACY_V0_OVERHEAD - PYLOG_LOG_OVERHEAD, "batch length");
    if (avail <= PYLOG_MAGIC_OFFSET)
        return fail(st, PYLOG_INCOMPLETE, 0, avail, (int64_t)length + PYLOG_LOG_OVERHEAD, "magic");
    int8_t magic = (int8_t)buf[PYLOG_MAGIC_OFFSET];
    if (magic < 0 || magic > 2)
        return fail(st, PYLOG_ERR_MAGIC, PYLOG_MAGIC_OFFSET, magic, 2, "magic");
    int32_t min_length = magic == 2   ? PYLOG_RECORD_BATCH_OVERHEAD - PYLOG_LOG_OVERHEAD
                         : magic == 1 ? PYLOG_LEGACY_V1_OVERHEAD - PYLOG_LOG_OVERHEAD
                                      : PYLOG_LEGACY_V0_OVERHEAD - PYLOG_LOG_OVERHEAD;
    if (length < min_length)
        return fail(st, PYLOG_ERR_LENGTH, PYLOG_LENGTH_OFFSET, length, min_length, "batch length");
    int64_t size = (int64_t)length + PYLOG_LOG_OVERHEAD;
    if (size > avail) return fail(st, PYLOG_INCOMPLETE, 0, avail, size, "batch");

    if (magic == 2) {
        pylog_batch_header_read(buf, h);
        if (verify_crc) {
            uint32_t computed = pylog_crc32c_extend(0, buf + PYLOG_ATTRIBUTES_OFFSET,
                                                    (size_t)(size - PYLOG_ATTRIBUTES_OFFSET));
            if (computed != h->crc) {
                st->stored_crc = h->crc;
                st->computed_crc = computed;
                return fail(st, PYLOG_ERR_CRC, PYLOG_CRC_OFFSET, 0, 0, "crc");
            }
        }
        if (h->records_count < 0)
            return fail(st, PYLOG_ERR_HEADER, PYLOG_RECORDS_COUNT_OFFSET, h->records_count, 0,
                        "records count");
        if (h->last_offset_delta < 0)
            return fail(st, PYLOG_ERR_HEADER, PYLOG_LAST_OFFSET_DELTA_OFFSET, h->last_offset_delta,
                        0, "last offset delta");
        return PYLOG_OK;
    }

    /* Legacy message: offset, size, crc (CRC-32 of magic..end), magic, attributes. */
    memset(h, 0, sizeof(*h));
    h->base_offset = pylog_load_i64(buf);
    h->length = length;
    h->magic = magic;
    h->crc = pylog_load_u32(buf + PYLOG_LOG_OVERHEAD);
    h->attributes = (int16_t)(uint8_t)buf[PYLOG_MAGIC_OFFSET + 1];
    h->partition_leader_epoch = -1;
    h->producer_id = -1;
    h->producer_epoch = -1;
    h->base_sequence = -1;
    h->base_timestamp = h->max_timestamp =
        magic == 1 ? pylog_load_i64(buf + PYLOG_MAGIC_OFFSET + 2) : PYLOG_NO_TIMESTAMP;
    if (verify_crc) {
        uint32_t computed = pylog_crc32_ieee(0, buf + PYLOG_MAGIC_OFFSET, (size_t)(size - PYLOG_MAGIC_OFFSET));
        if (computed != h->crc) {
            st->stored_crc = h->crc;
            st->computed_crc = computed;
            return fail(st, PYLOG_ERR_CRC, PYLOG_LOG_OVERHEAD, 0, 0, "crc");
        }
    }
    return PYLOG_OK;
}

void pylog_batch_header_finish(char *batch, int64_t total, const pylog_batch_header *h) {
    pylog_store_i64(batch + PYLOG_BASE_OFFSET_OFFSET, h->base_offset);
    pylog_store_i32(batch + PYLOG_LENGTH_OFFSET, (int32_t)(total - PYLOG_LOG_OVERHEAD));
    pylog_store_i32(batch + PYLOG_PARTITION_LEADER_EPOCH_OFFSET, h->partition_leader_epoch);
    batch[PYLOG_MAGIC_OFFSET] = 2;
    pylog_store_i16(batch + PYLOG_ATTRIBUTES_OFFSET, h->attributes);
    pylog_store_i32(batch + PYLOG_LAST_OFFSET_DELTA_OFFSET, h->last_offset_delta);
    pylog_store_i64(batch + PYLOG_BASE_TIMESTAMP_OFFSET, h->base_timestamp);
    pylog_store_i64(batch + PYLOG_MAX_TIMESTAMP_OFFSET, h->max_timestamp);
    pylog_store_i64(batch + PYLOG_PRODUCER_ID_OFFSET, h->producer_id);
    pylog_store_i16(batch + PYLOG_PRODUCER_EPOCH_OFFSET, h->producer_epoch);
    pylog_store_i32(batch + PYLOG_BASE_SEQUENCE_OFFSET, h->base_sequence);
    pylog_store_i32(batch + PYLOG_RECORDS_COUNT_OFFSET, h->records_count);
    uint32_t crc = pylog_crc32c_extend(0, batch + PYLOG_ATTRIBUTES_OFFSET,
                                       (size_t)(total - PYLOG_ATTRIBUTES_OFFSET));
    pylog_store_u32(batch + PYLOG_CRC_OFFSET, crc);
}

/* ================================================================== */
/* Encoding                                                            */

/* Entry i of a column: returns its length (-1 for null) and sets *ptr. */
static inline int64_t column_get(const pylog_column *c, int64_t i, const char **ptr) {
    int64_t j;
    switch (c->kind) {
    case PYLOG_COL_PTRS:
        *ptr = c->ptrs[i];
        return c->lens[i];
    case PYLOG_COL_ARROW32:
        j = i + c->array_offset;
        if (c->validity && !((c->validity[j >> 3] >> (j & 7)) & 1)) return -1;
        *ptr = c->data + c->off32[j];
        return (int64_t)c->off32[j + 1] - c->off32[j];
    case PYLOG_COL_ARROW64:
        j = i + c->array_offset;
        if (c->validity && !((c->validity[j >> 3] >> (j & 7)) & 1)) return -1;
        *ptr = c->data + c->off64[j];
        return c->off64[j + 1] - c->off64[j];
    default:
        *ptr = NULL;
        return -1;
    }
}

static inline int32_t offset_delta_of(const pylog_record_input *in, int64_t i) {
    return in->offset_deltas ? in->offset_deltas[i] : (int32_t)i;
}

static inline int64_t timestamp_of(const pylog_record_input *in, int64_t i) {
    return in->timestamps ? in->timestamps[i] : in->timestamp_const;
}

/* Timestamp deltas wrap modulo 2^64 exactly as Java's long arithmetic does,
 * so base + (ts - base) == ts for every pair of int64 timestamps. */
static inline int64_t ts_delta(int64_t ts, int64_t base) { return (int64_t)((uint64_t)ts - (uint64_t)base); }
static inline int64_t ts_add(int64_t base, int64_t delta) { return (int64_t)((uint64_t)base + (uint64_t)delta); }

/* Size of record i's body (everything after its length varint). */
static inline int64_t record_body_size(const pylog_record_input *in, int64_t i, int64_t base_ts) {
    const char *p;
    int64_t klen = column_get(&in->keys, i, &p);
    int64_t vlen = column_get(&in->values, i, &p);
    int64_t size = 1 /* attributes */ + pylog_varlong_size(ts_delta(timestamp_of(in, i), base_ts)) +
                   pylog_varint_size(offset_delta_of(in, i)) +
                   pylog_varint_size((int32_t)(klen < 0 ? -1 : klen)) + (klen > 0 ? klen : 0) +
                   pylog_varint_size((int32_t)(vlen < 0 ? -1 : vlen)) + (vlen > 0 ? vlen : 0);
    const pylog_headers *hd = &in->headers;
    int64_t first = hd->starts ? hd->starts[i] : 0, last = hd->starts ? hd->starts[i + 1] : 0;
    size += pylog_varint_size((int32_t)(last - first));
    for (int64_t k = first; k < last; k++) {
        int64_t hk = hd->key_lens[k], hv = hd->value_lens[k];
        size += pylog_varint_size((int32_t)hk) + hk + pylog_varint_size((int32_t)(hv < 0 ? -1 : hv)) +
                (hv > 0 ? hv : 0);
    }
    return size;
}

/* A plain input: values (and keys, if any) are pointer/length columns,
 * offset deltas 0..n-1 and no headers: send_batch's, send()'s and
 * encode_batch's common case from lists of bytes. Its loops below have no
 * per-record switch or branch on the input's layout. Its timestamps are one
 * for all (`timestamp_const`, every delta 0) or an int64 array (send()'s
 * batches whose records span milliseconds): a compile-time flag, `timed`,
 * picks the loop. */
static inline int plain_input(const pylog_record_input *in) {
    return in->values.kind == PYLOG_COL_PTRS &&
           (in->keys.kind == PYLOG_COL_PTRS || in->keys.kind == PYLOG_COL_NULL) &&
           !in->offset_deltas && !in->headers.starts;
}

/* A plain input's base timestamp (its first, or its constant) and largest
 * one, as the general loop finds it (Kafka's: from NO_TIMESTAMP up). */
static inline void plain_timestamps(const pylog_record_input *in, int64_t *base, int64_t *max) {
    int64_t n = in->count, top = PYLOG_NO_TIMESTAMP;
    if (n == 0) {
        *base = *max = PYLOG_NO_TIMESTAMP;
        return;
    }
    if (!in->timestamps) {
        *base = in->timestamp_const;
        *max = in->timestamp_const > top ? in->timestamp_const : top;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (in->timestamps[i] > top) top = in->timestamps[i];
    *base = in->timestamps[0];
    *max = top;
}

/* True when a per-record timestamp array holds one value throughout (what
 * send()'s batches hold when their records came within one millisecond, and a
 * numpy full array): such an input is plain, with that value as its constant. */
static int timestamps_constant(const pylog_record_input *in) {
    const int64_t *ts = in->timestamps;
    if (!ts || in->count == 0) return 0;
    int64_t first = ts[0], differ = 0;
    for (int64_t i = 1; i < in->count; i++) differ |= ts[i] ^ first;
    return differ == 0;
}

/* `in`, or in `constant` a copy of it with its one-valued timestamp array
 * turned into its constant timestamp (the same bytes: every delta is 0). */
static inline const pylog_record_input *with_constant_timestamps(const pylog_record_input *in,
                                                                 pylog_record_input *constant) {
    if (!timestamps_constant(in)) return in;
    *constant = *in;
    constant->timestamp_const = in->timestamps[0];
    constant->timestamps = NULL;
    return constant;
}

/* The body size of record i of a plain input: encode_plain's arithmetic.
 * `ts_size` is its timestamp delta's varint size (1 for a delta of 0). */
static inline int64_t plain_body_size(int64_t i, int64_t klen, int64_t vlen, int ts_size) {
    /* attributes and header count 0: 1 byte each */
    return 2 + ts_size + pylog_varint_size((int32_t)i) +
           pylog_varint_size((int32_t)(klen < 0 ? -1 : klen)) + (klen > 0 ? klen : 0) +
           pylog_varint_size((int32_t)(vlen < 0 ? -1 : vlen)) + (vlen > 0 ? vlen : 0);
}

static inline int plain_ts_size(const pylog_record_input *in, int timed, int64_t i, int64_t base) {
    return timed ? pylog_varlong_size(ts_delta(in->timestamps[i], base)) : 1;
}

/* pylog_records_size of a plain input. `keyed` and `timed` are compile-time
 * constants at each call; `base` is the base timestamp of a timed input. */
static inline __attribute__((always_inline)) int64_t size_plain(const pylog_record_input *in,
                                                                int keyed, int timed, int64_t base,
                                                                pylog_status *st) {
    const int64_t *vl = in->values.lens, *kl = in->keys.lens;
    int64_t total = 0;
    for (int64_t i = 0; i < in->count; i++) {
        int64_t body = plain_body_size(i, keyed ? kl[i] : -1, vl[i],
                                       plain_ts_size(in, timed, i, base));
        if (body > INT32_MAX) {
            fail(st, PYLOG_ERR_TOO_LARGE, i, body, INT32_MAX, "record");
            return -1;
        }
        total += pylog_varint_size((int32_t)body) + body;
    }
    return total;
}

/* The least and greatest entry and the bytes of a length column (-1: null). */
typedef struct {
    int64_t min, max, bytes;
} length_span;

static inline length_span span_of(const int64_t *lens, int64_t n) {
    length_span s = {INT64_MAX, -1, 0};
    for (int64_t i = 0; i < n; i++) {
        int64_t len = lens[i];
        s.min = len < s.min ? len : s.min;
        s.max = len > s.max ? len : s.max;
        s.bytes += len > 0 ? len : 0;
    }
    return s;
}

/* The varint bytes of a length field of `len` (>= -1, a null's -1 takes one). */
static inline int length_varint_size(int64_t len) {
    return len > INT32_MAX ? 5 : pylog_varint_size((int32_t)(len < 0 ? -1 : len));
}

/* The offset-delta varints of records 0 .. n-1 together: delta i takes one
 * byte below 64, two below 2^13, three below 2^20, four below 2^27. */
static inline int64_t offset_varints_size(int64_t n) {
    int64_t total = n;
    static const int64_t steps[] = {64, 1 << 13, 1 << 20, 1 << 27};
    for (int k = 0; k < 4; k++) total += n > steps[k] ? n - steps[k] : 0;
    return total;
}

/* size_plain of an input with one timestamp for all, in closed form when each
 * column's lengths share one varint size and so do the record lengths (any
 * column of one size, or of sizes within a varint's range: 100 B values, 6-8 B
 * keys). Then a record's framing differs only by its offset delta's varint,
 * and the section is the data bytes plus sums over n: one read of each
 * length, instead of size_plain's varint arithmetic per record. Returns 0,
 * computing nothing, when the lengths straddle a varint size or a record
 * could exceed int32: size_plain then decides. */
static int size_uniform(const pylog_record_input *in, int keyed, int64_t *total) {
    int64_t n = in->count;
    if (n <= 0) return 0;
    length_span v = span_of(in->values.lens, n);
    length_span k = keyed ? span_of(in->keys.lens, n) : (length_span){-1, -1, 0};
    int vs = length_varint_size(v.min), ks = length_varint_size(k.min);
    if (vs != length_varint_size(v.max) || ks != length_varint_size(k.max)) return 0;
    /* attributes, timestamp delta 0 and header count: a byte each */
    int64_t fixed = 3 + ks + vs;
    int64_t least = fixed + 1 + (k.min > 0 ? k.min : 0) + (v.min > 0 ? v.min : 0);
    /* the last record's offset delta, n - 1 (n <= INT32_MAX), has the widest varint */
    int64_t most = fixed + pylog_varint_size((int32_t)(n - 1)) + (k.max > 0 ? k.max : 0) +
                   (v.max > 0 ? v.max : 0);
    if (most > INT32_MAX || pylog_varint_size((int32_t)least) != pylog_varint_size((int32_t)most))
        return 0;
    int64_t bodies = n * fixed + offset_varints_size(n) + k.bytes + v.bytes;
    *total = n * pylog_varint_size((int32_t)most) + bodies;
    return 1;
}

/* size_plain with its compile-time flags picked from the input. */
static int64_t size_plain_any(const pylog_record_input *in, int64_t base, pylog_status *st) {
    int keyed = in->keys.kind == PYLOG_COL_PTRS;
    int64_t total;
    if (in->timestamps)
        return keyed ? size_plain(in, 1, 1, base, st) : size_plain(in, 0, 1, base, st);
    if (size_uniform(in, keyed, &total)) return total;
    return keyed ? size_plain(in, 1, 0, 0, st) : size_plain(in, 0, 0, 0, st);
}

int64_t pylog_records_size(const pylog_record_input *in, int64_t *base_ts, int64_t *max_ts,
                           pylog_status *st) {
    st->code = PYLOG_OK;
    int64_t n = in->count;
    pylog_record_input constant;
    in = with_constant_timestamps(in, &constant);
    if (plain_input(in)) {
        plain_timestamps(in, base_ts, max_ts);
        return size_plain_any(in, *base_ts, st);
    }
    int64_t base = n > 0 ? timestamp_of(in, 0) : PYLOG_NO_TIMESTAMP;
    int64_t max = PYLOG_NO_TIMESTAMP;
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ts = timestamp_of(in, i);
        if (ts > max) max = ts;
        int64_t body = record_body_size(in, i, base);
        if (body > INT32_MAX) {
            fail(st, PYLOG_ERR_TOO_LARGE, i, body, INT32_MAX, "record");
            return -1;
        }
        total += pylog_varint_size((int32_t)body) + body;
    }
    *base_ts = base;
    *max_ts = max;
    return total;
}

/* A length-prefixed key, value or header; 8-16 bytes (the usual keys) are
 * copied as two overlapping 8-byte moves instead of a call. */
static inline char *put_bytes(char *out, const char *src, int64_t len) {
    out = pylog_write_varint(out, (int32_t)(len < 0 ? -1 : len));
    if (len >= 8 && len <= 16) {
        uint64_t head, tail;
        memcpy(&head, src, 8);
        memcpy(&tail, src + len - 8, 8);
        memcpy(out, &head, 8);
        memcpy(out + len - 8, &tail, 8);
    } else if (len > 0) {
        memcpy(out, src, (size_t)len);
    }
    return out + (len > 0 ? len : 0);
}

/* Record i, whose body (everything after its length varint) is `body` bytes. */
static inline char *write_record(const pylog_record_input *in, int64_t i, int64_t base_ts,
                                 int64_t body, char *out) {
    const pylog_headers *hd = &in->headers;
    out = pylog_write_varint(out, (int32_t)body);
    *out++ = 0; /* record attributes: unused, always 0 */
    out = pylog_write_varlong(out, ts_delta(timestamp_of(in, i), base_ts));
    out = pylog_write_varint(out, offset_delta_of(in, i));
    const char *p;
    int64_t klen = column_get(&in->keys, i, &p);
    out = put_bytes(out, p, klen);
    int64_t vlen = column_get(&in->values, i, &p);
    out = put_bytes(out, p, vlen);
    int64_t first = hd->starts ? hd->starts[i] : 0, last = hd->starts ? hd->starts[i + 1] : 0;
    out = pylog_write_varint(out, (int32_t)(last - first));
    for (int64_t k = first; k < last; k++) {
        out = put_bytes(out, hd->key_ptrs[k], hd->key_lens[k]);
        out = put_bytes(out, hd->value_ptrs[k], hd->value_lens[k]);
    }
    return out;
}

/* Records of a plain input (no header): the same bytes as write_record's.
 * `keyed` and `timed` are compile-time constants at each call; without
 * `timed` every timestamp delta is 0, with it they are from `base`. */
static inline __attribute__((always_inline)) int64_t encode_plain(const pylog_record_input *in,
                                                                  char *out, int keyed, int timed,
                                                                  int64_t base, pylog_status *st) {
    char *start = out;
    const char *const *vp = in->values.ptrs, *const *kp = in->keys.ptrs;
    const int64_t *vl = in->values.lens, *kl = in->keys.lens;
    for (int64_t i = 0; i < in->count; i++) {
        int64_t klen = keyed ? kl[i] : -1, vlen = vl[i];
        int64_t delta = timed ? ts_delta(in->timestamps[i], base) : 0;
        int64_t body = plain_body_size(i, klen, vlen, timed ? pylog_varlong_size(delta) : 1);
        if (body > INT32_MAX) {
            fail(st, PYLOG_ERR_TOO_LARGE, i, body, INT32_MAX, "record");
            return -1;
        }
        out = pylog_write_varint(out, (int32_t)body);
        out[0] = 0;                                     /* attributes */
        if (timed) {
            out = pylog_write_varlong(out + 1, delta);
        } else {
            out[1] = 0;
            out += 2;
        }
        out = pylog_write_varint(out, (int32_t)i);
        out = put_bytes(out, keyed ? kp[i] : NULL, klen);
        out = put_bytes(out, vp[i], vlen);
        *out++ = 0;
    }
    return out - start;
}

/* encode_plain with its compile-time flags picked from the input. */
static int64_t encode_plain_any(const pylog_record_input *in, char *out, int64_t base,
                                pylog_status *st) {
    int keyed = in->keys.kind == PYLOG_COL_PTRS;
    if (in->timestamps)
        return keyed ? encode_plain(in, out, 1, 1, base, st) : encode_plain(in, out, 0, 1, base, st);
    return keyed ? encode_plain(in, out, 1, 0, 0, st) : encode_plain(in, out, 0, 0, 0, st);
}

int64_t pylog_records_write(const pylog_record_input *in, int64_t base_ts, char *out) {
    char *start = out;
    pylog_record_input constant;
    in = with_constant_timestamps(in, &constant);
    if (plain_input(in)) {
        pylog_status st;        /* pylog_records_size checked every record's size */
        return encode_plain_any(in, out, base_ts, &st);
    }
    for (int64_t i = 0; i < in->count; i++)
        out = write_record(in, i, base_ts, record_body_size(in, i, base_ts), out);
    return out - start;
}

/* The bytes of the zigzag varint of an int32 field whose value lies in
 * [-1, v] (a length, a count, an offset delta): v's, at most 5. */
static inline int64_t field_varint_bound(int64_t v) {
    return v > INT32_MAX ? 5 : pylog_varint_size((int32_t)(v < 1 ? 1 : v));
}

int64_t pylog_records_bound(const pylog_record_input *in, int64_t key_bytes, int64_t value_bytes,
                            int64_t header_bytes) {
    int64_t data = key_bytes + value_bytes + header_bytes;
    int64_t framing = 1                                             /* attributes */
        + (in->timestamps ? 10 : 1)                                 /* timestamp delta */
        + (in->offset_deltas ? 5 : field_varint_bound(in->count - 1))
        + (in->keys.kind == PYLOG_COL_NULL ? 1 : field_varint_bound(key_bytes))
        + field_varint_bound(value_bytes)
        + (in->headers.starts ? 5 : 1);                             /* header count */
    /* A record's body is at most its framing plus every byte of the input. */
    return in->count * (field_varint_bound(framing + data) + framing) + data;
}

int64_t pylog_records_encode(const pylog_record_input *in, char *out, int64_t *base_ts,
                             int64_t *max_ts, pylog_status *st) {
    char *start = out;
    int64_t n = in->count;
    pylog_record_input constant;
    in = with_constant_timestamps(in, &constant);
    if (plain_input(in)) {
        st->code = PYLOG_OK;
        plain_timestamps(in, base_ts, max_ts);
        return encode_plain_any(in, out, *base_ts, st);
    }
    int64_t base = n > 0 ? timestamp_of(in, 0) : PYLOG_NO_TIMESTAMP;
    int64_t max = PYLOG_NO_TIMESTAMP;
    st->code = PYLOG_OK;
    for (int64_t i = 0; i < n; i++) {
        int64_t ts = timestamp_of(in, i);
        if (ts > max) max = ts;
        int64_t body = record_body_size(in, i, base);
        if (body > INT32_MAX) {
            fail(st, PYLOG_ERR_TOO_LARGE, i, body, INT32_MAX, "record");
            return -1;
        }
        out = write_record(in, i, base, body, out);
    }
    *base_ts = base;
    *max_ts = max;
    return out - start;
}

/* ================================================================== */
/* Decoding                                                            */

static int record_fail(pylog_status *st, int64_t position, int64_t value, const char *detail) {
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

int pylog_header_read(const char **pp, const char *end, const char **key, int32_t *key_len,
                      const char **value, int32_t *value_len) {
    if (read_bytes(pp, end, key, key_len) < 0 || *key_len < 0) return -1;
    if (read_bytes(pp, end, value, value_len) < 0) return -1;
    return 0;
}

/* The body of pylog_record_read, inlined into this file's loops over records. */
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
 * them: record_read took ~160 a record). Common: each varint of one or two
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

int pylog_record_read(const char **pp, const char *end, const char *base, pylog_record *r,
                      pylog_status *st) {
    return record_read_any(pp, end, base, r, st, NULL);
}

int pylog_records_measure(const char *recs, int64_t len, int32_t count, pylog_records_totals *t,
                          pylog_status *st, pylog_parsed_record *out) {
    st->code = PYLOG_OK;
    const char *p = recs, *end = recs + len;
    pylog_record r;
    for (int32_t i = 0; i < count; i++) {
        if (p >= end)
            return fail(st, PYLOG_ERR_COUNT, p - recs, i, count, "records count (fewer records)");
        int rc = record_read_any(&p, end, recs, &r, st, NULL);
        if (rc) return rc;
        t->key_bytes += r.key_len > 0 ? r.key_len : 0;
        t->value_bytes += r.value_len > 0 ? r.value_len : 0;
        t->headers += r.header_count;
        if (out) {
            pylog_parsed_record *o = &out[i];
            o->timestamp_delta = r.timestamp_delta;
            o->offset_delta = r.offset_delta;
            o->key_len = r.key_len;
            o->value_len = r.value_len;
            o->header_count = r.header_count;
            o->key_at = (uint32_t)(r.key - recs);
            o->value_at = (uint32_t)(r.value - recs);
            o->headers_at = (uint32_t)(r.headers - recs);
            o->end_at = (uint32_t)(r.end - recs);
        }
        const char *h = r.headers;
        for (int32_t k = 0; k < r.header_count; k++) {
            const char *hk, *hv;
            int32_t hkl, hvl;
            pylog_header_read(&h, r.end, &hk, &hkl, &hv, &hvl);
            t->header_key_bytes += pylog_utf8_sanitized_len(hk, hkl);
            t->header_value_bytes += hvl > 0 ? hvl : 0;
        }
    }
    if (p != end) return fail(st, PYLOG_ERR_COUNT, p - recs, end - p, count, "records count (trailing bytes)");
    t->records += count;
    return PYLOG_OK;
}

/* The shape of a common record (see record_read_common) whose timestamp delta
 * takes one byte: its framing bytes up to its key, its value length varint and
 * its size. A later record with the same framing bytes (the timestamp delta
 * apart, which is read, and the offset delta, which must be the record's
 * index), the same value length bytes at the same place and a last byte of 0
 * (no headers) has the same lengths as the record the shape was taken from,
 * which the reader accepted: it is valid without being read field by field.
 * Batches of records of one size (a producer's typical batch) are walked this
 * way, a compare a record instead of a parse of every field. */
typedef struct {
    /* The first 8 bytes: the framing bytes to compare, the value length's too
     * when it ends within them, the timestamp delta (one byte: its high bit 0;
     * wanted: the delta of the run of records that share one) and the offset
     * delta's bytes (wanted: the index, added per record at od_shift). */
    uint64_t want, mask;
    uint64_t ts_want;           /* the shape record's timestamp delta byte, in place */
    uint16_t vl_want, vl_mask;  /* a value length past the first 8 bytes (keyed records) */
    int64_t size;               /* the whole record, its length varint included */
    int32_t ts_at, od_len, od_shift, vl_at;
} record_shape;

/* Little-endian loads: byte k of the record is bits 8k..8k+7 of the value. */
static inline uint64_t load_le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}
static inline uint16_t load_le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* The shape of the common record r read at `start`; 0 when it has none (a
 * timestamp delta of two bytes, or framing longer than 8 bytes before its key). */
static int shape_of(const unsigned char *start, const pylog_record *r, record_shape *s) {
    int32_t len_len = start[0] < 0x80 ? 1 : 2;
    s->ts_at = len_len + 1;                 /* after the attributes byte */
    if (start[s->ts_at] >= 0x80) return 0;
    int32_t od_at = s->ts_at + 1;
    s->od_len = start[od_at] < 0x80 ? 1 : 2;
    s->od_shift = 8 * od_at;
    int64_t key_at = (const unsigned char *)r->key - start;
    if (key_at > 8) return 0;
    int64_t vl_at = key_at + (r->key_len > 0 ? r->key_len : 0);
    int64_t vl_len = ((const unsigned char *)r->value - start) - vl_at;
    /* Without key bytes, a value length that ends within 8 bytes joins the 8-byte test. */
    int in_head = vl_at == key_at && vl_at + vl_len <= 8;
    int64_t head = in_head ? vl_at + vl_len : key_at;
    s->want = s->mask = 0;
    for (int64_t k = 0; k < head; k++) {
        int varies = k == s->ts_at || (k >= od_at && k < od_at + s->od_len);
        s->mask |= (uint64_t)0xFF << (8 * k);
        s->want |= (uint64_t)(varies ? 0 : start[k]) << (8 * k);
    }
    s->ts_want = (uint64_t)start[s->ts_at] << (8 * s->ts_at);
    s->vl_want = s->vl_mask = 0;
    for (int64_t k = 0; !in_head && k < vl_len; k++) {
        s->vl_want |= (uint16_t)(start[vl_at + k] << (8 * k));
        s->vl_mask |= (uint16_t)(0xFF << (8 * k));
    }
    s->vl_at = (int32_t)vl_at;
    s->size = (const unsigned char *)r->end - start;
    return 1;
}

/* A one-byte timestamp delta (its zigzag t < 0x80: the mask's high bit) joins [*lo, *hi]. */
static inline __attribute__((always_inline)) void join_delta(uint32_t t, int32_t *lo, int32_t *hi) {
    int32_t d = (int32_t)(t >> 1) ^ -(int32_t)(t & 1);
    *lo = d < *lo ? d : *lo;
    *hi = d > *hi ? d : *hi;
}

/* shape_run's loop for one offset delta width, with or without a value
 * length past the first 8 bytes, and comparing or reading the timestamp delta
 * (constants where it is inlined): records i..stop-1, the timestamp deltas'
 * least and greatest into *dlo, *dhi. The offset delta's zigzag is 2i: one
 * byte below 64; below 8,192 two bytes, (0x80 | (2i & 0x7F)) then 2i >> 7,
 * which read as a little-endian 16-bit value is 0x80 + 2i + (2i & ~0x7F):
 * within each run of 64 records it grows by 2 a record, so the wanted first 8
 * bytes grow by one add.
 *
 * Comparing (same_ts): a record with the timestamp delta of the one before
 * passes the same test; one whose only difference is another one-byte delta
 * starts a run of that delta (a producer's batch has long runs: one
 * millisecond, many records). A new delta within 8 records of the last stops
 * the loop with *churn set: the reading loop, which joins every record's
 * delta without a branch, takes over (deltas that change every record cost
 * the comparing loop more time than reading them). */
static inline __attribute__((always_inline)) int32_t shape_loop(const unsigned char **pp,
                                                                const record_shape *s, int32_t i,
                                                                int32_t stop, int od_len, int has_vl,
                                                                int same_ts, int32_t *dlo,
                                                                int32_t *dhi, int *churn) {
    const unsigned char *p = *pp;
    const uint64_t step = (uint64_t)2 << s->od_shift;
    const uint64_t ts_value = (uint64_t)0x7F << (8 * s->ts_at);    /* the delta's bits, not its width */
    const uint64_t mask = same_ts ? s->mask : s->mask & ~ts_value;
    const uint16_t vl_want = s->vl_want, vl_mask = s->vl_mask;
    const int64_t size = s->size;
    const int32_t ts_at = s->ts_at, vl_at = s->vl_at;
    uint64_t ts_want = same_ts ? s->ts_want : 0;   /* the shape record's delta: already joined */
    int32_t lo = *dlo, hi = *dhi, changed = -8;
    while (i < stop) {
        uint32_t z = (uint32_t)i << 1;
        uint64_t od = od_len == 1 ? z : 0x80 + z + (z & ~(uint32_t)0x7F);
        uint64_t want = s->want + (od << s->od_shift);   /* the offset delta's bytes are 0 in s->want */
        int32_t run_end = (i | 63) + 1 < stop ? (i | 63) + 1 : stop;
        for (; i < run_end; i++, want += step) {
            uint64_t miss = (load_le64(p) ^ (want | ts_want)) & mask;
            uint32_t other = p[size - 1];
            if (has_vl) other |= (uint32_t)((load_le16(p + vl_at) ^ vl_want) & vl_mask);
            if (same_ts) {
                if (miss | other) {
                    if ((miss & ~ts_value) | other) goto done;
                    if (i - changed < 8) {
                        *churn = 1;
                        goto done;
                    }
                    changed = i;
                    ts_want = (uint64_t)p[ts_at] << (8 * ts_at);
                    join_delta(p[ts_at], &lo, &hi);
                }
            } else {
                if (miss | other) goto done;
                join_delta(p[ts_at], &lo, &hi);
            }
            p += size;
        }
    }
done:
    *pp = p;
    *dlo = lo;
    *dhi = hi;
    return i;
}

/* Walks the records from p (index i) while they have shape s and end by
 * fast_end, joining their timestamps into [lo, hi]; returns the index of the
 * first record that does not (count when all do) and moves *pp to it. The
 * shape's fields sit in registers; one 8-byte test a record covers its
 * framing, its offset delta and its timestamp delta (its width, and its value
 * while it repeats). The caller keeps base more than 64 from int64's ends, so
 * base + delta never wraps. */
static inline __attribute__((always_inline)) int32_t shape_run(const unsigned char **pp,
                                                               const unsigned char *fast_end,
                                                               const record_shape *s, int32_t i,
                                                               int32_t count, int64_t base,
                                                               int64_t *lo, int64_t *hi) {
    int32_t first = s->od_len == 1 ? 0 : 64, stop = s->od_len == 1 ? 64 : 8192;
    if (i < first) stop = i;
    if (stop > count) stop = count;
    int64_t room = fast_end - *pp;
    int64_t fit = room < s->size ? 0 : room / s->size;     /* records that end by fast_end */
    if (stop - i > fit) stop = (int32_t)(i + fit);
    int32_t dlo = INT32_MAX, dhi = INT32_MIN;
    int vl = s->vl_mask != 0, churn = 0;
#define SHAPE_LOOP(od_len, same_ts) \
    (vl ? shape_loop(pp, s, i, stop, od_len, 1, same_ts, &dlo, &dhi, &churn) \
        : shape_loop(pp, s, i, stop, od_len, 0, same_ts, &dlo, &dhi, &churn))
    i = s->od_len == 1 ? SHAPE_LOOP(1, 1) : SHAPE_LOOP(2, 1);
    if (churn)
        i = s->od_len == 1 ? SHAPE_LOOP(1, 0) : SHAPE_LOOP(2, 0);
#undef SHAPE_LOOP
    if (dlo <= dhi) {
        if (base + dlo < *lo) *lo = base + dlo;
        if (base + dhi > *hi) *hi = base + dhi;
    }
    return i;
}

/* Record i of the validation walk, read by the reader: it must be there, its
 * offset delta must be i, its key present when required; its timestamp joins
 * [lo, hi]. Sets *common when the quick read took it. */
static inline __attribute__((always_inline)) int validate_one(const char **pp, const char *end,
                                                              const char *recs, int32_t i,
                                                              int32_t count, int64_t base_timestamp,
                                                              int require_keys, pylog_record *r,
                                                              int *common, int64_t *lo,
                                                              int64_t *hi, pylog_status *st) {
    const char *start = *pp;
    if (start >= end)
        return fail(st, PYLOG_ERR_COUNT, start - recs, i, count, "records count (fewer records)");
    int rc = record_read_any(pp, end, recs, r, st, common);
    if (rc) return rc;
    if (r->offset_delta != i)
        return fail(st, PYLOG_ERR_RECORD, start - recs, r->offset_delta, i, "offset delta");
    if (require_keys && r->key_len < 0)
        return fail(st, PYLOG_ERR_RECORD, start - recs, i, 0, "null key");
    int64_t ts = ts_add(base_timestamp, r->timestamp_delta);
    if (ts < *lo) *lo = ts;
    if (ts > *hi) *hi = ts;
    return PYLOG_OK;
}

/* In a piece of a records section (pylog_records_walk_piece), whether the
 * record at p lies whole before end: *cut is set when the piece ends inside
 * it (its length varint, or its bytes), so it waits for the next piece. A
 * record whose length says it is larger than max_bytes fails at once, before
 * its bytes arrive. A malformed length is left for validate_one to name. */
static inline __attribute__((always_inline)) int record_cut(const char *p, const char *end,
                                                            const char *recs, int64_t max_bytes,
                                                            int *cut, pylog_status *st) {
    const char *q = p;
    int32_t len;
    *cut = 0;
    if (pylog_read_varint(&q, end, &len) < 0) {
        *cut = end - p < PYLOG_VARINT_MAX;      /* the varint may end in the next piece */
        return PYLOG_OK;
    }
    if (len > 0 && (q - p) + (int64_t)len > max_bytes)
        return fail(st, PYLOG_ERR_TOO_LARGE, p - recs, (q - p) + (int64_t)len, max_bytes, "record size");
    *cut = len > end - q;
    return PYLOG_OK;
}

/* The validation walk over records [*next, count) in [recs, recs+len),
 * joining their timestamps into [*lo, *hi]. A whole section (pieces 0):
 * every record, then no byte left. A piece (pieces 1; inlined with constant
 * flags): records while they lie whole in it, each checked against
 * max_bytes first; *stop, *next say where it stopped. The last piece
 * (last 1) must then end exactly after record count-1; any other piece
 * may end inside a record, but not after record count-1 with bytes left. */
static inline __attribute__((always_inline)) int walk_records(
        const char *recs, int64_t len, int32_t count, int32_t *next, int64_t base_timestamp,
        int require_keys, int pieces, int last, int64_t max_bytes, const char **stop,
        int64_t *min_timestamp, int64_t *max_timestamp, pylog_status *st) {
    st->code = PYLOG_OK;
    const char *p = recs, *end = recs + len;
    const char *fast_end = len > PYLOG_COMMON_SLACK ? end - PYLOG_COMMON_SLACK : recs;
    pylog_record r;
    record_shape shape = {0};
    int64_t lo = *min_timestamp, hi = *max_timestamp;
    int shaped = 0, common, rc, cut = 0;
    int base_ok = base_timestamp > INT64_MIN + 64 && base_timestamp < INT64_MAX - 64;
    int32_t i = *next;
    /* A piece's record must be whole (and within max_bytes) before it is read. */
#define PIECE_CHECK()                                                                  \
    if (pieces) {                                                                      \
        if ((p < end || !last) && (rc = record_cut(p, end, recs, max_bytes, &cut, st))) \
            return rc;                                                                 \
        if (cut && !last) break;                                                       \
    }
    /* Records of one shape: each checked against the one before. Two records
     * in a row that the reader had to take mean varied shapes: the plain walk
     * below takes over from there. The shape's size is that of a record
     * already checked against max_bytes. */
    for (int read_last = 0; i < count; i++) {
        if (shaped) {
            int32_t j = shape_run((const unsigned char **)&p, (const unsigned char *)fast_end,
                                  &shape, i, count, base_timestamp, &lo, &hi);
            if (j > i) {
                read_last = 0;
                if ((i = j) == count) break;
            }
        }
        if (read_last) break;
        read_last = 1;
        const char *start = p;
        PIECE_CHECK()
        if ((rc = validate_one(&p, end, recs, i, count, base_timestamp, require_keys, &r, &common,
                               &lo, &hi, st)))
            return rc;
        shaped = common && base_ok && shape_of((const unsigned char *)start, &r, &shape);
    }
    if (!cut) {
        for (; i < count; i++) {
            PIECE_CHECK()
            if ((rc = validate_one(&p, end, recs, i, count, base_timestamp, require_keys, &r,
                                   &common, &lo, &hi, st)))
                return rc;
        }
    }
#undef PIECE_CHECK
    if (p != end && (i == count || !pieces || last))
        return fail(st, PYLOG_ERR_COUNT, p - recs, end - p, count, "records count (trailing bytes)");
    *stop = p;
    *next = i;
    *min_timestamp = lo;
    *max_timestamp = hi;
    return PYLOG_OK;
}

int pylog_records_validate(const char *recs, int64_t len, int32_t count, int64_t base_timestamp,
                           int require_keys, int64_t *min_timestamp, int64_t *max_timestamp,
                           pylog_status *st) {
    const char *stop;
    int32_t next = 0;
    *min_timestamp = INT64_MAX;
    *max_timestamp = INT64_MIN;
    return walk_records(recs, len, count, &next, base_timestamp, require_keys, 0, 1, INT64_MAX,
                        &stop, min_timestamp, max_timestamp, st);
}

void pylog_records_walk_init(pylog_records_walk *w, int32_t count, int64_t base_timestamp,
                             int require_keys, int64_t max_record_bytes) {
    w->count = count;
    w->next = 0;
    w->base_timestamp = base_timestamp;
    w->require_keys = require_keys;
    w->max_record_bytes = max_record_bytes;
    w->min_timestamp = INT64_MAX;
    w->max_timestamp = INT64_MIN;
}

int pylog_records_walk_piece(pylog_records_walk *w, const char *recs, int64_t len, int last,
                             int64_t *used, pylog_status *st) {
    const char *stop = recs;
    int rc = last ? walk_records(recs, len, w->count, &w->next, w->base_timestamp, w->require_keys,
                                 1, 1, w->max_record_bytes, &stop, &w->min_timestamp,
                                 &w->max_timestamp, st)
                  : walk_records(recs, len, w->count, &w->next, w->base_timestamp, w->require_keys,
                                 1, 0, w->max_record_bytes, &stop, &w->min_timestamp,
                                 &w->max_timestamp, st);
    *used = stop - recs;
    return rc;
}

static inline void set_offset(void *offsets, int wide, int64_t i, int64_t v) {
    if (wide)
        ((int64_t *)offsets)[i] = v;
    else
        ((int32_t *)offsets)[i] = (int32_t)v;
}

/* Copies a nullable byte string into a binary column at row `row`. */
static inline void put_binary(void *offsets, int wide, char *data, uint8_t *validity, int64_t row,
                              int64_t *pos, int64_t *nulls, const char *src, int32_t len) {
    if (len < 0) {
        (*nulls)++;
    } else {
        if (len) memcpy(data + *pos, src, (size_t)len);
        *pos += len;
        validity[row >> 3] |= (uint8_t)(1u << (row & 7));
    }
    set_offset(offsets, wide, row + 1, *pos);
}

void pylog_records_fill_parsed(const char *recs, const pylog_parsed_record *parsed, int32_t count,
                               int64_t base_offset, int64_t base_timestamp, int log_append,
                               int64_t log_append_time, pylog_arrow_out *o) {
    if (o->overflow) return;
    /* From the fields the measure pass read: the key and value lengths are the
     * ones the capacities were summed from, so their copies fit by construction
     * (still checked: one predictable branch). Headers are read again from the
     * buffer, which may have changed since: every bound is checked, and a
     * header that no longer fits sets `overflow`.
     * The cursors live in locals for the loop: a memcpy into char data may
     * alias *o, so through the pointer each would be reloaded per record.
     * They are stored back on every exit. */
    pylog_arrow_out c = *o;
    const int wide = c.wide;
    int64_t row = c.row, key_pos = c.key_pos, value_pos = c.value_pos;
    int64_t key_nulls = c.key_nulls, value_nulls = c.value_nulls, header_row = c.header_row;
    int overflow = 0;
    for (int32_t i = 0; i < count; i++) {
        const pylog_parsed_record *r = &parsed[i];
        if (row >= c.rows_cap || (r->key_len > 0 && r->key_len > c.key_cap - key_pos)
            || (r->value_len > 0 && r->value_len > c.value_cap - value_pos)
            || r->header_count > c.headers_cap - header_row) {
            overflow = 1;
            break;
        }
        c.offsets[row] = (int64_t)((uint64_t)base_offset + (uint64_t)(int64_t)r->offset_delta);
        c.timestamps[row] = log_append ? log_append_time : ts_add(base_timestamp, r->timestamp_delta);
        put_binary(c.key_offsets, wide, c.key_data, c.key_validity, row, &key_pos, &key_nulls,
                   recs + r->key_at, r->key_len);
        put_binary(c.value_offsets, wide, c.value_data, c.value_validity, row, &value_pos,
                   &value_nulls, recs + r->value_at, r->value_len);
        if (r->header_count) {
            const char *h = recs + r->headers_at, *hend = recs + r->end_at;
            o->header_row = header_row;
            for (int32_t k = 0; k < r->header_count; k++) {
                const char *hk, *hv;
                int32_t hkl, hvl;
                if (pylog_header_read(&h, hend, &hk, &hkl, &hv, &hvl) != 0
                    || pylog_utf8_sanitized_len(hk, hkl) > o->header_key_cap - o->header_key_pos
                    || (hvl > 0 && hvl > o->header_value_cap - o->header_value_pos)) {
                    overflow = 1;
                    break;
                }
                int64_t hrow = o->header_row++;
                o->header_key_pos += pylog_utf8_sanitize(o->header_key_data + o->header_key_pos, hk, hkl);
                set_offset(o->header_key_offsets, wide, hrow + 1, o->header_key_pos);
                put_binary(o->header_value_offsets, wide, o->header_value_data,
                           o->header_value_validity, hrow, &o->header_value_pos,
                           &o->header_value_nulls, hv, hvl);
            }
            header_row = o->header_row;
            if (overflow) break;
        }
        c.header_list_offsets[row + 1] = (int32_t)header_row;
        row++;
    }
    o->row = row;
    o->key_pos = key_pos;
    o->value_pos = value_pos;
    o->key_nulls = key_nulls;
    o->value_nulls = value_nulls;
    o->header_row = header_row;
    o->overflow = overflow;
}
