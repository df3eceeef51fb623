"""Checking a store's files offline, read-only: what ``pylog verify`` reports
(docs/FORMAT.md, section 10, "What pylog verify checks").

For every partition dir, every segment:

- the .log, batch by batch (the C recovery scan: lengths, magic, CRC-32C,
  offsets increasing and inside the segment's int32 range), and past a damaged
  batch whose header can still be walked, the rest of the file too, so every
  damaged batch is named, not only the first;
- its .index and .timeindex, entry by entry, against the .log
  (pylog.storage.segment_check);
- the continuity of the segments: each one's offsets end where the next
  begins (a gap is a hole: a .log removed, emptied or cut; a compacted log's
  gaps are the cleaner's and are not reported), and no index without its .log.

Findings are **problems** (damage: exit status 1) or **notes**: what a store
that is open, or stopped without a clean shutdown, legitimately looks like
and the next open repairs as a matter of course: the zero padding of an open
O_DIRECT segment, a batch being written (or cut by the crash) at the end of
the last segment, the indexes of the segments that recovery rebuilds anyway
(those above the recovery point). Nothing is changed; nothing raises on what
recovery would truncate.
"""

from __future__ import annotations

import bisect
import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from pylog._core.storage import LogFile, OffsetIndex, TimeIndex
from pylog.errors import CorruptRecordError, UnknownTopicOrPartitionError
from pylog.record import scan_batches
from pylog.record.batch_layout import MAGIC_OFFSET

from . import files
from .checkpoints import read_clean_shutdown, read_offset_checkpoint
from .reader import LogDirsReader
from .segment_check import (OFFSET_ENTRY, TIME_ENTRY, check_offset_entries, check_time_entries,
                            read_index_file)

__all__ = ["FileReport", "check_partition", "check_store"]

_CHUNK = 8 << 20
_HEADER = struct.Struct(">qi")              # base offset, batch length (Kafka's LOG_OVERHEAD)
_SCRATCH_INDEX_BYTES = 8192                 # recovery's index entries are not needed here


@dataclass
class FileReport:
    """One segment (its .log path names it, also when only its indexes are left)."""

    topic: str
    partition: int
    file: str
    bytes: int = 0
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    problems: list[str] = field(default_factory=list)     # damage
    notes: list[str] = field(default_factory=list)        # what the next open repairs routinely

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Expect:
    """What the next open will do with a segment: `trusted` (loaded from its indexes,
    never re-validated: a clean shutdown, or wholly below the recovery point) and
    `last` (the segment appends go to)."""

    trusted: bool
    last: bool


def check_store(log_dirs, topic: str | None = None) -> Iterator[tuple[str, int, list[FileReport]]]:
    """(topic, partition, reports) for every partition of the store (or of `topic`)."""
    reader = LogDirsReader(log_dirs)
    table = reader.topic_table()
    counts = reader.topics()
    for name in ([topic] if topic else sorted(counts)):
        config = table[name].config if name in table else {}
        compacted = "compact" in config.get("cleanup.policy", "delete")
        for p in range(counts.get(name, 0)):
            try:
                directory = reader.partition(name, p).directory
            except UnknownTopicOrPartitionError as exc:
                missing = FileReport(name, p, files.partition_dir_name(name, p))
                missing.problems.append(f"{exc} (pylog creates it empty at open)")
                yield name, p, [missing]
                continue
            yield name, p, check_partition(directory, name, p, compacted=compacted)


