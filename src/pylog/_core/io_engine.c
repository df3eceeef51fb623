/* I/O engine: the contract is in io_engine.h.
 *
 * Both kinds walk the caller's iovec array with a `cursor` and cut it into
 * pieces of at most IOV_MAX iovecs; a piece that starts inside an iovec (after
 * a short write) is that one iovec's remainder alone. The caller's array is
 * never modified.
 *
 * io_uring: one ring per engine, shared by threads that call without the GIL.
 *  - e->lock guards the submission queue, `inflight`, `reaping` and `broken`.
 *    A caller prepares and submits its SQEs without letting go of the lock,
 *    so its link chain is contiguous and the SQ is empty whenever the lock is
 *    free (unless the ring is broken).
 *  - An SQE's user_data points at a `uring_op` in the submitting caller's
 *    stack frame. Every op posts exactly one CQE (no multishot ops), and a
 *    caller returns only after each SQE the kernel took from it completed.
 *  - One thread at a time is the reaper: it waits for CQEs without the lock,
 *    then, with the lock, stores each result in its uring_op and wakes the
 *    other waiters (e->progress), who sleep instead of entering the kernel.
 *  - Once the ring is broken nothing is submitted again, but SQEs the kernel
 *    took may still be reading the callers' buffers: their callers keep
 *    waiting, reaping by peeking at the mmapped CQ ring (no system call)
 *    every URING_BROKEN_POLL_NS, until each of their SQEs has posted its CQE.
 *  - inflight <= depth = SQ entries = CQ entries / 2: the CQ cannot overflow
 *    and io_uring_get_sqe cannot fail.
 *
 * Known difference, outside the engine's use (regular files): on a pipe or
 * socket pwritev fails with ESPIPE, while io_uring ignores the position and
 * writes. Checking every fd would cost an fstat per call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* GNU strerror_r */
#endif
#define _FILE_OFFSET_BITS 64

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

/* O_DIRECT staging: buffers kept per engine, their alignment, and the
 * smallest piece an append is cut into for io_uring. */
#define DIRECT_POOL_MAX 8
#define DIRECT_BUF_ALIGN 4096
#define DIRECT_BUF_STEP ((size_t)1 << 20)
#define DIRECT_MIN_PIECE ((size_t)128 << 10)

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

