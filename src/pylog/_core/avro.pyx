# cython: boundscheck=False, wraparound=False, cdivision=True
"""Avro binary values framed and checked against a schema, in one C pass.

Avro's binary encoding has no per-value framing: a value that is too short
or too long cannot be told apart once values are concatenated. frame_values
walks each value alone (GIL released) against a schema program and says,
per value, whether it is exactly one well-formed datum of the schema, and if
not, why and at which byte. Good values are then concatenated and decoded in
one call by a block decoder (pylog.table.schema_avro).

The program is the schema as flat int64 triples in preorder:
``(op, arg, width)``, where width counts the node's own ints and those of its
children, which follow it: a record's fields (arg = count), an array's item,
a map's value (keys are strings), a union's branches (arg = count). fixed
has arg = size, enum arg = the number of symbols.
"""

from libc.stdint cimport int8_t, int64_t, uint8_t, uint64_t

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


cdef inline void skip(Cursor *c, int64_t n) noexcept nogil:
    if n < 0:
        c.verdict = V_LENGTH
    elif c.end - c.pos < n:
        c.verdict = V_TRUNCATED
    else:
        c.pos += n


cdef inline void read_string(Cursor *c) noexcept nogil:
    cdef int64_t n = read_long(c)
    cdef int64_t i, stop
    cdef int k
    if c.verdict:
        return
    if n < 0:
        c.verdict = V_LENGTH
        return
    if c.end - c.pos < n:
        c.verdict = V_TRUNCATED
        return
    i = c.pos
    stop = c.pos + n
    while i < stop:
        k = pylog_utf8_seq(c.p + i, stop - i)
        if k == 0:
            c.pos = i
            c.verdict = V_UTF8
            return
        i += k
    c.pos = stop


cdef void walk(const int64_t *node, Cursor *c) noexcept nogil:
    """Consumes one datum of `node`; on failure sets c.verdict, c.pos at the fault."""
    cdef int64_t op = node[0]
    cdef int64_t arg = node[1]
    cdef int64_t n, i, v
    cdef const int64_t *child
    if op == OP_NULL:
        return
    if op == OP_BOOLEAN:
        if c.pos >= c.end:
            c.verdict = V_TRUNCATED
        elif c.p[c.pos] > 1:
            c.verdict = V_BOOLEAN
        else:
            c.pos += 1
    elif op == OP_INT:
        v = read_long(c)
        if not c.verdict and (v < -2147483648 or v > 2147483647):
            c.verdict = V_INT_RANGE
    elif op == OP_LONG:
        read_long(c)
    elif op == OP_FLOAT:
        skip(c, 4)
    elif op == OP_DOUBLE:
        skip(c, 8)
    elif op == OP_BYTES:
        n = read_long(c)
        if not c.verdict:
            skip(c, n)
    elif op == OP_STRING:
        read_string(c)
    elif op == OP_FIXED:
        skip(c, arg)
    elif op == OP_ENUM:
        v = read_long(c)
        if not c.verdict and (v < 0 or v >= arg):
            c.verdict = V_ENUM
    elif op == OP_RECORD:
        child = node + 3
        for i in range(arg):
            walk(child, c)
            if c.verdict:
                return
            child += child[2]
    elif op == OP_ARRAY or op == OP_MAP:
        while True:
            n = read_long(c)
            if c.verdict or n == 0:
                return
            if n < 0:              # a block with its byte size after the count
                n = -n
                read_long(c)
                if c.verdict:
                    return
            # Invariant: every item takes at least one byte unless it is null,
            # so a count past the bytes left is garbage (and cannot spin).
            if n > c.end - c.pos and not (op == OP_ARRAY and node[3] == OP_NULL):
                c.verdict = V_COUNT
                return
            for i in range(n):
                if op == OP_MAP:
                    read_string(c)
                    if c.verdict:
                        return
                walk(node + 3, c)
                if c.verdict:
                    return
    elif op == OP_UNION:
        v = read_long(c)
        if c.verdict:
            return
        if v < 0 or v >= arg:
            c.verdict = V_UNION
            return
        child = node + 3
        for i in range(v):
            child += child[2]
        walk(child, c)


def frame_values(const int64_t[::1] program, const uint8_t[::1] data,
                 const int64_t[::1] offsets, int8_t[::1] verdicts, int64_t[::1] where):
    """Checks values ``data[offsets[i]:offsets[i+1]]`` against `program`:
    ``verdicts[i]`` is 0 for exactly one datum, else the fault's code, and
    ``where[i]`` the byte within the value where the walk stopped."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef Py_ssize_t i
    cdef Cursor c
    if n < 0 or verdicts.shape[0] < n or where.shape[0] < n:
        raise ValueError(f"frame_values: {n} values, {verdicts.shape[0]} verdicts, "
                         f"{where.shape[0]} positions")
    if program.shape[0] < 3 or program[2] != program.shape[0]:
        raise ValueError("frame_values: the program's root does not span it")
    for i in range(n):
        if offsets[i] < 0 or offsets[i] > offsets[i + 1] or offsets[i + 1] > data.shape[0]:
            raise ValueError(f"frame_values: offsets[{i}:{i + 2}] do not bound a value")
    with nogil:
        for i in range(n):
            c.p = &data[0] if data.shape[0] else NULL
            c.pos = offsets[i]
            c.end = offsets[i + 1]
            c.verdict = V_OK
            walk(&program[0], &c)
            if c.verdict == V_OK and c.pos != c.end:
                c.verdict = V_TRAILING
            verdicts[i] = <int8_t>c.verdict
            where[i] = c.pos - offsets[i]
