"""``spark.read.format("pylog")`` and ``spark.readStream.format("pylog")``.

Executors read the segment files directly (pylog.storage.reader: read-only, no
lock, beside a live writer) and yield Arrow batches built by the C decoder.
The driver plans: it resolves the options to offset ranges and cuts them into
tasks. Everything a task needs is in its :class:`RangePartition` (the reader
object that plans is not the one that reads).

Streaming offsets are Spark's Kafka JSON, ``{"topic": {"0": 42}}`` (next offset
to read, exclusive ends). Exactly-once on the source side rests on
determinism: a range read twice returns the same records (segments are
immutable below the consistent end), and a range retention deleted fails
loudly (or is skipped with failOnDataLoss=false).
"""

from __future__ import annotations

import time

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pylog.errors import OffsetOutOfRangeError
from pylog.storage import LogDirsReader, PartitionReader

from . import planning
from .options import EARLIEST, SinkOptions, SourceOptions
from .planning import OffsetRange
from .schema import spark_schema, to_spark_batch

__all__ = ["PylogDataSource"]


class RangePartition(InputPartition):
    """One task: records [start, end) of one partition, and how to read them.

    Everything is in ``value`` (plain, picklable): with filter pushdown on, PySpark hands
    ``read()`` a plain InputPartition rebuilt from ``value``."""

    def __init__(self, r: OffsetRange, opts: SourceOptions) -> None:
        # remote: r.directory is then the partition's leader ("host:port").
        super().__init__((r, opts.include_headers, opts.fail_on_data_loss,
                          opts.security if opts.bootstrap is not None else None,
                          opts.read_committed))

    def __repr__(self) -> str:
        r = self.value[0]
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


class TablePartition(InputPartition):
    """One task of the table part (option table=true): offsets [start, end) of one
    partition in data files of one pinned snapshot (pylog.spark.table_part)."""

    def __init__(self, r, include_headers: bool) -> None:
        super().__init__(("table", r, include_headers))

    def __repr__(self) -> str:
        r = self.value[1]
        return f"TablePartition({r.topic} {list(r.ranges)} in {r.file} @{r.snapshot_id})"


def read_range(part: InputPartition):
    """Executor side: Arrow batches of the Kafka source schema for one task."""
    if part.value is None:
        return          # PySpark's stand-in when planning found nothing to read
    if part.value[0] == "table":
        from .table_part import read_table_range
        yield from read_table_range(part.value[1], part.value[2])
        return
    r, include_headers, fail_on_data_loss, remote_security, read_committed = part.value
    isolation = "read_committed" if read_committed else "read_uncommitted"
    if remote_security is not None:        # remote mode: how to connect to the leader
        from pylog.remote import RemotePartition
        reader = RemotePartition(r.topic, r.partition, r.directory, "pylog-spark",
                                 security=remote_security)
    else:
        reader = PartitionReader(r.topic, r.partition, r.directory)
    # read_committed: the planned range ends at or below the last stable offset; the
    # reader skips aborted transactions' records (in C, from the .txnindex or the
    # Fetch response's aborted_transactions).
    start, failed_at = r.start, None
    while True:
        if not fail_on_data_loss:
            # Deleted before (or under) the task: skip to what is left, as Spark's Kafka
            # source does; rows already yielded are not read again.
            start = max(start, reader.log_start_offset())
        try:
            for rows in reader.read_arrow(start, r.end, isolation_level=isolation):
                if rows.num_rows:
                    yield to_spark_batch(rows, r.topic, r.partition, include_headers)
                    start = rows.column(0)[-1].as_py() + 1
            return
        except OffsetOutOfRangeError:
            if fail_on_data_loss or failed_at == start:
                raise                    # or no progress since the last try: give up
            failed_at = start


def open_topics(opts: SourceOptions):
    """The log dirs (read-only) or, in remote mode, the broker: same questions, same answers."""
    if opts.bootstrap is not None:
        from pylog.remote import RemoteTopics
        return RemoteTopics(opts.bootstrap, "pylog-spark", opts.security)
    return LogDirsReader(opts.paths)


def _to_json(offsets: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, p), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = offset
    return out


def _from_json(offsets: dict) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


