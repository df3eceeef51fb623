"""Planning on the driver: which topic-partitions, which offsets, how many tasks.

Pure Python over a :class:`pylog.storage.LogDirsReader` (or, in remote mode, a
:class:`pylog.remote.RemoteTopics`, which answers the same questions), no Spark: the
batch and streaming readers call it. Every error raised
here reaches the user at planning time, naming the option or topic.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pylog.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from pylog.storage import LogDirsReader

from .options import EARLIEST, LATEST, OptionError, SourceOptions

__all__ = ["OffsetRange", "resolve_partitions", "starting_offsets", "ending_offsets",
           "latest_offsets", "check_range", "check_order", "split_ranges", "TopicPartitionKey"]

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one partition: one Spark task. Plain and picklable."""

    topic: str
    partition: int
    start: int
    end: int
    directory: str

    @property
    def size(self) -> int:
        return self.end - self.start


def resolve_partitions(reader: LogDirsReader, opts: SourceOptions) -> list[TopicPartitionKey]:
    """The partitions ``subscribe``/``subscribePattern``/``assign`` name, sorted."""
    topics = reader.topics()
    where = ",".join(reader.paths)
    if opts.subscribe is not None:
        missing = [t for t in opts.subscribe if t not in topics]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"option 'subscribe': topic {missing[0]!r} does not exist in {where} "
                f"(topics: {', '.join(sorted(t for t in topics if not t.startswith('__'))) or 'none'})")
        return sorted((t, p) for t in set(opts.subscribe) for p in range(topics[t]))
    if opts.pattern is not None:
        # Kafka's consumer leaves internal topics (__consumer_offsets) out of patterns.
        return sorted((t, p) for t, n in topics.items()
                      if not t.startswith("__") and opts.pattern.fullmatch(t) for p in range(n))
    out = []
    for topic, parts in (opts.assign or {}).items():
        if topic not in topics:
            raise UnknownTopicOrPartitionError(
                f"option 'assign': topic {topic!r} does not exist in {where}")
        for p in parts:
            if not 0 <= p < topics[topic]:
                raise UnknownTopicOrPartitionError(
                    f"option 'assign': topic {topic!r} has {topics[topic]} partitions, no "
                    f"partition {p}")
            out.append((topic, p))
    return sorted(out)


def _require_all(key: str, given: dict[str, dict[int, int]], tps: list[TopicPartitionKey]) -> None:
    specified = {(t, p) for t, ps in given.items() for p in ps}
    if specified != set(tps):
        raise OptionError(
            f"if option {key!r} contains specific offsets, you must specify all topic "
            f"partitions (use -1 for latest, -2 for earliest); specified: "
            f"{sorted(specified)}, assigned: {sorted(tps)}")


def _latest(pr, read_committed: bool) -> int:
    """What "latest" is for the isolation level: the log end, or (read_committed) the
    last stable offset, as a read_committed Kafka consumer's endOffsets."""
    return pr.last_stable_offset() if read_committed else pr.log_end_offset()


def _by_timestamp(reader, tp, timestamp: int, strategy: str, key: str, ending: bool,
                  read_committed: bool = False) -> int:
    pr = reader.partition(*tp)
    found = pr.offset_for_timestamp(timestamp)
    if found is not None:
        return found if not ending else min(found, _latest(pr, read_committed))
    if ending or strategy == "latest":
        return _latest(pr, read_committed)
    raise OptionError(
        f"option {key!r}: no record of {tp[0]}-{tp[1]} has a timestamp >= {timestamp} "
        "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)")


def starting_offsets(reader: LogDirsReader, tps: list[TopicPartitionKey],
                     opts: SourceOptions) -> dict[TopicPartitionKey, int]:
    """Resolved first offsets; the precedence is Spark's: startingTimestamp, then
    startingOffsetsByTimestamp, then startingOffsets."""
    if opts.starting_timestamp is not None:
        return {tp: _by_timestamp(reader, tp, opts.starting_timestamp, opts.timestamp_strategy,
                                  "startingTimestamp", False) for tp in tps}
    if opts.starting_by_timestamp is not None:
        _require_all("startingOffsetsByTimestamp", opts.starting_by_timestamp, tps)
        return {tp: _by_timestamp(reader, tp, opts.starting_by_timestamp[tp[0]][tp[1]],
                                  opts.timestamp_strategy, "startingOffsetsByTimestamp", False)
                for tp in tps}
    return _offsets(reader, tps, opts.starting, "startingOffsets")


