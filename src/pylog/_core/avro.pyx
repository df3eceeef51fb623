# cython: boundscheck=False, wraparound=False, cdivision=True
"""Avro binary values decoded by a schema into Arrow column buffers, in one C pass.

Avro's binary encoding has no per-value framing: a value that is too short
or too long cannot be told apart once values are concatenated, so each value
is decoded alone (GIL released) and must be exactly one well-formed datum of
the schema; if not, it gets a verdict (why) and the byte where it failed, and
its partial output is rolled back. pylog.table.schema_avro compiles the
schema and turns the buffers into Arrow arrays.

The program is the schema as flat int64 triples in preorder:
``(op, arg, width)``, where width counts the node's own ints and those of its
children, which follow it: a record's fields (arg = count), an array's item,
a map's value (keys are strings), a union's branches (arg = count: the
compiler admits only [null, T] and [T, null] unions). fixed has arg = size,
enum arg = the number of symbols; a decimal is OP_DECIMAL_BYTES or
OP_DECIMAL_FIXED (arg = size), decoded to decimal128's 16 little-endian bytes.
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t

cdef extern from "utf8.h" nogil:
    int pylog_utf8_seq(const unsigned char *p, int64_t avail)

# Program ops (pylog.table.schema_avro.OPS holds the same numbers).
cdef enum:
    OP_NULL = 0
    OP_BOOLEAN = 1
    OP_INT = 2
    OP_LONG = 3
    OP_FLOAT = 4
    OP_DOUBLE = 5
    OP_BYTES = 6
    OP_STRING = 7
    OP_FIXED = 8
    OP_ENUM = 9
    OP_RECORD = 10
    OP_ARRAY = 11
    OP_MAP = 12
    OP_UNION = 13

# Verdicts (pylog.table.schema_avro.VERDICTS holds their texts).
cdef enum:
    V_OK = 0
    V_TRUNCATED = 1
    V_VARINT = 2
    V_LENGTH = 3
    V_UTF8 = 4
    V_UNION = 5
    V_ENUM = 6
    V_BOOLEAN = 7
    V_TRAILING = 8
    V_INT_RANGE = 9
    V_COUNT = 10

ctypedef struct Cursor:
    const uint8_t *p
    int64_t pos
    int64_t end
    int verdict


cdef inline int64_t read_long(Cursor *c) noexcept nogil:
    """A zigzag varint; sets V_TRUNCATED or V_VARINT (over 10 bytes) on failure."""
    cdef uint64_t acc = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if c.pos >= c.end:
            c.verdict = V_TRUNCATED
            return 0
        b = c.p[c.pos]
        c.pos += 1
        acc |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 63:
            c.verdict = V_VARINT
            return 0
    return <int64_t>((acc >> 1) ^ (<uint64_t>0 - (acc & 1)))


# -- decoding into Arrow buffers -----------------------------------------------
#
# decode_values walks each value and appends every datum to the column of its
# program node: one Column per node (a union has
# none: its non-null branch's column takes the value, or a null). A value
# that fails is rolled back: every column is cut back to its length before the
# value, so the columns hold exactly the good values, in order.

cdef extern from "stdlib.h" nogil:
    void *realloc(void *p, size_t size)
    void free(void *p)

cdef extern from "string.h" nogil:
    void *memcpy(void *dst, const void *src, size_t n)
    void *memset(void *s, int c, size_t n)

cdef enum:
    OP_DECIMAL_BYTES = 14   # bytes with logicalType decimal: 16-byte little-endian out
    OP_DECIMAL_FIXED = 15   # fixed with logicalType decimal (arg = size <= 16)
    V_DECIMAL = 11          # a decimal wider than 16 bytes
    V_NO_MEMORY = 12
    V_TOO_LARGE = 13        # a column past 2 GiB (int32 offsets)
    INT32_LIMIT = 2147483647

ctypedef struct Buf:
    char *p
    int64_t len
    int64_t cap

ctypedef struct Column:
    Buf valid       # one byte per element: 1 valid, 0 null
    Buf data        # fixed-width values, or the bytes of strings/bytes/fixed
    Buf offs        # int32 offsets: strings/bytes/fixed, arrays, maps (starts [0])
    Buf key_offs    # a map's keys: int32 offsets (starts [0]) and bytes
    Buf key_data
    int64_t n


cdef inline int reserve(Buf *b, int64_t extra) noexcept nogil:
    cdef int64_t cap
    cdef char *p
    if b.len + extra <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 256
    while cap < b.len + extra:
        cap *= 2
    p = <char *>realloc(b.p, <size_t>cap)
    if p == NULL:
        return -1
    b.p = p
    b.cap = cap
    return 0


cdef inline int push(Buf *b, const void *src, int64_t n) noexcept nogil:
    if reserve(b, n):
        return -1
    memcpy(b.p + b.len, src, <size_t>n)
    b.len += n
    return 0


cdef inline int push_zeros(Buf *b, int64_t n) noexcept nogil:
    if reserve(b, n):
        return -1
    memset(b.p + b.len, 0, <size_t>n)
    b.len += n
    return 0


cdef inline int push_i32(Buf *b, int64_t v) noexcept nogil:
    cdef int32_t x = <int32_t>v
    return push(b, &x, 4)


cdef inline int64_t last_i32(Buf *b) noexcept nogil:
    return (<int32_t *>(b.p + b.len - 4))[0]


ctypedef struct Decoder:
    const int64_t *program
    Column *cols
    Cursor c


cdef inline Column *col_of(Decoder *d, const int64_t *node) noexcept nogil:
    return &d.cols[(node - d.program) // 3]


cdef inline void fail(Decoder *d, int verdict) noexcept nogil:
    if not d.c.verdict:
        d.c.verdict = verdict


cdef int fixed_width(int64_t op) noexcept nogil:
    if op == OP_BOOLEAN:
        return 1
    if op == OP_INT or op == OP_FLOAT or op == OP_ENUM:
        return 4
    if op == OP_LONG or op == OP_DOUBLE:
        return 8
    if op == OP_DECIMAL_BYTES or op == OP_DECIMAL_FIXED:
        return 16
    return 0


cdef const int64_t *non_null_branch(const int64_t *node) noexcept nogil:
    """A union's non-null branch (the compiler admits [null, T] and [T, null])."""
    cdef const int64_t *child = node + 3
    if child[0] == OP_NULL:
        child += child[2]
    return child


