/* Validating a records section without decoding it (an append's and a
 * compressed batch's walk): pylog_records_validate and the piecewise walk. A
 * record shaped like the one before it is checked by its framing bytes. */
#include "records_impl.h"

/* The shape of a common record (see record_read_common) whose timestamp delta
 * takes one byte: its framing bytes up to its key, its value length varint and
 * its size. A later record with the same framing bytes (the timestamp delta
 * apart, which is read, and the offset delta, which must be the record's
 * index), the same value length bytes at the same place and a last byte of 0
 * (no headers) has the same lengths as the record the shape was taken from,
 * which the reader accepted: it is valid without being read field by field.
 * Batches of records of one size (a producer's typical batch) are walked this
 * way, a fraction of a full read per record. */
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
