# The active segment's append and roll rule (LogSegment.append / should_roll call
# segment_append / segment_roll_reason), and Log.append's common case in one C
# call (_append_fast, pylog/storage/log.py), which uses the same two.
#
# A Log appends in Python: validate, maybe roll, write, index, count, maybe
# flush. Around a small write that orchestration of interpreted attribute
# reads and calls costs a large share of the append. _append_fast() does the same steps for
# the case that needs no decision beyond arithmetic, reading and writing the
# Log's and its active LogSegment's fields (LogState and SegmentState below,
# which log.py's Log and segment.py's LogSegment subclass: C fields, not
# attribute lookups). It hands anything else back to the
# Python path, before writing anything: a closed or offline log, a coordinator
# append, magic 0/1 batches, producer ids other than the common case (see
# _in_sequence), a roll, a flush.messages flush, write-behind. Both paths produce the same bytes,
# offsets, indexes and counters (tests/storage/test_fast_append.py appends the
# same batches through both and compares files, indexes, results and state).

from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME

cdef object _AppendInfo = None       # pylog.storage.info.AppendInfo (set by configure_fast_append)
cdef bint _fast_append = True        # use_fast_append(): tests and benchmarks turn it off
cdef object _wall_clock = None       # the Log's default clock, read here without a Python call
cdef dict _target_codecs = {}        # log_validator.TARGET_CODECS
cdef object _BatchMetadata = None    # pylog.storage.producer_state.BatchMetadata

_APPEND_INFO_FIELDS = ("first_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp",
                       "log_append_time", "log_start_offset", "records", "batches", "size",
                       "flushed")
cdef enum:                          # their positions that log_append reads
    _INFO_LAST_OFFSET = 1
    _INFO_SIZE = 8
    _INFO_FLUSHED = 9


def configure_fast_append(append_info, wall_clock, dict target_codecs, batch_metadata):
    """Called once by pylog.storage.log: the result type, the clock that
    _append_fast may replace by clock_gettime(CLOCK_REALTIME) in ms,
    compression.type -> the codec stored batches must have, and the producer
    table's record of a batch (a NamedTuple)."""
    global _AppendInfo, _wall_clock, _target_codecs, _BatchMetadata
    # _append_info fills the namedtuple in place, in the order of its fields.
    if tuple(append_info._fields) != _APPEND_INFO_FIELDS or not issubclass(append_info, tuple):
        raise TypeError(f"AppendInfo's fields are {append_info._fields}, not {_APPEND_INFO_FIELDS}")
    _AppendInfo = append_info
    _wall_clock = wall_clock
    _target_codecs = target_codecs
    _BatchMetadata = batch_metadata


def use_fast_append(bint on):
    """Whether Log.append takes its C common case (the default) or, off, runs
    everything in Log._append_locked: tests compare the two, benchmarks show
    the difference. Returns the previous setting."""
    global _fast_append
    was, _fast_append = _fast_append, on
    return was


# ---------------------------------------------- the state an append touches


cdef class LogState:
    """The fields of a Log (pylog/storage/log.py) that its append reads and
    writes, held in C fields: _append_fast reaches each with a load instead of
    an attribute lookup. Python code sees ordinary attributes; Log subclasses
    this. The counters an append moves are int64 (Python sees ints): as
    objects, each append would make a new int of each; the rest are any object
    (a test clock's floats included). ``_writing`` is False until the Log's
    first change (Log._begin_writing: its dir marked as being written, its
    last segment made active); until then every append takes the Python path,
    which makes that change first.

    The core's contract with its subclass: besides these fields, the subclass
    provides ``producer_state`` (an object whose ``producers`` dict maps a
    producer id to its entry: the table an idempotent append checks sequences
    in), ``flush(offset)`` and the three hooks below, which this class declares
    and the subclass overrides. log_append calls nothing else of it."""
    cdef public object config, clock, engine, leader_epoch
    cdef public bint _writing
    cdef public object _offline, _closed, _append_limits, _segments
    cdef public object _log_start_offset, _last_flush_ms
    cdef public object _lock, _listeners
    cdef public object producer_state
    cdef public int64_t _next_offset, _unflushed_records, records_appended, bytes_appended

    def _append_locked(self, batches, origin, validated, converted, verification_guard):
        """The append's Python path, with the lock held: everything _append_fast
        declined (`validated`: its ``(PreparedAppend, now)``, or None). Returns
        an AppendInfo."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _append_locked")

    def _undo_partial_write(self, segment):
        """Cuts the active `segment` back to its size before a failed write."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _undo_partial_write")

    def _storage_error(self, exc, action):
        """The exception to raise for OSError `exc` during `action` (the log
        dir's failure handled)."""
        raise NotImplementedError(f"{type(self).__name__} does not provide _storage_error")


