/* I/O engine: how appends and fsyncs reach the kernel. One engine per log
 * directory (docs/ARCHITECTURE.md), shared by every partition in it.
 *
 * Two implementations with identical behaviour:
 *   io_uring  liburing ring; a write and its fdatasync are submitted together
 *             as one linked chain (IOSQE_IO_LINK), so the sync is ordered after
 *             the write without a second system call round trip; several fds
 *             are synced concurrently with one submission. A write without
 *             PYLOG_WRITE_DATASYNC uses pwritev(2) directly: a buffered write
 *             through the ring is punted to a kernel worker and was slower.
 *   portable  pwritev(2) + fdatasync(2), for kernels or sandboxes without
 *             io_uring (seccomp-filtered containers, io_uring_disabled=2, ...).
 *
 * Every function is thread-safe and is meant to be called without the GIL.
 * Functions return 0 (or a byte count) on success and -errno on failure;
 * they never set errno-dependent state visible to the caller. */
#ifndef PYLOG_IO_ENGINE_H
#define PYLOG_IO_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct pylog_engine pylog_engine;

enum {
    PYLOG_ENGINE_AUTO = 0,      /* io_uring when it can be set up, else portable */
    PYLOG_ENGINE_PORTABLE = 1,
    PYLOG_ENGINE_URING = 2,     /* io_uring or fail */
};

enum {
    PYLOG_WRITE_DATASYNC = 1,   /* fdatasync the fd after the write, ordered after it */
};

typedef struct {
    uint64_t writes;            /* pylog_engine_writev calls that succeeded */
    uint64_t bytes_written;
    uint64_t syncs;             /* fds synced (through writev flags or pylog_engine_sync) */
    uint64_t submissions;       /* io_uring_submit calls (0 for portable) */
    uint64_t short_writes;      /* writes the kernel completed partially and were resumed */
} pylog_engine_stats;

/* Creates an engine of `kind` with a ring of `queue_depth` entries (ignored by
 * portable). Returns NULL only when `kind` is PYLOG_ENGINE_URING and io_uring
 * cannot be used, or on allocation failure. `why` (may be NULL) always
 * receives a one-line, human-readable account of the choice, e.g.
 * "io_uring (liburing 2.3, queue depth 64)" or
 * "portable (pwritev): io_uring_queue_init failed: Operation not permitted". */
pylog_engine *pylog_engine_new(int kind, unsigned queue_depth, char *why, size_t why_len);

/* PYLOG_ENGINE_PORTABLE or PYLOG_ENGINE_URING. */
int pylog_engine_kind(const pylog_engine *e);

/* Writes every byte of iov[0..iovcnt) at file position `pos` (resuming after
 * short writes; iovcnt may exceed IOV_MAX). With PYLOG_WRITE_DATASYNC the fd
 * is then fdatasync'ed, and the call returns only after both completed.
 * Returns 0 or -errno (e.g. -ENOSPC, -EIO); on error some prefix of the data
 * may have been written. */
int pylog_engine_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
                        int64_t pos, int flags);

/* Syncs fds[0..n): fdatasync, or fsync when `full`. io_uring submits them all
 * at once and waits for all; portable syncs them one by one. Returns 0 or the
 * first -errno (every fd is still attempted). */
int pylog_engine_sync(pylog_engine *e, const int *fds, int n, int full);

/* O_DIRECT append (docs/FORMAT.md, "O_DIRECT segments"). `fd` was opened with
 * O_DIRECT; `align` (a power of two, <= PYLOG_DIRECT_MAX_ALIGN) is the write
 * granularity; `pos` is a multiple of it, where the file's last partial block
 * starts, and tail[0..*tail_len) are that block's bytes (*tail_len < align).
 * Writes tail + iov[0..iovcnt) at `pos`, zero-padded to a multiple of `align`,
 * through an aligned staging buffer of the engine's pool; with `pieces` > 1,
 * io_uring cuts it into that many writes in flight together (of at least
 * 128 KiB each); otherwise it is one pwrite(2). Then, with
 * PYLOG_WRITE_DATASYNC, fdatasync. On success `tail` receives the new partial
 * block, *tail_len its length, and 0 is returned; on -errno `tail` is unchanged
 * and some prefix of the blocks may have been written. */
#define PYLOG_DIRECT_MAX_ALIGN 65536
int pylog_engine_append_direct(pylog_engine *e, int fd, char *tail, size_t *tail_len,
                               const struct iovec *iov, int iovcnt, int64_t pos, size_t align,
                               unsigned pieces, int flags);

/* The O_DIRECT write granularity of the regular file `fd`: the largest of the
 * filesystem's direct I/O offset and memory alignment (statx STATX_DIOALIGN)
 * and its block size (st_blksize: writes of whole filesystem blocks avoid
 * ext4's serialised sub-block direct writes). Returns it (> 0), or -errno with
 * `why` saying why the file cannot be written with O_DIRECT (tmpfs and ramfs
 * keep files in memory; a filesystem that reports no direct I/O support). */
long pylog_direct_alignment(int fd, char *why, size_t why_len);

void pylog_engine_get_stats(pylog_engine *e, pylog_engine_stats *out);

/* Waits for in-flight work of other threads to drain, then frees the engine.
 * No call may start after pylog_engine_free begins. */
void pylog_engine_free(pylog_engine *e);

/* Tests only: makes the next io_uring_submit (PYLOG_ENGINE_FAULT_SUBMIT) or
 * io_uring_wait_cqe (PYLOG_ENGINE_FAULT_WAIT) of an io_uring engine fail with
 * `err` (< 0) without entering the kernel, which breaks the ring as a real
 * failure would. Returns 0, -EINVAL, or -EOPNOTSUPP for a portable engine. */
enum {
    PYLOG_ENGINE_FAULT_SUBMIT = 0,
    PYLOG_ENGINE_FAULT_WAIT = 1,
};
int pylog_engine_inject_fault(pylog_engine *e, int where, int err);

/* Whether this build has io_uring support compiled in (liburing found). */
int pylog_engine_uring_compiled(void);

#endif
