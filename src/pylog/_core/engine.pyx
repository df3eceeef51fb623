# cython: language_level=3
"""The I/O engine (io_engine.h) for Python: ``IoEngine`` and ``uring_compiled()``.

Other extensions ``cimport IoEngine`` and call ``pylog_engine_writev`` /
``pylog_engine_sync`` on its ``.engine`` without the GIL; the Python methods
here exist for tests, benchmarks and tools.
"""
import os

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t
from posix.uio cimport iovec

from pylog._core.includes.cengine cimport (
    PYLOG_ENGINE_AUTO, PYLOG_ENGINE_FAULT_SUBMIT, PYLOG_ENGINE_FAULT_WAIT, PYLOG_ENGINE_PORTABLE,
    PYLOG_ENGINE_URING, PYLOG_WRITE_DATASYNC, pylog_direct_alignment,
    pylog_engine_append_direct, pylog_engine_free, pylog_engine_inject_fault,
    pylog_engine_get_stats, pylog_engine_kind, pylog_engine_new,
    pylog_engine_stats, pylog_engine_sync, pylog_engine_uring_compiled, pylog_engine_writev)

ENV_VAR = "PYLOG_IO_ENGINE"
_KINDS = {"auto": PYLOG_ENGINE_AUTO, "portable": PYLOG_ENGINE_PORTABLE,
          "io_uring": PYLOG_ENGINE_URING}
_ALLOWED = "'auto', 'portable' or 'io_uring'"

cdef enum:
    WHY_LEN = 256


cdef int _check(int rc) except -1:
    """Raises OSError for a -errno result of the C engine."""
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    return rc


def direct_alignment(int fd):
    """The O_DIRECT write granularity of the regular file ``fd`` in bytes (io_engine.h:
    the file system's direct I/O alignment and block size). Raises OSError naming why
    the file cannot be written with O_DIRECT (tmpfs, a file system without direct I/O)."""
    cdef char why[WHY_LEN]
    why[0] = 0
    cdef long align = pylog_direct_alignment(fd, why, WHY_LEN)
    if align < 0:
        raise OSError(-align, why.decode(errors="replace"))
    return align


def uring_compiled():
    """Whether this build has io_uring support (liburing was found at build time)."""
    return pylog_engine_uring_compiled() != 0