static void stat_add(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

static void set_why(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL || why_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

/* `active` counts the callers inside, so pylog_engine_free waits for them.
 * The portable path moves it without the lock (no mutex round trips on an
 * append). free() sets `freeing` before it reads
 * `active`; the last caller out reads `freeing` after its decrement (both
 * sequentially consistent), so at least one of them sees the other: either
 * free() sees 0, or the caller takes the lock, which free() holds until it
 * waits, and wakes it. Without a free(), leaving is one atomic. */
static void enter(pylog_engine *e)
{
    atomic_fetch_add(&e->active, 1);
}

#ifdef PYLOG_HAVE_IO_URING
static void leave_locked(pylog_engine *e)
{
    if (atomic_fetch_sub(&e->active, 1) == 1)
        pthread_cond_broadcast(&e->idle);
}
#endif

static void leave(pylog_engine *e)
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
static void cursor_skip(struct cursor *c, size_t n)
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

static void cursor_init(struct cursor *c, const struct iovec *iov, int cnt)
{
    c->iov = iov;
    c->cnt = cnt;
    c->idx = 0;
    c->off = 0;
    cursor_skip(c, 0);
}

static int cursor_done(const struct cursor *c)
{
    return c->idx == c->cnt;
}

/* The next piece to write from a cursor that is not done: sets *vec / *n and
 * returns its byte count (> 0). A partly written iovec goes alone, through
 * `part`, which must outlive the write. */
static size_t next_piece(const struct cursor *c, struct iovec *part,
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

/* ---- portable: pwritev + fdatasync -------------------------------------- */

static int sync_fd(int fd, int full)
{
    while ((full ? fsync(fd) : fdatasync(fd)) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    return 0;
}

static int portable_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
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
        int rc = sync_fd(fd, 0);
        if (rc < 0)
            return rc;
        stat_add(&e->syncs, 1);
    }
    return 0;
}

static int portable_sync(pylog_engine *e, const int *fds, int n, int full)
{
    int first = 0;
    for (int i = 0; i < n; i++) {
        int rc = sync_fd(fds[i], full);
        if (rc == 0)
            stat_add(&e->syncs, 1);
        else if (first == 0)
            first = rc;
    }
    return first;
}

/* ---- io_uring ----------------------------------------------------------- */

#ifdef PYLOG_HAVE_IO_URING
/* The fault-injection layer of the durability tests (tests/durability/faultfs.c,
 * loaded with LD_PRELOAD) sees libc's fsync/fdatasync/msync, but not an fsync
 * that a ring runs. When that layer is loaded it defines faultfs_synced(); the
 * ring then tells it of every fsync that completed without error, after it
 * completed. Without the layer, synced_hook stays NULL and costs a branch. */
static void (*synced_hook)(int fd);
static pthread_once_t synced_hook_once = PTHREAD_ONCE_INIT;

static void synced_hook_lookup(void)
{
    synced_hook = (void (*)(int))dlsym(RTLD_DEFAULT, "faultfs_synced");
}

static void ring_synced(int fd)
{
    if (synced_hook != NULL)
        synced_hook(fd);
}
#endif

#ifdef PYLOG_HAVE_IO_URING

/* SQEs one caller prepares per round: bounds the uring_op arrays on its
 * stack (32 writev pieces carry up to 32 * IOV_MAX iovecs). */
#define URING_MAX_CHAIN 32u

/* Transient submit failures (-EAGAIN: kernel out of memory) are retried this
 * many times, 1 ms apart, before the ring is declared broken. */
#define URING_SUBMIT_RETRIES 1000

/* After a break, how often a waiter peeks at the CQ ring for completions. */
#define URING_BROKEN_POLL_NS 1000000L

/* A completion record; `done` and `res` are guarded by e->lock. */
struct uring_op {
    int res;
    int done;
};

/* The ring can no longer be trusted (lock held): every later call fails with
 * `err`, and every caller waiting on a completion is woken to reap by peeking
 * (uring_progress). No OS error may crash the host process: the caller raises
 * OSError and the LogManager takes the log dir offline. */
static void uring_break(pylog_engine *e, const char *what, int err)
{
    char buf[128];
    if (e->broken == 0) {
        fprintf(stderr, "pylog io_engine: %s: %s; the io_uring engine is now out of service\n",
                what, strerror_r(-err, buf, sizeof buf));
        e->broken = err < 0 ? err : -EIO;
    }
    pthread_cond_broadcast(&e->progress);
}

/* Appends " (kernel.io_uring_disabled=N)" when the sysctl exists and is set. */
static void disabled_hint(char *buf, size_t len)
{
    int value = 0;
    FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "re");
    buf[0] = '\0';
    if (f == NULL)
        return;
    if (fscanf(f, "%d", &value) == 1 && value != 0)
        snprintf(buf, len, " (kernel.io_uring_disabled=%d)", value);
    fclose(f);
}

static int uring_setup(pylog_engine *e, unsigned queue_depth, char *reason, size_t len)
{
    struct io_uring_params p;
    char hint[48], ebuf[128];
    int rc;
    if (queue_depth < 2) {
        snprintf(reason, len, "queue depth %u is below 2 (a write and its fdatasync "
                 "are submitted together)", queue_depth);
        return -EINVAL;
    }
    memset(&p, 0, sizeof p);
    rc = io_uring_queue_init_params(queue_depth, &e->ring, &p);
    if (rc < 0) {
        disabled_hint(hint, sizeof hint);
        snprintf(reason, len, "io_uring_queue_init failed: %s%s",
                 strerror_r(-rc, ebuf, sizeof ebuf), hint);
        return rc;
    }
    /* NODROP (Linux 5.5) implies WRITEV, FSYNC and IOSQE_IO_LINK. */
    if (!(p.features & IORING_FEAT_NODROP)) {
        io_uring_queue_exit(&e->ring);
        snprintf(reason, len, "kernel lacks IORING_FEAT_NODROP (needs Linux 5.5+)");
        return -EOPNOTSUPP;
    }
    rc = pthread_cond_init(&e->progress, NULL);
    if (rc != 0) {
        io_uring_queue_exit(&e->ring);
        snprintf(reason, len, "pthread_cond_init failed: %s", strerror_r(rc, ebuf, sizeof ebuf));
        return -rc;
    }
    e->depth = p.sq_entries;
    return 0;
}

/* Stores the result of every CQE the kernel has posted in its uring_op and
 * frees their slots (lock held; reads the mmapped CQ ring, no system call).
 * Returns how many. */
static unsigned uring_dispatch(pylog_engine *e)
{
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&e->ring, head, cqe) {
        struct uring_op *op = io_uring_cqe_get_data(cqe);
        op->res = cqe->res;
        op->done = 1;
        n++;
    }
    io_uring_cq_advance(&e->ring, n);
    e->inflight -= n;
    return n;
}

