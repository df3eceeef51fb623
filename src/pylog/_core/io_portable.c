/* The portable engine: pwritev(2) until every byte is written, then fdatasync(2)
 * or fsync(2). Every kind uses it for plain buffered writes (io_engine.c says why).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* GNU strerror_r */
#endif
#define _FILE_OFFSET_BITS 64

#include "io_engine_impl.h"

int pylog_sync_fd(int fd, int full)
{
    while ((full ? fsync(fd) : fdatasync(fd)) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    return 0;
}

int pylog_portable_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
                           int64_t pos, int flags)
{
    struct cursor c;
    cursor_init(&c, iov, iovcnt);
    while (!cursor_done(&c)) {
        struct iovec part;
        const struct iovec *vec;
        int n;
        size_t len = next_piece(&c, &part, &vec, &n);
        ssize_t w = pwritev(fd, vec, n, pos);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO;        /* no progress on a non-empty piece: would spin */
        stat_add(&e->bytes_written, (uint64_t)w);
        if ((size_t)w < len)
            stat_add(&e->short_writes, 1);
        cursor_skip(&c, (size_t)w);
        pos += w;
    }
    if (flags & PYLOG_WRITE_DATASYNC) {
        int rc = pylog_sync_fd(fd, 0);
        if (rc < 0)
            return rc;
        stat_add(&e->syncs, 1);
    }
    return 0;
}

int pylog_portable_sync(pylog_engine *e, const int *fds, int n, int full)
{
    int first = 0;
    for (int i = 0; i < n; i++) {
        int rc = pylog_sync_fd(fds[i], full);
        if (rc == 0)
            stat_add(&e->syncs, 1);
        else if (first == 0)
            first = rc;
    }
    return first;
}