def check_partition(directory: str, topic: str, partition: int, *,
                    compacted: bool) -> list[FileReport]:
    """Every segment of one partition dir, and their continuity."""
    log_dir = os.path.dirname(directory)
    clean = read_clean_shutdown(log_dir)
    recovery_point = _checkpoint(log_dir, files.RECOVERY_POINT_CHECKPOINT_FILE, topic, partition)
    log_start = _checkpoint(log_dir, files.LOG_START_OFFSET_CHECKPOINT_FILE, topic, partition)
    cleaned = _checkpoint(log_dir, files.CLEANER_OFFSET_CHECKPOINT_FILE, topic, partition)
    names = os.listdir(directory)
    segment_files = (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
    bases = sorted({b for n in names if n.endswith(segment_files)
                    and (b := files.offset_from_filename(n)) is not None})
    logs = [b for b in bases if files.filename_prefix_from_offset(b) + files.LOG_SUFFIX in names]
    reports: list[FileReport] = []
    with tempfile.TemporaryDirectory(prefix="pylog-verify-") as scratch:
        for base in bases:
            path = files.log_file(directory, base)
            report = FileReport(topic, partition, path)
            reports.append(report)
            if base not in logs:
                prefix = files.filename_prefix_from_offset(base)
                orphans = [n for n in (prefix + files.INDEX_SUFFIX, prefix + files.TIME_INDEX_SUFFIX)
                           if n in names]
                report.problems.append(f"the .log is missing: {' and '.join(orphans)} "
                                       f"{'is' if len(orphans) == 1 else 'are'} orphaned "
                                       "(pylog deletes them at open)")
                continue
            i = bisect.bisect_right(logs, base)
            following = logs[i] if i < len(logs) else None
            expect = _Expect(trusted=clean or (following is not None and
                                               following <= recovery_point),
                             last=following is None)
            try:
                _check_segment(report, directory, base, expect, scratch)
            except FileNotFoundError:
                report.notes.append("deleted while being verified (retention or the cleaner)")
    if not compacted:
        present = {files.log_file(directory, b) for b in logs}
        _check_continuity([r for r in reports if r.file in present], log_start, cleaned)
    return reports


def _checkpoint(log_dir: str, name: str, topic: str, partition: int) -> int:
    try:
        return read_offset_checkpoint(os.path.join(log_dir, name)).get((topic, partition), 0)
    except ValueError:
        return 0                # being rewritten by a live store: assume the least


def _check_continuity(reports: list[FileReport], log_start: int, cleaned: int) -> None:
    """Each segment's offsets must end where the next segment's begin (retention and
    DeleteRecords drop segments from the front, truncation from the back: a gap in
    between is lost data), except below where the log cleaner got (`cleaned`: a
    topic that was compacted keeps the cleaner's gaps after its policy changes)."""
    for a, b in zip(reports, reports[1:]):
        base_a = files.offset_from_filename(os.path.basename(a.file))
        base_b = files.offset_from_filename(os.path.basename(b.file))
        end = a.last_offset + 1 if a.last_offset is not None else base_a
        if end < base_b and base_b > max(log_start, cleaned):
            ends = f"it ends at offset {end - 1}" if a.batches else "it holds no batch"
            a.problems.append(f"offsets {max(end, log_start)}..{base_b - 1} are missing: no "
                              f"segment holds them ({ends}, the next segment starts at "
                              f"{base_b}); reads of them raise MissingOffsetsError")
        elif end > base_b:
            a.problems.append(f"its offsets run to {end - 1}, past the next segment's base "
                              f"offset {base_b}")


def _check_segment(report: FileReport, directory: str, base: int, expect: _Expect,
                   scratch: str) -> None:
    lf = LogFile(report.file, readonly=True)
    try:
        size = report.bytes = lf.size
        walk_end = _check_data(report, lf, base, size, expect, scratch)
        if walk_end:
            first = lf.slice_info(0, walk_end, -1, 1)
            report.first_offset = first[2] if first else None
            last = lf.summarize(0, walk_end)[2]
            report.last_offset = last if last >= 0 else None
        last_offset = report.last_offset if report.last_offset is not None else base - 1
        _check_index(report, lf, files.index_file(directory, base), OFFSET_ENTRY, expect,
                     lambda entries: check_offset_entries(lf, base, entries, walk_end))
        _check_index(report, lf, files.time_index_file(directory, base), TIME_ENTRY, expect,
                     lambda entries: check_time_entries(lf, base, entries, walk_end, last_offset))
    finally:
        lf.close()


def _check_index(report: FileReport, lf: LogFile, path: str, entry: struct.Struct,
                 expect: _Expect, check) -> None:
    name = os.path.basename(path)
    found: list[str] = []
    try:
        entries, found = read_index_file(path, entry)
    except FileNotFoundError:
        found = ["it is missing (pylog rebuilds it at open)"]
    else:
        found += check(entries)
    if not found:
        return
    if expect.trusted:
        report.problems += [f"{name}: {p}" for p in found]
    else:
        # Recovery rebuilds this index at the next open (above the recovery point).
        report.notes += [f"{name}: {p} (rebuilt at the next open, as it is above the "
                         "recovery point)" for p in found]


def _check_data(report: FileReport, lf: LogFile, base: int, size: int, expect: _Expect,
                scratch: str) -> int:
    """Validates every batch; returns where the batch headers stop being walkable (the
    end of the file, or the start of a torn, zero or garbage tail)."""
    oi = OffsetIndex.open(os.path.join(scratch, "scratch.index"), base, _SCRATCH_INDEX_BYTES)
    ti = TimeIndex.open(os.path.join(scratch, "scratch.timeindex"), base, _SCRATCH_INDEX_BYTES)
    try:
        result = lf.recover(base, 1 << 30, oi, ti)      # the scan recovery would do
    finally:
        oi.close()
        ti.close()
    report.batches, report.records = result["batches"], result["records"]
    pos, reason, error = result["valid_bytes"], result["reason"], result["error"]
    name = os.path.basename(report.file)
    while pos < size:
        if reason.startswith("torn tail") or _all_zero(lf, pos, size):
            _tail(report, lf, pos, size, expect)
            return pos
        # Past a damaged batch whose header still gives its length, go on: every
        # damaged batch is named, not only the first.
        try:
            batch = lf.slice_info(pos, size, -1, 1)
        except CorruptRecordError:
            batch = None
        if batch is not None and reason == "corrupt batch":
            # The codec's own words for what is wrong inside it (checksum, records).
            error = scan_batches(lf.read(pos, batch[1] - pos)).error or error
        report.problems.append(f"{_located(error, report.file, pos) if error else reason} "
                               f"(in {name}; {_fate(pos, expect)})")
        if batch is None or batch[0] != pos:
            report.problems.append(f"the {size - pos:,} bytes from byte {pos} cannot be walked "
                                   "as batches: not checked further")
            return pos
        pos, reason, error = _scan(report, lf, batch[1], size)
    return size


def _scan(report: FileReport, lf: LogFile, pos: int, size: int):
    """scan_batches from `pos` to the end: (where it stopped, why, error); why is
    "corrupt batch" or "torn tail" (nothing more walks), or None at the end."""
    fd = lf.fileno()
    while pos < size:
        chunk = os.pread(fd, min(_CHUNK, size - pos), pos)
        scan = scan_batches(chunk)
        if scan.batches == 0 and scan.error is None and scan.incomplete_bytes \
                and len(chunk) >= _HEADER.size:
            need = _HEADER.unpack_from(chunk)[1] + _HEADER.size     # one batch beyond a chunk
            if len(chunk) < need and pos + need <= size:
                scan = scan_batches(os.pread(fd, need, pos))
        report.batches += scan.batches
        report.records += scan.records
        pos += scan.valid_bytes
        if scan.error is not None:
            return pos, "corrupt batch", scan.error
        if scan.valid_bytes == 0:
            return pos, "torn tail", None
    return pos, None, None


def _located(error: CorruptRecordError, path: str, pos: int) -> str:
    """The error's text without the file's path, its batch named by its byte in the file
    (scan_batches counts from the start of the buffer it was given)."""
    text = str(error).removeprefix(f"{path}: ")
    if text.startswith("batch at byte ") and ":" in text:
        text = f"batch at byte {pos}:" + text.split(":", 1)[1]
    return text


def _fate(pos: int, expect: _Expect) -> str:
    if expect.trusted:
        return ("below the recovery point: recovery keeps every byte, and reads of this "
                "batch raise CorruptRecordError")
    return (f"recovery would truncate the segment at byte {pos}"
            f"{'' if expect.last else ' and delete the segments after it'}")


def _tail(report: FileReport, lf: LogFile, pos: int, size: int, expect: _Expect) -> None:
    """The bytes from `pos` to the end are not a whole batch: zeros (padding), one batch
    cut short, or garbage. The first two are what an open or crashed store's last
    segment may end with; anything else, and anything in another segment, is damage."""
    rest = size - pos
    if _all_zero(lf, pos, size):
        kind, why = "zeros", ("zero padding after the last batch (an open O_DIRECT "
                              "segment's last block, or preallocation)")
    elif _one_cut_batch(lf, pos, size):
        kind, why = "one batch cut short", ("an incomplete batch at the end (a write in "
                                            "progress, or cut by a crash)")
    else:
        kind, why = "garbage", None
    if why is not None and expect.last and not expect.trusted:
        report.notes.append(f"{rest:,} bytes of {why}: recovery will truncate them")
    else:
        report.problems.append(f"{rest:,} bytes after byte {pos} are not a whole batch "
                               f"({kind}; a torn tail: {_fate(pos, expect)})")


def _one_cut_batch(lf: LogFile, pos: int, size: int) -> bool:
    """The tail is the start of a single batch whose length runs past the end."""
    header = os.pread(lf.fileno(), MAGIC_OFFSET + 1, pos)
    if len(header) < MAGIC_OFFSET + 1:
        return True                     # not even a header: a write cut short
    length, magic = _HEADER.unpack_from(header)[1], header[MAGIC_OFFSET]
    return magic <= 2 and pos + _HEADER.size + length > size


def _all_zero(lf: LogFile, pos: int, size: int) -> bool:
    fd = lf.fileno()
    while pos < size:
        chunk = os.pread(fd, min(_CHUNK, size - pos), pos)
        if not chunk:
            return True
        if chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True
