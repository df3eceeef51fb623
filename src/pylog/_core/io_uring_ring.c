/* The io_uring engine (the contract is in io_engine.h):
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

#include "io_engine_impl.h"

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

int pylog_uring_setup(pylog_engine *e, unsigned queue_depth, char *reason, size_t len)
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
    pthread_once(&synced_hook_once, synced_hook_lookup);
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

int pylog_uring_writev(pylog_engine *e, int fd, const struct iovec *iov, int iovcnt,
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
int pylog_uring_sync(pylog_engine *e, const int *fds, int n, int full)
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

/* Writes buf[0..len) at `pos` as pieces of `piece` bytes, as many in flight
 * at once as the ring allows (unlinked: they run concurrently). A piece the
 * kernel wrote short, or refused with EAGAIN/EINTR, is finished by pwrite. */
int pylog_uring_write_direct(pylog_engine *e, int fd, const char *buf, size_t len, int64_t pos,
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
                rc = pylog_pwrite_direct(e, fd, buf + offs[i] + done, lens[i] - done,
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

void pylog_uring_teardown(pylog_engine *e)
{
    io_uring_queue_exit(&e->ring);
    pthread_cond_destroy(&e->progress);
}

#endif /* PYLOG_HAVE_IO_URING */