cdef void put_null(Decoder *d, const int64_t *node) noexcept nogil:
    """Appends a null to the column of `node` (and its children: Arrow's
    children of a struct hold an element for each of the struct's)."""
    cdef int64_t op = node[0]
    cdef Column *col
    cdef const int64_t *child
    cdef int64_t _i, w
    if op == OP_UNION:
        put_null(d, non_null_branch(node))
        return
    if op == OP_NULL:
        return
    col = col_of(d, node)
    col.n += 1
    if push_zeros(&col.valid, 1):
        fail(d, V_NO_MEMORY)
        return
    w = fixed_width(op)
    if w:
        if push_zeros(&col.data, w):
            fail(d, V_NO_MEMORY)
    elif op == OP_RECORD:
        child = node + 3
        for _i in range(node[1]):
            put_null(d, child)
            child += child[2]
    else:                        # strings, bytes, fixed, arrays, maps: an empty slot
        if push_i32(&col.offs, last_i32(&col.offs)):
            fail(d, V_NO_MEMORY)


cdef inline void put_bytes(Decoder *d, Buf *offs, Buf *data, int64_t n, bint utf8) noexcept nogil:
    """Moves n bytes from the cursor into data and closes the slot in offs."""
    cdef int64_t i, stop
    cdef int k
    if n < 0:
        fail(d, V_LENGTH)
        return
    if d.c.end - d.c.pos < n:
        fail(d, V_TRUNCATED)
        return
    if utf8:
        i = d.c.pos
        stop = d.c.pos + n
        while i < stop:
            k = pylog_utf8_seq(d.c.p + i, stop - i)
            if k == 0:
                d.c.pos = i
                fail(d, V_UTF8)
                return
            i += k
    if data.len + n > INT32_LIMIT:
        fail(d, V_TOO_LARGE)
        return
    if push(data, d.c.p + d.c.pos, n) or push_i32(offs, data.len):
        fail(d, V_NO_MEMORY)
        return
    d.c.pos += n


