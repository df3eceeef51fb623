/* Record batches as a whole: the header (read, checked, finished after
 * encoding) and the legacy CRC-32 of magic 0/1 message sets. See records.h and
 * docs/FORMAT.md.
 */
#include "records_impl.h"

#include <pthread.h>

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
