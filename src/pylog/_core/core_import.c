/* Gives an extension that does not own crc32c.c (or records_*.c) the same C
 * names, forwarding to the owner's functions through its capsule (core_api.h).
 * PYLOG_IMPORT_RECORDS adds the records_*.c functions. */
#include <Python.h>

#include "core_api.h"
#include "crc32c.h"

static const pylog_crc_api *crc_api;

int pylog_import_crc_api(void) {
    crc_api = (const pylog_crc_api *)PyCapsule_Import(PYLOG_CRC_CAPSULE, 0);
    return crc_api ? 0 : -1;
}

/* Chosen and self-tested once, by pylog._core.crc when it was imported. */
void pylog_crc32c_init(void) {}

uint32_t pylog_crc32c_extend(uint32_t crc, const void *buf, size_t len) {
    return crc_api->crc32c_extend(crc, buf, len);
}

#ifdef PYLOG_IMPORT_RECORDS
static const pylog_records_api *records_api;

int pylog_import_records_api(void) {
    records_api = (const pylog_records_api *)PyCapsule_Import(PYLOG_RECORDS_CAPSULE, 0);
    return records_api ? 0 : -1;
}

int pylog_batch_check(const char *buf, int64_t avail, int verify_crc, pylog_batch_header *h,
                      pylog_status *st) {
    return records_api->batch_check(buf, avail, verify_crc, h, st);
}

void pylog_batch_header_finish(char *batch, int64_t total, const pylog_batch_header *h) {
    records_api->batch_header_finish(batch, total, h);
}

int pylog_records_validate(const char *recs, int64_t len, int32_t count, int64_t base_timestamp,
                           int require_keys, int64_t *min_timestamp, int64_t *max_timestamp,
                           pylog_status *st) {
    return records_api->records_validate(recs, len, count, base_timestamp, require_keys,
                                         min_timestamp, max_timestamp, st);
}

void pylog_records_walk_init(pylog_records_walk *w, int32_t count, int64_t base_timestamp,
                             int require_keys, int64_t max_record_bytes) {
    records_api->records_walk_init(w, count, base_timestamp, require_keys, max_record_bytes);
}

int pylog_records_walk_piece(pylog_records_walk *w, const char *recs, int64_t len, int last,
                             int64_t *used, pylog_status *st) {
    return records_api->records_walk_piece(w, recs, len, last, used, st);
}
#endif
