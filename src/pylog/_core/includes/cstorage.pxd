# C declarations of the storage core: index.h, segment_io.h, append.h. See docs/FORMAT.md.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t
from posix.uio cimport iovec

from pylog._core.includes.ccore cimport pylog_status


cdef extern from "index.h" nogil:
    enum:
        PYLOG_INDEX_OFFSET
        PYLOG_INDEX_TIME
        PYLOG_OFFSET_ENTRY_SIZE
        PYLOG_TIME_ENTRY_SIZE
        PYLOG_INDEX_WARM_BYTES
    enum:
        PYLOG_INDEX_OK
        PYLOG_INDEX_FULL
        PYLOG_INDEX_NOT_INCREASING
        PYLOG_INDEX_OVERFLOW
        PYLOG_INDEX_IO

    ctypedef struct pylog_index:
        int kind
        int fd
        int writable
        int entry_size
        char *map
        int64_t map_size
        int64_t file_size
        int64_t entries
        int64_t max_entries
        int64_t base_offset
        int64_t allocated
        int last_errno

    int pylog_index_open(pylog_index *ix, const char *path, int kind, int64_t base_offset,
                         int64_t max_size, int writable)
    void pylog_index_close(pylog_index *ix)
    int pylog_index_release_fd(pylog_index *ix)
    int64_t pylog_index_round_size(const pylog_index *ix, int64_t size)
    int pylog_index_set_file_length(pylog_index *ix, int64_t size)
    int pylog_index_remap(pylog_index *ix, int64_t size)
    int pylog_index_flush(pylog_index *ix)
    void pylog_index_reset(pylog_index *ix)
    void pylog_offset_index_entry(const pylog_index *ix, int64_t i, int64_t *offset, int32_t *position)
    void pylog_time_index_entry(const pylog_index *ix, int64_t i, int64_t *timestamp, int64_t *offset)
    int pylog_offset_index_append(pylog_index *ix, int64_t offset, int32_t position)
    int pylog_time_index_append(pylog_index *ix, int64_t timestamp, int64_t offset, int skip_full_check)
    int pylog_index_is_full(const pylog_index *ix)
    void pylog_offset_index_lookup(const pylog_index *ix, int64_t target, int64_t *offset, int32_t *position)
    void pylog_offset_index_floor_position(const pylog_index *ix, int64_t target, int64_t *offset,
                                           int32_t *position)
    void pylog_time_index_lookup(const pylog_index *ix, int64_t target, int64_t *timestamp, int64_t *offset)
    void pylog_index_truncate_to(pylog_index *ix, int64_t offset)
    int pylog_index_sanity_check(const pylog_index *ix, int64_t log_size, char *msg, int msg_len)

    ctypedef struct pylog_index_gate:
        pass
    int pylog_index_gate_init(pylog_index_gate *g)
    void pylog_index_gate_destroy(pylog_index_gate *g)
    void pylog_index_gate_enter(pylog_index_gate *g)
    void pylog_index_gate_leave(pylog_index_gate *g)
    void pylog_index_gate_exclude(pylog_index_gate *g)
    void pylog_index_gate_include(pylog_index_gate *g)


cdef extern from "segment_io.h" nogil:
    ctypedef struct pylog_batch_meta:
        int64_t position
        int64_t size
        int64_t base_offset
        int64_t last_offset
        int64_t max_timestamp
        int8_t magic
        int16_t attributes
        int32_t records_count
        int64_t producer_id
        int16_t producer_epoch
        int32_t base_sequence

    ctypedef struct pylog_walker:
        pass

    int pylog_walker_init(pylog_walker *w, int fd, int64_t start, int64_t end, int64_t window)
    void pylog_walker_free(pylog_walker *w)
    int pylog_walker_next(pylog_walker *w, pylog_batch_meta *m)

    ctypedef struct pylog_slice_info:
        int64_t start_position
        int64_t end_position
        int64_t first_offset
        int64_t last_offset
        int64_t batches

    int pylog_segment_slice(int fd, int64_t start, int64_t end, int64_t target, int64_t max_bytes,
                            int64_t max_offset, pylog_slice_info *out)
    int pylog_segment_find_timestamp(int fd, int64_t start, int64_t end, int64_t timestamp,
                                     int64_t min_offset, pylog_batch_meta *m)

    ctypedef struct pylog_segment_summary:
        int64_t batches
        int64_t end_position
        int64_t last_offset
        int64_t max_timestamp
        int64_t offset_of_max_timestamp
        int64_t first_max_timestamp

    int pylog_segment_summarize(int fd, int64_t start, int64_t end, pylog_segment_summary *out)

    enum:
        PYLOG_RECOVER_CLEAN
        PYLOG_RECOVER_TORN
        PYLOG_RECOVER_CORRUPT
        PYLOG_RECOVER_OFFSETS
        PYLOG_RECOVER_OUT_OF_RANGE
        PYLOG_RECOVER_IO
        PYLOG_RECOVER_ZERO_FILL

    ctypedef struct pylog_recovery:
        int64_t valid_bytes
        int64_t scanned_bytes
        int64_t batches
        int64_t records
        int64_t last_offset
        int64_t max_timestamp
        int64_t offset_of_max_timestamp
        int64_t first_batch_max_timestamp
        int64_t bytes_since_index_entry
        int reason
        int io_errno
        pylog_status status

    int pylog_segment_recover(int fd, int64_t file_size, int64_t base_offset, int64_t index_interval,
                              pylog_index *offset_index, pylog_index *time_index, pylog_recovery *r)
    int64_t pylog_pread_full(int fd, void *buf, int64_t length, int64_t pos)


cdef extern from "append.h" nogil:
    ctypedef struct pylog_append_params:
        int64_t next_offset
        int32_t leader_epoch
        int64_t log_append_time
        int64_t max_batch_size
        int64_t min_timestamp
        int64_t max_timestamp
        int allow_control
        int validate_records
        int require_keys

    ctypedef struct pylog_append_batch:
        int64_t in_position
        int64_t size
        int64_t base_offset
        int64_t last_offset
        int64_t max_timestamp
        int32_t records
        int16_t attributes
        int64_t producer_id
        int16_t producer_epoch
        int32_t base_sequence

    enum:
        PYLOG_APPEND_OK
        PYLOG_APPEND_CORRUPT
        PYLOG_APPEND_TOO_LARGE
        PYLOG_APPEND_INVALID
        PYLOG_APPEND_TIMESTAMP
        PYLOG_APPEND_LEGACY
        PYLOG_APPEND_INCOMPLETE

    int64_t pylog_append_count(const char *buf, int64_t length)
    int pylog_append_prepare(const char *buf, int64_t length, const pylog_append_params *p,
                             pylog_append_batch *out, int64_t n, char *patches, pylog_status *st)
    void pylog_append_iovecs(const char *buf, const pylog_append_batch *batches, int64_t n,
                             char *patches, iovec *iov)
