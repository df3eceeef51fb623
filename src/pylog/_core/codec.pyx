# cython: language_level=3, cdivision=True
"""Record batch v2 codec: the Python face of records_*.c.

See docs/FORMAT.md for every byte. This module moves Python objects in and
out of the C codec; the C code runs with the GIL released. Public names are
re-exported by :mod:`pylog.records`.

Files joined here (one translation unit):
    codec_input.pxi   gathering values/keys/headers/timestamps into C arrays
    codec_encode.pxi  encode_batch, encode_control_batch
    codec_decode.pxi  iter_batches, RecordBatch, Record, scan_batches
    codec_arrow.pxi   decode_arrow
    codec_legacy.pxi  magic 0/1 message sets, up-conversion to v2
"""

cimport cython
from cpython.buffer cimport (PyObject_CheckBuffer, PyObject_GetBuffer, PyBuffer_Release,
                             PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_SIMPLE)
from cpython.bytes cimport (
    PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact)
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLong, PyLong_CheckExact
from cpython.mem cimport PyMem_Malloc, PyMem_Free, PyMem_Realloc, PyMem_RawMalloc, PyMem_RawFree
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t, INT32_MAX
from libc.string cimport memcpy, memset

from pylog._core.includes.ccore cimport *

import operator as _operator
import sys as _sys
import time as _time

from pylog import compression as _compression
from pylog.errors import (
    CorruptRecordError, InvalidRecordError, InvalidTimestampError, MessageTooLargeError,
    RecordListTooLargeError, UnsupportedCompressionTypeError)

# CRC-32C lives in pylog._core.crc; records_*.c live here, and storage calls them
# through this module's capsule (core_api.h).
from cpython.pycapsule cimport PyCapsule_New
from pylog._core.includes.capi cimport (PYLOG_RECORDS_CAPSULE, pylog_import_crc_api,
                                        pylog_records_api_table)

import pylog._core.crc  # no-cython-lint: unused, loaded first: its capsule is looked up by attribute

pylog_import_crc_api()

# numpy and pyarrow are imported on first use, once, not with this module: a
# process that reads a log's batches (pylog's commands, the broker's fetches)
# needs neither. Each is a module-level object after its first use.
cdef object _np = None
cdef object _ndarray = None             # numpy.ndarray, set with _np
cdef object _pa = None


cdef object _numpy():
    global _np, _ndarray
    if _np is None:
        import numpy
        _ndarray = numpy.ndarray
        _np = numpy
    return _np


cdef object _pyarrow():
    """pyarrow, with the codec's Arrow types built (codec_arrow.pxi)."""
    if _pa is None:
        _load_arrow()
    return _pa


cdef object _pyarrow_if_loaded():
    """pyarrow when some module has imported it, else None: no object is an
    Arrow array before pyarrow is imported, so an input's type check need not
    import it."""
    if _pa is None and "pyarrow" in _sys.modules:
        _load_arrow()
    return _pa

_C_API = PyCapsule_New(<void *>&pylog_records_api_table, PYLOG_RECORDS_CAPSULE, NULL)

# Kafka names for the timestamp type bit.
CREATE_TIME = "create"
LOG_APPEND_TIME = "log_append"
NO_TIMESTAMP = PYLOG_NO_TIMESTAMP
RECORD_BATCH_OVERHEAD = PYLOG_RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = PYLOG_LOG_OVERHEAD

cdef enum:
    EXACT_SIZE_BYTES = 131072    # glibc's default mmap threshold: bigger outputs are sized exactly

cdef tuple _EMPTY = ()


