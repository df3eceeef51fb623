"""Handing a pylog topic to an Apache Kafka broker, unconverted (``pylog export-to-kafka``).

pylog's segment files are Kafka's (docs/FORMAT.md), so a topic moves by copying them:

1. the topic is created in Kafka with the same partition count (Kafka gives it its topic
   id and an empty partition dir per partition), and Kafka is stopped cleanly;
2. :func:`export_topic` locks both sides for the whole copy (each pylog log dir's
   ``.lock`` as a LogManager takes it, so no pylog writer can open the store meanwhile,
   and Kafka's ``.lock`` as Kafka takes it, so Kafka cannot start), checks them, and
   copies each partition's ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` files over Kafka's
   empty ones, keeping Kafka's ``partition.metadata`` (its topic id) and writing pylog's
   log start offset into Kafka's ``log-start-offset-checkpoint``. Each copied partition's
   end offset is read back from the copied files and must be the one pylog's had;
3. Kafka starts after its clean shutdown: it checks each copied segment's indexes and
   serves every record at its original offset.

**Transactions.** Each segment's ``.txnindex`` goes with it: Kafka, started after a
clean shutdown, trusts it and answers read_committed fetches with the aborted
transactions it names. A partition with a transaction still open is refused: Kafka would
start with no producer state, so no last stable offset below it, and a read_committed
consumer would read the open transaction's records.

No producer state is handed over (pylog's ``.snapshot`` files stay behind). The batches
carry pylog's producer ids (0, 1, 2 ...), and a Kafka cluster allocates ids from 0 too:
with the snapshots, Kafka would take its own new producer for pylog's producer of the
same id and refuse its first batch as out of sequence. With none, and with Kafka's clean
shutdown (after which Kafka does not rebuild producer state from the segments: it takes
empty snapshots at their end, UnifiedLog.rebuildProducerState), Kafka starts with no
producer state for the topic. The cost: a pylog producer's retry of a batch written
before the export is not recognised as a duplicate by Kafka; the store is closed before
an export, so its producers are gone, and a producer that moves to Kafka starts anew.

Refused, with the reason: a pylog store that is open or was not shut down cleanly (its
tail could hold a torn batch that only pylog's recovery would cut), a Kafka log dir that
is locked (Kafka running) or was not shut down cleanly (Kafka would then recover the
copied segments and rebuild producer state from their batches), a Kafka partition dir
that is missing or already holds records, a partition count that differs, a partition
with an open transaction.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field

from pylog.errors import LogDirLockedError, PylogError

from . import files
from .checkpoints import read_offset_checkpoint, write_offset_checkpoint
from .log_dir import LogDir, lock_holder
from .reader import LogDirsReader, PartitionReader

__all__ = ["ExportError", "ExportReport", "export_topic"]

# Producer-state .snapshot files are not handed over (see the module docstring); the
# .txnindex files are (Kafka reads aborted transactions from them after a clean start).
_SEGMENT_SUFFIXES = files.SEGMENT_FILE_SUFFIXES


class ExportError(PylogError):
    """The export cannot go ahead; the message says why and what to do."""


@dataclass
class ExportReport:
    topic: str
    partitions: int = 0
    segments: int = 0
    bytes: int = 0
    end_offsets: dict[int, int] = field(default_factory=dict)


def check_pylog_dirs(reader: LogDirsReader) -> None:
    """Refuses a store that is open or was not closed cleanly (a probe: :func:`export_topic`
    checks again under the store's lock)."""
    for d in reader.paths:
        holder = lock_holder(d)
        if holder is not None:
            raise ExportError(_open_message(d, holder))
        _check_clean(d)


def _open_message(directory: str, holder: str) -> str:
    return (f"pylog log dir {directory} is open in another process ({holder}): close the "
            f"store or stop pylog serve first")


def _check_clean(directory: str) -> None:
    if not os.path.exists(os.path.join(directory, files.CLEAN_SHUTDOWN_FILE)):
        raise ExportError(
            f"pylog log dir {directory} was not shut down cleanly (no "
            f"{files.CLEAN_SHUTDOWN_FILE}): open and close it with pylog once (recovery cuts "
            f"any torn tail), then export")


@contextmanager
def _store_locked(paths: list[str]):
    """Each pylog log dir's ``.lock``, exclusively, as a LogManager holds it: a store, a
    standalone Log in the dir or ``pylog serve`` opening meanwhile is refused
    (LogDirLockedError) until the copy is done."""
    held: list[LogDir] = []
    try:
        for path in paths:
            d = LogDir(path)
            try:
                d.lock()
            except LogDirLockedError as exc:
                raise ExportError(_open_message(path, str(exc))) from None
            held.append(d)
            _check_clean(path)
        yield
    finally:
        for d in held:
            d.unlock()


@contextmanager
def _kafka_locked(kafka_log_dir: str):
    """Kafka's own lock on its log dir, held for the copy. Kafka takes it with
    FileChannel.tryLock, a POSIX record lock (fcntl), which flock(2) neither sees nor
    blocks: a running broker is refused here, and a broker started meanwhile fails to
    lock the dir ("A Kafka instance in another process or thread is using this
    directory")."""
    holder = lock_holder(kafka_log_dir)      # a pylog process (flock) holding it
    if holder is not None:
        raise ExportError(f"Kafka log dir {kafka_log_dir} is locked (by {holder}): stop the "
                          f"Kafka broker first")
    fd = os.open(os.path.join(kafka_log_dir, files.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise ExportError(f"Kafka log dir {kafka_log_dir} is locked (its .lock is held by "
                              f"a running Kafka broker): stop the Kafka broker first") from None
        yield
    finally:
        os.close(fd)                         # closing drops the lock


def export_topic(log_dirs, topic: str, kafka_log_dir: str) -> ExportReport:
    """Copies `topic`'s segments from pylog's log dirs into a stopped Kafka broker's log dir
    where the topic was created with the same partition count, holding both sides' locks
    for the whole copy."""
    reader = LogDirsReader(log_dirs)
    kafka_log_dir = os.path.abspath(kafka_log_dir)
    if not os.path.isfile(os.path.join(kafka_log_dir, files.META_PROPERTIES_FILE)):
        raise ExportError(f"{kafka_log_dir} is not a Kafka log dir (no meta.properties)")
    with _store_locked(reader.paths), _kafka_locked(kafka_log_dir):
        return _export_locked(reader, topic, kafka_log_dir)


def _export_locked(reader: LogDirsReader, topic: str, kafka_log_dir: str) -> ExportReport:
    partitions = reader.topics().get(topic)
    if partitions is None:
        raise ExportError(f"topic {topic!r} does not exist in {','.join(reader.paths)}")
    if not os.path.exists(os.path.join(kafka_log_dir, files.CLEAN_SHUTDOWN_FILE)):
        raise ExportError(
            f"Kafka log dir {kafka_log_dir} was not shut down cleanly (no "
            f"{files.CLEAN_SHUTDOWN_FILE}): Kafka would recover the copied segments and "
            f"rebuild producer state from their batches, then hand their producer ids out "
            f"again; start Kafka, let it stop cleanly, then export")
    targets = []
    for p in range(partitions):
        target = os.path.join(kafka_log_dir, files.partition_dir_name(topic, p))
        if not os.path.isfile(os.path.join(target, files.PARTITION_METADATA_FILE)):
            raise ExportError(
                f"{target} is missing (or has no partition.metadata): create the topic in Kafka "
                f"first with the same {partitions} partitions, e.g. kafka-topics.sh --create "
                f"--topic {topic} --partitions {partitions}, then stop Kafka")
        for name in os.listdir(target):
            if name.endswith(files.LOG_SUFFIX) and os.path.getsize(os.path.join(target, name)):
                raise ExportError(f"{target} already holds records ({name}): export only into "
                                  "a topic Kafka has just created")
        targets.append(target)
    extra = os.path.join(kafka_log_dir, files.partition_dir_name(topic, partitions))
    if os.path.isdir(extra):
        raise ExportError(f"Kafka's {topic!r} has more than the {partitions} partitions pylog's has")

    report = ExportReport(topic)
    starts = {}
    try:
        for p, target in enumerate(targets):
            source = reader.partition(topic, p)
            # Read under the store's lock: no writer moves them while the files are copied.
            starts[(topic, p)] = source.log_start_offset()
            end = source.log_end_offset()
            hanging = source.ongoing_transactions()
            if hanging:
                first = hanging[0]
                raise ExportError(
                    f"{source.directory} holds {len(hanging)} open transaction(s), the oldest "
                    f"of producer {first.producer_id} from offset "
                    f"{first.current_txn_start_offset}: Kafka starts with no producer state "
                    f"and would serve their records to read_committed consumers as committed; "
                    f"end them (commit or abort through the coordinator) first")
            _empty(target)                            # Kafka's empty segment 0 and its state
            for name in sorted(os.listdir(source.directory)):
                if name.endswith(_SEGMENT_SUFFIXES):
                    src = os.path.join(source.directory, name)
                    shutil.copy2(src, os.path.join(target, name))
                    report.bytes += os.path.getsize(src)
                    report.segments += name.endswith(files.LOG_SUFFIX)
            files.fsync_dir(target)
            copied = PartitionReader(topic, p, target).log_end_offset()
            if copied != end:
                raise ExportError(
                    f"{target}: the copied segments end at offset {copied}, but pylog's "
                    f"{source.directory} ends at {end}: the store changed during the copy "
                    f"(a writer that ignores its lock?); the copied files were removed")
            report.end_offsets[p] = end
            report.partitions += 1
    except BaseException:
        for target in targets:
            _empty(target)
        raise
    checkpoint = os.path.join(kafka_log_dir, files.LOG_START_OFFSET_CHECKPOINT_FILE)
    entries = read_offset_checkpoint(checkpoint)
    entries.update(starts)
    write_offset_checkpoint(checkpoint, entries)
    return report


def _empty(target: str) -> None:
    """Removes everything of a Kafka partition dir but its topic id (partition.metadata)."""
    for name in os.listdir(target):
        if name != files.PARTITION_METADATA_FILE:
            os.unlink(os.path.join(target, name))