class TableSplit:
    """option table=true: per partition, the pinned snapshot's offsets go to table tasks
    and the log part starts at that snapshot's watermark (no gap, no overlap)."""

    def __init__(self, reader, opts: SourceOptions, topics) -> None:
        from .table_part import pin_table
        self.opts = opts
        table = reader.topic_table()
        self.taken: dict[str, list[tuple[int, int, int]]] = {}
        self.pins = {}
        for topic in sorted(set(topics)):
            row = table.get(topic)
            config = dict(getattr(row, "config", None) or {})
            self.pins[topic] = pin_table(list(reader.paths), topic, config)

    def earliest(self, tp, start: int) -> int:
        """The table keeps what retention deleted from the log: earliest reaches it."""
        pin = self.pins.get(tp[0])
        low = pin.low(tp[1]) if pin is not None else None
        return min(start, low) if low is not None else start

    def split(self, tp, start: int, end: int) -> int:
        """Takes [start, min(end, watermark)) for the table; returns where the log part
        starts."""
        pin = self.pins.get(tp[0])
        if pin is None:
            return start
        w = min(pin.watermark(tp[1]), end)
        if start >= w:
            return start
        lost = pin.lost(tp[1], start, w)
        if lost and self.opts.fail_on_data_loss:
            gone = ", ".join(f"{a}..{b - 1}" for a, b in lost)
            raise OffsetOutOfRangeError(
                f"{tp[0]}-{tp[1]}: offsets {gone} were deleted from the log (retention or "
                f"DeleteRecords) before the converter took them into table "
                f"{'.'.join(pin.table.name())} (pylog.skipped): they are in neither the table "
                "nor the log. Some data may have been lost. If you want the query to go on "
                "without them, set the option failOnDataLoss to false.",
                offset=lost[0][0], topic_partition=tp)
        self.taken.setdefault(tp[0], []).append((tp[1], start, w))
        return w

    def tasks(self) -> list[TablePartition]:
        """The table part: one task per data file holding any range taken (a file with
        several Kafka partitions is read once)."""
        from .table_part import table_ranges
        return [TablePartition(r, self.opts.include_headers)
                for topic, ranges in sorted(self.taken.items())
                for r in table_ranges(self.pins[topic], ranges)]


def _asks_earliest(opts: SourceOptions, tp) -> bool:
    if opts.starting_timestamp is not None or opts.starting_by_timestamp is not None:
        return False
    if opts.starting == "earliest":
        return True
    return isinstance(opts.starting, dict) and opts.starting.get(tp[0], {}).get(tp[1]) == EARLIEST


class PylogBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.pruning = planning.Pruning()

    def partitions(self):
        opts = self.opts
        with open_topics(opts) as reader:
            tps = [tp for tp in planning.resolve_partitions(reader, opts)
                   if self.pruning.partitions is None or tp[1] in self.pruning.partitions]
            starts = planning.starting_offsets(reader, tps, opts)
            ends = planning.ending_offsets(reader, tps, opts)
            tables = TableSplit(reader, opts, [t for t, _ in tps]) if opts.table else None
            ranges = []
            for tp in tps:
                if tables is not None and _asks_earliest(opts, tp):
                    starts[tp] = tables.earliest(tp, starts[tp])
                planning.check_order(tp, starts[tp], ends[tp])
                start, end = self.pruning.clip(reader, tp, starts[tp], ends[tp])
                if tables is not None:
                    start = tables.split(tp, start, end)
                checked = planning.check_range(reader, tp, start, end, opts.fail_on_data_loss,
                                               opts.read_committed)
                if checked:
                    ranges.append(OffsetRange(tp[0], tp[1], checked[0], checked[1],
                                              reader.partition(*tp).directory))
            tasks = planning.split_ranges(reader, ranges, opts.min_partitions,
                                          opts.max_records_per_partition)
            table_tasks = tables.tasks() if tables is not None else []
        return table_tasks + [RangePartition(r, opts) for r in tasks]

    def read(self, partition: RangePartition):
        return read_range(partition)


class PylogPushdownReader(PylogBatchReader):
    """The batch reader with filter pushdown (``filterPushdown=true``; Spark also needs
    ``spark.sql.python.filterPushdown.enabled=true``, and fails every read of a reader
    that implements pushFilters without it, hence the opt-in)."""

    def pushFilters(self, filters):
        for f in filters:
            if not self.pruning.take(f):
                yield f


class PylogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the log: admission control (maxOffsetsPerTrigger,
    minOffsetsPerTrigger), Trigger.AvailableNow, new partitions from their start."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._target: dict[tuple[str, int], int] | None = None
        self._last_trigger = time.monotonic()   # maxTriggerDelay counts from here

    def _reader(self):
        return open_topics(self.opts)

    def initialOffset(self):
        with self._reader() as reader:
            tps = planning.resolve_partitions(reader, self.opts)
            starts = planning.starting_offsets(reader, tps, self.opts)
            if self.opts.table:
                tables = TableSplit(reader, self.opts, [t for t, _ in tps])
                for tp in tps:
                    if _asks_earliest(self.opts, tp):
                        starts[tp] = tables.earliest(tp, starts[tp])
            return _to_json(starts)

    def _latest(self) -> dict[tuple[str, int], int]:
        with self._reader() as reader:
            return planning.latest_offsets(reader, planning.resolve_partitions(reader, self.opts),
                                           self.opts.read_committed)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self):
        return _to_json(self._latest())

    def latestOffset(self, start=None, limit=None):
        latest = self._target if self._target is not None else self._latest()
        begin = _from_json(start) if start else {}
        with self._reader() as reader:
            for tp in latest:
                if tp not in begin:         # a partition added since: from its start
                    begin[tp] = reader.partition(*tp).log_start_offset()
        lag = {tp: max(latest[tp] - begin[tp], 0) for tp in latest}
        total = sum(lag.values())
        # minOffsetsPerTrigger waits for enough records, at most maxTriggerDelay (Kafka's
        # rule); never under availableNow, which would then wait forever.
        minimum = self.opts.min_offsets_per_trigger if self._target is None else None
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        if minimum and total < minimum and waited_ms < self.opts.max_trigger_delay_ms:
            return _to_json({tp: begin[tp] for tp in latest})
        if total:
            self._last_trigger = time.monotonic()
        end = dict(latest)
        if isinstance(limit, ReadMaxRows) and total > limit.max_rows:
            # Kafka's rate limit: each partition gets its share of the lag.
            budget = limit.max_rows
            for tp in sorted(lag, key=lambda k: lag[k]):
                share = lag[tp] * limit.max_rows // total
                take = min(lag[tp], share, budget)
                end[tp] = begin[tp] + take
                budget -= take
            for tp in sorted(lag):          # what rounding left, in partition order
                extra = min(budget, latest[tp] - end[tp])
                end[tp] += extra
                budget -= extra
        return _to_json({tp: max(end[tp], begin[tp]) for tp in end})

    def partitions(self, start, end):
        begin, stop = _from_json(start), _from_json(end)
        ranges = []
        with self._reader() as reader:
            # Pinned per micro-batch: a batch re-planned after a restart may split its
            # (same) offsets differently between table and log, never the records.
            tables = TableSplit(reader, self.opts, [t for t, _ in stop]) if self.opts.table \
                else None
            for tp, last in sorted(stop.items()):
                first = begin.get(tp)
                if first is None:
                    first = reader.partition(*tp).log_start_offset()
                    if tables is not None:
                        first = tables.earliest(tp, first)
                if last <= first:
                    continue
                if tables is not None:
                    first = tables.split(tp, first, last)
                    if last <= first:
                        continue
                checked = planning.check_range(reader, tp, first, last, self.opts.fail_on_data_loss,
                                               self.opts.read_committed)
                if checked:
                    ranges.append(OffsetRange(tp[0], tp[1], checked[0], checked[1],
                                              reader.partition(*tp).directory))
            tasks = planning.split_ranges(reader, ranges, self.opts.min_partitions,
                                          self.opts.max_records_per_partition)
            table_tasks = tables.tasks() if tables is not None else []
        return table_tasks + [RangePartition(r, self.opts) for r in tasks]

    def read(self, partition: RangePartition):
        return read_range(partition)

    def commit(self, end) -> None:
        """Nothing to do: the checkpoint is the source of truth (Spark commits lag a batch)."""


class PylogDataSource(DataSource):
    """``format("pylog")``: Spark's Kafka source and sink over pylog log dirs."""

    @classmethod
    def name(cls) -> str:
        return "pylog"

    def schema(self):
        # The other options are checked by reader()/streamReader(), which know the mode.
        include = str(self.options.get("includeHeaders", "false")).strip().lower()
        if include not in ("true", "false"):
            raise ValueError(f"option 'includeHeaders' must be true or false, got {include!r}")
        return spark_schema(include == "true")

    def reader(self, schema):
        opts = SourceOptions.parse(self.options, streaming=False)
        return PylogPushdownReader(opts) if opts.filter_pushdown else PylogBatchReader(opts)

    def streamReader(self, schema):
        opts = SourceOptions.parse(self.options, streaming=True)
        return PylogStreamReader(opts)

    def writer(self, schema, overwrite: bool):
        from .sink import PylogBatchWriter
        return PylogBatchWriter(SinkOptions.parse(self.options), schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from .sink import PylogStreamWriter
        return PylogStreamWriter(SinkOptions.parse(self.options), schema, overwrite)
