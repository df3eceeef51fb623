"""Log dirs as Kafka's tools see them: describing them, and moving a partition to another
log dir while it is written and read (Kafka's DescribeLogDirs and AlterReplicaLogDirs,
KIP-113). :class:`LogDirMoves` is the keeper the LogManager owns for them (it delegates
its public methods); it sees the store only through :class:`MoveHost`.

A move copies the partition dir into the destination log dir under Kafka's name for a
future replica, ``<topic>-<partition>.<uuid>-future``, on its own thread:

1. **copy**: passes over the source's files, each pass copying what changed since the
   last (a ``.log`` file only grows, so only its new bytes), while producers append
   and consumers read the source as before;
2. **swap**, once a pass has little left, under the manager's lock and the source
   Log's flush and append locks (appends wait; reads go on): the last pass; the source
   is closed (indexes trimmed, producer snapshot at its end) and the files its close
   changed are copied; every file of the future dir, the dir and the destination log
   dir are fsync'ed; then the source dir is renamed ``<topic>-<partition>.<uuid>-delete``
   (**the commit point**) and the future dir ``<topic>-<partition>``; a new Log opens
   there and takes the source's place. Who held the old Log (an append waiting for
   its lock, a parked fetch) gets NOT_LEADER_OR_FOLLOWER, which clients retry.

Crash safety rests on one invariant: the future dir is complete whenever the source dir
no longer exists (it is renamed away only after the future is complete and durable).
So at open (:func:`settle_future_dirs`), a ``-future`` dir whose partition dir exists in
another log dir is an unfinished copy, and the move **resumes** (as Kafka's future
replica does): each ``.log`` of the copy keeps its longest prefix that is verified to be
the source's (every batch valid, CRC-32C included, as recovery checks it; the same
batches at the same positions as the source's, by a header walk of both; the last
64 KiB compared byte for byte) and is truncated there; the copy goes on from there (the
other files, small, are copied again). One whose partition dir exists nowhere, all log
dirs online, is a move cut between its two renames and is renamed into place. No
acknowledged record is lost and no partition is in two dirs.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pylog._core.storage import LogFile, OffsetIndex, TimeIndex
from pylog.errors import (
    CorruptRecordError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirNotFoundError,
    NotLeaderOrFollowerError,
)

from . import files, leader_epochs
from .log import Log
from .log_dir import LogDir

__all__ = ["FUTURE_DIR_SUFFIX", "LogDirDescription", "LogDirMoves", "MoveHost", "MoveStats",
           "ReplicaDescription", "parse_future_dir", "settle_future_dirs", "verified_copy_length"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

FUTURE_DIR_SUFFIX = "-future"       # Kafka's UnifiedLog.FutureDirSuffix
#: A pass that leaves fewer bytes than this to copy lets the swap begin (appends wait
#: while the swap copies what is left).
SWAP_WHEN_BELOW = 4 << 20
#: Copy passes before the swap begins whatever is left. It begins earlier when a pass
#: leaves no less than the one before (producers outrun the copy: waiting gains nothing);
#: then appends wait while the swap copies the rest.
MAX_PASSES = 50
_CHUNK = 8 << 20

#: Called with the name of each step a move reaches ("copy-chunk" before each chunk a
#: copy writes, "copy-pass", "swap-copied", "committed", "renamed"): the crash tests stop
#: or slow a process there and SIGKILL it.
stage_hook = None
#: The bytes at the end of a resumed copy's verified prefix compared byte for byte.
_COMPARED_TAIL = 64 << 10


def _stage(name: str) -> None:
    if stage_hook is not None:
        stage_hook(name)


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One partition in one log dir (Kafka's DescribeLogDirsPartition)."""

    topic: str
    partition: int
    size: int                 # bytes of its segments (of the copy so far, for a future one)
    offset_lag: int           # 0 for the current replica; log end - copied end for a future one
    is_future: bool