cdef class SegmentState:
    """The same for a LogSegment (pylog/storage/segment.py): its offsets,
    timestamps, counters and files (None while closed); int64 where an
    append moves them. The files come to segment_append and segment_roll_reason
    as arguments (LogSegment opens its indexes lazily)."""
    cdef public object config, base_offset, rolling_based_timestamp, created_ms
    cdef public object roll_jitter_ms, flushed_size
    cdef public object _log, _offset_index, _time_index
    cdef public int64_t next_offset, max_timestamp, offset_of_max_timestamp
    cdef public int64_t bytes_since_index_entry


# ------------------------------------------------------- the active segment

cdef object _roll_reason(SegmentState segment, LogFile lf, OffsetIndex oi, TimeIndex ti,
                         PreparedAppend p, int64_t now, int64_t segment_bytes, int64_t segment_ms):
    cdef int64_t size = lf.size, waited
    cdef int64_t rolling_ts = segment.rolling_based_timestamp
    if size > 0:
        if size + p.size > segment_bytes:
            return "segment.bytes"
        if rolling_ts >= 0 and p.max_timestamp >= 0:
            waited = p.max_timestamp - rolling_ts
        else:
            waited = now - <int64_t>segment.created_ms
        if waited > segment_ms - <int64_t>segment.roll_jitter_ms:
            return "segment.ms"
        # An empty segment never rolls: its first batch sits at position 0, which a
        # lookup finds without an index entry (a roll would only recreate it).
        if pylog_index_is_full(&oi.ix) or pylog_index_is_full(&ti.ix):
            return "index full"
    if p.last_offset - <int64_t>segment.base_offset > INT32_MAX:
        return "relative offset overflow"
    return None


def segment_roll_reason(SegmentState segment, LogFile log, OffsetIndex offset_index,
                        TimeIndex time_index, PreparedAppend incoming, int64_t now_ms):
    """Why the active LogSegment must roll before taking `incoming`, or None
    (Kafka's shouldRoll): segment.bytes, segment.ms (from the first batch's
    timestamp, else the segment's creation, minus its jitter), a full index,
    or offsets beyond an index entry's 32 bits."""
    config = segment.config
    return _roll_reason(segment, log, offset_index, time_index, incoming, now_ms,
                        config.segment_bytes, config.segment_ms)


cdef int64_t _segment_append(SegmentState segment, LogFile lf, OffsetIndex oi, TimeIndex ti,
                             IoEngine engine, PreparedAppend p, int64_t index_interval,
                             bint datasync) except -1:
    cdef IndexCursor c
    cdef int64_t position
    lf._check()
    position = lf._write_end(engine, p.iov, <int>(2 * p.count), p.size,
                             PYLOG_WRITE_DATASYNC if datasync else 0)
    c.since_entry = segment.bytes_since_index_entry
    c.max_timestamp = segment.max_timestamp
    c.offset_of_max_timestamp = segment.offset_of_max_timestamp
    try:
        _index_append(oi, ti, p, position, index_interval, &c)
    except OSError:
        # No blocks for an index entry (a full disk): the append fails whole.
        oi.truncate_to(p.first_offset)
        ti.truncate_to(p.first_offset)
        lf.truncate(position)
        raise
    segment.bytes_since_index_entry = c.since_entry
    segment.max_timestamp = c.max_timestamp
    segment.offset_of_max_timestamp = c.offset_of_max_timestamp
    if position == 0 and <int64_t>segment.rolling_based_timestamp < 0:
        segment.rolling_based_timestamp = p.batches[0].max_timestamp
    segment.next_offset = p.last_offset + 1
    if datasync:
        segment.flushed_size = lf.size
    return position


def segment_append(SegmentState segment, LogFile log, OffsetIndex offset_index,
                   TimeIndex time_index, IoEngine engine, PreparedAppend prepared, bint datasync):
    """Writes the batches at the end of the active LogSegment in one I/O (with
    its fdatasync when `datasync`), then indexes them (recovery's rule) and
    updates the segment's offsets and timestamps. Returns their position."""
    return _segment_append(segment, log, offset_index, time_index, engine, prepared,
                           segment.config.index_interval_bytes, datasync)


# ---------------------------------------------------------- the Log's append


