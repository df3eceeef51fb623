# Included by producer.pyx: FastLock, the Producer's lock (one futex word, fastlock.h),
# which the accumulator and the direct path take from C.

from cpython.exc cimport PyErr_CheckSignals

cdef extern from "fastlock.h" nogil:
    int pylog_lock_try(int *word)
    int pylog_lock_wait(int *word, int64_t deadline_ns)
    void pylog_lock_give(int *word)
    int pylog_lock_held(const int *word)
    int64_t pylog_lock_now_ns()


@cython.final
@cython.auto_pickle(False)                  # a lock is not picklable (threading.Lock is not)
cdef class FastLock:
    """A mutex with ``threading.Lock``'s Python API (``acquire(blocking, timeout)``,
    ``release``, ``locked``, the context manager; usable by ``threading.Condition``)
    whose C callers (the accumulator, once per ``send()``) take it without a
    Python method call. It is one futex word (fastlock.h): an uncontended take
    is a compare-and-swap and a give an exchange; a contended take waits in
    the kernel with the GIL released. Not reentrant; any thread may release it."""

    cdef int _word          # 0 free, 1 held, 2 held with possible waiters

    cdef inline int take(self) except -1:
        """Acquires, blocking with the GIL released if another thread holds it."""
        cdef int r
        if not pylog_lock_try(&self._word):
            while True:
                with nogil:
                    r = pylog_lock_wait(&self._word, -1)
                if r == 1:
                    break
                PyErr_CheckSignals()   # interrupted: run handlers (Ctrl-C), then wait again
        return 0

    cdef inline void give(self) noexcept:
        pylog_lock_give(&self._word)

    def acquire(self, bint blocking=True, double timeout=-1):
        """As ``threading.Lock.acquire``: True once held, False on timeout."""
        cdef int r
        cdef int64_t deadline
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if pylog_lock_try(&self._word):
            return True
        if not blocking:
            return False
        # Past ~285 years (threading.TIMEOUT_MAX is ~292) the nanosecond deadline
        # would overflow: that wait has no deadline.
        deadline = pylog_lock_now_ns() + <int64_t>(timeout * 1e9) if 0 <= timeout < 9e9 else -1
        while True:
            with nogil:
                r = pylog_lock_wait(&self._word, deadline)
            if r == 1:
                return True
            if r == 0:
                return False
            PyErr_CheckSignals()

    def release(self):
        if not pylog_lock_held(&self._word):
            raise RuntimeError("release unlocked lock")
        self.give()

    def locked(self):
        return bool(pylog_lock_held(&self._word))

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.give()

    def __repr__(self):
        return f"<pylog FastLock {'locked' if pylog_lock_held(&self._word) else 'unlocked'}>"