def ending_offsets(reader: LogDirsReader, tps: list[TopicPartitionKey],
                   opts: SourceOptions) -> dict[TopicPartitionKey, int]:
    if opts.ending_timestamp is not None:
        return {tp: _by_timestamp(reader, tp, opts.ending_timestamp, "latest",
                                  "endingTimestamp", True, opts.read_committed) for tp in tps}
    if opts.ending_by_timestamp is not None:
        _require_all("endingOffsetsByTimestamp", opts.ending_by_timestamp, tps)
        return {tp: _by_timestamp(reader, tp, opts.ending_by_timestamp[tp[0]][tp[1]], "latest",
                                  "endingOffsetsByTimestamp", True, opts.read_committed)
                for tp in tps}
    return _offsets(reader, tps, opts.ending, "endingOffsets", opts.read_committed)


def _offsets(reader, tps, spec, key: str, read_committed: bool = False) -> dict[TopicPartitionKey, int]:
    if isinstance(spec, dict):
        _require_all(key, spec, tps)
    out = {}
    for tp in tps:
        value = spec[tp[0]][tp[1]] if isinstance(spec, dict) else \
            (EARLIEST if spec == "earliest" else LATEST)
        pr = reader.partition(*tp)
        if value == EARLIEST:
            out[tp] = pr.log_start_offset()
        elif value == LATEST:
            out[tp] = _latest(pr, read_committed)
        elif value < 0:
            raise OptionError(f"option {key!r}: {tp[0]}-{tp[1]} has offset {value}; use an "
                              "offset >= 0, -1 for latest or -2 for earliest")
        else:
            out[tp] = value
    return out


def latest_offsets(reader: LogDirsReader, tps: list[TopicPartitionKey],
                   read_committed: bool = False) -> dict[TopicPartitionKey, int]:
    return {tp: _latest(reader.partition(*tp), read_committed) for tp in tps}


def check_range(reader: LogDirsReader, tp: TopicPartitionKey, start: int, end: int,
                fail_on_data_loss: bool, read_committed: bool = False) -> tuple[int, int] | None:
    """The readable part of [start, end): raises (failOnDataLoss) or skips what
    retention deleted; None when nothing is left. read_committed: never past the last
    stable offset (an explicit end beyond it is cut there)."""
    pr = reader.partition(*tp)
    first, last = pr.log_start_offset(), pr.log_end_offset()
    if read_committed:
        end = min(end, pr.last_stable_offset())
    if end > last:
        raise OffsetOutOfRangeError(
            f"{tp[0]}-{tp[1]}: offsets up to {end - 1} were asked for but the log ends at "
            f"{last} (was the partition truncated or deleted and re-created?)",
            offset=end, log_end_offset=last)
    if start >= end:
        return None          # nothing asked (a table part may have taken the whole range)
    if start < first:
        if fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{tp[0]}-{tp[1]}: offsets {start}..{min(end, first) - 1} were deleted (log start "
                f"offset {first}) before they were read. Some data may have been lost because "
                "they are not available any more: retention or DeleteRecords removed them. If "
                "you want the query to go on, set the option failOnDataLoss to false.",
                offset=start, log_start_offset=first)
        start = first
    return (start, end) if start < end else None


def check_order(tp: TopicPartitionKey, start: int, end: int) -> None:
    """Spark's Kafka source refuses a resolved start past the resolved end (checked
    before filters prune the range, which may leave nothing to read on purpose)."""
    if start > end:
        raise OptionError(
            f"The resolved start offset {start} is greater than the resolved end offset {end} "
            f"for topic {tp[0]} partition {tp[1]}. Check whether the start is beyond the end "
            "or the latest available offset after resolution (a start by timestamp and an end "
            "by offset, or the reverse, or a start offset with endingOffsets latest), or "
            "whether the topic-partition was deleted and re-created.")


