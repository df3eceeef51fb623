# Gathering encode_batch's inputs into the C shapes of records.h.
#
# Every object the C code will read with the GIL released is kept alive (and
# its buffer exported, so it cannot be resized) by the gatherer that owns the
# pointers: lists are copied into tuples first, other bytes-like items are
# held through Py_buffer views, Arrow arrays are referenced.


cdef extern from "gather.h" nogil:
    Py_ssize_t pylog_gather_bytes(PyObject **items, Py_ssize_t n, const char **ptrs,
                                  int64_t *lens, int64_t *data_bytes)
    Py_ssize_t pylog_gather_bytes_keep(PyObject **items, Py_ssize_t n, PyObject *keep,
                                       const char **ptrs, int64_t *lens, int64_t *data_bytes)
    Py_ssize_t pylog_gather_rows_keep(PyObject **items, Py_ssize_t size, const int64_t *rows,
                                      Py_ssize_t count, PyObject *keep, Py_ssize_t j0,
                                      const char **ptrs, int64_t *lens, int64_t *data_bytes)

cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object)


@cython.final
cdef class _Views:
    """Py_buffer views acquired on non-bytes items; released together."""

    cdef Py_buffer *views
    cdef Py_ssize_t count, capacity

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.count):
            PyBuffer_Release(&self.views[i])
        PyMem_Free(self.views)

    cdef Py_buffer *acquire(self, object item) except NULL:
        cdef Py_buffer *grown
        if self.count == self.capacity:
            self.capacity = self.capacity * 2 + 8
            grown = <Py_buffer *>PyMem_Realloc(self.views, <size_t>self.capacity * sizeof(Py_buffer))
            if grown == NULL:
                raise MemoryError()
            self.views = grown
        PyObject_GetBuffer(item, &self.views[self.count], PyBUF_SIMPLE)
        self.count += 1
        return &self.views[self.count - 1]


cdef inline int _bytes_like(object item, _Views views, const char **ptr, int64_t *length,
                            str name, Py_ssize_t i) except -1:
    """Points at a bytes-like item (bytes fast path, None -> null)."""
    cdef Py_buffer *view
    if PyBytes_CheckExact(item):
        ptr[0] = PyBytes_AS_STRING(item)
        length[0] = PyBytes_GET_SIZE(item)
    elif item is None:
        ptr[0] = NULL
        length[0] = -1
    elif isinstance(item, str):
        raise TypeError(f"{name}[{i}] is a str; Kafka {name} are bytes (encode the string first)")
    else:
        try:
            view = views.acquire(item)
        except TypeError:
            raise TypeError(f"{name}[{i}] is a {type(item).__name__}, not bytes-like or None") from None
        ptr[0] = <const char *>view.buf
        length[0] = view.len
    return 0


@cython.final
cdef class _Column:
    """One keys or values column as a pylog_column."""

    cdef pylog_column col
    cdef const char **ptrs
    cdef int64_t *lens
    cdef object keep
    cdef _Views views
    cdef int64_t data_bytes       # key or value bytes in all (at least; for the size bound)

    def __dealloc__(self):
        PyMem_Free(self.ptrs)
        PyMem_Free(self.lens)


cdef _Column _arrow_column(_Column c, object arr, Py_ssize_t n, str name):
    # (arr is an Arrow array: pyarrow and _ARROW_NARROW/_WIDE are loaded)
    if arr.type in _ARROW_NARROW:
        c.col.kind = PYLOG_COL_ARROW32
    elif arr.type in _ARROW_WIDE:
        c.col.kind = PYLOG_COL_ARROW64
    elif _pa.types.is_binary_view(arr.type) or _pa.types.is_string_view(arr.type) or \
            _pa.types.is_fixed_size_binary(arr.type):
        return _arrow_column(c, arr.cast(_pa.large_binary()), n, name)
    else:
        raise TypeError(f"{name} is an Arrow {arr.type} array; expected binary or string")
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries but there are {n} records")
    buffers = arr.buffers()
    c.keep = (arr, buffers)
    if buffers[0] is not None and arr.null_count > 0:
        c.col.validity = <const uint8_t *><uintptr_t>buffers[0].address
    if c.col.kind == PYLOG_COL_ARROW32:
        c.col.off32 = <const int32_t *><uintptr_t>buffers[1].address
    else:
        c.col.off64 = <const int64_t *><uintptr_t>buffers[1].address
    if buffers[2] is not None:
        c.col.data = <const char *><uintptr_t>buffers[2].address
    c.col.array_offset = arr.offset
    if n and c.col.kind == PYLOG_COL_ARROW32:
        c.data_bytes = <int64_t>c.col.off32[arr.offset + n] - c.col.off32[arr.offset]
    elif n:
        c.data_bytes = c.col.off64[arr.offset + n] - c.col.off64[arr.offset]
    return c