@cython.final
cdef class AppendLimits:
    """The values of one LogConfig that an append reads, as C fields (a LogConfig
    is immutable: a Log whose config changes gets a new AppendLimits)."""

    cdef readonly object config
    cdef readonly bint eligible          # False: every append takes the Python path
    cdef int64_t before_max_ms, after_max_ms
    cdef bint log_append_time, compact, validate_records
    cdef int target_codec
    cdef int64_t segment_bytes, segment_ms, max_message_bytes, index_interval
    cdef int64_t flush_messages, flush_ms

    def __init__(self, config):
        self.config = config
        self.before_max_ms = config.message_timestamp_before_max_ms
        self.after_max_ms = config.message_timestamp_after_max_ms
        self.log_append_time = config.message_timestamp_type == "LogAppendTime"
        self.compact = "compact" in config.cleanup_policy
        self.validate_records = bool(config.pylog_validate_records)
        self.target_codec = _target_codecs.get(config.compression_type, -2)
        self.segment_bytes = config.segment_bytes
        self.segment_ms = config.segment_ms
        self.max_message_bytes = config.max_message_bytes
        self.index_interval = config.index_interval_bytes
        self.flush_messages = config.flush_messages
        self.flush_ms = config.flush_ms
        self.eligible = (self.target_codec >= -1 and self.before_max_ms >= 0
                         and self.after_max_ms >= 0 and not config.pylog_write_behind_bytes)


cdef inline int64_t _wall_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef object _in_sequence(object producers, PreparedAppend p):
    """The producer table's entry of the batches of `p` when they are an
    idempotent producer's next batches, in the common case only: every batch
    carries one producer id and epoch, that producer is known at that epoch,
    the first batch's sequence follows its last and each batch follows the one
    before, none repeats one of the batches it remembers (a retry), and every
    batch is transactional exactly when the producer's transaction is open
    here (its state does not change). Else None, and the Python path
    (ProducerStateManager.check_append) decides: a new producer or epoch, a
    duplicate, a gap, a mixed append, a transaction to open, a batch that
    does not fit the transaction state. Changes nothing; producer_state.py
    keeps the rules and the table."""
    cdef pylog_append_batch *b = &p.batches[0]
    cdef int64_t pid = b.producer_id, i
    cdef int epoch = b.producer_epoch
    cdef int64_t first, last
    cdef int16_t txn_bit
    entry = producers.get(pid)
    if entry is None or entry.epoch != epoch:
        return None
    remembered = entry.batches
    if not remembered:
        return None
    txn_bit = PYLOG_ATTR_TRANSACTIONAL if <int64_t>entry.txn_first_offset >= 0 else 0
    last = remembered[-1].last_seq
    for i in range(p.count):
        b = &p.batches[i]
        if b.producer_id != pid or b.producer_epoch != epoch or b.base_sequence < 0 \
                or (b.attributes & PYLOG_ATTR_TRANSACTIONAL) != txn_bit:
            return None
        first = b.base_sequence
        if first != (last + 1) % PYLOG_SEQUENCE_SPACE:
            return None
        last = (first + b.records - 1) % PYLOG_SEQUENCE_SPACE
        for old in remembered:
            if old.first_seq == first and old.last_seq == last:
                return None
    return entry


cdef int _remember_batches(object entry, PreparedAppend p) except -1:
    """ProducerStateManager.update for each batch of `p` (written), into the
    entry _in_sequence returned: BatchMetadata built by tuple's tp_new."""
    cdef pylog_append_batch *b
    cdef int64_t i
    remember = entry.batches.append
    for i in range(p.count):
        b = &p.batches[i]
        fields = (b.base_sequence, (b.base_sequence + b.records - 1) % PYLOG_SEQUENCE_SPACE,
                  b.base_offset, b.last_offset, b.max_timestamp)
        args = (fields,)
        remember((<PyTypeObject *>tuple).tp_new(<type>_BatchMetadata, <PyObject *>args, NULL))
    return 0


cdef inline bint _origin_is(str origin, str name):
    """origin == name, by identity first: callers pass the (interned) literals.
    Cython's str == str is a full PyUnicode_Compare."""
    return origin is name or (origin is not None and len(origin) == len(name) and origin == name)


cdef AppendLimits _limits(LogState log):
    """The log's AppendLimits, made again when its config changed."""
    config = log.config
    cdef AppendLimits lim = log._append_limits
    if lim is None or lim.config is not config:
        lim = log._append_limits = AppendLimits(config)
    return lim