class Pruning:
    """What pushed-down filters on ``partition``, ``offset`` and ``timestamp`` allow the
    reader to skip. Partition and offset filters are applied exactly (Spark does not
    apply them again); a timestamp bound only moves each start to the first record at or
    after it (records before it are all older) and goes back to Spark."""

    def __init__(self) -> None:
        self.partitions: set[int] | None = None
        self.low, self.high = 0, 2**63 - 1          # offsets [low, high)
        self.timestamp_ms: int | None = None        # first timestamp that can match

    def take(self, f) -> bool:
        """Records the filter; True when it is applied exactly."""
        from pyspark.sql.datasource import (
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            LessThan,
            LessThanOrEqual,
        )
        column = f.attribute[0].lower() if len(getattr(f, "attribute", ())) == 1 else None
        value = getattr(f, "value", None)
        if column == "partition" and isinstance(f, (EqualTo, In)):
            wanted = set(value) if isinstance(f, In) else {value}
            self.partitions = wanted if self.partitions is None else self.partitions & wanted
            return True
        if column == "offset" and isinstance(value, int) and not isinstance(value, bool):
            bounds = {EqualTo: (value, value + 1), GreaterThan: (value + 1, None),
                      GreaterThanOrEqual: (value, None), LessThan: (None, value),
                      LessThanOrEqual: (None, value + 1)}.get(type(f))
            if bounds is None:
                return False
            if bounds[0] is not None:
                self.low = max(self.low, bounds[0])
            if bounds[1] is not None:
                self.high = min(self.high, bounds[1])
            return True
        if column == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual)) \
                and hasattr(value, "timestamp"):
            micros = round(value.timestamp() * 1_000_000)
            first = micros // 1000 + 1 if isinstance(f, GreaterThan) else -(-micros // 1000)
            self.timestamp_ms = max(first, self.timestamp_ms or 0)
        return False

    def clip(self, reader, tp: TopicPartitionKey, start: int, end: int) -> tuple[int, int]:
        """[start, end) narrowed by the filters; (end, end) when nothing can match."""
        lo, hi = max(start, self.low), min(end, self.high)
        if self.timestamp_ms is not None and lo < hi:
            found = reader.partition(*tp).offset_for_timestamp(self.timestamp_ms, lo)
            lo = hi if found is None else max(lo, found)
        return (lo, hi) if lo < hi else (end, end)


def split_ranges(reader: LogDirsReader, ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange]:
    """Cuts ranges into tasks: none above ``maxRecordsPerPartition`` records, and at
    least ``minPartitions`` tasks when the records allow it. A cut prefers the
    segment boundary nearest the middle of the range (a task then reads whole
    segments), else the middle."""
    bounds = {}
    for r in ranges:
        key = (r.topic, r.partition)
        if key not in bounds:
            bounds[key] = reader.partition(*key).segment_bases()

    def cut(r: OffsetRange) -> tuple[OffsetRange, OffsetRange]:
        middle = r.start + r.size // 2
        bases = bounds[(r.topic, r.partition)]
        i = bisect.bisect_left(bases, middle)
        near = [b for b in bases[max(i - 1, 0):i + 1] if r.start < b < r.end]
        at = min(near, key=lambda b: abs(b - middle)) if near else middle
        # A boundary far from the middle (outside the middle half) makes lopsided tasks.
        if abs(at - middle) > r.size // 4:
            at = middle
        return (OffsetRange(r.topic, r.partition, r.start, at, r.directory),
                OffsetRange(r.topic, r.partition, at, r.end, r.directory))

    out: list[OffsetRange] = []
    for r in ranges:
        if max_records and r.size > max_records:
            pieces = -(-r.size // max_records)
            step = -(-r.size // pieces)
            out += [OffsetRange(r.topic, r.partition, s, min(s + step, r.end), r.directory)
                    for s in range(r.start, r.end, step)]
        else:
            out.append(r)
    while min_partitions and len(out) < min_partitions:
        largest = max(range(len(out)), key=lambda i: out[i].size, default=None)
        if largest is None or out[largest].size < 2:
            break
        out[largest:largest + 1] = cut(out[largest])
    return sorted(out, key=lambda r: (r.topic, r.partition, r.start))