/* Makes completions progress; called with e->lock held, which it drops
 * meanwhile. Becomes the reaper when nobody is, else sleeps until the reaper
 * has dispatched a round. Only called while inflight > 0, so a CQE will come.
 * On a broken ring nobody enters the kernel again: a caller peeks at the CQ
 * ring and, finding nothing, sleeps URING_BROKEN_POLL_NS without the lock.
 * (A reaper already inside io_uring_wait_cqe owns the ring until it returns:
 * peeking meanwhile could take the CQE it waits for.) */
static void uring_progress(pylog_engine *e)
{
    struct io_uring_cqe *cqe;
    int rc;
    if (e->reaping) {
        pthread_cond_wait(&e->progress, &e->lock);
        return;
    }
    if (e->broken) {
        if (uring_dispatch(e) > 0) {
            pthread_cond_broadcast(&e->progress);
        } else {
            struct timespec pause = {0, URING_BROKEN_POLL_NS};
            pthread_mutex_unlock(&e->lock);
            nanosleep(&pause, NULL);
            pthread_mutex_lock(&e->lock);
        }
        return;
    }
    e->reaping = 1;
    rc = e->fault[PYLOG_ENGINE_FAULT_WAIT];
    e->fault[PYLOG_ENGINE_FAULT_WAIT] = 0;
    pthread_mutex_unlock(&e->lock);
    if (rc == 0)
        rc = io_uring_wait_cqe(&e->ring, &cqe);     /* submits nothing: to_submit = 0 */
    pthread_mutex_lock(&e->lock);
    e->reaping = 0;
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        uring_break(e, "io_uring_wait_cqe", rc);   /* its waiters peek from now on */
        return;
    }
    uring_dispatch(e);
    pthread_cond_broadcast(&e->progress);
}

/* Waits (lock held) until ops[0..k) are all done. An op not done is one the
 * kernel took (uring_submit completes the others), so its CQE will come, even
 * after the ring broke: returning earlier would let the caller release
 * buffers the kernel may still read. */
static void uring_wait(pylog_engine *e, struct uring_op *ops, unsigned k)
{
    for (unsigned i = 0; i < k; i++) {
        while (!ops[i].done)
            uring_progress(e);
    }
}

/* Waits (lock held) until `want` SQEs may be added without exceeding depth.
 * Returns 0, or e->broken. */
static int uring_reserve(pylog_engine *e, unsigned want)
{
    while (!e->broken && e->depth - e->inflight < want)
        uring_progress(e);
    return e->broken;
}

/* NULL only if the ring's state contradicts the reservation (callers take at
 * most depth - inflight SQEs, and the SQ is empty whenever the lock is free):
 * then the ring is broken and the caller returns e->broken. */
