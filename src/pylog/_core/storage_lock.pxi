# The Log's lock (joined into storage.pyx).

from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport PyThread_get_thread_ident

cdef extern from "fastlock.h" nogil:
    int pylog_lock_try(int *word)
    int pylog_lock_wait(int *word, int64_t deadline_ns)
    void pylog_lock_give(int *word)
    int64_t pylog_lock_now_ns()


cdef class LogLock:
    """The Log's append lock: reentrant, with ``threading.RLock``'s Python API
    (``acquire(blocking, timeout)``, ``release``, the context manager), and
    ``take``/``give`` for log_append, which takes it without a Python method
    call. RLock's acquire parses its arguments and reads the clock on every
    call; an uncontended take here
    is a compare-and-swap (fastlock.h, one futex word) and a thread-id read.

    Invariant: ``_owner`` and ``_count`` change only with the word held and the
    GIL held, and are read with the GIL held (every caller holds it), so a
    thread sees its own ownership exactly. A contended take waits in the
    kernel with the GIL released. Free-threaded CPython would need atomics."""

    cdef int _word              # 0 free, 1 held, 2 held with possible waiters
    cdef unsigned long _owner   # the holder's thread ident, while _count > 0
    cdef Py_ssize_t _count      # the holder's nesting depth

    cdef inline int take(self) except -1:
        """Acquires, blocking with the GIL released if another thread holds it."""
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef int r
        if self._count and self._owner == me:
            self._count += 1
            return 0
        if not pylog_lock_try(&self._word):
            while True:
                with nogil:
                    r = pylog_lock_wait(&self._word, -1)
                if r == 1:
                    break
                PyErr_CheckSignals()    # interrupted: run handlers (Ctrl-C), then wait again
        self._owner = me
        self._count = 1
        return 0

    cdef inline void give(self) noexcept:
        """Releases one level; the caller holds the lock."""
        self._count -= 1
        if self._count == 0:
            self._owner = 0
            pylog_lock_give(&self._word)

    def acquire(self, bint blocking=True, double timeout=-1):
        """As ``threading.RLock.acquire``: True once held, False on timeout."""
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef int64_t deadline
        cdef int r
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if self._count and self._owner == me:
            self._count += 1
            return True
        if not pylog_lock_try(&self._word):
            if not blocking:
                return False
            # Past ~285 years the nanosecond deadline would overflow: no deadline.
            deadline = pylog_lock_now_ns() + <int64_t>(timeout * 1e9) if 0 <= timeout < 9e9 else -1
            while True:
                with nogil:
                    r = pylog_lock_wait(&self._word, deadline)
                if r == 1:
                    break
                if r == 0:
                    return False
                PyErr_CheckSignals()
        self._owner = me
        self._count = 1
        return True

    def release(self):
        """As ``threading.RLock.release``: only the holding thread may release."""
        if not self._count or self._owner != PyThread_get_thread_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self.give()

    def _is_owned(self):
        """Whether the calling thread holds it (threading.Condition asks this)."""
        return bool(self._count and self._owner == PyThread_get_thread_ident())

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return (f"<pylog LogLock {'locked' if self._count else 'unlocked'} "
                f"owner={self._owner} count={self._count}>")