cdef _Column _pointer_column(object keep, Py_ssize_t n):
    """A column of n pointer/length entries (PYLOG_COL_PTRS) for the caller to
    fill; `keep` (a tuple, or a list nothing changes) holds the items alive
    while the encoder reads them."""
    cdef _Column c = _Column.__new__(_Column)
    memset(&c.col, 0, sizeof(pylog_column))
    c.keep = keep
    c.views = _Views.__new__(_Views)
    c.ptrs = <const char **>PyMem_Malloc(<size_t>(n + 1) * sizeof(char *))
    c.lens = <int64_t *>PyMem_Malloc(<size_t>(n + 1) * sizeof(int64_t))
    if c.ptrs == NULL or c.lens == NULL:
        raise MemoryError()
    c.col.kind = PYLOG_COL_PTRS
    c.col.ptrs = c.ptrs
    c.col.lens = c.lens
    return c


cdef _Column _column(object obj, Py_ssize_t n, str name):
    """Gathers a keys/values argument: None, a sequence of bytes-like/None, or Arrow."""
    cdef _Column c = _Column.__new__(_Column)
    cdef tuple seq
    cdef Py_ssize_t i
    memset(&c.col, 0, sizeof(pylog_column))
    if obj is None:
        c.col.kind = PYLOG_COL_NULL
        return c
    cdef int64_t data_bytes = 0
    cdef Py_ssize_t done
    # bytes and None items in one C loop (gather.h); anything else item by item.
    # The loop could run without the GIL, but a GIL handoff costs more than
    # the loop: releasing it here was slower at 1 and 2 threads on 2 vCPUs
    # (bench/bench_scaling.py).
    if type(obj) is list:
        # The common input first: no lookups of pyarrow's types, whose
        # reference counts two threads encoding at once would both write.
        if PyList_GET_SIZE(obj) != n:
            raise ValueError(f"{name} has {PyList_GET_SIZE(obj)} entries but there are {n} records")
        seq = _tuple_new(n)
        c = _pointer_column(seq, n)
        done = pylog_gather_bytes_keep(PySequence_Fast_ITEMS(obj), n, <PyObject *>seq, c.ptrs,
                                       c.lens, &data_bytes)
    else:
        pa = _pyarrow_if_loaded()
        if pa is not None:
            if isinstance(obj, pa.ChunkedArray):
                obj = obj.combine_chunks()
            if isinstance(obj, pa.Array):
                return _arrow_column(c, obj, n, name)
        seq = obj if type(obj) is tuple else tuple(obj)
        if PyTuple_GET_SIZE(seq) != n:
            raise ValueError(f"{name} has {PyTuple_GET_SIZE(seq)} entries but there are {n} records")
        c = _pointer_column(seq, n)
        done = pylog_gather_bytes(PySequence_Fast_ITEMS(seq), n, c.ptrs, c.lens, &data_bytes)
    for i in range(done, n):
        _bytes_like(<object>PyTuple_GET_ITEM(seq, i), c.views, &c.ptrs[i], &c.lens[i], name, i)
        if c.lens[i] > 0:
            data_bytes += c.lens[i]
    c.data_bytes = data_bytes
    return c


@cython.final
cdef class _Headers:
    """Record headers flattened into pylog_headers."""

    cdef pylog_headers h
    cdef int64_t *starts
    cdef const char **key_ptrs
    cdef int64_t *key_lens
    cdef const char **value_ptrs
    cdef int64_t *value_lens
    cdef list keep
    cdef _Views views
    cdef int64_t data_bytes       # header key and value bytes, plus their framing (bound)

    def __dealloc__(self):
        PyMem_Free(self.starts)
        PyMem_Free(self.key_ptrs)
        PyMem_Free(self.key_lens)
        PyMem_Free(self.value_ptrs)
        PyMem_Free(self.value_lens)


