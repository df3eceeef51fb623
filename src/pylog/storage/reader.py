"""Read-only access to log dirs that another process owns (docs/FORMAT.md, section 12).

A Spark executor, a ``pylog dump-log`` or any second process can read a
topic's segment files while a Producer or ``pylog serve`` appends to them.
The reader takes no lock, recovers nothing and writes nothing: every file is
opened ``O_RDONLY`` and read with ``pread(2)`` (never mapped, so a writer
trimming an index or a segment cannot fault the reader).

**Consistent end.** The writer appends whole batches with one write each and
Linux grows a file's size only behind copied data, so every byte below the
size a reader observes is written. The end a reader may read to is the end of
the last *complete* batch of the newest segment (a header walk, from the last
offset-index entry): a batch still being written is past it. Batches read
are CRC-checked by the decoder; a bad CRC below that end is corruption, not a
write in progress, and raises CorruptRecordError.

**Transactions.** :meth:`PartitionReader.last_stable_offset` rebuilds the producer
state read-only (the newest snapshot at or below the end, then the batch headers after
it: no file is written), and ``read_arrow(isolation_level="read_committed")`` reads
below it, skipping the aborted transactions that the ``.txnindex`` files name (in C).

**Rolls and deletes under the reader.** Segment lists are re-read when a file
is missing; a descriptor already open stays readable after the writer unlinks
it. An offset below the first remaining segment (or the checkpointed log start
offset) raises OffsetOutOfRangeError: retention deleted it.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable, Iterator

from pylog._core.storage import LogFile
from pylog.errors import (CorruptRecordError, OffsetOutOfRangeError, PylogError,
                          UnknownTopicOrPartitionError)

from . import files
from .checkpoints import read_offset_checkpoint
from .dir_tables import read_copy
from .producer_state import ProducerInfo, ProducerStateManager, replay_batches
from .segment_check import entry_is_wrong
from .topics import TopicTable
from .transaction_index import ENTRY_SIZE, AbortedTxn, parse_entries

__all__ = ["LogDirsReader", "PartitionReader", "NotALogDirError", "index_entries"]

_MAX_RELISTS = 16        # segments vanishing under one read: the cleaner merging them
_INT64_MAX = 2**63 - 1
_OFFSET_ENTRY = struct.Struct(">iI")      # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")        # timestamp, relative offset
_SEGMENT_LOG = re.compile(r"^(\d{20})\.log$")


class NotALogDirError(PylogError, ValueError):
    """A path given as a log dir is missing or holds no pylog/Kafka log dir."""


def _split_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = str(paths).split(",")
    out = [os.path.abspath(str(p).strip()) for p in paths if str(p).strip()]
    if not out:
        raise NotALogDirError("no log dir given")
    return out


class LogDirsReader:
    """The topics and partitions of one store's log dirs, read-only."""

    def __init__(self, paths: str | os.PathLike | Iterable[str | os.PathLike]) -> None:
        self.paths = _split_paths(paths)
        self._dirs: dict[tuple[str, int], str] | None = None
        for path in self.paths:
            if not os.path.isdir(path):
                raise NotALogDirError(f"log dir {path} does not exist (or is not a directory)")
            names = set(os.listdir(path))
            if not names & {files.META_PROPERTIES_FILE, files.TOPICS_FILE}:
                raise NotALogDirError(
                    f"{path} is not a log dir: it has neither {files.META_PROPERTIES_FILE} nor "
                    f"{files.TOPICS_FILE} (give the directory pylog.open() or pylog serve was given)")

    # A context manager like pylog.remote.RemoteTopics (which holds connections
    # inside it); reading files holds nothing between calls.
    def __enter__(self) -> LogDirsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _partition_dirs(self, refresh: bool = False) -> dict[tuple[str, int], str]:
        """(topic, partition) -> its dir, listed once and again only on a miss (a topic
        created since): planning asks for every partition several times."""
        if refresh or self._dirs is None:
            found: dict[tuple[str, int], str] = {}
            for path in self.paths:
                for name in os.listdir(path):
                    tp = files.parse_partition_dir(name)
                    if tp is not None and os.path.isdir(os.path.join(path, name)):
                        found.setdefault(tp, os.path.join(path, name))
            self._dirs = found
        return self._dirs

    def topic_table(self) -> dict:
        """The newest topic table of the dirs (highest epoch): name -> its row (topic id,
        partition count, config overrides); {} when no dir has one."""
        tables = [t for t in (read_copy(TopicTable, p) for p in self.paths) if t is not None]
        return dict(max(tables, key=lambda t: t.epoch).topics) if tables else {}

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count: the newest topic table of the dirs, plus any
        partition dir on disk (a store written before its table, or by Kafka)."""
        out = {name: t.partitions for name, t in self.topic_table().items()}
        for topic, partition in self._partition_dirs(refresh=True):
            out[topic] = max(out.get(topic, 0), partition + 1)
        return out

    def partition(self, topic: str, partition: int) -> PartitionReader:
        directory = self._partition_dirs().get((topic, partition)) or \
            self._partition_dirs(refresh=True).get((topic, partition))
        if directory is None:
            if topic not in self.topics():
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} does not exist in {','.join(self.paths)}")
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} has no directory in "
                f"{','.join(self.paths)}")
        return PartitionReader(topic, partition, directory)


def index_entries(path: str, time_index: bool = False) -> list[tuple[int, int]]:
    """Every used entry of an .index ((relative offset, position)) or a .timeindex
    ((timestamp, relative offset)) file: a zero entry after the first ends them (the rest
    of a preallocated index). For tools (dump-log, verify); readers use _index_floor."""
    entry = _TIME_ENTRY if time_index else _OFFSET_ENTRY
    with open(path, "rb") as f:
        raw = f.read()
    out = []
    for i in range(len(raw) // entry.size):
        e = entry.unpack_from(raw, i * entry.size)
        if i and e == (0, 0):
            break
        out.append(e)
    return out


def _pread_entry(fd: int, entry: struct.Struct, i: int) -> tuple[int, int] | None:
    raw = os.pread(fd, entry.size, i * entry.size)
    return entry.unpack(raw) if len(raw) == entry.size else None


def _index_floor(directory: str, base: int, target: int, log_size: int) -> tuple[int, int]:
    """(offset, position) of the largest offset-index entry <= target whose position
    is inside ``log_size``; (base - 1, 0) without one.

    Binary search with pread: an unused (zero) slot after entry 0 sorts last,
    as the active segment's index is preallocated with zeros."""
    try:
        fd = os.open(files.index_file(directory, base), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return base - 1, 0
    try:
        lo, hi = 0, os.fstat(fd).st_size // _OFFSET_ENTRY.size - 1
        best = (base - 1, 0)
        rel_target = target - base
        while lo <= hi:
            mid = (lo + hi) // 2
            e = _pread_entry(fd, _OFFSET_ENTRY, mid)
            used = e is not None and (mid == 0 or e != (0, 0))
            if used and e[0] <= rel_target:
                if e[1] < log_size:
                    best = (base + e[0], e[1])
                lo = mid + 1
            else:
                hi = mid - 1
        return best
    finally:
        os.close(fd)


def _checked_floor(lf: LogFile, directory: str, base: int, target: int) -> tuple[int, int]:
    """_index_floor, with its entry checked against the .log (one header read): an
    entry that does not name the batch at its position is skipped for a walk from
    byte 0 (the owner rebuilds such an index when it meets it; a reader cannot)."""
    offset, position = _index_floor(directory, base, target, lf.size)
    if position and entry_is_wrong(lf, offset, position, lf.size):
        return base - 1, 0
    return offset, position


def _index_floor_position(lf: LogFile, directory: str, base: int, target: int) -> int:
    return _checked_floor(lf, directory, base, target)[1]


def _time_index_last(directory: str, base: int) -> int | None:
    """The largest timestamp of a rolled segment (its trimmed time index's last
    entry), or None when the index is missing or empty."""
    try:
        fd = os.open(files.time_index_file(directory, base), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        n = os.fstat(fd).st_size // _TIME_ENTRY.size
        e = _pread_entry(fd, _TIME_ENTRY, n - 1) if n else None
        return e[0] if e is not None and e != (0, 0) else None
    finally:
        os.close(fd)


class PartitionReader:
    """One partition's segments, read-only. Cheap to build; every call re-reads the dir."""

    def __init__(self, topic: str, partition: int, directory: str) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory

    def __repr__(self) -> str:
        return f"PartitionReader({self.topic!r}, {self.partition}, {self.directory!r})"

    def segment_bases(self) -> list[int]:
        """Base offsets of the segments on disk, ascending (``.deleted`` ones excluded)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            raise UnknownTopicOrPartitionError(
                f"{self.topic}-{self.partition}: {self.directory} was deleted") from None
        return sorted(int(m.group(1)) for m in map(_SEGMENT_LOG.match, names) if m)

    def _open(self, base: int) -> LogFile | None:
        try:
            return LogFile(files.log_file(self.directory, base), readonly=True)
        except FileNotFoundError:
            return None       # deleted (or renamed .deleted) since the listing

    def log_start_offset(self) -> int:
        """The first offset still readable: the first segment's base, or the log start
        offset the owner checkpointed (DeleteRecords) when that is later."""
        bases = self.segment_bases()
        start = bases[0] if bases else 0
        checkpoint = os.path.join(os.path.dirname(self.directory),
                                  files.LOG_START_OFFSET_CHECKPOINT_FILE)
        try:
            start = max(start, read_offset_checkpoint(checkpoint).get(
                (self.topic, self.partition), start))
        except ValueError:
            pass                 # being rewritten by its owner; segment bases suffice
        return start

    def log_end_offset(self) -> int:
        """One past the last offset of the last complete batch (the consistent end)."""
        for _attempt in range(100):
            bases = self.segment_bases()
            if not bases:
                return 0
            lf = self._open(bases[-1])
            if lf is None:
                continue          # rolled or deleted since the listing: list again
            try:
                # The writer may have indexed a batch that was not complete when the
                # file's size was read: step back an entry until a batch is whole.
                offset, pos = _checked_floor(lf, self.directory, bases[-1], _INT64_MAX)
                last = lf.summarize(pos, lf.size)[2]
                while last < 0 and pos > 0:
                    offset, pos = _checked_floor(lf, self.directory, bases[-1], offset - 1)
                    last = lf.summarize(pos, lf.size)[2]
            finally:
                lf.close()
            # An empty newest segment was rolled at the log end: its base is the end.
            return last + 1 if last >= 0 else bases[-1]
        raise OSError(f"{self.directory}: segments kept changing while the end was read")

    def _producer_state(self, end: int) -> ProducerStateManager:
        """The producer table as of offset `end`, rebuilt without writing anything: the
        newest readable snapshot at or below it, then the headers after it."""
        state = ProducerStateManager(self.directory)
        start = self.log_start_offset()
        for offset in reversed([o for o in state.snapshot_offsets() if o <= end]):
            try:
                state.read_snapshot(offset)
                start = offset
                break
            except (CorruptRecordError, OSError):
                state.clear()
        for base in self.segment_bases():
            if base >= end:
                break
            lf = self._open(base)
            if lf is None:
                continue
            try:
                state.replay(b for b in replay_batches(lf, lf.size, start) if b[0] < end)
            finally:
                lf.close()
        return state

    def ongoing_transactions(self) -> list[ProducerInfo]:
        """The producers whose transaction is open at the consistent end, oldest first."""
        infos = self._producer_state(self.log_end_offset()).describe()
        return sorted((p for p in infos if p.current_txn_start_offset >= 0),
                      key=lambda p: p.current_txn_start_offset)

    def last_stable_offset(self) -> int:
        """Where a read_committed reader stops: the first offset of the oldest open
        transaction (not below the log start), else the consistent end."""
        end = self.log_end_offset()
        first = self._producer_state(end).first_unstable_offset
        return end if first < 0 else min(max(first, self.log_start_offset()), end)

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper_bound), from the .txnindex
        files of the segment holding `start` on (Kafka's collectAbortedTransactions)."""
        try:
            names = set(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        bases = self.segment_bases()
        floor = max([b for b in bases if b <= start], default=bases[0] if bases else 0)
        out: list[AbortedTxn] = []
        for base in bases:
            name = f"{files.filename_prefix_from_offset(base)}{files.TXN_INDEX_SUFFIX}"
            if base < floor or name not in names:
                continue
            path = os.path.join(self.directory, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            # The owner may be appending an entry: a partial one at the end is not read.
            entries = parse_entries(data[:len(data) - len(data) % ENTRY_SIZE], path, base)
            for txn in entries:
                if txn.last_offset >= start and txn.first_offset < upper_bound:
                    out.append(txn)
                if txn.last_stable_offset >= upper_bound:
                    return out
        return out

    def offset_for_timestamp(self, timestamp: int, start: int | None = None) -> int | None:
        """The first offset at or after ``start`` whose timestamp is >= ``timestamp``
        (Kafka's offsetsForTimes), or None when every record is older."""
        from pylog.record import decode_arrow
        start = self.log_start_offset() if start is None else start
        bases = self.segment_bases()
        for i, base in enumerate(bases):
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            if nxt is not None and nxt <= start:
                continue
            if nxt is not None:
                largest = _time_index_last(self.directory, base)
                if largest is not None and largest < timestamp:
                    continue
            lf = self._open(base)
            if lf is None:
                continue
            try:
                found = lf.find_timestamp(0, lf.size, timestamp, start)
                if found is None:
                    continue
                rows = decode_arrow(lf.read(found[0], found[1]))
            finally:
                lf.close()
            offsets = rows.column(0).to_numpy()
            stamps = rows.column(1).cast("int64").to_numpy()
            hits = ((stamps >= timestamp) & (offsets >= start)).nonzero()[0]
            if len(hits):
                return int(offsets[hits[0]])
        return None

    def read_arrow(self, start: int, end: int, max_bytes: int = 8 << 20,
                   timestamp_type: bool = True,
                   isolation_level: str = "read_uncommitted") -> Iterator:
        """The records with offsets in [start, end) as pyarrow RecordBatches of the C
        decoder (``pylog.record.decode_arrow`` columns), about ``max_bytes`` of batches
        each. Raises OffsetOutOfRangeError when ``start`` was deleted, and when a
        segment the range needs disappears before it is opened. read_committed reads
        below the last stable offset only (plan ranges with :meth:`last_stable_offset`)
        and skips aborted transactions' records."""
        from pylog.record import decode_arrow, slice_offsets
        committed = isolation_level == "read_committed"
        if committed:
            end = min(end, self.last_stable_offset())
        if start >= end:
            return
        first = self.log_start_offset()
        if start < first:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: offset {start} is no longer in the log "
                f"(log start offset {first}: deleted by retention or DeleteRecords)",
                offset=start, log_start_offset=first)
        bases = self.segment_bases()
        target = start
        relists = i = 0
        while i < len(bases):
            base = bases[i]
            nxt = bases[i + 1] if i + 1 < len(bases) else _INT64_MAX
            if nxt <= target:
                i += 1
                continue
            if base >= end:
                break
            lf = self._open(base)
            if lf is None:
                # Gone since the listing: deleted by retention (the log start moved past
                # `target`: data lost to this reader) or merged by the log cleaner into
                # an earlier segment, which holds its offsets now: list again.
                first = self.log_start_offset()
                if target < first or relists >= _MAX_RELISTS:
                    raise OffsetOutOfRangeError(
                        f"{self.topic}-{self.partition}: segment {base} was deleted while "
                        f"offsets {target}..{end - 1} were being read (log start offset "
                        f"{first})", offset=target, log_start_offset=first)
                relists += 1
                bases, i = self.segment_bases(), 0
                continue
            try:
                pos = _index_floor_position(lf, self.directory, base, target)
                while target < end:
                    info = lf.slice_info(pos, lf.size, target, max_bytes, end)
                    if info is None:
                        # The next batch straddles `end`: read it alone and trim.
                        info = lf.slice_info(pos, lf.size, target, 1)
                        if info is None:
                            break     # this segment holds nothing more
                    spos, epos, _first, last, _n = info
                    aborted = self.aborted_transactions(target, last + 1) if committed else None
                    rows = decode_arrow(lf.read(spos, epos - spos), timestamp_type=timestamp_type,
                                        aborted_transactions=aborted)
                    yield slice_offsets(rows, target, end)
                    target, pos = last + 1, epos
            finally:
                lf.close()
            if target >= end:
                return
            i += 1

