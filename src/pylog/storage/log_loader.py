"""Loading a Log's directory: leftover files, segments, recovery, the state file.

Kafka's ``LogLoader``: what ``Log.__init__`` does to the files before the
log serves anything.

1. :func:`remove_temporary_files`: finish interrupted deletes (``.deleted``),
   drop half-written files (``.cleaned``, ``.tmp``), complete swaps (``.swap``),
   remove indexes whose ``.log`` is gone;
2. :func:`load_segments`: open each segment by base offset; a segment is
   recovered (scanned batch by batch, indexes rebuilt) when its index cannot
   be trusted, or, after an unclean shutdown, when it may hold data past the
   recovery point (its ``.txnindex`` is then rebuilt by the Log from the
   markers, with the producer state: ``LoadedSegments.txn_rebuild``). Only a segment that may hold unflushed data (or the last
   one) is truncated at its first invalid batch, and only then are the
   segments after it deleted. An inactive segment below the recovery point
   (or of a cleanly shut down log) whose index is damaged gets its index
   rebuilt and keeps every byte: corruption there is reported where it is
   read (docs/FORMAT.md, section 10). Every truncation and deletion is logged
   at WARNING with its offsets and bytes, and so is every index rebuilt where
   one was expected to be sound;
3. :func:`find_holes`: offsets below the log end that no segment holds (a
   segment's .log removed, emptied or cut below the recovery point) are
   logged at WARNING with the files around them; reads of them raise
   MissingOffsetsError (Log.read). A compacted log's gaps are not holes.

A Log opened on its own keeps its recovery point, log start offset and
clean-shutdown flag in ``pylog-log-state`` (:func:`read_log_state`,
:func:`write_log_state`; FORMAT.md, section 11); under a LogManager they come
from Kafka's checkpoint files instead.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from pylog._core.storage import LogFile
from pylog.errors import CorruptRecordError

from . import files
from .checkpoints import read_offset_checkpoint
from .config import LogConfig
from .info import SegmentRecovery
from .segment import LogSegment

log = logging.getLogger(__name__)

__all__ = ["LoadedSegments", "cleaned_up_to", "delete_segment_files", "find_holes",
           "load_segments", "read_log_state", "remove_temporary_files", "write_log_state"]


@dataclass
class LoadedSegments:
    """What :func:`load_segments` found: the segments in offset order (none for an
    empty dir), what it recovered, and how many segments it deleted."""

    segments: list[LogSegment] = field(default_factory=list)
    recovered: list[SegmentRecovery] = field(default_factory=list)
    indexes_rebuilt: int = 0
    deleted: int = 0
    bytes_deleted: int = 0
    holes: list[tuple[int, int]] = field(default_factory=list)    # [first, end) missing
    # Segments whose .txnindex the Log rebuilds from their markers: those that may hold
    # unflushed data (recovered and possibly truncated) and any whose .txnindex is torn.
    txn_rebuild: list[int] = field(default_factory=list)
    txn_indexes: set[int] = field(default_factory=set)    # segments with a .txnindex file


def remove_temporary_files(path: str) -> None:
    """Kafka's first loading step: finish interrupted deletes, drop orphans, and
    complete the log cleaner's swaps: a ``<base>.log.swap`` replaces every segment
    whose base lies in its offsets (the group it was cleaned from), and its index
    swaps replace theirs (pylog.storage.cleaner)."""
    names = os.listdir(path)
    for name in names:
        full = os.path.join(path, name)
        if name.endswith((files.DELETED_SUFFIX, files.CLEANED_SUFFIX)) or name.endswith(".tmp"):
            os.remove(full)
    for name in sorted(os.listdir(path)):
        if name.endswith(files.LOG_SUFFIX + files.SWAP_SUFFIX):
            _complete_swap(path, name)
    for name in os.listdir(path):
        if name.endswith(files.SWAP_SUFFIX):          # an index swap whose .log swap is done
            full = os.path.join(path, name)
            os.replace(full, full[: -len(files.SWAP_SUFFIX)])
    names = os.listdir(path)
    logs = {n[: -len(files.LOG_SUFFIX)] for n in names if n.endswith(files.LOG_SUFFIX)}
    for name in sorted(names):
        if name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX)):
            if name.rsplit(".", 1)[0] not in logs:
                # Kafka's LogLoader too: its .log is gone (a crash while deleting the
                # segment, or a removed file: then its offsets are a hole, see find_holes).
                log.warning("%s: found an orphaned index file %s, with no corresponding log "
                            "file; deleting it", path, name)
                os.remove(os.path.join(path, name))


def _complete_swap(path: str, name: str) -> None:
    """Replaces the segments a cleaned ``.log.swap`` covers, then takes its place."""
    full = os.path.join(path, name)
    base = files.offset_from_filename(name[: -len(files.SWAP_SUFFIX)])
    swap = LogFile(full, readonly=True)
    try:
        batches, _end, last_offset, *_ = swap.summarize(0, swap.size)   # headers only
    finally:
        swap.close()
    end = last_offset + 1 if batches else base + 1
    for other in os.listdir(path):
        b = files.offset_from_filename(other)
        if b is not None and other.endswith(files.LOG_SUFFIX) and base <= b < end:
            delete_segment_files(path, b)
    log.warning("%s: completed an interrupted log cleaning: segment %d (offsets %d..%d) "
                "replaces the segments it was cleaned from", path, base, base, end - 1)
    os.replace(full, full[: -len(files.SWAP_SUFFIX)])


def delete_segment_files(path: str, base: int) -> None:
    """Removes the ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` of segment `base` now."""
    for name in (files.log_file(path, base), files.index_file(path, base),
                 files.time_index_file(path, base), files.txn_index_file(path, base)):
        if os.path.exists(name):
            os.remove(name)


def load_segments(path: str, config: LogConfig, now: int, recovery_point: int,
                  clean_shutdown: bool, log_start_offset: int = 0) -> LoadedSegments:
    """Opens every segment of the partition dir `path`, recovering those that need it.
    Inactive segments come back with their files closed (LogSegment.log reopens); on an
    error every segment opened so far is closed."""
    names = os.listdir(path)
    bases = sorted(b for b in (files.offset_from_filename(n) for n in names
                               if n.endswith(files.LOG_SUFFIX)) if b is not None)
    out = LoadedSegments()
    out.txn_indexes = {b for b in (files.offset_from_filename(n) for n in names
                                   if n.endswith(files.TXN_INDEX_SUFFIX)) if b is not None}
    truncated_at: int | None = None
    try:
        for i, base in enumerate(bases):
            if truncated_at is not None:
                size = os.path.getsize(files.log_file(path, base))
                log.warning("%s: deleting segment %d (%d bytes, offsets from %d): it follows "
                            "the segment truncated at offset %d, above the recovery point %d",
                            path, base, size, base, truncated_at, recovery_point)
                delete_segment_files(path, base)
                out.deleted += 1
                out.bytes_deleted += size
                continue
            segment, index_problem = LogSegment.open(path, base, config, now)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            # Every byte of an inactive segment below the recovery point was
            # flushed: it is never truncated, and later segments never dropped.
            durable = next_base is not None and (clean_shutdown or next_base <= recovery_point)
            must_recover = index_problem is not None or (not clean_shutdown and not durable)
            if must_recover:
                out.indexes_rebuilt += index_problem is not None
                if index_problem is not None and (clean_shutdown or durable):
                    # Kafka warns too ("Found a corrupted index file ..."); above the
                    # recovery point after a crash an index is rebuilt anyway.
                    log.warning("%s: rebuilding the indexes of segment %d from its .log: %s",
                                path, base, index_problem)
                result = segment.recover(truncate=not durable)
                out.recovered.append(result)
                if durable and result.reason != "clean":
                    log.warning("%s: segment %d (below the recovery point %d) is damaged at "
                                "byte %d: %s; its index was rebuilt and every byte kept, reads "
                                "report the corruption there", path, base, recovery_point,
                                result.valid_bytes, result.error or result.reason)
                elif result.truncated_bytes:
                    log.warning("%s: truncated segment %d at byte %d (offset %d), dropping "
                                "%d bytes: %s", path, base, result.valid_bytes,
                                segment.next_offset, result.truncated_bytes,
                                result.error or result.reason)
                if result.truncated_bytes and next_base is not None:
                    truncated_at = segment.next_offset   # everything after it is dropped
            if (must_recover and not durable) or \
                    (base in out.txn_indexes and not segment.txn_index_whole()):
                out.txn_rebuild.append(base)
            if next_base is not None:
                segment.release_handles()     # inactive: files reopen on first use
            out.segments.append(segment)
    except BaseException:
        for segment in out.segments:
            segment.close()
        raise
    if "compact" not in config.cleanup_policy:
        cleaned = None
        for before, after in find_holes(out.segments):
            if after.base_offset <= log_start_offset:
                continue                # below the log start: never read again
            if cleaned is None:
                cleaned = cleaned_up_to(path)
            if after.base_offset <= cleaned:
                continue                # the cleaner's gap, from before a policy change
            out.holes.append((max(before.next_offset, log_start_offset), after.base_offset))
            log.warning("%s: offsets %d..%d are missing: %s (%d bytes) ends at offset %d and "
                        "the next segment, %s, starts at offset %d (a .log removed, emptied or "
                        "cut); reads of these offsets raise MissingOffsetsError", path,
                        out.holes[-1][0], after.base_offset - 1, os.path.basename(before.path),
                        before.size, before.next_offset - 1, os.path.basename(after.path),
                        after.base_offset)
    return out


def cleaned_up_to(path: str) -> int:
    """The offset below which the log cleaner has cleaned partition dir `path` (its
    entry in the log dir's cleaner-offset-checkpoint; 0 without one). A topic whose
    cleanup.policy lost ``compact`` keeps the gaps cleaning left below it."""
    tp = files.parse_partition_dir(os.path.basename(path))
    checkpoint = os.path.join(os.path.dirname(path), files.CLEANER_OFFSET_CHECKPOINT_FILE)
    try:
        return read_offset_checkpoint(checkpoint).get(tp, 0) if tp else 0
    except ValueError:
        return 0


def find_holes(segments: list[LogSegment]) -> list[tuple[LogSegment, LogSegment]]:
    """The consecutive segments (a, b) between which offsets are missing: a ends
    (its next offset) below b's base. Retention and DeleteRecords only drop whole
    segments from the front and truncation only from the back, so in a log that
    is not compacted every such gap is damage."""
    return [(a, b) for a, b in zip(segments, segments[1:]) if a.next_offset < b.base_offset]


def _state_path(path: str) -> str:
    return os.path.join(path, files.LOG_STATE_FILE)


def read_log_state(path: str) -> dict[str, int]:
    """The standalone state file of partition dir `path` ({} when there is none):
    Kafka's checkpoint text format (version line, count line, then one
    ``key value`` line per entry)."""
    state = _state_path(path)
    try:
        with open(state, encoding="ascii") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != "0":
        raise CorruptRecordError(f"{state}: unknown version line {lines[:1]!r}")
    count = int(lines[1])
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != 2 for e in entries):
        raise CorruptRecordError(f"{state}: expected {count} 'key value' lines, "
                                 f"found {len(entries)}")
    return {key: int(value) for key, value in entries}


def write_log_state(path: str, recovery_point: int, log_start_offset: int, clean: bool) -> None:
    """Replaces the state file atomically (write, fsync, rename, fsync the dir)."""
    body = (f"0\n3\nrecovery-point {recovery_point}\nlog-start-offset {log_start_offset}\n"
            f"clean-shutdown {int(clean)}\n")
    files.write_file_atomically(_state_path(path), body.encode("ascii"))
