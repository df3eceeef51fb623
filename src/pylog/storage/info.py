"""Small value types the log layer returns (Kafka's LogAppendInfo, TimestampAndOffset, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["AppendInfo", "CommittedRead", "TimestampOffset", "RecoveryReport", "SegmentRecovery"]


class AppendInfo(NamedTuple):
    """What one Log.append wrote (a tuple: built once per append, cheaply)."""

    first_offset: int
    last_offset: int
    max_timestamp: int              # after LogAppendTime, if applied
    offset_of_max_timestamp: int
    log_append_time: int            # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int
    batches: int
    size: int                       # bytes written
    flushed: bool                   # True if an fsync covering these records completed


class CommittedRead(NamedTuple):
    """A read_committed read (Kafka's FetchDataInfo with abortedTransactions): whole
    batches below the last stable offset, and the aborted transactions (AbortedTxn:
    producer id, first offset, ...) that overlap them, whose records a reader skips."""

    records: object                 # a FileSlice
    aborted_transactions: list
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A ListOffsets answer: the record's timestamp and offset (-1 timestamp for -1/-2)."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What recovery found in one segment."""

    base_offset: int
    scanned_bytes: int
    valid_bytes: int
    truncated_bytes: int
    batches: int
    reason: str                     # "clean", "torn tail ...", "corrupt batch", ...
    error: str | None               # the corruption, named with position and CRCs


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening a Log did."""

    clean_shutdown: bool
    recovery_point: int
    segments: int                   # segments loaded
    segments_recovered: tuple[SegmentRecovery, ...]
    segments_deleted: int           # after a truncation, later segments are dropped
    indexes_rebuilt: int            # segments whose index was missing or corrupt
    bytes_scanned: int
    bytes_truncated: int
    seconds: float
    bytes_deleted: int = 0          # bytes of the segments deleted
    # [first, end) ranges of offsets below the log end that no segment holds
    # (a .log removed, emptied or cut); reads of them raise MissingOffsetsError.
    missing_offsets: tuple[tuple[int, int], ...] = ()

    @property
    def truncated(self) -> bool:
        return self.bytes_truncated > 0 or self.segments_deleted > 0

    def summary(self) -> str:
        kind = "clean" if self.clean_shutdown else "unclean"
        text = (f"{kind} shutdown; {self.segments} segments, {len(self.segments_recovered)} "
                f"recovered, {self.bytes_scanned} bytes scanned, {self.bytes_truncated} bytes "
                f"truncated, {self.segments_deleted} segments ({self.bytes_deleted} bytes) deleted "
                f"in {self.seconds:.3f}s")
        problems = [r for r in self.segments_recovered if r.error or r.reason != "clean"]
        if problems:
            text += "; " + "; ".join(f"segment {r.base_offset}: {r.error or r.reason}" for r in problems)
        if self.missing_offsets:
            text += "; missing offsets " + ", ".join(f"{a}..{b - 1}"
                                                      for a, b in self.missing_offsets)
        return text
