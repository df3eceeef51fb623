/* O_DIRECT appends: the caller's bytes copied once into an aligned staging
 * buffer (pooled per engine), the last partial block kept by the caller and
 * rewritten, completed, by the next append; written by pwrite(2), or by the
 * ring in pieces in flight together (io_uring_ring.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* GNU strerror_r */
#endif
#define _FILE_OFFSET_BITS 64

#include "io_engine_impl.h"

/* Staging buffers' alignment and size steps, and the smallest piece an append
 * is cut into for io_uring. */
#define DIRECT_BUF_ALIGN 4096
#define DIRECT_BUF_STEP ((size_t)1 << 20)
#define DIRECT_MIN_PIECE ((size_t)128 << 10)

static void *pool_get(pylog_engine *e, size_t len, size_t *cap)
{
    void *buf = NULL, *too_small = NULL;
    size_t best = SIZE_MAX;
    int at = -1;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->pooled; i++) {
        if (e->pool[i].cap >= len && e->pool[i].cap < best) {
            best = e->pool[i].cap;
            at = i;
        }
    }
    if (at >= 0) {
        buf = e->pool[at].buf;
        *cap = e->pool[at].cap;
        e->pool[at] = e->pool[--e->pooled];
    } else if (e->pooled == DIRECT_POOL_MAX) {
        too_small = e->pool[--e->pooled].buf;   /* replaced by a bigger one */
    }
    pthread_mutex_unlock(&e->lock);
    free(too_small);
    if (buf != NULL)
        return buf;
    *cap = (len + DIRECT_BUF_STEP - 1) / DIRECT_BUF_STEP * DIRECT_BUF_STEP;
    if (posix_memalign(&buf, DIRECT_BUF_ALIGN, *cap) != 0)
        return NULL;
    return buf;
}

static void pool_put(pylog_engine *e, void *buf, size_t cap)
{
    pthread_mutex_lock(&e->lock);
    if (e->pooled < DIRECT_POOL_MAX) {
        e->pool[e->pooled].buf = buf;
        e->pool[e->pooled].cap = cap;
        e->pooled++;
        buf = NULL;
    }
    pthread_mutex_unlock(&e->lock);
    free(buf);
}

/* pwrite(2) of whole aligned blocks until done. A short direct write is resumed
 * from the last whole block it wrote (rewriting the same bytes is harmless). */
int pylog_pwrite_direct(pylog_engine *e, int fd, const char *buf, size_t len, int64_t pos,
                         size_t align)
{
    while (len > 0) {
        ssize_t w = pwrite(fd, buf, len, pos);
        size_t done;
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        done = (size_t)w & ~(align - 1);
        if (done == 0)
            return -EIO;        /* no whole block written: would spin */
        stat_add(&e->bytes_written, done);
        if (done < len)
            stat_add(&e->short_writes, 1);
        buf += done;
        len -= done;
        pos += (int64_t)done;
    }
    return 0;
}
int pylog_engine_append_direct(pylog_engine *e, int fd, char *tail, size_t *tail_len,
                               const struct iovec *iov, int iovcnt, int64_t pos, size_t align,
                               unsigned pieces, int flags)
{
    size_t data = 0, total, padded, cap = 0, piece, keep;
    char *buf, *p;
    int rc;
    if (align == 0 || align > PYLOG_DIRECT_MAX_ALIGN || (align & (align - 1)) || pos < 0 ||
        (uint64_t)pos % align || *tail_len >= align || iovcnt < 0 || (iovcnt > 0 && iov == NULL) ||
        (flags & ~PYLOG_WRITE_DATASYNC))
        return -EINVAL;
    for (int i = 0; i < iovcnt; i++)
        data += iov[i].iov_len;
    total = *tail_len + data;
    padded = (total + align - 1) & ~(align - 1);
    if (padded == 0)
        return (flags & PYLOG_WRITE_DATASYNC) ? pylog_engine_sync(e, &fd, 1, 0) : 0;
    buf = pool_get(e, padded, &cap);
    if (buf == NULL)
        return -ENOMEM;
    memcpy(buf, tail, *tail_len);
    p = buf + *tail_len;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    memset(buf + total, 0, padded - total);
    if (pieces < 1)
        pieces = 1;
    piece = (padded / pieces + align - 1) & ~(align - 1);
    if (piece < DIRECT_MIN_PIECE)
        piece = DIRECT_MIN_PIECE;
#ifdef PYLOG_HAVE_IO_URING
    /* The ring only when pieces go in flight together: one direct write
     * completes as fast in the caller's context, and through the ring an
     * extending write is punted to a kernel worker (bench/RESULTS.md). */
    if (e->kind == PYLOG_ENGINE_URING && piece < padded) {
        rc = pylog_uring_write_direct(e, fd, buf, padded, pos, piece, align);
    } else if (e->kind == PYLOG_ENGINE_URING && (flags & PYLOG_WRITE_DATASYNC)) {
        /* One linked write + fdatasync chain, as for buffered synced writes. */
        struct iovec whole = {buf, padded};
        rc = pylog_uring_writev(e, fd, &whole, 1, pos, PYLOG_WRITE_DATASYNC);
        flags &= ~PYLOG_WRITE_DATASYNC;
    } else
#endif
    {
        enter(e);
        rc = pylog_pwrite_direct(e, fd, buf, padded, pos, align);
        leave(e);
    }
    if (rc == 0 && (flags & PYLOG_WRITE_DATASYNC))
        rc = pylog_engine_sync(e, &fd, 1, 0);
    if (rc == 0) {
        keep = total & (align - 1);
        memcpy(tail, buf + (total - keep), keep);
        *tail_len = keep;
        stat_add(&e->writes, 1);
    }
    pool_put(e, buf, cap);
    return rc;
}

#define PYLOG_TMPFS_MAGIC 0x01021994
#define PYLOG_RAMFS_MAGIC 0x858458f6

long pylog_direct_alignment(int fd, char *why, size_t why_len)
{
    struct statfs fs;
    struct stat st;
    char ebuf[128];
    long align;
    if (fstatfs(fd, &fs) < 0 || fstat(fd, &st) < 0) {
        int err = errno;
        set_why(why, why_len, "fstat: %s", strerror_r(err, ebuf, sizeof ebuf));
        return -err;
    }
    if (fs.f_type == PYLOG_TMPFS_MAGIC || fs.f_type == PYLOG_RAMFS_MAGIC) {
        set_why(why, why_len, "the file system keeps its files in memory (tmpfs or ramfs): "
                "O_DIRECT has no disk to write to past the page cache");
        return -EINVAL;
    }
    align = st.st_blksize > 0 ? (long)st.st_blksize : 4096;
#ifdef STATX_DIOALIGN
    {
        struct statx sx;
        if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
            if (sx.stx_dio_offset_align == 0) {
                set_why(why, why_len, "the file system does not support direct I/O on this "
                        "file (statx reports no O_DIRECT alignment)");
                return -EINVAL;
            }
            if ((long)sx.stx_dio_offset_align > align)
                align = (long)sx.stx_dio_offset_align;
            if ((long)sx.stx_dio_mem_align > align)
                align = (long)sx.stx_dio_mem_align;
        }
    }
#endif
    if (align > PYLOG_DIRECT_MAX_ALIGN || (align & (align - 1))) {
        set_why(why, why_len, "unsupported direct I/O alignment of %ld bytes", align);
        return -EINVAL;
    }
    set_why(why, why_len, "%ld-byte blocks", align);
    return align;
}
