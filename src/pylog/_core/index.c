/* Sparse segment indexes (index.h; docs/FORMAT.md, section 9).
 *
 * Invariants while open:
 *   - map covers exactly file_size bytes (NULL when 0);
 *   - entries <= max_entries = file_size / entry_size;
 *   - entries [0, entries) have strictly increasing keys; bytes of the
 *     mapping past the entries are zero unless the file came from disk that
 *     way (a trimmed index has no tail at all). */
#define _GNU_SOURCE
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "byteorder.h"

/* ------------------------------------------------------------------ */
/* Entry access                                                         */

static inline const char *entry_ptr(const pylog_index *ix, int64_t i) {
    return ix->map + i * ix->entry_size;
}

/* The search key of entry i: the absolute offset (offset index) or the
 * timestamp (time index). */
static inline int64_t entry_key(const pylog_index *ix, int64_t i) {
    const char *p = entry_ptr(ix, i);
    if (ix->kind == PYLOG_INDEX_OFFSET) return ix->base_offset + pylog_load_i32(p);
    return pylog_load_i64(p);
}

/* The absolute offset stored in entry i, for either kind. */
static inline int64_t entry_offset(const pylog_index *ix, int64_t i) {
    const char *p = entry_ptr(ix, i);
    if (ix->kind == PYLOG_INDEX_OFFSET) return ix->base_offset + pylog_load_i32(p);
    return ix->base_offset + pylog_load_i32(p + 8);
}

void pylog_offset_index_entry(const pylog_index *ix, int64_t i, int64_t *offset, int32_t *position) {
    const char *p = entry_ptr(ix, i);
    *offset = ix->base_offset + pylog_load_i32(p);
    *position = pylog_load_i32(p + 4);
}

void pylog_time_index_entry(const pylog_index *ix, int64_t i, int64_t *timestamp, int64_t *offset) {
    const char *p = entry_ptr(ix, i);
    *timestamp = pylog_load_i64(p);
    *offset = ix->base_offset + pylog_load_i32(p + 8);
}

static int entry_is_zero(const pylog_index *ix, int64_t i) {
    static const char zero[PYLOG_TIME_ENTRY_SIZE];
    return memcmp(entry_ptr(ix, i), zero, (size_t)ix->entry_size) == 0;
}

/* Whether entry i may follow entry i-1 (or start the index when i == 0). */
static int entry_follows(const pylog_index *ix, int64_t i) {
    const char *p = entry_ptr(ix, i);
    int32_t rel = pylog_load_i32(ix->kind == PYLOG_INDEX_OFFSET ? p : p + 8);
    if (rel < 0) return 0;
    if (ix->kind == PYLOG_INDEX_OFFSET) {
        int32_t pos = pylog_load_i32(p + 4);
        if (i == 0) return pos > 0;  /* the first batch (position 0) never gets an entry */
        const char *q = entry_ptr(ix, i - 1);
        return rel > pylog_load_i32(q) && pos > pylog_load_i32(q + 4);
    }
    if (i == 0) return 1;
    const char *q = entry_ptr(ix, i - 1);
    return pylog_load_i64(p) > pylog_load_i64(q) && rel >= pylog_load_i32(q + 8);
}

/* Entries = the strictly increasing prefix before the zero tail, among the
 * first `limit` slots (those that existed on disk before preallocation). The zero
 * tail is found by binary search (zeros are a suffix in any index pylog
 * wrote); the prefix is then verified entry by entry. */
static void count_entries(pylog_index *ix, int64_t limit) {
    int64_t lo = 0, hi = limit < ix->max_entries ? limit : ix->max_entries;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (entry_is_zero(ix, mid)) hi = mid;
        else lo = mid + 1;
    }
    int64_t n = 0;
    while (n < lo && entry_follows(ix, n)) n++;
    ix->entries = n;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                            */

static int map_file(pylog_index *ix) {
    ix->map = NULL;
    ix->map_size = ix->file_size;
    ix->max_entries = ix->file_size / ix->entry_size;
    if (ix->file_size == 0) return 0;
    int prot = PROT_READ | (ix->writable ? PROT_WRITE : 0);
    void *m = mmap(NULL, (size_t)ix->file_size, prot, MAP_SHARED, ix->fd, 0);
    if (m == MAP_FAILED) {
        ix->map_size = 0;
        ix->max_entries = 0;
        return -errno;
    }
    /* Index access is a binary search or an append at the end: never sequential.
     * Without this hint the first store into a preallocated index faults in
     * (and zero-fills) megabytes of read-ahead per index file. */
    (void)madvise(m, (size_t)ix->file_size, MADV_RANDOM);
    ix->map = m;
    return 0;
}

