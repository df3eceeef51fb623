/* Reading a segment's .log file: batch-header walks and recovery
 * (segment_io.h; docs/FORMAT.md, sections 8-10). */
#define _GNU_SOURCE
#include "segment_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch_format.h"
#include "byteorder.h"

int64_t pylog_pread_full(int fd, void *buf, int64_t len, int64_t pos) {
    int64_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, (size_t)(len - done), (off_t)(pos + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) break;
        done += n;
    }
    return done;
}

/* ------------------------------------------------------------------ */
/* Walker: batch headers through a read window                          */

int pylog_walker_init(pylog_walker *w, int fd, int64_t start, int64_t end, int64_t window) {
    memset(w, 0, sizeof(*w));
    w->fd = fd;
    w->pos = start;
    w->end = end;
    w->cap = window < 64 ? 64 : window;
    w->last_size = -1;
    w->buf = malloc((size_t)w->cap);
    return w->buf ? 0 : -ENOMEM;
}

void pylog_walker_free(pylog_walker *w) {
    free(w->buf);
    w->buf = NULL;
}

enum { HEADER_READ = 2048 };

/* Makes [pos, pos + need) available in the window; returns a pointer to it,
 * or NULL with *err set (0 when the file ends first). need <= cap. */
static const char *window_at(pylog_walker *w, int64_t pos, int64_t need, int *err) {
    if (pos >= w->win_pos && pos + need <= w->win_pos + w->win_len)
        return w->buf + (pos - w->win_pos);
    /* The first read, and reads after a batch larger than the window (each of its
     * headers is a window miss), fetch HEADER_READ bytes, not a whole window: a 1 MiB
     * fetch of 500 KB batches reads ~6 KB of headers, not 192 KiB. After small batches
     * a window holds many headers. */
    int64_t want = w->last_size < 0 || w->last_size > w->cap ? HEADER_READ : w->cap;
    if (want < need) want = need;
    if (pos + want > w->end) want = w->end - pos;
    int64_t n = want > 0 ? pylog_pread_full(w->fd, w->buf, want, pos) : 0;
    if (n < 0) { *err = (int)n; w->win_len = 0; return NULL; }
    w->win_pos = pos;
    w->win_len = n;
    if (n < need) { *err = 0; return NULL; }
    return w->buf;
}

int pylog_walker_next(pylog_walker *w, pylog_batch_meta *m) {
    int err = 0;
    int64_t pos = w->pos;
    /* Offset, length, partition leader epoch (or legacy crc), magic. */
    const char *p = window_at(w, pos, PYLOG_MAGIC_OFFSET + 1, &err);
    if (!p) return err;
    int32_t length = pylog_load_i32(p + PYLOG_LENGTH_OFFSET);
    int8_t magic = (int8_t)p[PYLOG_MAGIC_OFFSET];
    /* Zeros where a batch would start end the data, as a partial batch does:
     * the padding of an open O_DIRECT segment or a preallocated file's tail. */
    int zeros = 1;
    for (int i = 0; i <= PYLOG_MAGIC_OFFSET && zeros; i++)
        zeros = p[i] == 0;
    if (zeros) return 0;
    int64_t min_length = magic == 2 ? PYLOG_RECORD_BATCH_OVERHEAD - PYLOG_LOG_OVERHEAD
                       : magic == 1 ? PYLOG_LEGACY_V1_OVERHEAD - PYLOG_LOG_OVERHEAD
                                    : PYLOG_LEGACY_V0_OVERHEAD - PYLOG_LOG_OVERHEAD;
    if (magic < 0 || magic > 2 || length < min_length) return -EILSEQ;
    int64_t size = (int64_t)length + PYLOG_LOG_OVERHEAD;
    if (pos + size > w->end) return 0;   /* a partial batch ends the walk */
    int64_t need = magic == 2 ? PYLOG_RECORD_BATCH_OVERHEAD
                 : magic == 1 ? PYLOG_MAGIC_OFFSET + 2 + 8 : PYLOG_MAGIC_OFFSET + 2;
    p = window_at(w, pos, need, &err);
    if (!p) return err ? err : 0;
    m->position = pos;
    m->size = size;
    m->magic = magic;
    if (magic == 2) {
        m->base_offset = pylog_load_i64(p);
        /* Not validated yet (no CRC check here): a damaged header must not
         * overflow, so it is "not a record batch" like a bad length or magic. */
        if (__builtin_add_overflow(m->base_offset, pylog_load_i32(p + PYLOG_LAST_OFFSET_DELTA_OFFSET),
                                   &m->last_offset))
            return -EILSEQ;
        m->max_timestamp = pylog_load_i64(p + PYLOG_MAX_TIMESTAMP_OFFSET);
        m->attributes = pylog_load_i16(p + PYLOG_ATTRIBUTES_OFFSET);
        m->records_count = pylog_load_i32(p + PYLOG_RECORDS_COUNT_OFFSET);
        m->producer_id = pylog_load_i64(p + PYLOG_PRODUCER_ID_OFFSET);
        m->producer_epoch = pylog_load_i16(p + PYLOG_PRODUCER_EPOCH_OFFSET);
        m->base_sequence = pylog_load_i32(p + PYLOG_BASE_SEQUENCE_OFFSET);
    } else {
        /* A legacy message (or compressed wrapper) carries its last offset. */
        m->base_offset = m->last_offset = pylog_load_i64(p);
        m->attributes = (int16_t)(uint8_t)p[PYLOG_MAGIC_OFFSET + 1];
        m->max_timestamp = magic == 1 ? pylog_load_i64(p + PYLOG_MAGIC_OFFSET + 2) : PYLOG_NO_TIMESTAMP;
        m->records_count = 1;
        m->producer_id = -1;
        m->producer_epoch = -1;
        m->base_sequence = -1;
    }
    w->pos = pos + size;
    w->last_size = size;
    return 1;
}

