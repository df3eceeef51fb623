/* Decoding records: one record (pylog_record_read), one header, a section
 * measured for Arrow (pylog_records_measure) and filled into Arrow's columns
 * from what the measure kept (pylog_records_fill_parsed). */
#include "records_impl.h"

int pylog_header_read(const char **pp, const char *end, const char **key, int32_t *key_len,
                      const char **value, int32_t *value_len) {
    if (read_bytes(pp, end, key, key_len) < 0 || *key_len < 0) return -1;
    if (read_bytes(pp, end, value, value_len) < 0) return -1;
    return 0;
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
