# LogFile: one segment's .log file (segment_io.h; docs/FORMAT.md, sections 8 and 10).

RECOVERY_REASONS = {
    PYLOG_RECOVER_CLEAN: "clean",
    PYLOG_RECOVER_TORN: "torn tail (a partial batch at the end)",
    PYLOG_RECOVER_CORRUPT: "corrupt batch",
    PYLOG_RECOVER_OFFSETS: "offsets do not increase",
    PYLOG_RECOVER_OUT_OF_RANGE: "offset outside the segment's range",
    PYLOG_RECOVER_IO: "I/O error",
    PYLOG_RECOVER_ZERO_FILL: "torn tail: zero-filled (preallocated, O_DIRECT padding, or "
                             "never written before a crash)",
}


@cython.final
cdef class LogFile:
    """The .log file of one segment: appends at its end, positional reads.

    ``size`` is the logical size, the end of the last complete batch; the file
    itself can be longer (preallocated, or not yet truncated after recovery).
    One writer at a time (the Log's lock); any number of concurrent readers,
    which only read below the ``size`` they observed. The descriptor stays
    open while any object (e.g. a FileSlice) references the LogFile, so
    renaming or unlinking the file never breaks a reader; ``close()`` is for
    shutdown.
    """

    cdef int fd
    cdef readonly str path
    cdef readonly int64_t size
    cdef readonly int64_t file_size
    cdef int _users             # calls using fd without the GIL right now
    cdef bint _close_pending    # close() was called while _users > 0
    # O_DIRECT mode (enable_direct; docs/FORMAT.md "O_DIRECT segments"): appends
    # go through dfd in whole blocks of `align` bytes; reads keep using fd. The
    # file's last partial block, [tail_pos, tail_pos + tail_len), is kept in
    # `tail` and written again, completed, by the next append. tail_pos is -1
    # when `tail` must be read back from the file first (after a truncation).
    cdef int dfd
    cdef size_t align
    cdef unsigned pieces
    cdef char *tail
    cdef size_t tail_len
    cdef int64_t tail_pos

    def __init__(self, str path, *, bint create=False, int64_t preallocate=0, bint readonly=False):
        """Opens (or creates) the file; size starts as the file's length, or 0 when preallocating.

        ``readonly`` opens with O_RDONLY, for readers beside the process that owns the log
        (pylog.storage.reader): appends, truncation and sync then fail with EBADF."""
        cdef bytes bpath = _os.fsencode(path)
        cdef stat st
        cdef int rc = 0
        self.path = path
        self.dfd = -1
        self.tail_pos = -1
        if readonly and (create or preallocate):
            raise ValueError("a read-only LogFile cannot create or preallocate")
        self.fd = open(bpath, (O_RDONLY if readonly else O_RDWR) | O_CLOEXEC | (O_CREAT if create else 0),
                       0o644)
        if self.fd < 0:
            _raise_os(errno, path)
        if fstat(self.fd, &st) < 0:
            err = errno
            self.close()
            _raise_os(err, path)
        self.size = st.st_size
        self.file_size = st.st_size
        if preallocate > st.st_size:
            with nogil:
                rc = posix_fallocate(self.fd, 0, preallocate)
            if rc != 0:
                self.close()
                _raise_os(rc, path)
            self.size = st.st_size
            self.file_size = preallocate

    def __dealloc__(self):
        self._close_fds()

    cdef void _close_fds(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1
        self._end_direct()

    cdef void _end_direct(self):
        if self.dfd >= 0:
            close(self.dfd)
            self.dfd = -1
        PyMem_Free(self.tail)
        self.tail = NULL
        self.tail_len = 0
        self.tail_pos = -1

    cdef int _check(self) except -1:
        if self.fd < 0 or self._close_pending:
            raise ValueError(f"log file {self.path} is closed")
        return 0

    # The descriptor is never closed while a call uses it without the GIL (a
    # closed number can be reused at once by another open, so a pread could
    # return another file's bytes). Every GIL-free use is bracketed by _use()
    # and _done(), both run with the GIL held; close() during a use only marks
    # the file, and the last _done() closes it. New uses fail as closed.

    cdef int _use(self) except -1:
        self._check()
        self._users += 1
        return 0

    cdef void _done(self):
        self._users -= 1
        if self._users == 0 and self._close_pending:
            self._close_fds()

    def fileno(self):
        """The descriptor, for callers that hold this LogFile while they use it.
        Prefer :meth:`sendfile`, which keeps it open for the duration of the call."""
        self._check()
        return self.fd

    @property
    def closed(self):
        return self.fd < 0 or self._close_pending

    @property
    def users(self):
        """How many calls are using the descriptor without the GIL right now."""
        return self._users

    def close(self):
        """Closes the descriptor, or, while calls are using it, marks the file
        closed and lets the last of them close it."""
        if self.fd < 0 or self._close_pending:
            return
        if self._users > 0:
            self._close_pending = True
            return
        self._close_fds()

    def sendfile(self, int out_fd, int64_t position, int64_t count):
        """sendfile(2) of up to `count` bytes at `position` to `out_fd`, with the GIL
        released and the descriptor kept open throughout; returns the bytes sent.
        Raises OSError (BlockingIOError on a full non-blocking socket)."""
        cdef off_t offset = position
        cdef ssize_t n
        cdef int err = 0
        self._use()
        try:
            with nogil:
                n = c_sendfile(out_fd, self.fd, &offset, <size_t>count)
                if n < 0:
                    err = errno
        finally:
            self._done()
        if n < 0:
            raise OSError(err, strerror(err).decode(), self.path)
        return n

    def enable_direct(self, unsigned pieces=4):
        """Appends from now on bypass the page cache (O_DIRECT, docs/FORMAT.md "O_DIRECT
        segments"), in whole blocks of the file system's direct I/O granularity, cut into
        up to `pieces` writes in flight together (io_uring). Returns that granularity.
        Raises OSError naming the file and why where the file system refuses O_DIRECT."""
        self._check()
        if self.dfd >= 0:
            return self.align
        try:
            align = _direct_alignment(self.fd)
        except OSError as exc:
            raise OSError(exc.errno, f"O_DIRECT is not available for {self.path}: "
                                     f"{exc.strerror}") from None
        cdef bytes bpath = _os.fsencode(self.path)
        cdef int dfd = open(bpath, O_WRONLY | O_DIRECT | O_CLOEXEC, 0)
        if dfd < 0:
            err = errno
            raise OSError(err, f"O_DIRECT is not available for {self.path}: "
                               f"{strerror(err).decode()}")
        self.tail = <char *>PyMem_Malloc(<size_t>align)
        if self.tail == NULL:
            close(dfd)
            raise MemoryError()
        self.dfd = dfd
        self.align = <size_t>align
        self.pieces = pieces if pieces > 0 else 1
        self.tail_len = 0
        self.tail_pos = -1
        return align

    def end_direct(self):
        """Back to buffered appends (a segment that stops being active). Only appends
        use the O_DIRECT descriptor, and the one writer (the Log's lock) is the caller,
        so readers using the file meanwhile are unaffected."""
        self._end_direct()

    @property
    def direct_alignment(self):
        """The O_DIRECT block size appends are written in, or 0 in buffered mode."""
        return self.align if self.dfd >= 0 else 0

    cdef int _load_tail(self, int64_t start) except -1:
        """Reads the partial block [start, size) back from the file into `tail`."""
        cdef int64_t want = self.size - start
        cdef int64_t n = 0
        if want > 0:
            self._use()
            try:
                with nogil:
                    n = pylog_pread_full(self.fd, self.tail, want, start)
            finally:
                self._done()
            if n < 0:
                _raise_os(n, self.path)
            if n != want:
                raise OSError(EIO, f"{self.path}: the last block ends before the log's "
                                   f"size {self.size}", self.path)
        self.tail_len = <size_t>want
        self.tail_pos = start
        return 0

    cdef int64_t _write_end(self, IoEngine engine, const iovec *iov, int iovcnt, int64_t nbytes,
                            int flags) except -1:
        """Writes nbytes from iov at the end (buffered or O_DIRECT); returns their position."""
        cdef int64_t position = self.size
        cdef int64_t start, end
        cdef int rc
        cdef size_t tail_len
        if self.dfd >= 0:
            start = position - <int64_t>(<uint64_t>position % self.align)
            if self.tail_pos != start or <int64_t>self.tail_len != position - start:
                self._load_tail(start)
            tail_len = self.tail_len
            self._use()
            try:
                with nogil:
                    rc = engine.c_append_direct(self.dfd, self.tail, &tail_len, iov, iovcnt,
                                                start, self.align, self.pieces, flags)
            finally:
                self._done()
            if rc < 0:
                _raise_os(rc, self.path)
            end = position + nbytes
            self.tail_len = tail_len
            self.tail_pos = end - <int64_t>tail_len
            # The file now ends at the block boundary after `end` (zero padding).
            end = end + (<int64_t>self.align - <int64_t>tail_len) % <int64_t>self.align
            if end > self.file_size:
                self.file_size = end
        else:
            self._use()
            try:
                with nogil:
                    rc = engine.c_writev(self.fd, iov, iovcnt, position, flags)
            finally:
                self._done()
            if rc < 0:
                _raise_os(rc, self.path)
        self.size = position + nbytes
        if self.size > self.file_size:
            self.file_size = self.size
        return position

    def append(self, IoEngine engine, PreparedAppend prep, bint datasync=False):
        """Writes the prepared batches at the end in one I/O; returns their position."""
        self._check()
        return self._write_end(engine, prep.iov, <int>(2 * prep.count), prep.size,
                               PYLOG_WRITE_DATASYNC if datasync else 0)

    def append_bytes(self, IoEngine engine, data, bint datasync=False):
        """Writes raw bytes at the end (already-validated batches; used by recovery tools)."""
        self._check()
        cdef Py_buffer view
        cdef iovec iov
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            iov.iov_base = view.buf
            iov.iov_len = <size_t>view.len
            return self._write_end(engine, &iov, 1, view.len,
                                   PYLOG_WRITE_DATASYNC if datasync else 0)
        finally:
            PyBuffer_Release(&view)

    def sync(self, IoEngine engine=None, bint full=False):
        """fdatasync (fsync when ``full``) through the engine, or directly."""
        self._check()
        cdef int rc
        cdef int fd = self.fd
        if engine is not None:
            self._use()
            try:
                with nogil:
                    rc = engine.c_sync(&fd, 1, full)
            finally:
                self._done()
        else:
            self._use()
            try:
                with nogil:
                    rc = fsync(fd) if full else fdatasync(fd)
            finally:
                self._done()
            if rc < 0:
                rc = -errno
        if rc < 0:
            _raise_os(rc, self.path)

    def set_size(self, int64_t size):
        """Declares [0, size) the valid content (after recovery), without touching the file."""
        self.size = size
        self.tail_pos = -1

    def truncate(self, int64_t size):
        """Truncates the file to `size` bytes (and the logical size with it).
        The call runs without the GIL: cutting 200 MiB frees ~50,000 page-cache
        pages, tens of ms that held every other thread (bench_scaling's append
        row truncates so, and scaled 0.80 at two threads against its raw
        loop's 1.03). A read racing it meets the file's end early, as any read
        racing a truncation (its pread runs without the GIL too)."""
        self._check()
        cdef int fd = self.fd, rc
        self._use()
        try:
            with nogil:
                rc = ftruncate(fd, size)
                if rc < 0:
                    rc = -errno
        finally:
            self._done()
        if rc < 0:
            _raise_os(rc, self.path)
        self.size = size
        self.file_size = size
        self.tail_pos = -1

    def trim(self):
        """Shrinks a preallocated file to its logical size (roll, close)."""
        self._check()
        if self.file_size != self.size:
            self.truncate(self.size)

    def read(self, int64_t position, int64_t length):
        """Reads up to `length` bytes at `position` (short only at the end of the file)."""
        self._check()
        if length < 0 or position < 0:
            raise ValueError(f"read of {length} bytes at {position} in {self.path}")
        out = PyBytes_FromStringAndSize(NULL, length)
        cdef char *buf = PyBytes_AS_STRING(out)
        cdef int64_t n
        self._use()
        try:
            with nogil:
                n = pylog_pread_full(self.fd, buf, length, position)
        finally:
            self._done()
        if n < 0:
            _raise_os(n, self.path)
        return out if n == length else out[:n]

    def readinto(self, int64_t position, buffer):
        """Fills `buffer` from `position`; returns the bytes read."""
        self._check()
        cdef Py_buffer view
        cdef int64_t n
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
        try:
            self._use()
            try:
                with nogil:
                    n = pylog_pread_full(self.fd, view.buf, view.len, position)
            finally:
                self._done()
        finally:
            PyBuffer_Release(&view)
        if n < 0:
            _raise_os(n, self.path)
        return n

    def slice_info(self, int64_t start, int64_t end, int64_t target, int64_t max_bytes,
                   int64_t max_offset=INT64_MAX):
        """Whole batches from the one holding `target`, walking from position `start`
        up to `end`: (start_position, end_position, first_offset, last_offset, batches),
        or None if no batch at or after `target` is below max_offset."""
        self._check()
        cdef pylog_slice_info info
        cdef int rc
        self._use()
        try:
            with nogil:
                rc = pylog_segment_slice(self.fd, start, end, target, max_bytes, max_offset, &info)
        finally:
            self._done()
        if rc < 0:
            _raise_walk(rc, self.path, start)
        if info.start_position < 0:
            return None
        return (info.start_position, info.end_position, info.first_offset, info.last_offset,
                info.batches)

    def find_timestamp(self, int64_t start, int64_t end, int64_t timestamp, int64_t min_offset):
        """(position, size, base_offset, last_offset, max_timestamp) of the first batch at or
        after `start` with max_timestamp >= timestamp and last_offset >= min_offset, or None."""
        self._check()
        cdef pylog_batch_meta m
        cdef int rc
        self._use()
        try:
            with nogil:
                rc = pylog_segment_find_timestamp(self.fd, start, end, timestamp, min_offset, &m)
        finally:
            self._done()
        if rc < 0:
            _raise_walk(rc, self.path, start)
        if rc == 0:
            return None
        return m.position, m.size, m.base_offset, m.last_offset, m.max_timestamp

    def producer_batches(self, int64_t start, int64_t end):
        """The idempotent/transactional batches in [start, end), from their headers:
        a list of (base_offset, last_offset, max_timestamp, producer_id,
        producer_epoch, base_sequence, attributes, position, size). Rebuilds
        producer state after a restart (a control batch's marker is read from
        its bytes at position, size)."""
        self._check()
        cdef pylog_walker w
        cdef pylog_batch_meta m
        cdef int rc
        out = []
        self._use()
        try:
            if pylog_walker_init(&w, self.fd, start, end, 1 << 20) < 0:
                raise MemoryError()
            try:
                while True:
                    with nogil:
                        rc = pylog_walker_next(&w, &m)
                    if rc != 1:
                        break
                    if m.producer_id >= 0:
                        out.append((m.base_offset, m.last_offset, m.max_timestamp, m.producer_id,
                                    m.producer_epoch, m.base_sequence, m.attributes, m.position,
                                    m.size))
            finally:
                pylog_walker_free(&w)
        finally:
            self._done()
        if rc < 0:
            _raise_walk(rc, self.path, start)
        return out

    def summarize(self, int64_t start, int64_t end):
        """Walks the batch headers in [start, end): (batches, end_position, last_offset,
        max_timestamp, offset_of_max_timestamp, first_batch_max_timestamp)."""
        self._check()
        cdef pylog_segment_summary s
        cdef int rc
        self._use()
        try:
            with nogil:
                rc = pylog_segment_summarize(self.fd, start, end, &s)
        finally:
            self._done()
        if rc < 0:
            _raise_walk(rc, self.path, start)
        return (s.batches, s.end_position, s.last_offset, s.max_timestamp,
                s.offset_of_max_timestamp, s.first_max_timestamp)

    def recover(self, int64_t base_offset, int64_t index_interval, OffsetIndex oi, TimeIndex ti):
        """Validates every batch of the file and rebuilds both indexes. Returns a dict:
        valid_bytes, scanned_bytes, batches, records, last_offset, max_timestamp,
        offset_of_max_timestamp, first_batch_max_timestamp, bytes_since_index_entry,
        reason (text), error (CorruptRecordError or None). Does not truncate."""
        self._check()
        oi._check()
        ti._check()
        cdef pylog_recovery r
        cdef stat st
        cdef int rc
        if fstat(self.fd, &st) < 0:
            _raise_os(errno, self.path)
        self._use()
        try:
            with nogil:
                rc = pylog_segment_recover(self.fd, st.st_size, base_offset, index_interval,
                                           &oi.ix, &ti.ix, &r)
        finally:
            self._done()
        if rc < 0:
            _raise_os(rc, self.path)
        if r.reason == PYLOG_RECOVER_IO:
            _raise_os(r.io_errno, self.path)
        error = None
        if r.reason == PYLOG_RECOVER_CORRUPT:
            error = _recovery_error(&r, self.path)
        elif r.reason == PYLOG_RECOVER_OFFSETS:
            error = CorruptRecordError(
                f"{self.path}: batch at byte {r.status.position} starts at offset {r.status.value}, "
                f"below the next expected offset {r.status.limit}", position=r.status.position)
        elif r.reason == PYLOG_RECOVER_OUT_OF_RANGE:
            error = CorruptRecordError(
                f"{self.path}: batch at byte {r.status.position} has offset {r.status.value}, outside "
                f"the segment's int32 range from base offset {r.status.limit}",
                position=r.status.position)
        return {
            "valid_bytes": r.valid_bytes, "scanned_bytes": r.scanned_bytes,
            "file_bytes": st.st_size, "batches": r.batches, "records": r.records,
            "last_offset": r.last_offset, "max_timestamp": r.max_timestamp,
            "offset_of_max_timestamp": r.offset_of_max_timestamp,
            "first_batch_max_timestamp": r.first_batch_max_timestamp,
            "bytes_since_index_entry": r.bytes_since_index_entry,
            "reason": RECOVERY_REASONS[r.reason], "error": error,
        }

    def fadvise_dontneed(self, int64_t start, int64_t end):
        """Drops [start, end) from the page cache (clean pages only)."""
        self._check()
        cdef int rc
        self._use()
        try:
            with nogil:
                rc = posix_fadvise(self.fd, start, end - start, POSIX_FADV_DONTNEED)
        finally:
            self._done()
        if rc != 0:
            _raise_os(rc, self.path)

    def write_behind(self, int64_t start, int64_t end):
        """Starts asynchronous write-back of [start, end) (sync_file_range WRITE)."""
        self._check()
        cdef int rc
        self._use()
        try:
            with nogil:
                rc = sync_file_range(self.fd, start, end - start, SYNC_FILE_RANGE_WRITE)
        finally:
            self._done()
        if rc < 0:
            _raise_os(errno, self.path)


cdef int _raise_walk(int rc, str path, int64_t start) except -1:
    if rc == -EILSEQ:  # bytes that cannot be a batch header
        raise CorruptRecordError(f"{path}: bytes after position {start} are not a record batch "
                                 f"(bad length or magic)", position=start)
    return _raise_os(rc, path)


cdef object _recovery_error(pylog_recovery *r, str path):
    cdef pylog_status *st = &r.status
    detail = st.detail.decode() if st.detail != NULL else u""
    if st.code == PYLOG_ERR_CRC_CODE:
        return CorruptRecordError(
            f"{path}: record batch at byte {r.valid_bytes} is corrupt: stored crc = "
            f"0x{st.stored_crc:08x}, computed crc = 0x{st.computed_crc:08x}",
            position=r.valid_bytes, stored_crc=st.stored_crc, computed_crc=st.computed_crc)
    return CorruptRecordError(
        f"{path}: record batch at byte {r.valid_bytes} is corrupt: bad {detail} ({st.value})",
        position=st.position)
