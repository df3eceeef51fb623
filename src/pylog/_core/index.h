/* Sparse segment indexes, memory-mapped (docs/FORMAT.md, section 9).
 *
 *   offset index (.index)     8-byte entries: relative offset int32, position int32
 *                             "the batch whose last offset is base+rel starts at position"
 *   time index (.timeindex)  12-byte entries: timestamp int64, relative offset int32
 *                             "the largest timestamp seen up to offset base+rel is timestamp"
 *
 * Both are big-endian like Kafka's, preallocated to segment.index.bytes while
 * their segment is active and trimmed to the entries when it rolls or closes.
 * Keys strictly increase (offsets in the offset index, timestamps in the time
 * index). Nothing is checksummed: after an unclean shutdown an index is
 * rebuilt from its .log, and on open only the strictly increasing prefix of
 * the entries is trusted (a preallocated tail of zeros is not an entry).
 *
 * Not thread-safe: the owner serialises every call (pylog holds the GIL). The
 * mapping is never moved while entries are in use except by resize(), which
 * only the writer calls while it owns the segment. */
#ifndef PYLOG_INDEX_H
#define PYLOG_INDEX_H

#include <pthread.h>
#include <stdint.h>

enum { PYLOG_INDEX_OFFSET = 0, PYLOG_INDEX_TIME = 1 };
enum { PYLOG_OFFSET_ENTRY_SIZE = 8, PYLOG_TIME_ENTRY_SIZE = 12 };

/* Kafka searches the last 8 KiB of entries first: those pages are hot, so a
 * lookup for recent data never faults in cold pages (KAFKA-6432). */
enum { PYLOG_INDEX_WARM_BYTES = 8192 };

typedef struct {
    int kind;
    int fd;
    int writable;
    int entry_size;
    char *map;             /* MAP_SHARED mapping of map_size bytes, or NULL when map_size == 0 */
    int64_t map_size;
    int64_t file_size;     /* current length of the file */
    int64_t entries;       /* valid entries at the start of the mapping */
    int64_t max_entries;   /* file_size / entry_size */
    int64_t base_offset;
    char *path;            /* to reopen the file after pylog_index_release_fd */
    int64_t allocated;     /* bytes from the start known to have disk blocks */
    int last_errno;        /* the errno behind PYLOG_INDEX_IO */
} pylog_index;

/* Opens (creating if absent when writable) an index file. When writable
 * and max_size > 0, the file is resized to max_size rounded down to the
 * entry size, sparsely as Kafka's setLength does; otherwise it keeps its
 * size. Disk blocks are allocated ahead of the entries in small chunks
 * (posix_fallocate), so a store through the mapping never meets a hole on a
 * full disk (SIGBUS): the append that cannot get its blocks fails with
 * PYLOG_INDEX_IO instead. Entries = the strictly increasing prefix.
 * Returns 0 or -errno. */
int pylog_index_open(pylog_index *ix, const char *path, int kind, int64_t base_offset,
                     int64_t max_size, int writable);

void pylog_index_close(pylog_index *ix);

/* Closes the file descriptor but keeps the mapping (valid without it), so an
 * inactive segment costs no descriptor for its indexes. The functions that
 * need the file (set_file_length, flush of an empty index) reopen it by path.
 * Returns 0. */
int pylog_index_release_fd(pylog_index *ix);

/* A resize of the file (and mapping), in two halves, so that callers run the
 * slow one (the file length: ftruncate, freeing blocks) without their lock on
 * the mapping:
 * growing sets the length first and then remaps; shrinking remaps first
 * (readers then never see bytes past the file) and then sets the length.
 * The mapping keeps min(entries, new max) entries; a remap that fails leaves
 * no mapping and no entries (reads as empty). round_size rounds a size down to
 * whole entries. Each returns 0 or -errno. (Trimming, on roll and close, is a
 * resize to entries * entry_size.) */
int64_t pylog_index_round_size(const pylog_index *ix, int64_t size);
int pylog_index_set_file_length(pylog_index *ix, int64_t size);
int pylog_index_remap(pylog_index *ix, int64_t size);

/* msync of the valid entries. Returns 0 or -errno. */
int pylog_index_flush(pylog_index *ix);

/* Forgets every entry (before a rebuild) and zeroes the mapped bytes. */
void pylog_index_reset(pylog_index *ix);

/* Entry i; the caller guarantees i < entries. */
void pylog_offset_index_entry(const pylog_index *ix, int64_t i, int64_t *offset, int32_t *position);
void pylog_time_index_entry(const pylog_index *ix, int64_t i, int64_t *timestamp, int64_t *offset);

enum {
    PYLOG_INDEX_OK = 0,
    PYLOG_INDEX_FULL = 1,          /* no room for another entry */
    PYLOG_INDEX_NOT_INCREASING = 2,/* key not larger than the last entry's */
    PYLOG_INDEX_OVERFLOW = 3,      /* offset - base_offset outside [0, INT32_MAX] */
    PYLOG_INDEX_IO = 4,            /* allocating blocks for the entry failed: errno in last_errno */
};

/* Appends offset -> position. Returns PYLOG_INDEX_OK or a PYLOG_INDEX_* code. */
int pylog_offset_index_append(pylog_index *ix, int64_t offset, int32_t position);

/* Appends timestamp -> offset if timestamp is larger than the last entry's
 * (the running maximum); otherwise does nothing and returns OK. The last
 * slot is kept for the entry written at roll time unless skip_full_check. */
int pylog_time_index_append(pylog_index *ix, int64_t timestamp, int64_t offset, int skip_full_check);

int pylog_index_is_full(const pylog_index *ix);

/* Largest entry with offset <= target; (base_offset, 0) when there is none. */
void pylog_offset_index_lookup(const pylog_index *ix, int64_t target, int64_t *offset, int32_t *position);

/* Largest entry with position <= target; (base_offset, 0) when there is none. */
void pylog_offset_index_floor_position(const pylog_index *ix, int64_t target, int64_t *offset,
                                       int32_t *position);

/* Largest entry with timestamp <= target; (-1, base_offset) when there is none. */
void pylog_time_index_lookup(const pylog_index *ix, int64_t target, int64_t *timestamp, int64_t *offset);

/* Removes entries whose offset is >= offset. */
void pylog_index_truncate_to(pylog_index *ix, int64_t offset);

/* Checks the invariants a loaded index must hold; on failure writes a
 * message naming the numbers to msg and returns -1. `log_size` bounds the
 * offset index positions. */
int pylog_index_sanity_check(const pylog_index *ix, int64_t log_size, char *msg, int msg_len);

/* The gate between an index's flushes, which run without the GIL (any number
 * at once), and what changes its mapping or descriptor (remap, release, close:
 * one at a time, with no flush running). A waiting change is not starved: new
 * flushes wait behind it. Waits block on a condition variable, so callers
 * release the GIL first; the gate's mutex is never held while waiting for the
 * GIL. Lookups and appends do not pass through it. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;     /* broadcast when users drops to 0 or exclusive clears */
    int users;                  /* flushes running */
    int exclusive;              /* a change runs or waits for the flushes to end */
} pylog_index_gate;

int pylog_index_gate_init(pylog_index_gate *g);     /* 0 or -errno */
void pylog_index_gate_destroy(pylog_index_gate *g);
void pylog_index_gate_enter(pylog_index_gate *g);   /* a flush starts */
void pylog_index_gate_leave(pylog_index_gate *g);   /* ... and ends */
void pylog_index_gate_exclude(pylog_index_gate *g); /* a change starts, alone */
void pylog_index_gate_include(pylog_index_gate *g); /* ... and ends */

#endif