cdef _Headers _headers(object headers, Py_ssize_t n):
    """Gathers per-record lists of (str key, bytes-like/None value) pairs."""
    cdef _Headers hs = _Headers.__new__(_Headers)
    cdef Py_ssize_t i, k, total = 0, pos = 0
    cdef Py_ssize_t key_len
    cdef const char *key_ptr
    cdef tuple rows, row, pair
    memset(&hs.h, 0, sizeof(pylog_headers))
    if headers is None:
        return hs
    rows = tuple(None if r is None else tuple(r) for r in headers)
    if len(rows) != n:
        raise ValueError(f"headers has {len(rows)} entries but there are {n} records")
    for row in rows:
        if row is not None:
            total += len(row)
    if total == 0:
        return hs
    hs.keep = [rows]
    hs.views = _Views.__new__(_Views)
    hs.starts = <int64_t *>PyMem_Malloc(<size_t>(n + 1) * sizeof(int64_t))
    hs.key_ptrs = <const char **>PyMem_Malloc(<size_t>total * sizeof(char *))
    hs.key_lens = <int64_t *>PyMem_Malloc(<size_t>total * sizeof(int64_t))
    hs.value_ptrs = <const char **>PyMem_Malloc(<size_t>total * sizeof(char *))
    hs.value_lens = <int64_t *>PyMem_Malloc(<size_t>total * sizeof(int64_t))
    if not (hs.starts and hs.key_ptrs and hs.key_lens and hs.value_ptrs and hs.value_lens):
        raise MemoryError()
    for i in range(n):
        hs.starts[i] = pos
        row = <tuple>rows[i]
        if row is None:
            continue
        for k in range(len(row)):
            pair = tuple(row[k])
            if len(pair) != 2:
                raise ValueError(f"headers[{i}][{k}] is not a (key, value) pair")
            key = pair[0]
            if not isinstance(key, str):
                raise TypeError(f"headers[{i}][{k}] key is a {type(key).__name__}; "
                                f"Kafka header keys are str")
            hs.keep.append(pair)
            key_ptr = PyUnicode_AsUTF8AndSize(key, &key_len)
            hs.key_ptrs[pos] = key_ptr
            hs.key_lens[pos] = key_len
            _bytes_like(pair[1], hs.views, &hs.value_ptrs[pos], &hs.value_lens[pos],
                        u"header values", pos)
            hs.data_bytes += key_len + PYLOG_HEADER_MAX_FRAMING + \
                (hs.value_lens[pos] if hs.value_lens[pos] > 0 else 0)
            pos += 1
    hs.starts[n] = pos
    hs.h.starts = hs.starts
    hs.h.key_ptrs = hs.key_ptrs
    hs.h.key_lens = hs.key_lens
    hs.h.value_ptrs = hs.value_ptrs
    hs.h.value_lens = hs.value_lens
    return hs


cdef object _timestamps(object timestamps, Py_ssize_t n, pylog_record_input *inp,
                        bint check=True):
    """Sets inp's timestamps; returns the array that must stay alive (or None)."""
    cdef const int64_t[::1] view
    if timestamps is None:
        inp.timestamps = NULL
        inp.timestamp_const = <int64_t>(_time.time_ns() // 1_000_000)
        return None
    if isinstance(timestamps, int):
        if check and timestamps < NO_TIMESTAMP:
            raise InvalidTimestampError(
                f"timestamp {timestamps} is invalid: timestamps are milliseconds since the epoch, "
                f">= 0, or -1 for none")
        if not _INT64_MIN <= timestamps <= _INT64_MAX:
            raise _timestamp_overflow(u"timestamp", timestamps)
        inp.timestamps = NULL
        inp.timestamp_const = timestamps
        return None
    if isinstance(timestamps, _numpy().integer):      # a numpy scalar: one timestamp for all
        return _timestamps(int(timestamps), n, inp, check)
    if type(timestamps) is list and PyList_GET_SIZE(timestamps) == n and n:
        # A list of ints (a send_batch or encode_batch caller's column): one C
        # loop, not numpy's conversion of a list (an object call per item).
        return _list_timestamps(<list>timestamps, n, inp, check)
    if type(timestamps) is _ndarray and n and _native_int64(timestamps, n, inp):
        if check:
            _check_timestamps(inp.timestamps, n)
        return timestamps
    try:
        np = _numpy()
        arr = np.ascontiguousarray(timestamps, dtype=np.int64)
    except OverflowError:
        raise _first_overflow(timestamps) from None
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"timestamps has shape {arr.shape} but there are {n} records")
    if n == 0:
        inp.timestamps = NULL
        inp.timestamp_const = NO_TIMESTAMP
        return arr
    view = arr
    if check:
        _check_timestamps(&view[0], n)
    inp.timestamps = &view[0]
    return arr


cdef object _INT64_MIN = -(1 << 63), _INT64_MAX = (1 << 63) - 1