cdef object _corrupt(pylog_status *st, Py_ssize_t batch_pos, Py_ssize_t field_base=-1,
                     str inside=None):
    """Builds the CorruptRecordError for a failed C check of the batch at `batch_pos`.

    Every message starts "batch at byte N: " with N the batch's position in
    the caller's buffer, and ``position`` is N, where a log would be cut.
    st.position is relative to `field_base` (the batch itself by default);
    `inside` names the buffer it points into when that is not the caller's
    (decompressed data): the byte is then given relative to it.
    """
    if field_base < 0:
        field_base = batch_pos
    cdef int64_t at = field_base + st.position
    cdef str where = f"byte {at}" if inside is None else f"byte {at} {inside}"
    cdef str detail = st.detail.decode() if st.detail != NULL else u""
    if st.code == PYLOG_ERR_CRC:
        return _batch_error(
            batch_pos, f"checksum mismatch{'' if inside is None else ' at ' + where}: "
            f"stored crc = 0x{st.stored_crc:08x}, "
            f"computed crc = 0x{st.computed_crc:08x}", stored_crc=st.stored_crc,
            computed_crc=st.computed_crc)
    if st.code == PYLOG_ERR_LENGTH:
        return _batch_error(batch_pos, f"length {st.value} at {where} is below the minimum "
                                       f"{st.limit} for its format")
    if st.code == PYLOG_ERR_MAGIC:
        return _batch_error(batch_pos, f"unknown magic {st.value} at {where} (expected 0, 1 or 2)")
    if st.code == PYLOG_ERR_HEADER:
        return _batch_error(batch_pos, f"invalid {detail} {st.value} at {where}")
    if st.code == PYLOG_ERR_COUNT:
        if u"fewer" in detail:
            return _batch_error(batch_pos, f"declares {st.limit} records but its records section "
                                           f"ends after {st.value}, at {where}")
        return _batch_error(batch_pos, f"{st.value} bytes left after its {st.limit} records, "
                                       f"at {where}")
    if st.code == PYLOG_ERR_RECORD:
        return _batch_error(batch_pos, f"malformed record at {where}: bad {detail}")
    if st.code == PYLOG_INCOMPLETE:
        return _batch_error(batch_pos, f"incomplete: {st.value} bytes available, {st.limit} needed")
    return _batch_error(batch_pos, f"corrupt at {where} (code {st.code})")


cdef inline int64_t _last_offset(const pylog_batch_header *h) noexcept nogil:
    """A v2 batch's base_offset + last_offset_delta, in unsigned arithmetic: a damaged
    base offset (the CRC does not cover it) wraps instead of overflowing."""
    return <int64_t>(<uint64_t>h.base_offset + <uint64_t>h.last_offset_delta)


cdef object _batch_error(Py_ssize_t batch_pos, str problem, stored_crc=None, computed_crc=None):
    """CorruptRecordError "batch at byte N: <problem>" with position N."""
    return CorruptRecordError(f"batch at byte {batch_pos}: {problem}", position=batch_pos,
                              stored_crc=stored_crc, computed_crc=computed_crc)


cdef bytes _decompress_at(int codec, object data, Py_ssize_t batch_pos, object max_bytes=None):
    """Decompresses a batch's records (or a legacy wrapper's value); errors name the batch.
    With `max_bytes`, in pieces, refusing more output (MessageTooLargeError) as it comes."""
    try:
        return _compression.decompress(codec, data, max_bytes)
    except (CorruptRecordError, UnsupportedCompressionTypeError) as exc:
        raise _batch_error(batch_pos, str(exc)) from exc
    except MessageTooLargeError as exc:
        raise MessageTooLargeError(f"batch at byte {batch_pos}: {exc}") from None


@cython.final
@cython.no_gc_clear
cdef class _Buffer:
    """A Py_buffer held for as long as batches decoded from it are alive."""

    cdef Py_buffer view
    cdef bint acquired
    cdef readonly object obj

    def __cinit__(self, obj):
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
        self.acquired = True
        self.obj = obj

    def __dealloc__(self):
        if self.acquired:
            PyBuffer_Release(&self.view)
            self.acquired = False

    cdef inline const char *ptr(self) noexcept nogil:
        return <const char *>self.view.buf

    cdef inline Py_ssize_t size(self) noexcept nogil:
        return self.view.len


include "codec_input.pxi"
include "codec_encode.pxi"
include "codec_decode.pxi"
include "codec_arrow.pxi"
include "codec_legacy.pxi"