/* The descriptor, reopened if it was released. Returns 0 or -errno. */
static int need_fd(pylog_index *ix) {
    if (ix->fd >= 0) return 0;
    ix->fd = open(ix->path, (ix->writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    return ix->fd < 0 ? -errno : 0;
}

int pylog_index_release_fd(pylog_index *ix) {
    if (ix->fd >= 0) close(ix->fd);
    ix->fd = -1;
    return 0;
}

static void unmap_file(pylog_index *ix) {
    if (ix->map) munmap(ix->map, (size_t)ix->map_size);
    ix->map = NULL;
    ix->map_size = 0;
}

/* Sets the file length, sparsely (Kafka's setLength): an idle partition's
 * preallocated indexes cost no disk. Blocks are allocated as entries need
 * them (ensure_allocated). */
static int set_length(pylog_index *ix, int64_t size) {
    if (size != ix->file_size) {
        if (ftruncate(ix->fd, size) < 0) return -errno;
    }
    ix->file_size = size;
    if (ix->allocated > size) ix->allocated = size;
    return 0;
}

/* Blocks are allocated this far ahead of the entries. */
#define PYLOG_INDEX_ALLOC_CHUNK (64 * 1024)

/* Makes sure bytes [0, end) have disk blocks before an entry is stored there
 * through the mapping: a store into a hole on a full disk would kill the
 * process with SIGBUS; this turns it into ENOSPC for the append. */
static int ensure_allocated(pylog_index *ix, int64_t end) {
    if (end <= ix->allocated) return PYLOG_INDEX_OK;
    int64_t want = (end + PYLOG_INDEX_ALLOC_CHUNK - 1) / PYLOG_INDEX_ALLOC_CHUNK * PYLOG_INDEX_ALLOC_CHUNK;
    if (want > ix->file_size) want = ix->file_size;
    int rc = need_fd(ix);
    if (rc < 0) { ix->last_errno = -rc; return PYLOG_INDEX_IO; }
    rc = posix_fallocate(ix->fd, ix->allocated, want - ix->allocated);
    if (rc == EOPNOTSUPP || rc == EINVAL) {
        ix->allocated = ix->file_size;  /* the filesystem cannot: sparse, as Kafka runs */
        return PYLOG_INDEX_OK;
    }
    if (rc != 0) { ix->last_errno = rc; return PYLOG_INDEX_IO; }
    ix->allocated = want;
    return PYLOG_INDEX_OK;
}

int pylog_index_open(pylog_index *ix, const char *path, int kind, int64_t base_offset,
                     int64_t max_size, int writable) {
    memset(ix, 0, sizeof(*ix));
    ix->kind = kind;
    ix->entry_size = kind == PYLOG_INDEX_OFFSET ? PYLOG_OFFSET_ENTRY_SIZE : PYLOG_TIME_ENTRY_SIZE;
    ix->base_offset = base_offset;
    ix->writable = writable;
    ix->path = strdup(path);
    if (!ix->path) return -ENOMEM;
    ix->fd = open(path, (writable ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC, 0644);
    if (ix->fd < 0) {
        int err = errno;
        free(ix->path);
        ix->path = NULL;
        return -err;
    }
    struct stat st;
    if (fstat(ix->fd, &st) < 0) goto fail;
    ix->file_size = st.st_size;
    /* A writable index with a max_size is resized to it (Kafka preallocates
     * the active segment's indexes); otherwise it keeps its length. */
    if (writable && max_size > 0) {
        int rc = set_length(ix, max_size - max_size % ix->entry_size);
        if (rc < 0) { errno = -rc; goto fail; }
    }
    int rc = map_file(ix);
    if (rc < 0) { errno = -rc; goto fail; }
    /* Slots beyond the length the file had on disk were just added and are
     * zero: only the old length can hold entries (a new index has none). */
    count_entries(ix, st.st_size / ix->entry_size);
    ix->allocated = ix->entries * ix->entry_size;   /* written entries have blocks */
    return 0;
fail: {
        int err = errno;
        close(ix->fd);
        ix->fd = -1;
        free(ix->path);
        ix->path = NULL;
        return -err;
    }
}

void pylog_index_close(pylog_index *ix) {
    unmap_file(ix);
    if (ix->fd >= 0) close(ix->fd);
    ix->fd = -1;
    free(ix->path);
    ix->path = NULL;
}

int64_t pylog_index_round_size(const pylog_index *ix, int64_t size) {
    size -= size % ix->entry_size;
    return size < 0 ? 0 : size;
}

int pylog_index_set_file_length(pylog_index *ix, int64_t size) {
    int rc = need_fd(ix);
    if (rc < 0) return rc;
    return set_length(ix, size);
}

int pylog_index_remap(pylog_index *ix, int64_t size) {
    unmap_file(ix);
    int64_t file_size = ix->file_size;
    ix->file_size = size;              /* map_file maps file_size bytes */
    int rc = map_file(ix);
    ix->file_size = file_size;
    if (rc < 0) {
        ix->entries = 0;               /* no mapping: reads as empty (see resize) */
        return rc;
    }
    if (ix->entries > ix->max_entries) ix->entries = ix->max_entries;
    return 0;
}

int pylog_index_flush(pylog_index *ix) {
    /* msync(MS_SYNC) is an fdatasync of the range: it also makes a changed
     * file length durable. An index with no mapping (trimmed to nothing)
     * still needs its new length on disk. */
    if (ix->map && ix->entries > 0) {
        if (msync(ix->map, (size_t)(ix->entries * ix->entry_size), MS_SYNC) < 0) return -errno;
    } else if (ix->fd >= 0) {
        if (fdatasync(ix->fd) < 0) return -errno;
    } else {
        /* A released descriptor stays released: sync through a temporary one. */
        int fd = open(ix->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -errno;
        int rc = fdatasync(fd) < 0 ? -errno : 0;
        close(fd);
        if (rc < 0) return rc;
    }
    return 0;
}

void pylog_index_reset(pylog_index *ix) {
    if (ix->map) memset(ix->map, 0, (size_t)(ix->entries * ix->entry_size));
    ix->entries = 0;
}

int pylog_index_is_full(const pylog_index *ix) {
    /* The time index keeps its last slot for the entry written when the
     * segment rolls (Kafka's TimeIndex.isFull). */
    if (ix->kind == PYLOG_INDEX_TIME) return ix->entries >= ix->max_entries - 1;
    return ix->entries >= ix->max_entries;
}

/* ------------------------------------------------------------------ */
/* Appends                                                               */

static int relative(const pylog_index *ix, int64_t offset, int32_t *rel) {
    int64_t r = offset - ix->base_offset;
    if (r < 0 || r > INT32_MAX) return PYLOG_INDEX_OVERFLOW;
    *rel = (int32_t)r;
    return PYLOG_INDEX_OK;
}

int pylog_offset_index_append(pylog_index *ix, int64_t offset, int32_t position) {
    int32_t rel;
    if (relative(ix, offset, &rel) != PYLOG_INDEX_OK) return PYLOG_INDEX_OVERFLOW;
    if (ix->entries > 0 && offset <= entry_key(ix, ix->entries - 1)) return PYLOG_INDEX_NOT_INCREASING;
    if (ix->entries >= ix->max_entries) return PYLOG_INDEX_FULL;
    int rc = ensure_allocated(ix, (ix->entries + 1) * ix->entry_size);
    if (rc != PYLOG_INDEX_OK) return rc;
    char *p = ix->map + ix->entries * ix->entry_size;
    pylog_store_i32(p, rel);
    pylog_store_i32(p + 4, position);
    ix->entries++;
    return PYLOG_INDEX_OK;
}

int pylog_time_index_append(pylog_index *ix, int64_t timestamp, int64_t offset, int skip_full_check) {
    int32_t rel;
    if (relative(ix, offset, &rel) != PYLOG_INDEX_OK) return PYLOG_INDEX_OVERFLOW;
    if (ix->entries > 0 && offset < entry_offset(ix, ix->entries - 1)) return PYLOG_INDEX_NOT_INCREASING;
    /* Only a new maximum is stored; an empty index's maximum is NO_TIMESTAMP (-1), so
     * a segment without timestamps (or without batches) gets no entry (Kafka's
     * TimeIndex.maybeAppend). */
    if (timestamp <= (ix->entries > 0 ? entry_key(ix, ix->entries - 1) : -1)) return PYLOG_INDEX_OK;
    if (ix->entries >= ix->max_entries || (!skip_full_check && pylog_index_is_full(ix)))
        return PYLOG_INDEX_FULL;
    int rc = ensure_allocated(ix, (ix->entries + 1) * ix->entry_size);
    if (rc != PYLOG_INDEX_OK) return rc;
    char *p = ix->map + ix->entries * ix->entry_size;
    pylog_store_i64(p, timestamp);
    pylog_store_i32(p + 8, rel);
    ix->entries++;
    return PYLOG_INDEX_OK;
}

/* ------------------------------------------------------------------ */
/* Lookups                                                               */

/* Largest i in [lo, hi] with key(i) <= target, or lo - 1. */
static int64_t search(const pylog_index *ix, int64_t target, int64_t lo, int64_t hi,
                      int64_t (*key)(const pylog_index *, int64_t)) {
    int64_t found = lo - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (key(ix, mid) <= target) { found = mid; lo = mid + 1; }
        else hi = mid - 1;
    }
    return found;
}

/* Kafka's two-level search: the last PYLOG_INDEX_WARM_BYTES of entries
 * first, since lookups for recent data land there and those pages are hot. */
static int64_t largest_lower_bound(const pylog_index *ix, int64_t target,
                                   int64_t (*key)(const pylog_index *, int64_t)) {
    if (ix->entries == 0 || key(ix, 0) > target) return -1;
    int64_t first_hot = ix->entries - 1 - PYLOG_INDEX_WARM_BYTES / ix->entry_size;
    if (first_hot < 0) first_hot = 0;
    if (key(ix, first_hot) <= target) return search(ix, target, first_hot, ix->entries - 1, key);
    return search(ix, target, 0, first_hot - 1, key);
}

static int64_t position_key(const pylog_index *ix, int64_t i) {
    return pylog_load_i32(entry_ptr(ix, i) + 4);
}

void pylog_offset_index_lookup(const pylog_index *ix, int64_t target, int64_t *offset, int32_t *position) {
    int64_t i = largest_lower_bound(ix, target, entry_key);
    if (i < 0) { *offset = ix->base_offset; *position = 0; return; }
    pylog_offset_index_entry(ix, i, offset, position);
}

void pylog_offset_index_floor_position(const pylog_index *ix, int64_t target, int64_t *offset,
                                       int32_t *position) {
    int64_t i = largest_lower_bound(ix, target, position_key);
    if (i < 0) { *offset = ix->base_offset; *position = 0; return; }
    pylog_offset_index_entry(ix, i, offset, position);
}

void pylog_time_index_lookup(const pylog_index *ix, int64_t target, int64_t *timestamp, int64_t *offset) {
    int64_t i = largest_lower_bound(ix, target, entry_key);
    if (i < 0) { *timestamp = -1; *offset = ix->base_offset; return; }
    pylog_time_index_entry(ix, i, timestamp, offset);
}

void pylog_index_truncate_to(pylog_index *ix, int64_t offset) {
    /* Keep the entries whose offset is < offset; offsets never decrease. */
    int64_t lo = 0, hi = ix->entries;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (entry_offset(ix, mid) < offset) lo = mid + 1;
        else hi = mid;
    }
    if (lo < ix->entries)
        memset(ix->map + lo * ix->entry_size, 0, (size_t)((ix->entries - lo) * ix->entry_size));
    ix->entries = lo;
}

int pylog_index_sanity_check(const pylog_index *ix, int64_t log_size, char *msg, int msg_len) {
    if (ix->file_size % ix->entry_size != 0) {
        snprintf(msg, (size_t)msg_len, "file size %lld is not a multiple of the entry size %d",
                 (long long)ix->file_size, ix->entry_size);
        return -1;
    }
    /* Past the valid entries there may only be a zero tail (preallocation);
     * anything else means an entry broke the increasing order. */
    if (ix->entries < ix->max_entries && !entry_is_zero(ix, ix->entries)) {
        snprintf(msg, (size_t)msg_len,
                 "entry %lld of %lld does not follow entry %lld (keys must strictly increase)",
                 (long long)ix->entries, (long long)ix->max_entries, (long long)ix->entries - 1);
        return -1;
    }
    if (ix->kind == PYLOG_INDEX_OFFSET && ix->entries > 0) {
        int64_t offset;
        int32_t position;
        pylog_offset_index_entry(ix, ix->entries - 1, &offset, &position);
        if (position >= log_size) {
            snprintf(msg, (size_t)msg_len,
                     "last entry (offset %lld) points at position %d, beyond the log's %lld bytes",
                     (long long)offset, position, (long long)log_size);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Gate between flushes and changes of the mapping (index.h)            */

int pylog_index_gate_init(pylog_index_gate *g) {
    int rc = pthread_mutex_init(&g->lock, NULL);
    if (rc != 0) return -rc;
    rc = pthread_cond_init(&g->changed, NULL);
    if (rc != 0) {
        pthread_mutex_destroy(&g->lock);
        return -rc;
    }
    g->users = 0;
    g->exclusive = 0;
    return 0;
}

void pylog_index_gate_destroy(pylog_index_gate *g) {
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->lock);
}

void pylog_index_gate_enter(pylog_index_gate *g) {
    pthread_mutex_lock(&g->lock);
    while (g->exclusive)
        pthread_cond_wait(&g->changed, &g->lock);
    g->users++;
    pthread_mutex_unlock(&g->lock);
}

void pylog_index_gate_leave(pylog_index_gate *g) {
    pthread_mutex_lock(&g->lock);
    if (--g->users == 0)
        pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}

void pylog_index_gate_exclude(pylog_index_gate *g) {
    pthread_mutex_lock(&g->lock);
    while (g->exclusive)
        pthread_cond_wait(&g->changed, &g->lock);
    g->exclusive = 1;
    while (g->users > 0)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void pylog_index_gate_include(pylog_index_gate *g) {
    pthread_mutex_lock(&g->lock);
    g->exclusive = 0;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}
