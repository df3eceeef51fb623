# cython: language_level=3
"""CRC-32C for Python: ``crc32c(data, crc=0)``. See crc32c.h."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport uint32_t

from pylog._core.includes.ccore cimport (
    pylog_crc32c_init, pylog_crc32c_extend, pylog_crc32c_extend_sw, pylog_crc32c_implementation)

pylog_crc32c_init()

# The one copy of the CRC-32C code and its chosen implementation: the other
# extensions call it through this capsule (core_api.h).
from cpython.pycapsule cimport PyCapsule_New
from pylog._core.includes.capi cimport PYLOG_CRC_CAPSULE, pylog_crc_api_table

_C_API = PyCapsule_New(<void *>&pylog_crc_api_table, PYLOG_CRC_CAPSULE, NULL)

# Releasing and re-taking the GIL is a fixed cost per call, a large share of a
# small call in cache. Below 64 KiB a call is too short for another thread to make
# use of the GIL, so it is kept (bench/bench_crc.py compares builds that always and
# never release it).
cdef enum:
    NOGIL_THRESHOLD = 65536


def crc32c(data, unsigned int crc=0):
    """Returns the CRC-32C of ``data`` (any contiguous buffer), continuing ``crc``.

    ``crc32c(b, crc32c(a)) == crc32c(a + b)``. The GIL is released for large inputs.
    """
    cdef Py_buffer view
    cdef uint32_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= NOGIL_THRESHOLD:
            with nogil:
                result = pylog_crc32c_extend(crc, view.buf, <size_t>view.len)
        else:
            result = pylog_crc32c_extend(crc, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c_portable(data, unsigned int crc=0):
    """The table-driven implementation, whatever the CPU offers (a test oracle)."""
    cdef Py_buffer view
    cdef uint32_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            result = pylog_crc32c_extend_sw(crc, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c_implementation():
    """Which implementation ``crc32c`` uses: ``"avx512-vpclmulqdq"``, ``"avx2-vpclmulqdq"``,
    ``"sse4.2"`` or ``"table"``."""
    return pylog_crc32c_implementation().decode()