enum { WALK_WINDOW = 64 * 1024 };

int pylog_segment_slice(int fd, int64_t start, int64_t end, int64_t target, int64_t max_bytes,
                        int64_t max_offset, pylog_slice_info *out) {
    pylog_walker w;
    pylog_batch_meta m;
    memset(out, 0, sizeof(*out));
    out->start_position = -1;
    int rc = pylog_walker_init(&w, fd, start, end, WALK_WINDOW);
    if (rc < 0) return rc;
    while ((rc = pylog_walker_next(&w, &m)) == 1) {
        if (out->start_position < 0) {
            if (m.last_offset < target) continue;
            if (m.last_offset >= max_offset) break;
            out->start_position = m.position;
            out->first_offset = m.base_offset;
        } else if (m.position + m.size - out->start_position > max_bytes ||
                   m.last_offset >= max_offset) {
            break;
        }
        out->end_position = m.position + m.size;
        out->last_offset = m.last_offset;
        out->batches++;
    }
    pylog_walker_free(&w);
    /* A bad header after the slice's batches does not spoil what was found. */
    return rc < 0 && out->start_position < 0 ? rc : 0;
}

int pylog_segment_find_timestamp(int fd, int64_t start, int64_t end, int64_t timestamp,
                                 int64_t min_offset, pylog_batch_meta *m) {
    pylog_walker w;
    int rc = pylog_walker_init(&w, fd, start, end, WALK_WINDOW);
    if (rc < 0) return rc;
    while ((rc = pylog_walker_next(&w, m)) == 1)
        if (m->max_timestamp >= timestamp && m->last_offset >= min_offset) break;
    pylog_walker_free(&w);
    return rc;
}

int pylog_segment_summarize(int fd, int64_t start, int64_t end, pylog_segment_summary *out) {
    pylog_walker w;
    pylog_batch_meta m;
    out->batches = 0;
    out->end_position = start;
    out->last_offset = -1;
    out->max_timestamp = -1;
    out->offset_of_max_timestamp = -1;
    out->first_max_timestamp = -1;
    int rc = pylog_walker_init(&w, fd, start, end, WALK_WINDOW);
    if (rc < 0) return rc;
    while ((rc = pylog_walker_next(&w, &m)) == 1) {
        if (out->batches == 0) out->first_max_timestamp = m.max_timestamp;
        if (m.max_timestamp > out->max_timestamp) {
            out->max_timestamp = m.max_timestamp;
            out->offset_of_max_timestamp = m.last_offset;
        }
        out->batches++;
        out->last_offset = m.last_offset;
        out->end_position = m.position + m.size;
    }
    pylog_walker_free(&w);
    return rc < 0 ? rc : 0;
}

/* ------------------------------------------------------------------ */
/* Recovery                                                              */

enum { RECOVER_WINDOW = 1 << 20 };

/* Reads the file in windows of at least RECOVER_WINDOW bytes; a batch larger
 * than the window grows it, so every batch is checked from one buffer. */
typedef struct {
    int fd;
    int64_t file_size;
    char *buf;
    int64_t cap;
    int64_t win_pos;
    int64_t win_len;
    int64_t read_bytes;
} scan_buffer;

/* Ensures [pos, pos + need) is in the window, as far as the file allows.
 * Returns the bytes available from pos (may be < need at the end of the
 * file), or -errno. */
static int64_t scan_fill(scan_buffer *s, int64_t pos, int64_t need) {
    int64_t have = s->win_pos + s->win_len - pos;
    if (pos >= s->win_pos && have >= need) return have;
    if (need > s->cap) {
        char *b = realloc(s->buf, (size_t)need);
        if (!b) return -ENOMEM;
        s->buf = b;
        s->cap = need;
    }
    int64_t want = s->cap;
    if (pos + want > s->file_size) want = s->file_size - pos;
    int64_t n = want > 0 ? pylog_pread_full(s->fd, s->buf, want, pos) : 0;
    if (n < 0) return n;
    s->read_bytes += n;
    s->win_pos = pos;
    s->win_len = n;
    return n;
}

