# OffsetIndex and TimeIndex: mmap'd sparse indexes (index.h; docs/FORMAT.md, section 9).


cdef class _Index:
    """Shared life cycle of both index kinds.

    One writer (the owning segment, under its Log's lock) and any number of
    readers. Lookups and appends run under the GIL and read the mapping
    directly. The slow calls run without it: ``flush`` (msync or fdatasync)
    passes through the gate (index.h, a pthread mutex and condition), and
    whatever changes the mapping or the descriptor (``resize``, ``trim``,
    ``release_fd``, ``close``) first takes the gate alone, waiting with the
    GIL released until no flush uses them; the file-length half of a resize
    (ftruncate) also runs without the GIL, ordered so that the mapping never
    covers bytes past the end of the file.
    """

    cdef pylog_index ix
    cdef bint is_open
    cdef readonly str path
    cdef pylog_index_gate gate
    cdef bint has_gate

    def __cinit__(self):
        cdef int rc = pylog_index_gate_init(&self.gate)
        if rc < 0:
            raise OSError(-rc, strerror(-rc).decode())
        self.has_gate = True

    def __init__(self):
        raise TypeError(f"{type(self).__name__} is not supposed to be instantiated directly; "
                        f"use OffsetIndex.open() or TimeIndex.open()")

    cdef int _open(self, str path, int kind, int64_t base_offset, int64_t max_index_size,
                   bint writable) except -1:
        cdef bytes bpath = _os.fsencode(path)
        self.path = path
        rc = pylog_index_open(&self.ix, bpath, kind, base_offset, max_index_size, writable)
        if rc < 0:
            _raise_os(rc, path)
        self.is_open = True
        return 0

    def __dealloc__(self):
        if self.is_open:               # no flush can run: it would hold a reference
            pylog_index_close(&self.ix)
        if self.has_gate:
            pylog_index_gate_destroy(&self.gate)

    cdef int _check(self) except -1:
        if not self.is_open:
            raise ValueError(f"index {self.path} is closed")
        return 0

    cdef int _exclude_flushes(self) except -1:
        """Takes the gate alone (GIL released while waiting); raises, without
        it, when the index was closed meanwhile."""
        with nogil:
            pylog_index_gate_exclude(&self.gate)
        if not self.is_open:
            pylog_index_gate_include(&self.gate)
            self._check()
        return 0

    cdef void _include_flushes(self):
        pylog_index_gate_include(&self.gate)

    @property
    def entries(self):
        return self.ix.entries

    @property
    def max_entries(self):
        return self.ix.max_entries

    @property
    def base_offset(self):
        return self.ix.base_offset

    @property
    def file_size(self):
        return self.ix.file_size

    @property
    def is_full(self):
        return bool(pylog_index_is_full(&self.ix))

    @property
    def closed(self):
        return not self.is_open

    def resize(self, int64_t size):
        """Sets the file (and mapping) to `size` bytes, rounded down to whole entries."""
        cdef int rc = 0, rc2 = 0
        self._check()
        size = pylog_index_round_size(&self.ix, size)
        if size == self.ix.file_size and (self.ix.map_size == size):
            return
        self._exclude_flushes()
        try:
            if size > self.ix.map_size:
                # Grow: the file first (the old mapping stays valid), then the mapping.
                with nogil:
                    rc = pylog_index_set_file_length(&self.ix, size)
                if rc == 0:
                    rc = pylog_index_remap(&self.ix, size)
            else:
                # Shrink: the mapping first, so no reader sees bytes past the file.
                rc = pylog_index_remap(&self.ix, size)
                with nogil:
                    rc2 = pylog_index_set_file_length(&self.ix, size)
                if rc == 0:
                    rc = rc2
        finally:
            self._include_flushes()
        if rc < 0:
            _raise_os(rc, self.path)

    def release_fd(self):
        """Closes the descriptor, keeping the mapping (inactive segments); the file
        is reopened by path when a resize or trim needs it."""
        self._check()
        self._exclude_flushes()
        pylog_index_release_fd(&self.ix)
        self._include_flushes()

    def trim(self):
        """Shrinks the file to the valid entries (roll, close)."""
        self._check()
        self.resize(self.ix.entries * self.ix.entry_size)

    def flush(self):
        """msync of the entries (fdatasync when there are none), without the GIL."""
        cdef int rc
        self._check()
        with nogil:
            pylog_index_gate_enter(&self.gate)    # behind a waiting remap
        try:
            self._check()
            with nogil:
                rc = pylog_index_flush(&self.ix)
        finally:
            pylog_index_gate_leave(&self.gate)
        if rc < 0:
            _raise_os(rc, self.path)

    def reset(self):
        """Drops every entry (before a rebuild)."""
        self._check()
        pylog_index_reset(&self.ix)

    def truncate_to(self, int64_t offset):
        """Removes the entries for offsets >= offset."""
        self._check()
        pylog_index_truncate_to(&self.ix, offset)

    def sanity_check(self, int64_t log_size):
        """Raises CorruptIndexError naming the file and numbers if the index is inconsistent."""
        cdef char msg[256]
        self._check()
        if pylog_index_sanity_check(&self.ix, log_size, msg, 256) < 0:
            raise CorruptIndexError(f"index {self.path} is corrupt: {msg.decode()}")

    def close(self):
        if self.is_open:
            with nogil:
                pylog_index_gate_exclude(&self.gate)
            if self.is_open:
                pylog_index_close(&self.ix)
                self.is_open = False
            self._include_flushes()


