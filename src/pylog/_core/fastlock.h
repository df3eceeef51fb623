/* A mutex on one futex word, for producer.pyx's FastLock (Drepper, "Futexes
 * Are Tricky", mutex 2). The word is 0 (free), 1 (held) or 2 (held, and a
 * thread may be waiting). An uncontended take is one compare-and-swap and a
 * give one exchange: no system call and no clock read, where CPython's own
 * lock (a semaphore) reads the monotonic clock on every try. Any thread may
 * give the lock, as threading.Lock allows. Linux only (futex). */
#ifndef PYLOG_FASTLOCK_H
#define PYLOG_FASTLOCK_H

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline int pylog_lock_try(int *word) {
    int expected = 0;
    return __atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline int64_t pylog_lock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Waits for the lock; call without the GIL. `deadline_ns` is CLOCK_MONOTONIC
 * nanoseconds, or < 0 for no deadline. Returns 1 once held, 0 at the
 * deadline, -1 when a signal interrupted the wait (the caller runs the
 * handlers, then calls again). The word stays 2 while anyone may wait, so the
 * give after it wakes one waiter (a stale 2 costs one spurious wake). */
static inline int pylog_lock_wait(int *word, int64_t deadline_ns) {
    int seen = __atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE);
    while (seen != 0) {
        struct timespec rel, *timeout = NULL;
        if (deadline_ns >= 0) {
            int64_t left = deadline_ns - pylog_lock_now_ns();
            if (left <= 0) return 0;
            rel.tv_sec = (time_t)(left / 1000000000);
            rel.tv_nsec = (long)(left % 1000000000);
            timeout = &rel;
        }
        if (syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 2, timeout, NULL, 0) == -1 && errno == EINTR)
            return -1;
        /* Woken, timed out, or the word was no longer 2 (EAGAIN): try again. */
        seen = __atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE);
    }
    return 1;
}

static inline void pylog_lock_give(int *word) {
    if (__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) == 2)
        syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static inline int pylog_lock_held(const int *word) {
    return __atomic_load_n(word, __ATOMIC_RELAXED) != 0;
}

#endif
