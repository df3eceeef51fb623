/* decode_arrow's output handed to Arrow in one import (the Arrow C Data
 * Interface, https://arrow.apache.org/docs/format/CDataInterface.html).
 *
 * decode_arrow fills its columns into one block of memory (a pyarrow Buffer
 * from Arrow's memory pool, so Arrow's accounting sees it) at offsets laid
 * out here, then describes them as one ArrowArray tree: a struct array whose
 * children are the RecordBatch's columns. pyarrow imports the tree in one
 * call (RecordBatch._import_from_c, GIL released), where building the same
 * batch from Python (allocate_buffer x14, Array.from_buffers x7, a
 * StructArray, a RecordBatch) takes many calls with the GIL held.
 *
 * Ownership: the tree owns one reference to the block (a Python object);
 * Arrow calls the root's release when its last array goes, from any thread,
 * and release drops that reference under the GIL. Children are released with
 * their root (the interface's rule: consumers release only the root).
 */
#ifndef PYLOG_ARROW_EXPORT_H
#define PYLOG_ARROW_EXPORT_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

/* The arrays of decode_arrow's tree, by position. */
enum {
    PYLOG_AX_ROOT, PYLOG_AX_OFFSET, PYLOG_AX_TIMESTAMP, PYLOG_AX_KEY, PYLOG_AX_VALUE,
    PYLOG_AX_HEADERS, PYLOG_AX_TIMESTAMP_TYPE, PYLOG_AX_HEADER, PYLOG_AX_HEADER_KEY,
    PYLOG_AX_HEADER_VALUE, PYLOG_AX_COUNT
};

/* The buffers of the block, by position. */
enum {
    PYLOG_BX_OFFSETS, PYLOG_BX_TIMESTAMPS, PYLOG_BX_KEY_VALID, PYLOG_BX_KEY_OFFSETS,
    PYLOG_BX_KEY_DATA, PYLOG_BX_VALUE_VALID, PYLOG_BX_VALUE_OFFSETS, PYLOG_BX_VALUE_DATA,
    PYLOG_BX_HEADER_LIST, PYLOG_BX_HKEY_OFFSETS, PYLOG_BX_HKEY_DATA, PYLOG_BX_HVAL_VALID,
    PYLOG_BX_HVAL_OFFSETS, PYLOG_BX_HVAL_DATA, PYLOG_BX_TYPES, PYLOG_BX_COUNT
};

#define PYLOG_ARROW_ALIGN 64        /* Arrow's recommended buffer alignment */

typedef struct {
    struct ArrowArray arrays[PYLOG_AX_COUNT];
    struct ArrowArray *children[PYLOG_AX_COUNT][6];
    const void *buffers[PYLOG_AX_COUNT][3];
    PyObject *owner;                /* the block's Python object: one reference */
} pylog_arrow_tree;

/* Where each buffer starts in the block (64-byte aligned), and the block's
 * size. Sizes: rows records, headers header entries, the data bytes of each
 * binary column, `width` 4 or 8 (binary or large_binary offsets). */
static inline int64_t pylog_arrow_layout(int64_t rows, int64_t headers, int width,
                                         int64_t key_bytes, int64_t value_bytes,
                                         int64_t hkey_bytes, int64_t hval_bytes, int types,
                                         int64_t at[PYLOG_BX_COUNT]) {
    int64_t size[PYLOG_BX_COUNT];
    size[PYLOG_BX_OFFSETS] = rows * 8;
    size[PYLOG_BX_TIMESTAMPS] = rows * 8;
    size[PYLOG_BX_KEY_VALID] = (rows + 7) / 8;
    size[PYLOG_BX_KEY_OFFSETS] = (rows + 1) * width;
    size[PYLOG_BX_KEY_DATA] = key_bytes;
    size[PYLOG_BX_VALUE_VALID] = (rows + 7) / 8;
    size[PYLOG_BX_VALUE_OFFSETS] = (rows + 1) * width;
    size[PYLOG_BX_VALUE_DATA] = value_bytes;
    size[PYLOG_BX_HEADER_LIST] = (rows + 1) * 4;
    size[PYLOG_BX_HKEY_OFFSETS] = (headers + 1) * width;
    size[PYLOG_BX_HKEY_DATA] = hkey_bytes;
    size[PYLOG_BX_HVAL_VALID] = (headers + 7) / 8;
    size[PYLOG_BX_HVAL_OFFSETS] = (headers + 1) * width;
    size[PYLOG_BX_HVAL_DATA] = hval_bytes;
    size[PYLOG_BX_TYPES] = types ? rows * 4 : 0;
    int64_t total = 0;
    for (int i = 0; i < PYLOG_BX_COUNT; i++) {
        at[i] = total;
        /* Every buffer gets at least one aligned slot: no buffer is a null
         * pointer, even an empty one. */
        total += (size[i] + PYLOG_ARROW_ALIGN) / PYLOG_ARROW_ALIGN * PYLOG_ARROW_ALIGN;
    }
    return total;
}

static void pylog_arrow_child_release(struct ArrowArray *a) {
    a->release = NULL;              /* released with its root */
}

static void pylog_arrow_root_release(struct ArrowArray *root) {
    pylog_arrow_tree *tree = (pylog_arrow_tree *)root->private_data;
    root->release = NULL;
    if (tree == NULL) return;
    /* Any thread may drop the last array: take the GIL for the reference.
     * At interpreter exit the block is left to the process's end. */
    if (tree->owner != NULL && Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_DECREF(tree->owner);
        PyGILState_Release(gil);
    }
    free(tree);
}