cdef void put(Decoder *d, const int64_t *node) noexcept nogil:
    """Decodes one datum of `node` from the cursor into its column."""
    cdef int64_t op = node[0]
    cdef int64_t arg = node[1]
    cdef int64_t n, i, _k, v, count
    cdef uint8_t dec[16]
    cdef uint8_t fill
    cdef Column *col
    cdef const int64_t *child
    cdef Cursor *c = &d.c
    if op == OP_NULL:
        return
    if op == OP_UNION:
        v = read_long(c)
        if c.verdict:
            return
        if v < 0 or v >= arg:
            fail(d, V_UNION)
            return
        child = node + 3
        if v == 1:
            child += child[2]
        if child[0] == OP_NULL:
            put_null(d, non_null_branch(node))
        else:
            put(d, child)
        return
    col = col_of(d, node)
    col.n += 1
    if push(&col.valid, b"\x01", 1):
        fail(d, V_NO_MEMORY)
        return
    if op == OP_BOOLEAN:
        if c.pos >= c.end:
            fail(d, V_TRUNCATED)
        elif c.p[c.pos] > 1:
            fail(d, V_BOOLEAN)
        elif push(&col.data, c.p + c.pos, 1):
            fail(d, V_NO_MEMORY)
        else:
            c.pos += 1
    elif op == OP_INT or op == OP_ENUM:
        v = read_long(c)
        if c.verdict:
            return
        if op == OP_INT and (v < -2147483648 or v > 2147483647):
            fail(d, V_INT_RANGE)
        elif op == OP_ENUM and (v < 0 or v >= arg):
            fail(d, V_ENUM)
        elif push_i32(&col.data, v):
            fail(d, V_NO_MEMORY)
    elif op == OP_LONG:
        v = read_long(c)
        if not c.verdict and push(&col.data, &v, 8):
            fail(d, V_NO_MEMORY)
    elif op == OP_FLOAT or op == OP_DOUBLE:
        n = 4 if op == OP_FLOAT else 8
        if c.end - c.pos < n:
            fail(d, V_TRUNCATED)
        elif push(&col.data, c.p + c.pos, n):
            fail(d, V_NO_MEMORY)
        else:
            c.pos += n
    elif op == OP_BYTES or op == OP_STRING:
        n = read_long(c)
        if not c.verdict:
            put_bytes(d, &col.offs, &col.data, n, op == OP_STRING)
    elif op == OP_FIXED:
        put_bytes(d, &col.offs, &col.data, arg, False)
    elif op == OP_DECIMAL_BYTES or op == OP_DECIMAL_FIXED:
        if op == OP_DECIMAL_BYTES:
            n = read_long(c)
            if c.verdict:
                return
        else:
            n = arg
        if n < 0:
            fail(d, V_LENGTH)
        elif c.end - c.pos < n:
            fail(d, V_TRUNCATED)
        elif n > 16:
            fail(d, V_DECIMAL)
        else:
            # big-endian two's complement -> 16 bytes little-endian, sign-extended
            fill = 0xFF if n and (c.p[c.pos] & 0x80) else 0
            memset(dec, fill, 16)
            for i in range(n):
                dec[i] = c.p[c.pos + n - 1 - i]
            c.pos += n
            if push(&col.data, dec, 16):
                fail(d, V_NO_MEMORY)
    elif op == OP_RECORD:
        child = node + 3
        for _k in range(arg):
            put(d, child)
            if c.verdict:
                return
            child += child[2]
    elif op == OP_ARRAY or op == OP_MAP:
        count = last_i32(&col.offs)
        while True:
            n = read_long(c)
            if c.verdict:
                return
            if n == 0:
                break
            if n < 0:
                n = -n
                read_long(c)
                if c.verdict:
                    return
            if n > c.end - c.pos and not (op == OP_ARRAY and node[3] == OP_NULL):
                fail(d, V_COUNT)
                return
            if count + n > INT32_LIMIT:
                fail(d, V_TOO_LARGE)
                return
            for _k in range(n):
                if op == OP_MAP:
                    v = read_long(c)
                    if c.verdict:
                        return
                    put_bytes(d, &col.key_offs, &col.key_data, v, True)
                    if c.verdict:
                        return
                put(d, node + 3)
                if c.verdict:
                    return
            count += n
        if push_i32(&col.offs, count):
            fail(d, V_NO_MEMORY)
    else:
        fail(d, V_LENGTH)


