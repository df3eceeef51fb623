# cython: language_level=3, cdivision=True
"""Storage core: segment indexes, .log file I/O, append preparation, recovery.

The Python face of index.c, segment_io.c and append.c (docs/FORMAT.md,
sections 8-10). The segment and log layers (pylog/segment.py, pylog/log.py)
orchestrate these objects; nothing here knows about topics or configs,
except storage_fastappend.pxi, which runs the segment's and the Log's
append orchestration for the common case and names what it reads.

C functions return >= 0 or -errno; _raise_os() is the one place that turns
an errno into an exception. The GIL is released around every system call
that can block (writes, reads, syncs, recovery); index operations keep it,
which is also what serialises them.

Files joined here (one translation unit):
    storage_lock.pxi     LogLock: the Log's reentrant lock, taken from C by log_append
    storage_index.pxi    OffsetIndex, TimeIndex
    storage_append.pxi   prepare_append, PreparedAppend, the index rule of appends
    storage_logfile.pxi  LogFile: the .log file (append, read, walk, recover)
    storage_validate.pxi convert_client_batches: compressed batches checked, recompressed
    storage_fastappend.pxi the active segment's append and roll rule, and
                         _append_fast: Log.append's common case in one call (the one
                         place here that knows the Log's and LogSegment's attributes)
"""

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.errno cimport errno, EILSEQ, EIO
from libc.stdint cimport int16_t, int32_t, int64_t, uint64_t, INT32_MAX, INT64_MIN, INT64_MAX
from libc.string cimport memset, strerror
from posix.types cimport off_t
from posix.uio cimport iovec

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t c_sendfile "sendfile"(int out_fd, int in_fd, off_t *offset, size_t count)

from pylog._core.includes.ccore cimport pylog_status, PYLOG_ERR_CRC as PYLOG_ERR_CRC_CODE
from pylog._core.includes.ccore cimport (
    PYLOG_ATTR_COMPRESSION_MASK, PYLOG_ATTR_CONTROL, PYLOG_ATTR_TIMESTAMP_TYPE, PYLOG_LOG_OVERHEAD,
    PYLOG_ATTR_TRANSACTIONAL,
    PYLOG_MAGIC_OFFSET, PYLOG_OK, PYLOG_RECORDS_OFFSET, NOGIL_MIN_BYTES, PYLOG_ERR_TOO_LARGE,
    PYLOG_NO_TIMESTAMP, PYLOG_RECORD_BATCH_OVERHEAD, PYLOG_SEQUENCE_SPACE,
    pylog_batch_check, pylog_batch_header, pylog_batch_header_finish, pylog_records_validate,
    pylog_records_walk, pylog_records_walk_init, pylog_records_walk_piece)
from pylog._core.includes.cstorage cimport *
from pylog._core.includes.cengine cimport PYLOG_WRITE_DATASYNC
from pylog._core.engine cimport IoEngine
from pylog._core.engine import direct_alignment as _direct_alignment

import os as _os

from pylog.errors import (CorruptIndexError, CorruptRecordError, InvalidRecordError,
                          InvalidTimestampError, MessageTooLargeError)

from pylog import compression as _compression

cdef extern from "Python.h":
    ctypedef struct PyThreadState
    ctypedef struct PyInterpreterState
    PyThreadState *PyThreadState_Get()
    PyInterpreterState *PyInterpreterState_Head()
    PyInterpreterState *PyInterpreterState_Next(PyInterpreterState *interp)
    PyThreadState *PyInterpreterState_ThreadHead(PyInterpreterState *interp)
    PyThreadState *PyThreadState_Next(PyThreadState *tstate)
    object PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems)


cdef inline bint _gil_wanted_elsewhere() noexcept:
    """False when the calling thread is the one Python thread of the one
    interpreter: no other thread could take the GIL if CPU work released it,
    so the work keeps it (a thread attaching from C meanwhile waits for that
    work, microseconds). Blocking I/O releases the GIL regardless."""
    cdef PyThreadState *me = PyThreadState_Get()
    cdef PyInterpreterState *interp = PyInterpreterState_Head()
    return not (PyInterpreterState_Next(interp) == NULL
                and PyInterpreterState_ThreadHead(interp) == me and PyThreadState_Next(me) == NULL)


def gil_wanted_elsewhere():
    """Whether another Python thread exists that could take the GIL (what
    prepare_append asks before it validates 16 KiB or more without it)."""
    return _gil_wanted_elsewhere()


from pylog._core.includes.capi cimport pylog_import_crc_api, pylog_import_records_api

# CRC-32C and records_*.c live in pylog._core.crc and pylog._core.codec (core_api.h).
import pylog._core.crc  # noqa: F401 - loaded first: their capsules are looked up by attribute
import pylog._core.codec  # noqa: F401
from pylog._core.codec import upconvert as _upconvert

pylog_import_crc_api()
pylog_import_records_api()


cdef extern from "<fcntl.h>" nogil:
    int posix_fadvise(int fd, long offset, long length, int advice)
    int sync_file_range(int fd, long offset, long nbytes, unsigned int flags)
    int posix_fallocate(int fd, long offset, long length)
    int POSIX_FADV_DONTNEED
    unsigned int SYNC_FILE_RANGE_WRITE
    int O_RDWR, O_RDONLY, O_WRONLY, O_CREAT, O_CLOEXEC, O_DIRECT
    int open(const char *path, int flags, int mode)

cdef extern from "<unistd.h>" nogil:
    int close(int fd)
    int ftruncate(int fd, long length)
    int fdatasync(int fd)
    int fsync(int fd)

cdef extern from "<sys/stat.h>" nogil:
    cdef struct stat:
        long st_size
    int fstat(int fd, stat *buf)


cdef int _raise_os(int err, object path) except -1:
    """The one place a negative errno from the core becomes an exception."""
    err = -err if err < 0 else err
    raise OSError(err, strerror(err).decode(), path)


include "storage_lock.pxi"
include "storage_index.pxi"
include "storage_append.pxi"
include "storage_logfile.pxi"
include "storage_validate.pxi"
include "storage_fastappend.pxi"