@dataclass(frozen=True, slots=True)
class MoveStats:
    """What a finished move copied of the segments' data (``.log`` files): ``kept`` bytes
    of an interrupted earlier copy were verified and kept (0 for a move that did not
    resume one); ``copied`` bytes were written (the indexes and other files, copied
    whole, are not counted)."""

    topic: str
    partition: int
    source: str
    dest: str
    kept: int
    copied: int


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir (Kafka's DescribeLogDirsResult): ``error`` is None when online."""

    path: str
    error: str | None
    total_bytes: int = -1
    usable_bytes: int = -1
    replicas: tuple[ReplicaDescription, ...] = field(default=())


class _DirCopy:
    """Keeps a directory a copy of a partition dir, pass after pass.

    A segment's ``.log`` is copied from where the last pass stopped, up to the size its
    LogSegment reports (bytes below it are written; a preallocated file's tail is not
    data); a segment whose LogSegment changed (the cleaner swapped it in) or shrank is
    copied again whole. Every other file is copied whole when its size or mtime changed,
    or always when named in ``always``. Files gone from the source go from the copy."""

    def __init__(self, src: str, dst: str, stop: threading.Event) -> None:
        self.src, self.dst, self.stop = src, dst, stop
        self.logs: dict[int, tuple[object, int]] = {}          # base -> (segment, bytes copied)
        self.others: dict[str, tuple[int, int, int]] = {}      # name -> (ino, size, mtime_ns)
        self.unsynced: set[str] = set()                        # written since their last fsync
        self.kept = 0               # bytes of an earlier copy verified and kept (resume)
        self.written = 0            # bytes of .log files this copy wrote

    def resume(self, segments) -> int:
        """Takes over an interrupted copy in the destination: each segment's ``.log``
        there keeps its verified prefix (:func:`verified_copy_length`) and is truncated
        to it; the passes go on from there. Returns the bytes kept."""
        for seg in segments:
            name = files.filename_prefix_from_offset(seg.base_offset) + files.LOG_SUFFIX
            dst = os.path.join(self.dst, name)
            if not os.path.exists(dst):
                continue
            kept = verified_copy_length(os.path.join(self.src, name), dst, seg.base_offset, seg.size)
            if os.path.getsize(dst) != kept:
                os.truncate(dst, kept)
                self.unsynced.add(name)
            self.logs[seg.base_offset] = (seg, kept)
            self.kept += kept
        return self.kept

    def pending(self, segments) -> int:
        """Bytes of the segments' .log files not yet copied."""
        left = 0
        for seg in segments:
            copied = self.logs.get(seg.base_offset)
            size = seg.size
            left += size - copied[1] if copied and copied[0] is seg and copied[1] <= size else size
        return left

    def copied_bytes(self) -> int:
        return sum(n for _, n in self.logs.values())

    def sync(self, segments, always: frozenset[str] = frozenset()) -> int:
        """One pass; returns the bytes copied. FileNotFoundError: a file went (retention,
        a deletion) between the listing and its copy; the next pass sees the new state."""
        moved = 0
        wanted = set()
        for seg in segments:
            name = files.filename_prefix_from_offset(seg.base_offset) + files.LOG_SUFFIX
            wanted.add(name)
            size = seg.size
            copied = self.logs.get(seg.base_offset)
            start = copied[1] if copied and copied[0] is seg and copied[1] <= size else 0
            if start < size or copied is None:
                written = self._copy(name, start, size)
                self.written += written
                moved += written
            self.logs[seg.base_offset] = (seg, size)
        live = {seg.base_offset for seg in segments}
        for base in [b for b in self.logs if b not in live]:
            del self.logs[base]
        for entry in os.scandir(self.src):
            name = entry.name
            if name in wanted or not entry.is_file(follow_symlinks=False) or \
                    name.endswith((".tmp", files.DELETED_SUFFIX, files.CLEANED_SUFFIX,
                                   files.SWAP_SUFFIX, files.LOG_SUFFIX)):
                continue
            wanted.add(name)
            st = entry.stat(follow_symlinks=False)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self.others.get(name) == key and name not in always:
                continue
            moved += self._copy(name, 0, st.st_size)
            self.others[name] = key
        for name in os.listdir(self.dst):
            if name not in wanted:
                os.remove(os.path.join(self.dst, name))
                self.others.pop(name, None)
                self.unsynced.discard(name)
        return moved

    def fsync(self) -> None:
        """fsyncs the files written since the last call, then the copy's directory (each
        pass calls it outside the swap, so the swap syncs only its last bytes)."""
        for name in sorted(self.unsynced):
            fd = os.open(os.path.join(self.dst, name), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.unsynced.clear()
        files.fsync_dir(self.dst)

    def _copy(self, name: str, start: int, end: int) -> int:
        self.unsynced.add(name)
        src_fd = os.open(os.path.join(self.src, name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (0 if start else os.O_TRUNC)
            dst_fd = os.open(os.path.join(self.dst, name), flags, 0o644)
            try:
                if start:
                    os.ftruncate(dst_fd, start)
                position = start
                while position < end:
                    if self.stop.is_set():
                        raise _MoveCancelled()
                    _stage("copy-chunk")
                    n = _copy_range(src_fd, dst_fd, position, min(_CHUNK, end - position))
                    if n == 0:
                        break                   # the source is shorter: truncated meanwhile
                    position += n
                return position - start
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)


def verified_copy_length(src_log: str, dst_log: str, base_offset: int, src_size: int) -> int:
    """How many bytes at the start of the copy `dst_log` are verified to be the source
    `src_log`'s (a segment of base `base_offset` whose data ends at `src_size`): the
    copy's batches are valid up to there (lengths, magic, CRC-32C, offsets: recovery's
    scan, in C), a header walk of both files over that prefix agrees (batches, end,
    last offset, timestamps), and its last 64 KiB are the same bytes. 0 if not even
    one batch is."""
    try:
        dst = LogFile(dst_log, readonly=True)
    except FileNotFoundError:
        return 0
    try:
        # /dev/null indexes of no capacity: the scan stores no entry.
        scratch = (OffsetIndex.open(os.devnull, base_offset, 0), TimeIndex.open(os.devnull, base_offset, 0))
        try:
            result = dst.recover(base_offset, 2**62, *scratch)
        finally:
            for index in scratch:
                index.close()
        valid = min(result["valid_bytes"], src_size)
        if valid <= 0:
            return 0
        src = LogFile(src_log, readonly=True)
        try:
            walked = src.summarize(0, valid)
            if walked[1] != valid or walked != dst.summarize(0, valid):
                return 0            # not the same batches (the cleaner rewrote the segment)
            tail = min(valid, _COMPARED_TAIL)
            if src.read(valid - tail, tail) != dst.read(valid - tail, tail):
                return 0
            return valid
        finally:
            src.close()
    except CorruptRecordError:
        return 0
    finally:
        dst.close()


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> int:
    try:
        return os.copy_file_range(src_fd, dst_fd, count, offset, offset)
    except OSError as exc:
        if exc.errno not in (errno_mod.EXDEV, errno_mod.ENOSYS, errno_mod.EOPNOTSUPP,
                             errno_mod.EINVAL):
            raise
    data = os.pread(src_fd, count, offset)
    return os.pwrite(dst_fd, data, offset)


class _MoveCancelled(Exception):
    """The move was cancelled (another destination, the topic deleted, the store closing)."""


class _Move:
    def __init__(self, tp: TopicPartition, dest: LogDir, future_path: str) -> None:
        self.tp, self.dest, self.future_path = tp, dest, future_path
        self.stop = threading.Event()
        self.copy: _DirCopy | None = None
        self.synced_offset = 0            # every record below it is in the copy
        self.committed = False            # the source dir is renamed away: the copy is it
        self.resuming = False             # the future dir holds an interrupted copy
        self.thread: threading.Thread | None = None


@dataclass(frozen=True, slots=True)
class MoveHost:
    """The store's side of log-dir moves (LogManager's, bound).

    ``logs`` and ``dir_of`` are the store's partition maps (its own dicts): a swap
    replaces a partition's entries in them, under ``lock``, which also serialises
    every other change to them. ``log(topic, partition)`` raises why a partition is
    unavailable; ``open_log(d, tp, path, config, recovery_point, log_start_offset,
    clean_shutdown)`` opens a Log as the store opens its own; ``moved(tp, source_dir,
    dest_dir)`` follows a swap (cleaner offsets, both dirs' checkpoints);
    ``schedule(delay_s, fn)`` runs `fn` later on the store's background thread."""

    lock: threading.RLock
    dirs: list[LogDir]
    logs: dict[TopicPartition, Log]
    dir_of: dict[TopicPartition, LogDir]
    check_open: Callable[[], None]
    log: Callable[[str, int], Log]
    open_log: Callable[..., Log]
    moved: Callable[[TopicPartition, LogDir, LogDir], None]
    schedule: Callable[[float, Callable[[], None]], None]


class LogDirMoves:
    """The store's log dirs as Kafka's tools see them, and the moves under way."""

    def __init__(self, host: MoveHost) -> None:
        self._host = host
        self._moves: dict[TopicPartition, _Move] = {}
        self._finished: dict[TopicPartition, MoveStats] = {}

    # ------------------------------------------------------------ describing

    def log_dir_of(self, topic: str, partition: int) -> str:
        """The log dir that holds a partition now (during a swap: the source, until the
        copy takes over). UnknownTopicOrPartitionError, or KafkaStorageError for a
        partition that is offline."""
        d = self._host.dir_of.get((topic, partition))
        if d is None:
            self._host.log(topic, partition)   # raises why it is in no dir
        return d.path

    def describe_log_dirs(self, partitions=None) -> list[LogDirDescription]:
        """Every log dir (Kafka's DescribeLogDirs): its state, its file system's total and
        usable bytes, and its partitions (those of `partitions`, an iterable of (topic,
        partition), when given), a moving partition's copy as a future replica of its
        destination dir."""
        wanted = None if partitions is None else set(partitions)
        host = self._host
        by_dir: dict[str, list[ReplicaDescription]] = {d.path: [] for d in host.dirs}
        for tp, lg in list(host.logs.items()):
            d = host.dir_of.get(tp)
            if d is None or (wanted is not None and tp not in wanted):
                continue          # (a source in its swap is closed: listed until replaced)
            by_dir[d.path].append(ReplicaDescription(tp[0], tp[1], lg.size, 0, False))
        for tp, move in list(self._moves.items()):
            lg = host.logs.get(tp)
            copy = move.copy
            if lg is None or copy is None or (wanted is not None and tp not in wanted):
                continue
            lag = max(lg.log_end_offset - move.synced_offset, 0)
            by_dir[move.dest.path].append(ReplicaDescription(tp[0], tp[1], copy.copied_bytes(),
                                                             lag, True))
        result = []
        for d in host.dirs:
            if not d.online:
                result.append(LogDirDescription(d.path, f"log dir {d.path} is offline: "
                                                f"{d.offline_reason}"))
                continue
            try:
                st = os.statvfs(d.path)
            except OSError as exc:
                result.append(LogDirDescription(d.path, f"log dir {d.path}: {exc}"))
                continue
            result.append(LogDirDescription(
                d.path, None, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize,
                tuple(sorted(by_dir[d.path], key=lambda r: (r.topic, r.partition, r.is_future)))))
        return result

    # --------------------------------------------------------------- moving

    def _log_dir_named(self, path: str) -> LogDir:
        """The log dir at `path` (LogDirNotFoundError if none; KafkaStorageError if offline)."""
        target = os.path.abspath(path)
        for d in self._host.dirs:
            if d.path == target or os.path.realpath(d.path) == os.path.realpath(target):
                if not d.online:
                    raise KafkaStorageError(errno_mod.EIO, f"log dir {d.path} is offline: "
                                            f"{d.offline_reason}", d.path)
                return d
        raise LogDirNotFoundError(f"{path} is not one of the log dirs "
                                  f"({', '.join(d.path for d in self._host.dirs)})")

    def alter_log_dir(self, topic: str, partition: int, log_dir: str) -> bool:
        """Moves a partition to the log dir `log_dir` (Kafka's AlterReplicaLogDirs) while
        it stays writable and readable; returns at once (True when a move started, False
        when it is already there or already moving there). Naming the dir it is in
        cancels a move under way. Raises LogDirNotFoundError, KafkaStorageError (the
        dir is offline, or one is), UnknownTopicOrPartitionError."""
        tp = (topic, partition)
        host = self._host
        with host.lock:
            host.check_open()
            dest = self._log_dir_named(log_dir)
            lg = host.log(topic, partition)
            current = host.dir_of[tp]
            move = self._moves.get(tp)
            if move is not None:
                if move.dest is dest:
                    return False
                self.cancel(tp)
            if current is dest:
                return False
            offline = [d.path for d in host.dirs if not d.online]
            if offline:
                # As Kafka: no future replica while a dir is offline (the partition might
                # have a copy there that comes back).
                raise KafkaStorageError(errno_mod.EIO, "cannot move a partition while a log dir "
                                        "is offline: " + ", ".join(offline), None)
            name = f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
            if len(name.encode()) > 255:      # as Kafka (KAFKA-4893): no room for the suffix
                raise InvalidTopicError("The topic name is too long.")
            move = _Move(tp, dest, os.path.join(dest.path, name))
            move.synced_offset = lg.log_start_offset
            self._moves[tp] = move
            move.thread = threading.Thread(target=self._run_move, args=(move, lg),
                                           name=f"pylog-log-dir-move-{topic}-{partition}",
                                           daemon=True)
            move.thread.start()
            log.info("moving %s-%d from %s to %s (through %s)", topic, partition, current.path,
                     dest.path, move.future_path)
            return True

    def resume(self, copies: list[tuple[LogDir, TopicPartition, str]]) -> None:
        """At open: the interrupted moves :func:`settle_future_dirs` kept, (destination,
        partition, future dir), go on from their copies."""
        host = self._host
        for dest, tp, path in copies:
            with host.lock:
                try:
                    lg = host.log(*tp)
                except (KafkaStorageError, LookupError, ValueError) as exc:
                    log.warning("removed %s: the partition it copies is unavailable (%s)", path, exc)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if host.dir_of.get(tp) is dest or tp in self._moves:
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                move = _Move(tp, dest, path)
                move.resuming = True
                move.synced_offset = lg.log_start_offset
                self._moves[tp] = move
                move.thread = threading.Thread(target=self._run_move, args=(move, lg),
                                               name=f"pylog-log-dir-move-{tp[0]}-{tp[1]}",
                                               daemon=True)
                move.thread.start()

    def last_move(self, topic: str, partition: int) -> MoveStats | None:
        """What the last finished move of a partition (in this process) copied."""
        return self._finished.get((topic, partition))

    def moving(self, topic: str, partition: int) -> str | None:
        """The destination log dir of a move under way, or None."""
        move = self._moves.get((topic, partition))
        return move.dest.path if move else None

    def cancel(self, tp: TopicPartition) -> None:
        """Stops a move (the caller holds the lock); its thread removes the future dir."""
        move = self._moves.pop(tp, None)
        if move is not None:
            move.stop.set()

    def stop(self) -> None:
        """At close: stops every move and waits for its thread (outside the lock: a move
        may be waiting for it to swap)."""
        with self._host.lock:
            moves = list(self._moves.values())
            self._moves.clear()
        for move in moves:
            move.stop.set()
        for move in moves:
            if move.thread is not None:
                move.thread.join()

    def _run_move(self, move: _Move, source: Log) -> None:
        tp = move.tp
        try:
            copy = _DirCopy(source.path, move.future_path, move.stop)
            if move.resuming:
                kept = copy.resume(source.segments)
                log.info("resuming the move of %s-%d to %s: %d bytes of its interrupted copy "
                         "verified and kept", tp[0], tp[1], move.dest.path, kept)
            else:
                files.make_dirs(move.future_path)
                files.fsync_dir(move.dest.path)
            move.copy = copy
            previous = None
            for n in range(MAX_PASSES):
                if move.stop.is_set():
                    raise _MoveCancelled()
                pending = copy.pending(source.segments)
                if pending < SWAP_WHEN_BELOW or (n >= 3 and pending >= previous):
                    break           # little left, or appends outrun the copy: swap now
                previous = pending
                end = source.log_end_offset
                try:
                    copy.sync(source.segments)
                except FileNotFoundError:
                    continue                  # retention took a segment: the next pass
                copy.fsync()
                move.synced_offset = end
                source._check_open()
                _stage("copy-pass")
            self._swap(move, source)
        except _MoveCancelled:
            shutil.rmtree(move.future_path, ignore_errors=True)
            log.info("the move of %s-%d to %s stopped", tp[0], tp[1], move.dest.path)
        except Exception as exc:  # noqa: BLE001 - a failed move leaves the partition where it was
            if move.committed:
                # Past the commit point the copy is the only one: it is never removed;
                # the next open renames it into place (settle_future_dirs).
                log.critical("moving %s-%d to %s failed after its commit point: %s; the "
                             "partition is offline until the store is opened again",
                             tp[0], tp[1], move.dest.path, exc)
                return
            shutil.rmtree(move.future_path, ignore_errors=True)
            with self._host.lock:
                if self._moves.get(tp) is move:
                    del self._moves[tp]
            if isinstance(exc, OSError) and not isinstance(exc, KafkaStorageError):
                log.error("moving %s-%d to %s failed: %s; it stays in %s", tp[0], tp[1],
                          move.dest.path, exc, source.path)
            else:
                log.warning("moving %s-%d to %s stopped: %s", tp[0], tp[1], move.dest.path, exc)

    def _swap(self, move: _Move, source: Log) -> None:
        """The last pass and the swap (see the module's docstring), under the store's
        lock and the source's flush and append locks."""
        tp, dest = move.tp, move.dest
        host = self._host
        with host.lock:
            if self._moves.get(tp) is not move or host.logs.get(tp) is not source:
                raise _MoveCancelled()
            src_dir = host.dir_of[tp]
            with source._flush_lock, source._lock:
                source._check_open()
                segments = source.segments
                copy = move.copy
                copy.sync(segments)
                source.mark_offline(NotLeaderOrFollowerError(
                    f"partition {tp[0]}-{tp[1]} moved to log dir {dest.path}: retry"))
                try:
                    source._close_locked()
                    # What close changed (the active segment's trimmed indexes, the producer
                    # snapshot at the log end, ...), and every file not a sealed segment's.
                    active = files.filename_prefix_from_offset(segments[-1].base_offset)
                    always = frozenset(n for n in os.listdir(source.path) if
                                       files.offset_from_filename(n) is None or n.startswith(active))
                    copy.sync(segments, always)
                    copy.fsync()
                    files.fsync_dir(dest.path)
                except BaseException:
                    # Before the commit point: the source (closed cleanly) serves again.
                    self._reopen_source(tp, src_dir, source)
                    raise
                _stage("swap-copied")
                # The commit point: from here the copy is the partition.
                deleted = os.path.join(src_dir.path, files.renamed_dir_name(
                    tp[0], tp[1], uuid.uuid4().hex, files.DELETE_DIR_SUFFIX))
                os.rename(source.path, deleted)
                move.committed = True
                files.fsync_dir(src_dir.path)
                _stage("committed")
                target = os.path.join(dest.path, files.partition_dir_name(*tp))
                os.rename(move.future_path, target)
                files.fsync_dir(dest.path)
                _stage("renamed")
                config = source.config
                moved = self._open_in_place_of(source, target, dest, tp)
                host.logs[tp] = moved
                host.dir_of[tp] = dest
                self._finished[tp] = stats = MoveStats(tp[0], tp[1], src_dir.path, dest.path,
                                                       copy.kept, copy.written)
                del self._moves[tp]
            host.moved(tp, src_dir, dest)
            host.schedule(config.file_delete_delay_ms / 1000,
                          lambda: shutil.rmtree(deleted, ignore_errors=True))
        log.info("moved %s-%d from %s to %s (%d bytes copied, %d kept from an interrupted copy)",
                 tp[0], tp[1], src_dir.path, dest.path, stats.copied, stats.kept)

    def _open_in_place_of(self, source: Log, path: str, d: LogDir, tp: TopicPartition) -> Log:
        """A Log on `path` (the source's files, closed cleanly) to replace `source`."""
        lg = self._host.open_log(d, tp, path, source.config, recovery_point=source.log_end_offset,
                                 log_start_offset=source.log_start_offset, clean_shutdown=True)
        leader_epochs.attach(lg, path)
        # Who waits for appends (an in-process Consumer, a parked fetch) goes on being
        # woken by the new Log's.
        lg._listeners = source._listeners
        return lg

    def _reopen_source(self, tp: TopicPartition, d: LogDir, source: Log) -> None:
        """A swap failed before its commit point, after closing its source: the source
        opens again in its place (the caller holds the lock)."""
        try:
            self._host.logs[tp] = self._open_in_place_of(source, source.path, d, tp)
        except Exception as exc:  # noqa: BLE001 - the partition stays offline, named
            log.error("%s-%d could not be opened again after its move failed: %s; it is "
                      "offline until the store is opened again", tp[0], tp[1], exc)


def settle_future_dirs(dirs: list[LogDir], futures: list[tuple[LogDir, TopicPartition, str]],
                       found: dict[TopicPartition, tuple[LogDir, str]],
                       claimed: Callable[[TopicPartition], bool]
                       ) -> list[tuple[LogDir, TopicPartition, str]]:
    """At open, after every dir was scanned: a future dir whose partition is in another
    dir (`found`) is an unfinished copy, returned as (destination, partition, path) for
    :meth:`LogDirMoves.resume` (several copies of one partition, or one beside its
    source, go); one whose partition no topic has (not `claimed`) goes; one whose
    partition is in none (every dir online) is a move cut between its renames, and is
    renamed into place (`found` gains it)."""
    by_tp: dict[TopicPartition, list[tuple[LogDir, str]]] = {}
    for d, tp, path in futures:
        by_tp.setdefault(tp, []).append((d, path))
    all_online = all(d.online for d in dirs)
    resumable: list[tuple[LogDir, TopicPartition, str]] = []
    for tp, copies in sorted(by_tp.items()):
        if tp in found and claimed(tp) and len(copies) == 1 and copies[0][0] is not found[tp][0]:
            d, path = copies[0]
            resumable.append((d, tp, path))
            log.warning("found %s: an unfinished move of %s-%d to %s; it resumes", path,
                        tp[0], tp[1], d.path)
            continue
        if tp in found or not claimed(tp):
            for d, path in copies:
                shutil.rmtree(path, ignore_errors=True)
                log.warning("removed %s: an unfinished move of %s-%d to %s (issue the move "
                            "again)", path, tp[0], tp[1], d.path)
            continue
        if not all_online or len(copies) > 1:
            log.error("left %s as it is: %s-%d is in no online log dir, and with %s its "
                      "move cannot be completed safely", ", ".join(p for _, p in copies),
                      tp[0], tp[1], "a log dir offline" if not all_online else
                      "several future copies")
            continue
        d, path = copies[0]
        target = os.path.join(d.path, files.partition_dir_name(*tp))
        os.rename(path, target)
        files.fsync_dir(d.path)
        found[tp] = (d, target)
        log.warning("completed the move of %s-%d to %s: it was cut short after its copy was "
                    "complete", tp[0], tp[1], d.path)
    return resumable


def parse_future_dir(name: str) -> tuple[str, int] | None:
    """``clicks-3.<unique id>-future`` -> (``clicks``, 3); None for anything else (Kafka's
    LogFileUtils.FUTURE_DIR_PATTERN; its id is a UUID without dashes, as pylog's)."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem = name[: -len(FUTURE_DIR_SUFFIX)]
    head, dot, unique = stem.rpartition(".")
    if not dot or not unique or any(c.isspace() for c in unique):
        return None
    return files.parse_partition_dir(head)