static struct io_uring_sqe *uring_sqe(pylog_engine *e, struct uring_op *op)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
    if (sqe == NULL) {
        uring_break(e, "io_uring_get_sqe: SQ full despite reservation", -EBUSY);
        return NULL;
    }
    io_uring_sqe_set_data(sqe, op);
    op->done = 0;
    return sqe;
}

/* Hands the k SQEs just prepared for ops[0..k) to the kernel (lock held).
 * Those it does not take, because the ring broke, are completed here with
 * the error; those it took complete through uring_wait. */
static void uring_submit(pylog_engine *e, struct uring_op *ops, unsigned k)
{
    struct timespec pause = {0, 1000000};
    unsigned taken = 0;
    int retries = 0;
    while (taken < k) {
        int rc = e->fault[PYLOG_ENGINE_FAULT_SUBMIT];
        e->fault[PYLOG_ENGINE_FAULT_SUBMIT] = 0;
        if (rc == 0)
            rc = io_uring_submit(&e->ring);
        stat_add(&e->submissions, 1);
        if (rc > 0) {
            taken += (unsigned)rc;
            e->inflight += (unsigned)rc;
            continue;
        }
        if (rc == -EINTR)
            continue;
        if ((rc == 0 || rc == -EAGAIN || rc == -EBUSY) && ++retries < URING_SUBMIT_RETRIES) {
            nanosleep(&pause, NULL);
            continue;
        }
        uring_break(e, "io_uring_submit", rc < 0 ? rc : -EAGAIN);
        for (unsigned i = taken; i < k; i++) {
            ops[i].res = e->broken;
            ops[i].done = 1;
        }
        return;
    }
}

/* One round of uring_writev (lock held): submits up to URING_MAX_CHAIN
 * pieces from *c as one linked chain, followed by the fdatasync when the
 * chain reaches the end and *need_sync, then waits for all of them and moves
 * *c, *pos and *need_sync on. Returns 0 or -errno. */
static int uring_write_round(pylog_engine *e, int fd, struct cursor *c, int64_t *pos,
                             int *need_sync)
{
    struct uring_op ops[URING_MAX_CHAIN];
    size_t lens[URING_MAX_CHAIN];
    struct iovec part;          /* only the chain's first piece can be partial */
    struct io_uring_sqe *sqe = NULL;
    struct cursor v = *c;       /* where the chain gets if every write is full */
    int64_t vpos = *pos;
    unsigned k = 0, nwrites, slots, want;
    int sync_at = -1, complete = 1, rc;

    want = (cursor_done(c) ? 0u : 1u) + (*need_sync ? 1u : 0u);
    rc = uring_reserve(e, want);
    if (rc < 0)
        return rc;
    slots = e->depth - e->inflight;
    if (slots > URING_MAX_CHAIN)
        slots = URING_MAX_CHAIN;

    while (!cursor_done(&v) && k < slots) {
        const struct iovec *vec;
        int n;
        size_t len = next_piece(&v, &part, &vec, &n);
        sqe = uring_sqe(e, &ops[k]);
        if (sqe == NULL)
            return e->broken;   /* nothing is submitted once the ring is broken */
        io_uring_prep_writev(sqe, fd, vec, (unsigned)n, (uint64_t)vpos);
        sqe->flags |= IOSQE_IO_LINK;
        lens[k++] = len;
        cursor_skip(&v, len);
        vpos += (int64_t)len;
    }
    nwrites = k;
    if (cursor_done(&v) && *need_sync && k < slots) {
        sqe = uring_sqe(e, &ops[k]);
        if (sqe == NULL)
            return e->broken;
        io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
        sync_at = (int)k++;
    }
    /* The chain ends here: never link into the next caller's SQEs. */
    sqe->flags &= (__u8)~IOSQE_IO_LINK;
    uring_submit(e, ops, k);
    uring_wait(e, ops, k);

    rc = 0;
    for (unsigned i = 0; i < nwrites; i++) {
        int res = ops[i].res;
        if (res > 0)
            stat_add(&e->bytes_written, (uint64_t)res);
        if (!complete || rc < 0)
            continue;           /* count bytes of later pieces, but resume here */
        if (res >= 0 && (size_t)res == lens[i]) {
            cursor_skip(c, lens[i]);
            *pos += (int64_t)lens[i];
        } else if (res > 0) {
            /* Short: the kernel cancels the rest of the chain (-ECANCELED);
             * whatever of it ran anyway is rewritten next round. */
            stat_add(&e->short_writes, 1);
            cursor_skip(c, (size_t)res);
            *pos += res;
            complete = 0;
        } else if (res == -EINTR || (res == -ECANCELED && i > 0)) {
            complete = 0;       /* retried next round */
        } else {
            rc = res == 0 ? -EIO : res;     /* 0 bytes: no progress, would spin */
        }
    }
    if (sync_at >= 0) {
        int res = ops[sync_at].res;
        if (res == 0 && complete) {
            *need_sync = 0;
            stat_add(&e->syncs, 1);
            ring_synced(fd);
        } else if (res < 0 && rc == 0 && (res != -ECANCELED || complete)) {
            /* An fdatasync that ran and failed is reported even when a write
             * was short: the kernel reports a writeback error only once. */
            rc = res;
        }
    }
    return rc;
}

