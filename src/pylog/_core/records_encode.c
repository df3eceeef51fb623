/* Encoding records into a batch's records section (records.h: pylog_records_*
 * sizing, writing and encoding). */
#include "records_impl.h"

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
 * length instead of size_plain's arithmetic per record. Returns 0, computing nothing, when the lengths straddle a varint
 * size or a record could exceed int32: size_plain then decides. */
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
