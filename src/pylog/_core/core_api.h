/* The C functions one extension exports to the others, through a capsule.
 *
 * Every C source of the core is compiled into exactly one extension, so its
 * state exists once per process: crc32c.c (the implementation chosen at
 * start-up, its tables) in pylog._core.crc, records_*.c (the legacy CRC-32
 * table) in pylog._core.codec. The other extensions reach those functions
 * through the capsules below; core_import.c gives them the same C names, so
 * append.c, segment_io.c and the Cython code call them unchanged (one
 * indirect call each: per batch, never per record or per byte). */
#ifndef PYLOG_CORE_API_H
#define PYLOG_CORE_API_H

#include <stddef.h>
#include <stdint.h>

#include "records.h"

#define PYLOG_CRC_CAPSULE "pylog._core.crc._C_API"
#define PYLOG_RECORDS_CAPSULE "pylog._core.codec._C_API"

typedef struct {
    uint32_t (*crc32c_extend)(uint32_t crc, const void *buf, size_t len);
} pylog_crc_api;

typedef struct {
    int (*batch_check)(const char *buf, int64_t avail, int verify_crc, pylog_batch_header *h,
                       pylog_status *st);
    void (*batch_header_finish)(char *batch, int64_t total, const pylog_batch_header *h);
    int (*records_validate)(const char *recs, int64_t len, int32_t count, int64_t base_timestamp,
                            int require_keys, int64_t *min_timestamp, int64_t *max_timestamp,
                            pylog_status *st);
    void (*records_walk_init)(pylog_records_walk *w, int32_t count, int64_t base_timestamp,
                              int require_keys, int64_t max_record_bytes);
    int (*records_walk_piece)(pylog_records_walk *w, const char *recs, int64_t len, int last,
                              int64_t *used, pylog_status *st);
} pylog_records_api;

/* The exporters' tables (crc.pyx and codec.pyx wrap them in their capsules). */
extern const pylog_crc_api pylog_crc_api_table;
extern const pylog_records_api pylog_records_api_table;

/* The importers (core_import.c): 0, or -1 with a Python exception set. */
int pylog_import_crc_api(void);
int pylog_import_records_api(void);

#endif