@cython.final
cdef class OffsetIndex(_Index):
    """Sparse offset -> file position map of one segment (.index).

    Entry i says: the batch whose last offset is ``offset`` starts at
    ``position``. Offsets strictly increase. Not checksummed: rebuilt from
    the .log after an unclean shutdown.
    """

    @staticmethod
    def open(str path, int64_t base_offset, int64_t max_index_size=10 << 20, *, bint writable=True):
        cdef OffsetIndex ix = OffsetIndex.__new__(OffsetIndex)
        ix._open(path, PYLOG_INDEX_OFFSET, base_offset, max_index_size, writable)
        return ix

    def append(self, int64_t offset, int32_t position):
        self._check()
        rc = pylog_offset_index_append(&self.ix, offset, position)
        if rc != PYLOG_INDEX_OK:
            raise _append_error(self, rc, offset)

    def lookup(self, int64_t target):
        """(offset, position) of the largest entry with offset <= target, else (base_offset, 0)."""
        cdef int64_t offset
        cdef int32_t position
        self._check()
        pylog_offset_index_lookup(&self.ix, target, &offset, &position)
        return offset, position

    def floor_position(self, int64_t position):
        """(offset, position) of the largest entry with position <= position."""
        cdef int64_t offset
        cdef int32_t found
        self._check()
        pylog_offset_index_floor_position(&self.ix, position, &offset, &found)
        return offset, found

    def entry(self, int64_t i):
        cdef int64_t offset
        cdef int32_t position
        self._check()
        if not 0 <= i < self.ix.entries:
            raise IndexError(f"entry {i} of {self.ix.entries} in {self.path}")
        pylog_offset_index_entry(&self.ix, i, &offset, &position)
        return offset, position

    def last_entry(self):
        """The last entry, or (base_offset, 0) when there is none."""
        if self.ix.entries == 0:
            return self.ix.base_offset, 0
        return self.entry(self.ix.entries - 1)

    def to_list(self):
        return [self.entry(i) for i in range(self.ix.entries)]


@cython.final
cdef class TimeIndex(_Index):
    """Sparse timestamp -> offset map of one segment (.timeindex).

    Entry i says: the largest timestamp among offsets <= ``offset`` is
    ``timestamp``. Timestamps strictly increase (a running maximum). Not
    checksummed: rebuilt from the .log after an unclean shutdown.
    """

    @staticmethod
    def open(str path, int64_t base_offset, int64_t max_index_size=10 << 20, *, bint writable=True):
        cdef TimeIndex ix = TimeIndex.__new__(TimeIndex)
        ix._open(path, PYLOG_INDEX_TIME, base_offset, max_index_size, writable)
        return ix

    def maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check=False):
        """Appends (timestamp, offset) if timestamp is a new maximum."""
        self._check()
        rc = pylog_time_index_append(&self.ix, timestamp, offset, skip_full_check)
        if rc != PYLOG_INDEX_OK:
            raise _append_error(self, rc, offset)

    def lookup(self, int64_t timestamp):
        """(timestamp, offset) of the largest entry with timestamp <= target, else (-1, base_offset)."""
        cdef int64_t ts, offset
        self._check()
        pylog_time_index_lookup(&self.ix, timestamp, &ts, &offset)
        return ts, offset

    def entry(self, int64_t i):
        cdef int64_t ts, offset
        self._check()
        if not 0 <= i < self.ix.entries:
            raise IndexError(f"entry {i} of {self.ix.entries} in {self.path}")
        pylog_time_index_entry(&self.ix, i, &ts, &offset)
        return ts, offset

    def last_entry(self):
        """The last entry, or (-1, base_offset) when there is none."""
        if self.ix.entries == 0:
            return -1, self.ix.base_offset
        return self.entry(self.ix.entries - 1)

    def to_list(self):
        return [self.entry(i) for i in range(self.ix.entries)]


cdef object _append_error(_Index index, int rc, int64_t offset):
    if rc == PYLOG_INDEX_IO:
        err = index.ix.last_errno
        return OSError(err, _os.strerror(err), index.path)
    if rc == PYLOG_INDEX_FULL:
        return CorruptIndexError(f"index {index.path} is full ({index.ix.entries} entries); "
                                 f"cannot append offset {offset}")
    if rc == PYLOG_INDEX_OVERFLOW:
        return CorruptIndexError(f"offset {offset} is outside the int32 range of index {index.path} "
                                 f"(base offset {index.ix.base_offset})")
    return CorruptIndexError(f"attempt to append offset {offset} to index {index.path}, no larger "
                             f"than its last entry (entry {index.ix.entries - 1})")