static int uring_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
                        int64_t pos, int flags)
{
    struct cursor c;
    int need_sync = (flags & PYLOG_WRITE_DATASYNC) != 0;
    int rc = 0;
    cursor_init(&c, iov, iovcnt);
    pthread_mutex_lock(&e->lock);
    e->active++;
    while (rc == 0 && (!cursor_done(&c) || need_sync))
        rc = uring_write_round(e, fd, &c, &pos, &need_sync);
    leave_locked(e);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Submits up to URING_MAX_CHAIN unlinked fsyncs per round, so they run
 * concurrently; every fd is attempted unless the ring breaks. */
static int uring_sync(pylog_engine *e, const int *fds, int n, int full)
{
    struct uring_op ops[URING_MAX_CHAIN];
    int first = 0, i = 0;
    pthread_mutex_lock(&e->lock);
    e->active++;
    while (i < n) {
        unsigned k;
        int rc = uring_reserve(e, 1);
        if (rc < 0) {
            if (first == 0)
                first = rc;
            break;
        }
        k = e->depth - e->inflight;
        if (k > URING_MAX_CHAIN)
            k = URING_MAX_CHAIN;
        if (k > (unsigned)(n - i))
            k = (unsigned)(n - i);
        for (unsigned j = 0; j < k; j++) {
            struct io_uring_sqe *sqe = uring_sqe(e, &ops[j]);
            if (sqe == NULL) {
                k = 0;
                break;
            }
            io_uring_prep_fsync(sqe, fds[i + (int)j], full ? 0 : IORING_FSYNC_DATASYNC);
        }
        if (k == 0) {
            if (first == 0)
                first = e->broken;
            break;
        }
        uring_submit(e, ops, k);
        uring_wait(e, ops, k);
        for (unsigned j = 0; j < k; j++) {
            if (ops[j].res == 0) {
                stat_add(&e->syncs, 1);
                ring_synced(fds[i + (int)j]);
            } else if (first == 0)
                first = ops[j].res;
        }
        i += (int)k;
    }
    leave_locked(e);
    pthread_mutex_unlock(&e->lock);
    return first;
}

#endif /* PYLOG_HAVE_IO_URING */

/* ---- O_DIRECT appends ----------------------------------------------------- */

/* A staging buffer of at least `len` bytes, aligned to DIRECT_BUF_ALIGN: the
 * smallest pooled one that fits, else a new one (sizes in DIRECT_BUF_STEP
 * steps). NULL when out of memory. */
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
static int pwrite_direct(pylog_engine *e, int fd, const char *buf, size_t len, int64_t pos,
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

#ifdef PYLOG_HAVE_IO_URING
/* Writes buf[0..len) at `pos` as pieces of `piece` bytes, as many in flight
 * at once as the ring allows (unlinked: they run concurrently). A piece the
 * kernel wrote short, or refused with EAGAIN/EINTR, is finished by pwrite. */
static int uring_write_direct(pylog_engine *e, int fd, const char *buf, size_t len, int64_t pos,
                              size_t piece, size_t align)
{
    struct uring_op ops[URING_MAX_CHAIN];
    size_t lens[URING_MAX_CHAIN], offs[URING_MAX_CHAIN];
    size_t off = 0;
    int rc = 0;
    pthread_mutex_lock(&e->lock);
    e->active++;
    while (rc == 0 && off < len) {
        unsigned k = 0, slots;
        rc = uring_reserve(e, 1);
        if (rc < 0)
            break;
        slots = e->depth - e->inflight;
        if (slots > URING_MAX_CHAIN)
            slots = URING_MAX_CHAIN;
        while (k < slots && off < len) {
            size_t n = len - off < piece ? len - off : piece;
            struct io_uring_sqe *sqe = uring_sqe(e, &ops[k]);
            if (sqe == NULL)
                break;
            io_uring_prep_write(sqe, fd, buf + off, (unsigned)n, (uint64_t)(pos + (int64_t)off));
            lens[k] = n;
            offs[k] = off;
            k++;
            off += n;
        }
        if (e->broken) {
            rc = e->broken;     /* nothing is submitted once the ring is broken */
            break;
        }
        uring_submit(e, ops, k);
        uring_wait(e, ops, k);
        for (unsigned i = 0; i < k && rc == 0; i++) {
            int res = ops[i].res;
            if (res > 0)
                stat_add(&e->bytes_written, (uint64_t)res);
            if (res >= 0 && (size_t)res == lens[i])
                continue;
            if (res >= 0 || res == -EINTR || res == -EAGAIN) {
                size_t done = res > 0 ? ((size_t)res & ~(align - 1)) : 0;
                stat_add(&e->short_writes, 1);
                pthread_mutex_unlock(&e->lock);
                rc = pwrite_direct(e, fd, buf + offs[i] + done, lens[i] - done,
                                   pos + (int64_t)(offs[i] + done), align);
                pthread_mutex_lock(&e->lock);
            } else {
                rc = res;
            }
        }
    }
    leave_locked(e);
    pthread_mutex_unlock(&e->lock);
    return rc;
}
#endif

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
        rc = uring_write_direct(e, fd, buf, padded, pos, piece, align);
    } else if (e->kind == PYLOG_ENGINE_URING && (flags & PYLOG_WRITE_DATASYNC)) {
        /* One linked write + fdatasync chain, as for buffered synced writes. */
        struct iovec whole = {buf, padded};
        rc = uring_writev(e, fd, &whole, 1, pos, PYLOG_WRITE_DATASYNC);
        flags &= ~PYLOG_WRITE_DATASYNC;
    } else
#endif
    {
        enter(e);
        rc = pwrite_direct(e, fd, buf, padded, pos, align);
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
        if (uring_setup(e, queue_depth, reason, sizeof reason) == 0) {
            e->kind = PYLOG_ENGINE_URING;
            pthread_once(&synced_hook_once, synced_hook_lookup);
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
        rc = uring_writev(e, fd, iov, iovcnt, pos, flags);
    else
#endif
    {
        enter(e);
        rc = portable_writev(e, fd, iov, iovcnt, pos, flags);
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
        return uring_sync(e, fds, n, full);
#endif
    enter(e);
    rc = portable_sync(e, fds, n, full);
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
    if (e->kind == PYLOG_ENGINE_URING) {
        io_uring_queue_exit(&e->ring);
        pthread_cond_destroy(&e->progress);
    }
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
