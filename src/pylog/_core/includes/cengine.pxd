# C declarations of the I/O engine (io_engine.h): see that header for the contract.
from libc.stdint cimport int64_t, uint64_t
from posix.uio cimport iovec


cdef extern from "io_engine.h" nogil:
    ctypedef struct pylog_engine:
        pass

    enum:
        PYLOG_ENGINE_AUTO
        PYLOG_ENGINE_PORTABLE
        PYLOG_ENGINE_URING

    enum:
        PYLOG_WRITE_DATASYNC

    ctypedef struct pylog_engine_stats:
        uint64_t writes
        uint64_t bytes_written
        uint64_t syncs
        uint64_t submissions
        uint64_t short_writes

    pylog_engine *pylog_engine_new(int kind, unsigned queue_depth, char *why, size_t why_len)
    int pylog_engine_kind(const pylog_engine *e)
    int pylog_engine_writev(pylog_engine *e, int fd, const iovec *iov, int iovcnt,
                            int64_t pos, int flags)
    int pylog_engine_sync(pylog_engine *e, const int *fds, int n, int full)
    int pylog_engine_append_direct(pylog_engine *e, int fd, char *tail, size_t *tail_len,
                                   const iovec *iov, int iovcnt, int64_t pos, size_t align,
                                   unsigned pieces, int flags)
    long pylog_direct_alignment(int fd, char *why, size_t why_len)
    void pylog_engine_get_stats(pylog_engine *e, pylog_engine_stats *out)
    void pylog_engine_free(pylog_engine *e)
    int pylog_engine_uring_compiled()

    enum:
        PYLOG_ENGINE_FAULT_SUBMIT
        PYLOG_ENGINE_FAULT_WAIT
    int pylog_engine_inject_fault(pylog_engine *e, int where, int err)
