/* I/O engine: the contract is in io_engine.h. This file is the public API; it
 * chooses the kind for each call. The kinds: io_portable.c (pwritev +
 * fdatasync), io_uring_ring.c (one ring per engine) and io_direct.c (O_DIRECT
 * appends); their shared state: io_engine_impl.h.
 *
 * Both kinds walk the caller's iovec array with a `cursor` and cut it into
 * pieces of at most IOV_MAX iovecs; a piece that starts inside an iovec (after
 * a short write) is that one iovec's remainder alone. The caller's array is
 * never modified.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* GNU strerror_r */
#endif
#define _FILE_OFFSET_BITS 64

#include "io_engine_impl.h"

/* ---- public API --------------------------------------------------------- */

/* Also returns NULL (with `why`) for an unknown `kind`. */
pylog_engine *pylog_engine_new(int kind, unsigned queue_depth, char *why, size_t why_len)
{
    char ebuf[128];
    pylog_engine *e;
    int rc;
    if (kind != PYLOG_ENGINE_AUTO && kind != PYLOG_ENGINE_PORTABLE && kind != PYLOG_ENGINE_URING) {
        set_why(why, why_len, "unknown engine kind %d", kind);
        return NULL;
    }
    e = calloc(1, sizeof *e);
    if (e == NULL) {
        set_why(why, why_len, "out of memory");
        return NULL;
    }
    rc = pthread_mutex_init(&e->lock, NULL);
    if (rc == 0) {
        rc = pthread_cond_init(&e->idle, NULL);
        if (rc != 0)
            pthread_mutex_destroy(&e->lock);
    }
    if (rc != 0) {
        set_why(why, why_len, "pthread init failed: %s", strerror_r(rc, ebuf, sizeof ebuf));
        free(e);
        return NULL;
    }
    e->kind = PYLOG_ENGINE_PORTABLE;

#ifdef PYLOG_HAVE_IO_URING
    if (kind == PYLOG_ENGINE_PORTABLE) {
        set_why(why, why_len, "portable (pwritev): requested");
        return e;
    }
    {
        char reason[192];
        if (pylog_uring_setup(e, queue_depth, reason, sizeof reason) == 0) {
            e->kind = PYLOG_ENGINE_URING;
#ifdef IO_URING_VERSION_MAJOR
            set_why(why, why_len, "io_uring (liburing %d.%d, queue depth %u)",
                    IO_URING_VERSION_MAJOR, IO_URING_VERSION_MINOR, e->depth);
#else
            set_why(why, why_len, "io_uring (queue depth %u)", e->depth);
#endif
            return e;
        }
        if (kind == PYLOG_ENGINE_AUTO) {
            set_why(why, why_len, "portable (pwritev): %s", reason);
            return e;
        }
        set_why(why, why_len, "io_uring unavailable: %s", reason);
    }
#else
    (void)queue_depth;
    if (kind != PYLOG_ENGINE_URING) {
        set_why(why, why_len, kind == PYLOG_ENGINE_PORTABLE ? "portable (pwritev): requested"
                : "portable (pwritev): built without io_uring (liburing not found)");
        return e;
    }
    set_why(why, why_len, "io_uring unavailable: built without io_uring (liburing not found)");
#endif
    pthread_cond_destroy(&e->idle);
    pthread_mutex_destroy(&e->lock);
    free(e);
    return NULL;
}

int pylog_engine_kind(const pylog_engine *e)
{
    return e->kind;
}

int pylog_engine_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
                        int64_t pos, int flags)
{
    int rc;
    if (iovcnt < 0 || (iovcnt > 0 && iov == NULL) || pos < 0 || (flags & ~PYLOG_WRITE_DATASYNC))
        return -EINVAL;
#ifdef PYLOG_HAVE_IO_URING
    /* io_uring only where it measurably helps (bench/RESULTS.md): a write that
     * must be synced goes out as one linked write+fdatasync chain. A plain
     * buffered write completes in the caller's context with pwritev; through
     * the ring, filesystems hand it to an io-wq worker thread, which slows
     * appends to the page cache. */
    if (e->kind == PYLOG_ENGINE_URING && (flags & PYLOG_WRITE_DATASYNC))
        rc = pylog_uring_writev(e, fd, iov, iovcnt, pos, flags);
    else
#endif
    {
        enter(e);
        rc = pylog_portable_writev(e, fd, iov, iovcnt, pos, flags);
        leave(e);
    }
    if (rc == 0)
        stat_add(&e->writes, 1);
    return rc;
}

int pylog_engine_sync(pylog_engine *e, const int *fds, int n, int full)
{
    int rc;
    if (n < 0 || (n > 0 && fds == NULL))
        return -EINVAL;
#ifdef PYLOG_HAVE_IO_URING
    if (e->kind == PYLOG_ENGINE_URING)
        return pylog_uring_sync(e, fds, n, full);
#endif
    enter(e);
    rc = pylog_portable_sync(e, fds, n, full);
    leave(e);
    return rc;
}

void pylog_engine_get_stats(pylog_engine *e, pylog_engine_stats *out)
{
    out->writes = atomic_load_explicit(&e->writes, memory_order_relaxed);
    out->bytes_written = atomic_load_explicit(&e->bytes_written, memory_order_relaxed);
    out->syncs = atomic_load_explicit(&e->syncs, memory_order_relaxed);
    out->submissions = atomic_load_explicit(&e->submissions, memory_order_relaxed);
    out->short_writes = atomic_load_explicit(&e->short_writes, memory_order_relaxed);
}

void pylog_engine_free(pylog_engine *e)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->lock);
    atomic_store(&e->freeing, 1);
    while (e->active > 0)
        pthread_cond_wait(&e->idle, &e->lock);
    pthread_mutex_unlock(&e->lock);
    for (int i = 0; i < e->pooled; i++)
        free(e->pool[i].buf);
#ifdef PYLOG_HAVE_IO_URING
    if (e->kind == PYLOG_ENGINE_URING)
        pylog_uring_teardown(e);
#endif
    pthread_cond_destroy(&e->idle);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int pylog_engine_inject_fault(pylog_engine *e, int where, int err)
{
    if (where != PYLOG_ENGINE_FAULT_SUBMIT && where != PYLOG_ENGINE_FAULT_WAIT)
        return -EINVAL;
    if (err >= 0)
        return -EINVAL;
#ifdef PYLOG_HAVE_IO_URING
    if (e->kind != PYLOG_ENGINE_URING)
        return -EOPNOTSUPP;
    pthread_mutex_lock(&e->lock);
    e->fault[where] = err;
    pthread_mutex_unlock(&e->lock);
    return 0;
#else
    (void)e;
    return -EOPNOTSUPP;
#endif
}

int pylog_engine_uring_compiled(void)
{
#ifdef PYLOG_HAVE_IO_URING
    return 1;
#else
    return 0;
#endif
}
