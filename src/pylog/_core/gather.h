/* One C loop over a column of bytes/None items: gathering a tuple into
 * pointer and length arrays (the encoder), and planning a send_batch call
 * (each record's size and partition).
 *
 * It reads only immutable fields (type, size, data) of objects the caller
 * keeps alive (the tuple holds them) and writes only the caller's arrays, so
 * it would be safe without the GIL (or on a free-threaded build). Any other
 * item type stops it; the caller handles the rest through the buffer
 * protocol. */
#ifndef PYLOG_GATHER_H
#define PYLOG_GATHER_H

#include <Python.h>
#include <stdint.h>

#include "murmur2.h"

/* One item of a bytes/None column: its pointer and length (None: NULL, -1).
 * Returns 0, filling nothing, for any other type (the caller reads those
 * through the buffer protocol). */
static inline int pylog_gather_one(PyObject *o, const char **ptr, int64_t *len) {
    if (o == Py_None) {
        *ptr = NULL;
        *len = -1;
        return 1;
    }
    if (Py_IS_TYPE(o, &PyBytes_Type)) {
        *ptr = PyBytes_AS_STRING(o);
        *len = PyBytes_GET_SIZE(o);
        return 1;
    }
    return 0;
}

/* Each item's pointer and length, and the bytes of all, until the first item
 * that is not bytes or None; returns how many items it read. */
static inline Py_ssize_t pylog_gather_bytes(PyObject *const *items, Py_ssize_t n,
                                            const char **ptrs, int64_t *lens,
                                            int64_t *data_bytes) {
    int64_t total = 0;
    Py_ssize_t i;
    for (i = 0; i < n && pylog_gather_one(items[i], &ptrs[i], &lens[i]); i++)
        total += lens[i] > 0 ? lens[i] : 0;
    *data_bytes = total;
    return i;
}

/* pylog_gather_bytes over a list's items, copying each into `keep` (a new
 * tuple of n empty slots, given a new reference to every item) in the same
 * pass: the tuple keeps the items alive while the encoder reads them without
 * the GIL, and a copy followed by a gather read every item twice. Every slot
 * is filled; the gather stops at the first item that is not bytes or None. */
static inline Py_ssize_t pylog_gather_bytes_keep(PyObject *const *items, Py_ssize_t n,
                                                 PyObject *keep, const char **ptrs,
                                                 int64_t *lens, int64_t *data_bytes) {
    int64_t total = 0;
    Py_ssize_t done = n;                /* the first item not gathered */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = items[i];
        Py_INCREF(o);
        PyTuple_SET_ITEM(keep, i, o);
        if (done == n) {
            if (pylog_gather_one(o, &ptrs[i], &lens[i]))
                total += lens[i] > 0 ? lens[i] : 0;
            else
                done = i;
        }
    }
    *data_bytes = total;
    return done;
}

/* pylog_gather_bytes_keep over the items at `rows` of a list's `size` items,
 * into slots j0 .. j0+count of `keep`: encode_groups' gather of one group.
 * Stops, having filled keep up to there, at the first row outside the list
 * or item that is not bytes or None, and returns how many rows it did. */
static inline Py_ssize_t pylog_gather_rows_keep(PyObject *const *items, Py_ssize_t size,
                                                const int64_t *rows, Py_ssize_t count,
                                                PyObject *keep, Py_ssize_t j0,
                                                const char **ptrs, int64_t *lens,
                                                int64_t *data_bytes) {
    int64_t total = 0;
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        int64_t r = rows[i];
        Py_ssize_t j = j0 + i;
        if (r < 0 || r >= size || !pylog_gather_one(items[r], &ptrs[j], &lens[j]))
            break;
        total += lens[j] > 0 ? lens[j] : 0;
        Py_INCREF(items[r]);
        PyTuple_SET_ITEM(keep, j, items[r]);
    }
    *data_bytes += total;
    return i;
}

/* send_batch's planning pass over a call's columns of bytes/None: each
 * record's key + value bytes plus `overhead` into sizes[i], and, with keys
 * and num_partitions > 0, the partition Kafka's default partitioner picks
 * into parts[i] (-1 for a null key). One read of each item, where separate
 * passes for partitions, totals and sizes read every item five times (the
 * items are scattered objects: each read is a cache miss). `keys` may be NULL
 * (no keys). Returns how many records it planned: it stops at the first item
 * that is neither bytes nor None, and the caller takes the general path. Like
 * pylog_gather_bytes it runs no Python code, so the items stay as they are. */
static inline Py_ssize_t pylog_plan_bytes(PyObject *const *values, PyObject *const *keys,
                                          Py_ssize_t n, int32_t num_partitions,
                                          int64_t overhead, int64_t *sizes, int32_t *parts,
                                          int64_t *total_bytes) {
    int64_t total = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        PyObject *v = values[i];
        int64_t size = overhead;
        if (Py_IS_TYPE(v, &PyBytes_Type))
            size += PyBytes_GET_SIZE(v);
        else if (v != Py_None)
            break;
        if (keys != NULL) {
            PyObject *k = keys[i];
            if (Py_IS_TYPE(k, &PyBytes_Type)) {
                size += PyBytes_GET_SIZE(k);
                if (parts != NULL)
                    parts[i] = pylog_key_partition(PyBytes_AS_STRING(k),
                                                   (size_t)PyBytes_GET_SIZE(k), num_partitions);
            } else if (k == Py_None) {
                if (parts != NULL)
                    parts[i] = -1;
            } else {
                break;
            }
        }
        sizes[i] = size;
        total += size;
    }
    *total_bytes = total;
    return i;
}

#endif