cdef object _convert_unlocked(LogState log, object batches, str origin):
    """convert_client_batches for `batches`, run before the log's lock is
    taken: it reads no state of the log, only its config, and decompressing a
    batch may take long (a big one, or a hostile one until it is refused),
    which would hold every other append to the log. Returns the converted
    batches, or None where the append's own path must convert them (a config
    or a clock _append_fast leaves to Python, a closed or offline log, the
    coordinator's appends)."""
    if log._offline is not None or log._closed or _origin_is(origin, "coordinator"):
        return None
    cdef AppendLimits lim = _limits(log)
    cdef bint validate = lim.validate_records and not _origin_is(origin, "producer")
    if not lim.eligible:
        return None
    if _all_left_as_is(batches, lim.target_codec, lim.compact, validate):
        return batches
    if _is_legacy(batches):
        batches = _upconvert(batches, max_inner_bytes=lim.max_message_bytes)
    clock = log.clock
    cdef int64_t now = _wall_ms() if clock is _wall_clock else clock()
    if now < 0:
        return None
    return _convert_client_batches(batches, lim.target_codec, lim.compact,
                                   _min_timestamp(lim, now), _max_timestamp(lim, now), validate,
                                   lim.max_message_bytes)


cdef bint _is_legacy(object batches):
    """Whether `batches` starts with a magic 0/1 message (Log.append up-converts them)."""
    cdef Py_buffer view
    cdef bint legacy
    PyObject_GetBuffer(batches, &view, PyBUF_SIMPLE)
    legacy = view.len > PYLOG_MAGIC_OFFSET and (<const char *>view.buf)[PYLOG_MAGIC_OFFSET] < 2
    PyBuffer_Release(&view)
    return legacy


cdef inline int64_t _min_timestamp(AppendLimits lim, int64_t now) noexcept:
    """The earliest CreateTime accepted at `now` (message.timestamp.before.max.ms)."""
    return now - lim.before_max_ms if lim.before_max_ms < INT64_MAX \
        and now - lim.before_max_ms > -INT64_MAX else INT64_MIN


cdef inline int64_t _max_timestamp(AppendLimits lim, int64_t now) noexcept:
    """The latest CreateTime accepted at `now` (message.timestamp.after.max.ms)."""
    return now + lim.after_max_ms if lim.after_max_ms < INT64_MAX - now else INT64_MAX


cdef object _append_fast(LogState log, object batches, str origin, bint converted):
    """Appends `batches` to `log` as Log.append does, with the log's lock held by
    the caller (`converted`: _convert_unlocked has converted them). Returns an
    AppendInfo (written, indexed, counted; its `flushed` field asks the caller
    to flush, by flush.ms), or ``(prepared, now)`` when the batches were
    validated but the Python path must write them, or None when nothing was
    done. Raises what Log.append raises for invalid batches and failed writes."""
    if log._offline is not None or log._closed or not log._writing or \
            _origin_is(origin, "coordinator"):
        return None                       # (not _writing: the Log's first write)
    cdef bint from_producer = _origin_is(origin, "producer")
    cdef AppendLimits lim = _limits(log)
    if not lim.eligible:
        return None
    clock = log.clock
    cdef int64_t now = _wall_ms() if clock is _wall_clock else clock()
    if now < 0:
        return None                       # a test clock before 1970: the Python path's big ints

    # -- validation (log_validator.validate_append, same parameters)
    cdef pylog_append_params params
    memset(&params, 0, sizeof(params))
    params.next_offset = log._next_offset
    params.leader_epoch = log.leader_epoch
    params.log_append_time = now if lim.log_append_time else -1
    params.max_batch_size = lim.max_message_bytes
    params.min_timestamp = _min_timestamp(lim, now)
    params.max_timestamp = _max_timestamp(lim, now)
    params.require_keys = lim.compact
    params.validate_records = (lim.validate_records and not from_producer) or lim.compact
    cdef PreparedAppend p
    try:
        data = batches if converted else _convert_client_batches(
            batches, lim.target_codec, lim.compact, params.min_timestamp, params.max_timestamp,
            lim.validate_records and not from_producer, lim.max_message_bytes)
        p = _prepare_append(data, &params)
    except LegacyBatchError:
        return None                       # magic 0/1: the Python path up-converts
    if p.size > lim.segment_bytes:
        return (p, now)

    # -- the active segment takes it without a roll
    cdef tuple segments = log._segments
    cdef SegmentState segment = segments[len(segments) - 1]
    lf_obj, oi_obj, ti_obj = segment._log, segment._offset_index, segment._time_index
    if lf_obj is None or oi_obj is None or ti_obj is None:
        return (p, now)
    if _roll_reason(segment, lf_obj, oi_obj, ti_obj, p, now, lim.segment_bytes,
                    lim.segment_ms) is not None:
        return (p, now)
    cdef int64_t unflushed = log._unflushed_records
    if unflushed + p.records >= lim.flush_messages:
        return (p, now)                   # a write with its fdatasync: the Python path times it
    entry = None
    if p.has_producer_ids:
        entry = _in_sequence(log.producer_state.producers, p)
        if entry is None:
            return (p, now)
    try:
        _segment_append(segment, lf_obj, oi_obj, ti_obj, log.engine, p, lim.index_interval, False)
    except OSError as exc:
        log._undo_partial_write(segment)
        raise log._storage_error(exc, "append") from exc

    # -- the Log's counters (Log.append)
    log._next_offset = p.last_offset + 1
    log._unflushed_records = unflushed + p.records
    log.records_appended = <int64_t>log.records_appended + p.records
    log.bytes_appended = <int64_t>log.bytes_appended + p.size
    if entry is not None:
        _remember_batches(entry, p)
    cdef bint flush = now - <int64_t>log._last_flush_ms >= lim.flush_ms
    return _append_info(p, lim.log_append_time, log._log_start_offset, flush)


