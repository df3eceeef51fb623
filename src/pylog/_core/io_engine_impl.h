/* The I/O engine's shared inside: the engine's state and what every kind uses
 * (the iovec cursor, counters, the `active` count that pylog_engine_free waits
 * on). Included by io_engine.c (the public API: io_engine.h), io_portable.c
 * (pwritev + fdatasync), io_uring_ring.c (the ring) and io_direct.c (O_DIRECT
 * appends and their staging buffers); nothing else includes it.
 */
#ifndef PYLOG_IO_ENGINE_IMPL_H
#define PYLOG_IO_ENGINE_IMPL_H

#include "io_engine.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <fcntl.h>

#ifdef PYLOG_HAVE_IO_URING
#include <dlfcn.h>
#include <liburing.h>
#include <time.h>
#endif

#ifndef IOV_MAX
#define IOV_MAX 1024            /* Linux UIO_MAXIOV */
#endif

/* O_DIRECT staging buffers kept per engine (io_direct.c). */
#define DIRECT_POOL_MAX 8


struct pylog_engine {
    int kind;                   /* PYLOG_ENGINE_PORTABLE or PYLOG_ENGINE_URING */
    pthread_mutex_t lock;
    pthread_cond_t idle;        /* broadcast when `active` drops to 0 */
    _Atomic unsigned active;    /* callers inside the engine (changed atomically) */
    _Atomic int freeing;        /* set by pylog_engine_free before it waits for `active` */
    _Atomic uint64_t writes, bytes_written, syncs, submissions, short_writes;
    /* Staging buffers of O_DIRECT appends, kept for reuse (guarded by lock):
     * resident memory, so an append does not pay for fresh pages. */
    struct { void *buf; size_t cap; } pool[DIRECT_POOL_MAX];
    int pooled;
#ifdef PYLOG_HAVE_IO_URING
    struct io_uring ring;
    pthread_cond_t progress;    /* broadcast after each reaping round */
    unsigned depth;             /* SQ entries; bound on `inflight` */
    unsigned inflight;          /* SQEs the kernel took whose CQE is not reaped */
    int reaping;                /* a thread waits for CQEs without the lock */
    int broken;                 /* 0, or the -errno of a submit or wait that
                                 * failed for good: SQEs the kernel did not take
                                 * still point at dead stack frames, so the ring
                                 * is never submitted to again */
    int fault[PYLOG_ENGINE_FAULT_WAIT + 1]; /* tests: the next call fails (-errno) */
#endif
};

static inline void stat_add(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

static inline void set_why(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL || why_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

/* `active` counts the callers inside, so pylog_engine_free waits for them.
 * The portable path moves it without the lock (two mutex round trips per
 * append would cost more than the append's own bookkeeping). free() sets `freeing` before it reads
 * `active`; the last caller out reads `freeing` after its decrement (both
 * sequentially consistent), so at least one of them sees the other: either
 * free() sees 0, or the caller takes the lock, which free() holds until it
 * waits, and wakes it. Without a free(), leaving is one atomic. */
static inline void enter(pylog_engine *e)
{
    atomic_fetch_add(&e->active, 1);
}

#ifdef PYLOG_HAVE_IO_URING
static inline void leave_locked(pylog_engine *e)
{
    if (atomic_fetch_sub(&e->active, 1) == 1)
        pthread_cond_broadcast(&e->idle);
}
#endif

static inline void leave(pylog_engine *e)
{
    if (atomic_fetch_sub(&e->active, 1) == 1 && atomic_load(&e->freeing)) {
        pthread_mutex_lock(&e->lock);
        pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->lock);
    }
}

/* ---- iovec cursor ------------------------------------------------------- */

/* A position in iov[0..cnt): iov[idx] is written up to `off` bytes.
 * Invariant (after cursor_skip): idx == cnt or iov[idx] has bytes left. */
struct cursor {
    const struct iovec *iov;
    int cnt;
    int idx;
    size_t off;
};

/* Moves the cursor `n` bytes on, past any empty iovecs. */
static inline void cursor_skip(struct cursor *c, size_t n)
{
    while (c->idx < c->cnt) {
        size_t left = c->iov[c->idx].iov_len - c->off;
        if (n < left) {
            c->off += n;
            return;
        }
        n -= left;
        c->idx++;
        c->off = 0;
    }
}

static inline void cursor_init(struct cursor *c, const struct iovec *iov, int cnt)
{
    c->iov = iov;
    c->cnt = cnt;
    c->idx = 0;
    c->off = 0;
    cursor_skip(c, 0);
}

static inline int cursor_done(const struct cursor *c)
{
    return c->idx == c->cnt;
}

/* The next piece to write from a cursor that is not done: sets *vec / *n and
 * returns its byte count (> 0). A partly written iovec goes alone, through
 * `part`, which must outlive the write. */
static inline size_t next_piece(const struct cursor *c, struct iovec *part,
                         const struct iovec **vec, int *n)
{
    const struct iovec *v = &c->iov[c->idx];
    size_t len = 0;
    if (c->off > 0) {
        part->iov_base = (char *)v->iov_base + c->off;
        part->iov_len = v->iov_len - c->off;
        *vec = part;
        *n = 1;
        return part->iov_len;
    }
    *vec = v;
    *n = c->cnt - c->idx < IOV_MAX ? c->cnt - c->idx : IOV_MAX;
    for (int i = 0; i < *n; i++)
        len += v[i].iov_len;
    return len;
}


/* ---- between the files -------------------------------------------------- */

/* io_portable.c */
int pylog_sync_fd(int fd, int full);
int pylog_portable_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
                          int64_t pos, int flags);
int pylog_portable_sync(pylog_engine *e, const int *fds, int n, int full);

/* io_direct.c */
int pylog_pwrite_direct(pylog_engine *e, int fd, const char *buf, size_t len, int64_t pos,
                        size_t align);

#ifdef PYLOG_HAVE_IO_URING
/* io_uring_ring.c */
int pylog_uring_setup(pylog_engine *e, unsigned queue_depth, char *reason, size_t len);
int pylog_uring_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
                       int64_t pos, int flags);
int pylog_uring_sync(pylog_engine *e, const int *fds, int n, int full);
int pylog_uring_write_direct(pylog_engine *e, int fd, const char *buf, size_t len, int64_t pos,
                             size_t piece, size_t align);
void pylog_uring_teardown(pylog_engine *e);
#endif

#endif