@cython.final
cdef class IoEngine:
    """How appends and fsyncs reach the kernel; one per log dir, shared by its partitions.

    ``IoEngine(kind="auto", queue_depth=64)``:

    - ``kind="auto"``: io_uring when a ring can be set up, else the portable
      pwritev + fdatasync engine. The environment variable ``PYLOG_IO_ENGINE``
      (``auto``, ``portable`` or ``io_uring``) replaces an ``"auto"`` kind, so a
      deployment can pin the engine without code changes; an explicit
      ``"portable"`` or ``"io_uring"`` argument wins over it.
    - ``kind="portable"``: pwritev(2) + fdatasync(2).
    - ``kind="io_uring"``: io_uring or ``OSError`` (with the reason) when the
      kernel, a sandbox or the build does not allow it.
    - ``queue_depth``: io_uring ring entries (at least 2); bounds the SQEs in
      flight across all threads.

    ``kind`` is the engine in use (``"io_uring"`` or ``"portable"``); ``why`` is a
    one-line account of the choice, e.g. ``"portable (pwritev): io_uring_queue_init
    failed: Operation not permitted"``.

    Thread-safe: every method releases the GIL while the kernel works, and any
    number of threads may write and sync through one engine. Errors are
    ``OSError(errno, strerror)``; after a failed write a prefix of the data may
    have been written.
    """

    cdef int c_writev(self, int fd, const iovec *iov, int iovcnt, int64_t pos, int flags) noexcept nogil:
        """pylog_engine_writev on this engine: 0 or -errno (see io_engine.h)."""
        return pylog_engine_writev(self.engine, fd, iov, iovcnt, pos, flags)

    cdef int c_append_direct(self, int fd, char *tail, size_t *tail_len, const iovec *iov,
                             int iovcnt, int64_t pos, size_t align, unsigned pieces,
                             int flags) noexcept nogil:
        """pylog_engine_append_direct on this engine: 0 or -errno (see io_engine.h)."""
        return pylog_engine_append_direct(self.engine, fd, tail, tail_len, iov, iovcnt, pos,
                                          align, pieces, flags)

    cdef int c_sync(self, const int *fds, int n, int full) noexcept nogil:
        """pylog_engine_sync on this engine: 0 or the first -errno."""
        return pylog_engine_sync(self.engine, fds, n, full)

    def __cinit__(self, kind="auto", int queue_depth=64):
        cdef char why[WHY_LEN]
        chosen_by = ""
        if kind == "auto" and os.environ.get(ENV_VAR):
            kind = os.environ[ENV_VAR]
            if kind not in _KINDS:
                raise ValueError(f"{ENV_VAR}={kind!r}: expected {_ALLOWED}")
            chosen_by = f" ({ENV_VAR}={kind})"
        if not isinstance(kind, str) or kind not in _KINDS:
            raise ValueError(f"unknown I/O engine kind {kind!r}: expected {_ALLOWED}")
        if queue_depth < 2:
            raise ValueError(f"queue_depth must be at least 2, got {queue_depth}")
        why[0] = 0
        self.engine = pylog_engine_new(_KINDS[kind], <unsigned>queue_depth, why, WHY_LEN)
        self.why = why.decode(errors="replace") + chosen_by
        if self.engine == NULL:
            raise OSError(self.why)
        self.kind = "io_uring" if pylog_engine_kind(self.engine) == PYLOG_ENGINE_URING \
            else "portable"

    def __dealloc__(self):
        # Waits for other threads' calls through .engine (they hold a reference).
        pylog_engine_free(self.engine)

    def __repr__(self):
        return f"<IoEngine {self.kind}: {self.why}>"

    def stats(self):
        """Counters since creation: a dict of writes, bytes_written, syncs,
        submissions (io_uring_submit calls; 0 for portable) and short_writes."""
        cdef pylog_engine_stats s
        pylog_engine_get_stats(self.engine, &s)
        return {"writes": s.writes, "bytes_written": s.bytes_written, "syncs": s.syncs,
                "submissions": s.submissions, "short_writes": s.short_writes}

    def _inject_fault(self, str where, int err):
        """Tests only: the next ``"submit"`` (io_uring_submit) or ``"wait"``
        (io_uring_wait_cqe) of this io_uring engine fails with errno ``err``
        without entering the kernel, breaking the ring as a real failure would."""
        if where not in ("submit", "wait"):
            raise ValueError(f"unknown fault point {where!r}: expected 'submit' or 'wait'")
        _check(pylog_engine_inject_fault(
            self.engine, PYLOG_ENGINE_FAULT_SUBMIT if where == "submit" else PYLOG_ENGINE_FAULT_WAIT,
            -err))

    def writev(self, int fd, buffers, int64_t pos, bint datasync=False):
        """Writes the concatenation of ``buffers`` (a sequence of contiguous
        bytes-like objects) at file position ``pos`` of ``fd``, then fdatasyncs
        ``fd`` when ``datasync``. Returns the byte count. Releases the GIL."""
        cdef Py_ssize_t n, i, held = 0
        cdef Py_buffer *views
        cdef iovec *iov
        cdef size_t total = 0
        cdef int rc
        cdef int flags = PYLOG_WRITE_DATASYNC if datasync else 0
        if isinstance(buffers, (bytes, bytearray, memoryview)):
            raise TypeError("buffers must be a sequence of bytes-like objects, not one buffer")
        seq = tuple(buffers)
        n = len(seq)
        if n > INT_MAX:
            raise OverflowError(f"{n} buffers is more than one call takes ({INT_MAX})")
        views = <Py_buffer *>PyMem_Malloc(<size_t>(n if n > 0 else 1) * sizeof(Py_buffer))
        iov = <iovec *>PyMem_Malloc(<size_t>(n if n > 0 else 1) * sizeof(iovec))
        try:
            if views == NULL or iov == NULL:
                raise MemoryError()
            for i in range(n):
                PyObject_GetBuffer(seq[i], &views[i], PyBUF_SIMPLE)
                held += 1
                iov[i].iov_base = views[i].buf
                iov[i].iov_len = <size_t>views[i].len
                total += <size_t>views[i].len
            with nogil:
                rc = pylog_engine_writev(self.engine, fd, iov, <int>n, pos, flags)
        finally:
            for i in range(held):
                PyBuffer_Release(&views[i])
            PyMem_Free(views)
            PyMem_Free(iov)
        _check(rc)
        return total

    def sync(self, fds, bint full=False):
        """fdatasyncs (fsyncs when ``full``) every fd in ``fds``; io_uring runs
        them concurrently. Every fd is attempted; raises OSError for the first
        failure. Releases the GIL."""
        cdef Py_ssize_t n, i
        cdef int *arr
        cdef int rc
        seq = tuple(fds)
        n = len(seq)
        if n > INT_MAX:
            raise OverflowError(f"{n} fds is more than one call takes ({INT_MAX})")
        arr = <int *>PyMem_Malloc(<size_t>(n if n > 0 else 1) * sizeof(int))
        if arr == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                arr[i] = seq[i]
            with nogil:
                rc = pylog_engine_sync(self.engine, arr, <int>n, full)
        finally:
            PyMem_Free(arr)
        _check(rc)
