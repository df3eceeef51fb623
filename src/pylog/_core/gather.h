/* Gathering a tuple of bytes/None into pointer and length arrays, in one C loop.
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

static inline Py_ssize_t pylog_gather_bytes(PyObject *const *items, Py_ssize_t n,
                                            const char **ptrs, int64_t *lens,
                                            int64_t *data_bytes) {
    int64_t total = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        PyObject *o = items[i];
        if (o == Py_None) {
            ptrs[i] = NULL;
            lens[i] = -1;
        } else if (Py_IS_TYPE(o, &PyBytes_Type)) {
            ptrs[i] = PyBytes_AS_STRING(o);
            lens[i] = PyBytes_GET_SIZE(o);
            total += lens[i];
        } else {
            break;
        }
    }
    *data_bytes = total;
    return i;
}

#endif
