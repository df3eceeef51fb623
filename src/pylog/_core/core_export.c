/* The tables behind the capsules of core_api.h. Compiled into the extension
 * that owns each function: pylog_crc_api_table with crc32c.c (pylog._core.crc),
 * pylog_records_api_table with records_*.c (pylog._core.codec). */
#include "core_api.h"

#include "crc32c.h"

#ifdef PYLOG_EXPORT_CRC
const pylog_crc_api pylog_crc_api_table = {pylog_crc32c_extend};
#endif

#ifdef PYLOG_EXPORT_RECORDS
const pylog_records_api pylog_records_api_table = {
    pylog_batch_check, pylog_batch_header_finish, pylog_records_validate,
    pylog_records_walk_init, pylog_records_walk_piece,
};
#endif
