# cython: language_level=3
"""Producer hot paths: Kafka's murmur2 partitioning and the accumulator.

``murmur2`` / ``key_partition`` / ``partition_keys`` reproduce the Java
client's default partitioner (murmur2.h), one key or a whole column at once.
``Accumulator.append`` is the per-record step of ``Producer.send``: it adds a
record to its partition's open batch and creates the record's future, with no
Python-level work per record beyond the call itself. ``ProducerBase`` holds
send_batch's direct path (the caller appends its own batches) and its common
case in one call.

One module, four parts by job (included below): partitioning and send_batch's
planning, the FastLock, the accumulator (batches, futures, topic state) and the
direct path. Bounds and negative-index checks are off only in the functions
that index buffers in a loop (their indexes are in range by construction).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_INCREF
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t
from libc.string cimport memcpy, memset

from pylog._core.includes.ccore cimport PYLOG_RECORD_BATCH_OVERHEAD as BATCH_OVERHEAD
from pylog._core.includes.ccore cimport PYLOG_SEQUENCE_SPACE

from concurrent.futures import Future as _Future

from pylog._core.codec import _encode_sealed, encode_batch as _encode_batch
from pylog._core.storage import LogState as _LogState

import numpy as np

include "producer_partition.pxi"
include "producer_lock.pxi"
include "producer_accumulator.pxi"
include "producer_direct.pxi"