static int header_is_zero(const char *p, int64_t avail) {
    for (int64_t i = 0; i < avail && i < PYLOG_LOG_OVERHEAD; i++)
        if (p[i]) return 0;
    return 1;
}

int pylog_segment_recover(int fd, int64_t file_size, int64_t base_offset, int64_t index_interval,
                          pylog_index *offset_index, pylog_index *time_index, pylog_recovery *r) {
    memset(r, 0, sizeof(*r));
    r->last_offset = -1;
    r->max_timestamp = -1;
    r->offset_of_max_timestamp = base_offset;
    r->first_batch_max_timestamp = -1;
    r->reason = PYLOG_RECOVER_CLEAN;
    pylog_index_reset(offset_index);
    pylog_index_reset(time_index);

    scan_buffer s = {.fd = fd, .file_size = file_size, .cap = RECOVER_WINDOW};
    s.buf = malloc((size_t)s.cap);
    if (!s.buf) return -ENOMEM;

    int64_t pos = 0, since_entry = 0, next_offset = base_offset;
    while (pos < file_size) {
        int64_t avail = scan_fill(&s, pos, PYLOG_RECORD_BATCH_OVERHEAD);
        if (avail < 0) {
            if (avail == -ENOMEM) { free(s.buf); return -ENOMEM; }
            r->reason = PYLOG_RECOVER_IO;
            r->io_errno = (int)-avail;
            break;
        }
        const char *p = s.buf + (pos - s.win_pos);
        pylog_batch_header h;
        pylog_status st;
        int code = pylog_batch_check(p, avail, 1, &h, &st);
        if (code == PYLOG_INCOMPLETE && st.limit > avail && pos + st.limit <= file_size) {
            /* The batch is in the file but not yet in the window. */
            avail = scan_fill(&s, pos, st.limit);
            if (avail < 0) {
                if (avail == -ENOMEM) { free(s.buf); return -ENOMEM; }
                r->reason = PYLOG_RECOVER_IO;
                r->io_errno = (int)-avail;
                break;
            }
            p = s.buf + (pos - s.win_pos);
            code = pylog_batch_check(p, avail, 1, &h, &st);
        }
        if (code == PYLOG_INCOMPLETE) {
            r->reason = PYLOG_RECOVER_TORN;
            break;
        }
        if (code != PYLOG_OK) {
            /* A zero-filled tail (preallocation, O_DIRECT padding, or blocks
             * allocated but never written before a crash) ends the data; it is
             * not corruption. */
            r->reason = header_is_zero(p, avail) ? PYLOG_RECOVER_ZERO_FILL : PYLOG_RECOVER_CORRUPT;
            r->status = st;
            r->status.position += pos;
            break;
        }
        int64_t size = (int64_t)h.length + PYLOG_LOG_OVERHEAD;
        int64_t first, last, max_ts, records;
        if (h.magic == 2) {
            first = h.base_offset;
            /* Unsigned: a damaged base offset (outside the CRC) may wrap; the
             * range check below then refuses it. */
            last = (int64_t)((uint64_t)h.base_offset + (uint64_t)h.last_offset_delta);
            max_ts = h.max_timestamp;
            records = h.records_count;
        } else {
            first = last = h.base_offset;
            max_ts = h.max_timestamp;
            records = 1;
        }
        if (first < next_offset) {
            r->reason = PYLOG_RECOVER_OFFSETS;
            r->status.position = pos;
            r->status.value = first;
            r->status.limit = next_offset;
            break;
        }
        if (last < first || last - base_offset > INT32_MAX) {
            r->reason = PYLOG_RECOVER_OUT_OF_RANGE;
            r->status.position = pos;
            r->status.value = last < first ? first : last;
            r->status.limit = base_offset;
            break;
        }
        if (r->batches == 0) r->first_batch_max_timestamp = max_ts;
        if (max_ts > r->max_timestamp) {
            r->max_timestamp = max_ts;
            r->offset_of_max_timestamp = last;
        }
        /* The same rule as appends (index_append): an entry at a batch's start
         * once more than index_interval bytes came since the last entry. */
        if (since_entry > index_interval) {
            if (pylog_offset_index_append(offset_index, last, (int32_t)pos) == PYLOG_INDEX_OK)
                pylog_time_index_append(time_index, r->max_timestamp, r->offset_of_max_timestamp, 0);
            since_entry = 0;
        }
        since_entry += size;
        r->batches++;
        r->records += records;
        r->last_offset = last;
        next_offset = last + 1;
        pos += size;
    }
    r->valid_bytes = pos;
    r->bytes_since_index_entry = since_entry;
    r->scanned_bytes = s.read_bytes;
    if (r->max_timestamp < 0) r->offset_of_max_timestamp = base_offset;
    free(s.buf);
    return 0;
}