cdef inline void mark(Column *cols, Py_ssize_t ncols, int64_t *saved) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(ncols):
        saved[6 * k] = cols[k].valid.len
        saved[6 * k + 1] = cols[k].data.len
        saved[6 * k + 2] = cols[k].offs.len
        saved[6 * k + 3] = cols[k].key_offs.len
        saved[6 * k + 4] = cols[k].key_data.len
        saved[6 * k + 5] = cols[k].n


cdef inline void rollback(Column *cols, Py_ssize_t ncols, const int64_t *saved) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(ncols):
        cols[k].valid.len = saved[6 * k]
        cols[k].data.len = saved[6 * k + 1]
        cols[k].offs.len = saved[6 * k + 2]
        cols[k].key_offs.len = saved[6 * k + 3]
        cols[k].key_data.len = saved[6 * k + 4]
        cols[k].n = saved[6 * k + 5]


cdef bytes take(Buf *b):
    return b.p[:b.len] if b.len else b""


def decode_values(const int64_t[::1] program, const uint8_t[::1] data,
                  const int64_t[::1] starts, const int64_t[::1] ends,
                  int8_t[::1] verdicts, int64_t[::1] where):
    """Decodes values ``data[starts[i]:ends[i]]`` by `program` into columns, one
    per program node (index = node position // 3): a list of
    ``(valid, data, offsets, key_offsets, key_data, length)`` bytes. A value
    that is not exactly one datum is left out (its columns rolled back) and
    gets its verdict (V_*) and the byte position where it failed."""
    cdef Py_ssize_t n = starts.shape[0]
    cdef Py_ssize_t ncols = program.shape[0] // 3
    cdef Py_ssize_t i, k
    cdef Decoder d
    cdef Column *cols
    cdef int64_t *saved
    cdef int oom = 0
    if ends.shape[0] != n or verdicts.shape[0] < n or where.shape[0] < n:
        raise ValueError(f"decode_values: {n} starts, {ends.shape[0]} ends, "
                         f"{verdicts.shape[0]} verdicts, {where.shape[0]} positions")
    if program.shape[0] < 3 or program[2] != program.shape[0]:
        raise ValueError("decode_values: the program's root does not span it")
    for i in range(n):
        if starts[i] < 0 or starts[i] > ends[i] or ends[i] > data.shape[0]:
            raise ValueError(f"decode_values: value {i} is not inside the data")
    cols = <Column *>realloc(NULL, <size_t>(ncols * sizeof(Column)))
    saved = <int64_t *>realloc(NULL, <size_t>(ncols * 6 * sizeof(int64_t)))
    if cols == NULL or saved == NULL:
        free(cols)
        free(saved)
        raise MemoryError()
    memset(cols, 0, <size_t>(ncols * sizeof(Column)))
    try:
        with nogil:
            for k in range(ncols):
                if push_i32(&cols[k].offs, 0) or push_i32(&cols[k].key_offs, 0):
                    oom = 1
            d.program = &program[0]
            d.cols = cols
            for i in range(n):
                if oom:
                    break
                mark(cols, ncols, saved)
                d.c.p = &data[0] if data.shape[0] else NULL
                d.c.pos = starts[i]
                d.c.end = ends[i]
                d.c.verdict = V_OK
                put(&d, d.program)
                if d.c.verdict == V_OK and d.c.pos != d.c.end:
                    d.c.verdict = V_TRAILING
                if d.c.verdict == V_NO_MEMORY:
                    oom = 1
                if d.c.verdict != V_OK:
                    rollback(cols, ncols, saved)
                verdicts[i] = <int8_t>d.c.verdict
                where[i] = d.c.pos - starts[i]
        if oom:
            raise MemoryError("decode_values: out of memory building the columns")
        return [(take(&cols[k].valid), take(&cols[k].data), take(&cols[k].offs),
                 take(&cols[k].key_offs), take(&cols[k].key_data), cols[k].n)
                for k in range(ncols)]
    finally:
        for k in range(ncols):
            free(cols[k].valid.p)
            free(cols[k].data.p)
            free(cols[k].offs.p)
            free(cols[k].key_offs.p)
            free(cols[k].key_data.p)
        free(cols)
        free(saved)
