from libc.stdint cimport int64_t
from posix.uio cimport iovec

from pylog._core.includes.cengine cimport pylog_engine


cdef class IoEngine:
    # Other extensions (storage) call c_writev/c_sync without the GIL; they go
    # through this class's vtable, so io_engine.c is linked into one extension only.
    cdef pylog_engine *engine
    cdef readonly str kind
    cdef readonly str why

    cdef int c_writev(self, int fd, const iovec *iov, int iovcnt, int64_t pos, int flags) noexcept nogil
    cdef int c_append_direct(self, int fd, char *tail, size_t *tail_len, const iovec *iov,
                             int iovcnt, int64_t pos, size_t align, unsigned pieces,
                             int flags) noexcept nogil
    cdef int c_sync(self, const int *fds, int n, int full) noexcept nogil
