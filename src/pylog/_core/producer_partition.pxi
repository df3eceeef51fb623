# Included by producer.pyx: Kafka's default partitioner (murmur2.h), one key or a
# column at once, and send_batch's planning: each record's size and partition in one
# pass (plan_rows), rows grouped by partition and cut into chunks (plan_chunks), a
# partition's rows gathered (take_rows).

cdef extern from "murmur2.h" nogil:
    int32_t pylog_murmur2(const void *data, size_t length)
    int32_t pylog_key_partition(const void *key, size_t length, int32_t num_partitions)


def murmur2(data):
    """Kafka's murmur2 hash of a bytes-like object, as a signed 32-bit int
    (org.apache.kafka.common.utils.Utils.murmur2)."""
    cdef Py_buffer view
    cdef int32_t h
    if PyBytes_CheckExact(data):
        return pylog_murmur2(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        h = pylog_murmur2(view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return h


cpdef int32_t key_partition(object key, int32_t num_partitions) except -1:
    """The partition Kafka's default partitioner picks for a non-null key."""
    cdef Py_buffer view
    cdef int32_t p
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    if PyBytes_CheckExact(key):
        return pylog_key_partition(PyBytes_AS_STRING(key), <size_t>PyBytes_GET_SIZE(key), num_partitions)
    if isinstance(key, str):
        raise TypeError("a key is bytes (encode the string first)")
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        p = pylog_key_partition(view.buf, <size_t>view.len, num_partitions)
    finally:
        PyBuffer_Release(&view)
    return p


def partition_keys(keys, int32_t num_partitions):
    """Partitions of a column of keys: a list/tuple of bytes-like or None, or a
    pyarrow binary/string array (chunked too). Returns a numpy int32 array;
    -1 marks a null key (the caller's null-key policy decides those)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    if isinstance(keys, (list, tuple)):
        return _partition_sequence(keys, num_partitions)
    import pyarrow as pa
    if isinstance(keys, pa.ChunkedArray):
        if keys.num_chunks == 0:
            return np.empty(0, dtype=np.int32)
        return np.concatenate([partition_keys(c, num_partitions) for c in keys.chunks])
    if isinstance(keys, pa.Array):
        return _partition_arrow(keys, num_partitions)
    return _partition_sequence(list(keys), num_partitions)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef object _partition_sequence(object keys, int32_t n):
    cdef Py_ssize_t i, count = len(keys)
    out = np.empty(count, dtype=np.int32)
    cdef int32_t[::1] o = out
    for i in range(count):
        k = keys[i]
        o[i] = -1 if k is None else key_partition(k, n)
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
cdef object _partition_arrow(object arr, int32_t n):
    import pyarrow as pa
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        wide = False
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        wide = True
    else:
        raise TypeError(f"keys must be a binary or string Arrow array, not {t}")
    cdef Py_ssize_t i, count = len(arr), start = arr.offset
    out = np.empty(count, dtype=np.int32)
    cdef int32_t[::1] o = out
    bufs = arr.buffers()
    cdef const uint8_t[::1] validity = None
    if bufs[0] is not None and arr.null_count:
        validity = np.frombuffer(bufs[0], dtype=np.uint8)
    cdef const uint8_t[::1] data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None \
        else np.zeros(1, dtype=np.uint8)
    cdef const int32_t[::1] off32
    cdef const int64_t[::1] off64
    cdef const uint8_t *base = &data[0] if data.shape[0] else NULL
    cdef int64_t a, b
    if wide:
        off64 = np.frombuffer(bufs[1], dtype=np.int64)
    else:
        off32 = np.frombuffer(bufs[1], dtype=np.int32)
    with nogil:
        for i in range(count):
            if validity is not None and not (validity[(start + i) >> 3] >> ((start + i) & 7)) & 1:
                o[i] = -1
                continue
            if wide:
                a = off64[start + i]
                b = off64[start + i + 1]
            else:
                a = off32[start + i]
                b = off32[start + i + 1]
            o[i] = pylog_key_partition(base + a, <size_t>(b - a), n)
    return out


cdef void _group_rows(const int32_t *parts, Py_ssize_t n, int32_t null_partition,
                      int32_t num_partitions, int64_t *order, int64_t *bounds) noexcept nogil:
    """plan_chunks' stable counting sort of rows by partition into order[n] and
    bounds[num_partitions + 1] (rows of partition p: order[bounds[p]:bounds[p + 1]];
    a partition outside 0..num_partitions - 1, -1 for a null key, is null_partition)."""
    cdef Py_ssize_t i
    cdef int32_t p
    memset(bounds, 0, <size_t>(num_partitions + 1) * sizeof(int64_t))
    for i in range(n):
        p = parts[i]
        if p < 0 or p >= num_partitions:
            p = null_partition
        bounds[p + 1] += 1
    for p in range(num_partitions):
        bounds[p + 1] += bounds[p]
    for i in range(n):                  # place rows, reusing bounds[p] as the next slot of p
        p = parts[i]
        if p < 0 or p >= num_partitions:
            p = null_partition
        order[bounds[p]] = i
        bounds[p] += 1
    for p in range(num_partitions, 0, -1):
        bounds[p] = bounds[p - 1]
    bounds[0] = 0


cdef Py_ssize_t _cut_chunks(const int64_t *order, const int64_t *sizes, const int64_t *bounds,
                            int32_t num_partitions, int64_t limit, int64_t *cuts,
                            int64_t *too_large) noexcept nogil:
    """plan_chunks' cut: each partition's rows order[bounds[p]:bounds[p + 1]] in
    runs whose sizes sum to at most `limit` (greedy, as many rows as fit).
    Writes (partition, start, end, bytes) per chunk into `cuts` (room: see
    plan_chunks) and returns the chunk count, or -1 with *too_large the first
    row that does not fit alone."""
    cdef Py_ssize_t k = 0
    cdef int64_t i, start, end, acc, size
    cdef int32_t p
    for p in range(num_partitions):
        start, end = bounds[p], bounds[p + 1]
        if start == end:
            continue
        acc = 0
        for i in range(start, end):
            size = sizes[order[i]]
            if size > limit:
                too_large[0] = order[i]
                return -1
            if acc + size > limit:      # the chunk so far is full: cut before row i
                cuts[4 * k], cuts[4 * k + 1], cuts[4 * k + 2], cuts[4 * k + 3] = p, start, i, acc
                k += 1
                start, acc = i, 0
            acc += size
        cuts[4 * k], cuts[4 * k + 1], cuts[4 * k + 2], cuts[4 * k + 3] = p, start, end, acc
        k += 1
    return k


@cython.boundscheck(False)
@cython.wraparound(False)
def plan_chunks(parts, const int64_t[::1] sizes, int32_t null_partition, int32_t num_partitions,
                int64_t limit):
    """send_batch's plan of a call in one C pass: its rows grouped by partition
    (stable; ``parts`` None puts every row in `null_partition`, as -1 does for
    one row) and each partition's rows cut into chunks whose record sizes
    (each >= 0) sum to at most `limit`. Returns ``(order, chunks, too_large)``:
    chunk ``(p, start, end, bytes)`` holds the rows ``order[start:end]`` of
    partition p, in partition order; ``too_large`` is the first row larger than
    `limit` alone (-1 for none), and then `chunks` is empty."""
    cdef Py_ssize_t n = sizes.shape[0], k = 0, c, room
    cdef const int32_t[::1] pv
    if not 0 <= null_partition < num_partitions:
        raise ValueError(f"null_partition {null_partition} is not in 0..{num_partitions - 1}")
    if limit < 1:
        raise ValueError(f"limit {limit} is not positive")
    if parts is not None:
        pv = parts
        if pv.shape[0] != n:
            raise ValueError(f"{pv.shape[0]} partitions for {n} sizes")
    order = np.empty(n, dtype=np.int64)
    bounds = np.zeros(num_partitions + 1, dtype=np.int64)
    cdef int64_t[::1] o = order
    cdef int64_t[::1] b = bounds
    cdef int64_t too_large = -1, total = 0, negative = -1, i
    cdef bint grouped = parts is not None
    with nogil:
        for i in range(n):
            if sizes[i] < 0:
                negative = i
                break
            total += sizes[i]
    if negative >= 0:
        raise ValueError(f"record size {sizes[negative]} at row {negative} is negative")
    if n == 0:
        return order, [], -1
    # Greedy cuts: two neighbouring chunks of a partition hold more than `limit`
    # together, so a partition of B bytes has at most 2 * (B // limit) + 1 chunks.
    room = min(n, 2 * (total // limit) + num_partitions)
    cdef int64_t *cuts = <int64_t *>PyMem_Malloc(<size_t>(4 * room) * sizeof(int64_t))
    if cuts == NULL:
        raise MemoryError()
    try:
        with nogil:
            if not grouped:
                for i in range(n):
                    o[i] = i
                for i in range(null_partition + 1, num_partitions + 1):
                    b[i] = n
            else:
                _group_rows(&pv[0], n, null_partition, num_partitions, &o[0], &b[0])
            k = _cut_chunks(&o[0], &sizes[0], &b[0], num_partitions, limit, cuts, &too_large)
        if k < 0:
            return order, [], too_large
        return order, [(<int32_t>cuts[4 * c], cuts[4 * c + 1], cuts[4 * c + 2], cuts[4 * c + 3])
                       for c in range(k)], -1
    finally:
        PyMem_Free(cuts)


@cython.boundscheck(False)
@cython.wraparound(False)
def take_rows(list column, const int64_t[::1] rows):
    """column[rows] as a new tuple (the records of one partition, in order). A
    tuple, because the encoder keeps a tuple as it is and copies anything else."""
    cdef Py_ssize_t i, n = rows.shape[0], size = len(column)
    cdef tuple out = PyTuple_New(n)
    for i in range(n):
        if rows[i] < 0 or rows[i] >= size:
            raise IndexError(rows[i])
        item = column[rows[i]]
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    return out


cdef extern from "gather.h":
    Py_ssize_t pylog_plan_bytes(PyObject **values, PyObject **keys, Py_ssize_t n,
                                int32_t num_partitions, int64_t overhead, int64_t *sizes,
                                int32_t *parts, int64_t *total_bytes)
    PyObject **PySequence_Fast_ITEMS(object)


def plan_rows(values, keys, int32_t num_partitions, int64_t overhead):
    """send_batch's one pass over list columns of bytes/None: returns ``(sizes,
    parts, total)``, each record's key + value bytes + ``overhead`` (int64),
    its partition by Kafka's default partitioner (int32, -1 for a null key;
    None without keys or when ``num_partitions`` is 0) and the sum of sizes.
    Returns None when a column is not a list or holds another type: the caller
    then takes the general path (Arrow arrays, bytearrays, memoryviews)."""
    if type(values) is not list or (keys is not None and type(keys) is not list):
        return None
    cdef Py_ssize_t n = PyList_GET_SIZE(values)
    if keys is not None and PyList_GET_SIZE(keys) != n:
        return None
    sizes = np.empty(n, dtype=np.int64)
    parts = np.empty(n, dtype=np.int32) if keys is not None and num_partitions > 0 else None
    cdef int64_t[::1] s = sizes
    cdef int32_t[::1] o
    cdef int32_t *parts_out = NULL
    if parts is not None:
        o = parts
        parts_out = &o[0] if n else NULL
    cdef int64_t total = 0
    if n == 0:
        return sizes, parts, 0
    # No Python code runs from here on, so the item arrays stay valid.
    cdef Py_ssize_t done = pylog_plan_bytes(
        PySequence_Fast_ITEMS(values), PySequence_Fast_ITEMS(keys) if keys is not None else NULL,
        n, num_partitions, overhead, &s[0], parts_out, &total)
    if done < n:
        return None
    return sizes, parts, total


@cython.boundscheck(False)
@cython.wraparound(False)
def column_lengths(column):
    """Byte length of each entry of a list of bytes-like/None (0 for None), as int64."""
    cdef Py_ssize_t i, n = len(column)
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    for i in range(n):
        item = column[i]
        if PyBytes_CheckExact(item):
            o[i] = PyBytes_GET_SIZE(item)
        elif item is None:
            o[i] = 0
        else:
            o[i] = len(item)
    return out