static inline void pylog_arrow_set(pylog_arrow_tree *t, int ax, int64_t length, int64_t nulls,
                                   int n_buffers, const void *b0, const void *b1, const void *b2) {
    struct ArrowArray *a = &t->arrays[ax];
    a->length = length;
    a->null_count = nulls;
    a->offset = 0;
    a->n_buffers = n_buffers;
    a->n_children = 0;
    t->buffers[ax][0] = b0;
    t->buffers[ax][1] = b1;
    t->buffers[ax][2] = b2;
    a->buffers = t->buffers[ax];
    a->children = t->children[ax];
    a->dictionary = NULL;
    a->release = pylog_arrow_child_release;
    a->private_data = NULL;
}

static inline void pylog_arrow_adopt(pylog_arrow_tree *t, int parent, int child) {
    struct ArrowArray *a = &t->arrays[parent];
    t->children[parent][a->n_children++] = &t->arrays[child];
}

/* Builds the tree over `base` (the block, laid out by pylog_arrow_layout)
 * for the counts decode_arrow filled. Returns it with a new reference to
 * `owner`, or NULL (out of memory). Its root is what pyarrow imports; until
 * then pylog_arrow_root_release(&tree->arrays[0]) frees it. */
static inline pylog_arrow_tree *pylog_arrow_tree_new(
        PyObject *owner, char *base, const int64_t at[PYLOG_BX_COUNT], int64_t rows,
        int64_t headers, int64_t key_nulls, int64_t value_nulls, int64_t hval_nulls, int types) {
    pylog_arrow_tree *t = (pylog_arrow_tree *)calloc(1, sizeof(pylog_arrow_tree));
    if (t == NULL) return NULL;
#define B(i) ((const void *)(base + at[i]))
    pylog_arrow_set(t, PYLOG_AX_ROOT, rows, 0, 1, NULL, NULL, NULL);
    pylog_arrow_set(t, PYLOG_AX_OFFSET, rows, 0, 2, NULL, B(PYLOG_BX_OFFSETS), NULL);
    pylog_arrow_set(t, PYLOG_AX_TIMESTAMP, rows, 0, 2, NULL, B(PYLOG_BX_TIMESTAMPS), NULL);
    pylog_arrow_set(t, PYLOG_AX_KEY, rows, key_nulls, 3, key_nulls ? B(PYLOG_BX_KEY_VALID) : NULL,
                    B(PYLOG_BX_KEY_OFFSETS), B(PYLOG_BX_KEY_DATA));
    pylog_arrow_set(t, PYLOG_AX_VALUE, rows, value_nulls, 3,
                    value_nulls ? B(PYLOG_BX_VALUE_VALID) : NULL, B(PYLOG_BX_VALUE_OFFSETS),
                    B(PYLOG_BX_VALUE_DATA));
    pylog_arrow_set(t, PYLOG_AX_HEADERS, rows, 0, 2, NULL, B(PYLOG_BX_HEADER_LIST), NULL);
    pylog_arrow_set(t, PYLOG_AX_HEADER, headers, 0, 1, NULL, NULL, NULL);
    pylog_arrow_set(t, PYLOG_AX_HEADER_KEY, headers, 0, 3, NULL, B(PYLOG_BX_HKEY_OFFSETS),
                    B(PYLOG_BX_HKEY_DATA));
    pylog_arrow_set(t, PYLOG_AX_HEADER_VALUE, headers, hval_nulls, 3,
                    hval_nulls ? B(PYLOG_BX_HVAL_VALID) : NULL, B(PYLOG_BX_HVAL_OFFSETS),
                    B(PYLOG_BX_HVAL_DATA));
    pylog_arrow_set(t, PYLOG_AX_TIMESTAMP_TYPE, rows, 0, 2, NULL, B(PYLOG_BX_TYPES), NULL);
#undef B
    pylog_arrow_adopt(t, PYLOG_AX_HEADER, PYLOG_AX_HEADER_KEY);
    pylog_arrow_adopt(t, PYLOG_AX_HEADER, PYLOG_AX_HEADER_VALUE);
    pylog_arrow_adopt(t, PYLOG_AX_HEADERS, PYLOG_AX_HEADER);
    pylog_arrow_adopt(t, PYLOG_AX_ROOT, PYLOG_AX_OFFSET);
    pylog_arrow_adopt(t, PYLOG_AX_ROOT, PYLOG_AX_TIMESTAMP);
    pylog_arrow_adopt(t, PYLOG_AX_ROOT, PYLOG_AX_KEY);
    pylog_arrow_adopt(t, PYLOG_AX_ROOT, PYLOG_AX_VALUE);
    pylog_arrow_adopt(t, PYLOG_AX_ROOT, PYLOG_AX_HEADERS);
    if (types)
        pylog_arrow_adopt(t, PYLOG_AX_ROOT, PYLOG_AX_TIMESTAMP_TYPE);
    t->arrays[PYLOG_AX_ROOT].release = pylog_arrow_root_release;
    t->arrays[PYLOG_AX_ROOT].private_data = t;
    Py_INCREF(owner);
    t->owner = owner;
    return t;
}

#endif