cdef object _timestamp_overflow(str what, object value):
    """The error for a timestamp no int64 holds (Kafka's timestamps are int64 ms)."""
    return InvalidTimestampError(
        f"{what} = {value} is invalid: timestamps are milliseconds since the epoch, a "
        f"signed 64-bit integer (at most {_INT64_MAX})")


cdef object _first_overflow(object timestamps):
    """_timestamp_overflow for the first item of `timestamps` outside int64 (a cold
    path: numpy's conversion only says some item was)."""
    for i, value in enumerate(timestamps):
        try:
            value = _operator.index(value)
        except TypeError:
            continue
        if not _INT64_MIN <= value <= _INT64_MAX:
            return _timestamp_overflow(f"timestamps[{i}]", value)
    return OverflowError("timestamps: a value is outside the int64 range")


cdef bint _native_int64(object arr, Py_ssize_t n, pylog_record_input *inp) except -1:
    """Points inp's timestamps at an ndarray's own n native int64s, when it is
    one contiguous dimension of them, through its buffer (numpy's
    ascontiguousarray and a typed memoryview cost attribute lookups and calls
    on every call, on objects two encoding threads share). False: any
    other array, for ascontiguousarray. The caller keeps `arr` referenced, as
    a memoryview on the same array would (an array referenced elsewhere
    cannot be resized)."""
    cdef Py_buffer view
    cdef bint native
    try:
        PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except (BufferError, ValueError):
        return False                    # not contiguous (numpy raises ValueError)
    native = view.ndim == 1 and view.itemsize == 8 and view.len == n * 8 and \
        view.format != NULL and view.format[0] in (b'@', b'=', b'<', b'l', b'q') and \
        view.format[len(view.format) - 1] in (b'l', b'q')
    if native:
        inp.timestamps = <const int64_t *>view.buf
    PyBuffer_Release(&view)
    return native


cdef int _check_timestamps(const int64_t *ts, Py_ssize_t n) except -1:
    """Refuses a timestamp below -1 (NO_TIMESTAMP), naming the first. A C loop,
    not arr.min(): numpy's reduction costs microseconds and drops and retakes
    the GIL, a convoy when threads encode at once."""
    cdef Py_ssize_t i
    for i in range(n):
        if ts[i] < -1:
            raise InvalidTimestampError(
                f"timestamps[{i}] = {ts[i]} is invalid: timestamps are milliseconds since "
                f"the epoch, >= 0, or -1 for none")
    return 0


cdef object _list_timestamps(list timestamps, Py_ssize_t n, pylog_record_input *inp, bint check):
    """_timestamps for a list of n ints: an int64 array filled in one C loop (an
    item that is not an int falls back to numpy's conversion, which names it)."""
    np = _numpy()
    arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] view = arr
    cdef Py_ssize_t i
    cdef PyObject *item
    cdef bint exact = True
    try:                                # (entered once: not per item)
        for i in range(n):
            item = PyList_GET_ITEM(timestamps, i)
            if not PyLong_CheckExact(<object>item):
                exact = False
                break
            # long is int64 on Linux; PyLong_AsLongLong takes CPython's slow path
            # for multi-digit ints. OverflowError past int64, which names nothing.
            view[i] = PyLong_AsLong(<object>item)
    except OverflowError:
        raise _timestamp_overflow(f"timestamps[{i}]", timestamps[i]) from None
    if not exact:
        return _timestamps(tuple(timestamps), n, inp, check)
    if check:
        _check_timestamps(&view[0], n)
    inp.timestamps = &view[0]
    return arr


cdef object _offset_deltas(object deltas, Py_ssize_t n, pylog_record_input *inp):
    """Explicit offset deltas (compacted or up-converted data); strictly increasing."""
    cdef const int32_t[::1] view
    cdef Py_ssize_t i
    if deltas is None:
        inp.offset_deltas = NULL
        return None
    np = _numpy()
    arr = np.ascontiguousarray(deltas, dtype=np.int32)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"offset_deltas has shape {arr.shape} but there are {n} records")
    if n == 0:
        return arr
    view = arr
    if view[0] < 0:
        raise ValueError(f"offset_deltas[0] is {view[0]}; deltas cannot be negative")
    for i in range(1, n):
        if view[i] <= view[i - 1]:
            raise ValueError(f"offset_deltas must strictly increase: [{i - 1}]={view[i - 1]}, "
                             f"[{i}]={view[i]}")
    inp.offset_deltas = &view[0]
    return arr