cdef object _append_info(PreparedAppend p, bint log_append_time, object log_start_offset,
                         bint flush):
    """The AppendInfo of `p`, a namedtuple filled in place (as tuple.__new__
    would, without the two tuples it takes). Every field object exists before
    the allocation: nothing can run the GC while the tuple has empty slots."""
    first, last, max_ts = p.first_offset, p.last_offset, p.max_timestamp
    of_max, lat = p.offset_of_max_timestamp, p.max_timestamp if log_append_time else -1
    records, batches, size, flushed = p.records, p.count, p.size, flush
    info = PyType_GenericAlloc(<PyTypeObject *>_AppendInfo, 10)
    _fill(info, 0, first)
    _fill(info, 1, last)
    _fill(info, 2, max_ts)
    _fill(info, 3, of_max)
    _fill(info, 4, lat)
    _fill(info, 5, log_start_offset)
    _fill(info, 6, records)
    _fill(info, 7, batches)
    _fill(info, 8, size)
    _fill(info, 9, flushed)
    return info


cdef inline void _fill(object t, Py_ssize_t i, object v) noexcept:
    Py_INCREF(v)                        # PyTuple_SET_ITEM takes the reference
    PyTuple_SET_ITEM(t, i, v)


def log_append(LogState log, batches, *, str origin="client", verification_guard=None):
    """Appends Kafka v2 record batches; assigns their offsets. Returns AppendInfo.

    Every batch is validated (length, magic, CRC-32C, ``max.message.bytes``,
    record count vs lastOffsetDelta, records of uncompressed batches). Magic
    0/1 message sets are up-converted first, as Kafka does. ``origin`` is
    ``"client"`` (control batches refused), ``"producer"`` (an in-process
    pylog Producer, whose batches pylog's own encoder just built: their
    records are not walked again, the CRC still is) or ``"coordinator"``.

    A batch with a producer id is checked against the producer state
    (pylog/storage/producer_state.py): epoch, sequence, duplicates, and for
    a transactional batch (attribute bit 4) its transaction: the first one of
    a producer in this partition opens its transaction only with the
    ``verification_guard`` that ``Log.maybe_start_transaction_verification``
    handed out (the coordinator's word that the partition is in it), else
    InvalidTxnStateError.
    """
    # Log.append (pylog/storage/log.py binds it as the method): compressed
    # batches validated and converted before the lock (_convert_unlocked); the
    # append under the Log's lock, by _append_fast or else Log._append_locked; then the
    # listeners; then a flush.ms flush outside the lock, where other appends
    # proceed during the fsync and one fsync covers every append before it.
    # In C: a Python frame for these few steps would be a large share of a
    # small append.
    cdef LogLock lock = log._lock
    converted = _convert_unlocked(log, batches, origin)
    if converted is not None:
        batches = converted
    lock.take()
    try:
        info = _append_fast(log, batches, origin, converted is not None) if _fast_append else None
        if type(info) is not _AppendInfo:
            info = log._append_locked(batches, origin, info, converted is not None,
                                       verification_guard)
            if not (<tuple>info)[_INFO_SIZE]:
                return info             # a retry of batches already in the log
    finally:
        lock.give()
    for event in log._listeners:
        event.set()
    if (<tuple>info)[_INFO_FLUSHED]:
        log.flush((<tuple>info)[_INFO_LAST_OFFSET] + 1)
    return info
