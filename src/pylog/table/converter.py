"""The converter: a topic's committed records past the table's watermark, into the table,
exactly once (docs/TABLES.md "How a table stays exact").

The rule: each commit is one Iceberg snapshot whose summary carries, beside its data
files, ``pylog.watermark`` = {partition: the next offset not yet in the table} for every
partition (cumulative) and ``pylog.offsets`` = {partition: [from, to)} for this commit.
Data files and watermark become visible in one atomic catalog commit, so whatever the
process dies in (reading, writing Parquet, committing), the next run starts from the
watermark of the table as it is: nothing is skipped, nothing is repeated. Files written
by a run that died before its commit are referenced by no snapshot (orphans, for
maintenance to remove); a new run never adopts them. A converter that loses a race with
another commit of the same table fails its commit (optimistic concurrency) and converts
again from the new watermark on its next run.

What is converted: read_committed records below the partition's last stable offset (an
open transaction's records wait; aborted records and control batches never appear), from
the segment files by the C decoder into Arrow (pylog.record.decode_arrow), in Spark's
Kafka source columns (:mod:`pylog.table.columns`). When the log is a live Store's, the
converted range is flushed first: the table never holds a record that a power loss
could take from the log. Records deleted (retention, DeleteRecords) before they were
converted are not silently passed: the commit records them in ``pylog.skipped``
({partition: [from, to)}) and in the table property ``pylog.skipped.ranges`` (every skip
so far, which snapshot expiry keeps), and logs a warning.

Typed value columns (``pylog.table.schema.*`` set): the module ``pylog.table.schema``
offers ``hook_for(topic, table_config)``, an object with ``evolve(table)`` (before each
run; may evolve the table's schema; returns the table, or None for the same one) and
``transform(rows: pa.Table, table) -> pa.Table`` (the rows to append: the Kafka columns
plus the typed ones; it may write dead letters). Without that module such a topic is
refused with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pylog.errors import OffsetOutOfRangeError
from pylog.storage import LogConfig, LogDirsReader, LogManager, PartitionReader

from .catalog import load_or_create_table, log_dirs_of, open_catalog
from .columns import ARROW_SCHEMA, to_table_batch
from .config import TableConfig, check_convertible, table_config
from .writer import can_write, transaction, write_data_file

__all__ = ["TableConverter", "CommitResult", "watermarks", "convert", "rebuild",
           "WATERMARK", "OFFSETS", "SKIPPED", "SKIPPED_RANGES", "KILL_AT_ENV"]

log = logging.getLogger(__name__)

WATERMARK = "pylog.watermark"   # snapshot summary and table property: {"p": next offset}
OFFSETS = "pylog.offsets"       # snapshot summary: {"p": [from, to)} of this commit
SKIPPED = "pylog.skipped"       # snapshot summary: {"p": [from, to)} deleted before conversion
SKIPPED_RANGES = "pylog.skipped.ranges"   # table property: {"p": [[from, to), ...]}, every skip

#: Fault injection for the exactness tests: SIGKILL this process at a step of run_once:
#: "read" (records decoded, nothing written), "written" (Parquet files written, not
#: committed), "committed" (committed, before run_once returns).
KILL_AT_ENV = "PYLOG_TABLE_KILL_AT"

#: Bytes of records one commit takes from the log, at most (about): a backlog (a rebuild,
#: a converter that was down) is converted in several commits, each bounded in memory.
MAX_COMMIT_BYTES = 256 << 20


def _kill_point(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class CommitResult:
    """What one run did. ``committed`` is False when there was nothing new to convert."""

    topic: str
    table: tuple[str, str]
    committed: bool = False
    snapshot_id: int | None = None
    records: int = 0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)   # this commit's [from, to)
    watermark: dict[int, int] = field(default_factory=dict)             # after it, all partitions
    skipped: dict[int, tuple[int, int]] = field(default_factory=dict)   # deleted before conversion
    more: bool = False            # a partition stopped at MAX_COMMIT_BYTES: run again


def _decode_map(text: str | None) -> dict[int, Any]:
    return {int(p): v for p, v in json.loads(text).items()} if text else {}


def _encode_map(values: Mapping[int, Any]) -> str:
    return json.dumps({str(p): (list(v) if isinstance(v, tuple) else v)
                       for p, v in sorted(values.items())}, separators=(",", ":"))


def watermarks(table) -> dict[int, int]:
    """{partition: next offset not yet in the table}, from the newest snapshot of the
    current lineage that carries ``pylog.watermark`` (a maintenance snapshot, which
    rewrites files without changing rows, may carry none), else from the table property
    written in the same commit; {} for a table no converter committed to. A partition
    absent is at 0."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        value = summary.additional_properties.get(WATERMARK) if summary is not None else None
        if value is not None:
            return _decode_map(value)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return _decode_map(table.properties.get(WATERMARK))


def _add_skipped(table, skipped: Mapping[int, tuple[int, int]]) -> str:
    """The table's SKIPPED_RANGES property with this commit's skips added."""
    every = json.loads(table.properties.get(SKIPPED_RANGES) or "{}")
    for p, (a, b) in skipped.items():
        every.setdefault(str(p), []).append([a, b])
    return json.dumps(dict(sorted(every.items())), separators=(",", ":"))


class _LivePartition(PartitionReader):
    """A partition of an open store: its files read like any reader's, its log start and
    last stable offset the Log's own (DeleteRecords moves the start before any file goes,
    and an open transaction is known to the Log before its state reaches the disk)."""

    def __init__(self, store: LogManager, topic: str, partition: int, log_dir: str) -> None:
        super().__init__(topic, partition, os.path.join(log_dir, f"{topic}-{partition}"))
        self._log = store.log(topic, partition)

    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    def last_stable_offset(self) -> int:
        return self._log.last_stable_offset

    def make_durable(self, end: int) -> None:
        """The table never holds a record a power loss could take from the log."""
        self._log.flush(end)


class _DirPartition(PartitionReader):
    """A partition of log dirs read beside their owner, for one run: its last stable
    offset (a replay of the producer state from the newest snapshot) is computed once and
    kept. read_arrow asks for it again; it never decreases, so the kept value is still a
    bound below which every record is decided, and the run plans its range with it."""

    _stable: int | None = None

    def last_stable_offset(self) -> int:
        if self._stable is None:
            self._stable = super().last_stable_offset()
        return self._stable


class _Partitions:
    """The topic's partitions as read-only readers, its configs, and (for a live store)
    a flush: one interface over a Store and over log dirs read beside their owner."""

    def __init__(self, source: Any, topic: str) -> None:
        self.topic = topic
        self.store = source if isinstance(source, LogManager) else None
        self.log_dirs = log_dirs_of(source)
        self._dirs = None if self.store is not None else LogDirsReader(self.log_dirs)

    def config(self) -> Mapping[str, Any]:
        """The topic's configs: a store's in effect; from log dirs its own overrides over
        the defaults (broker-level defaults are the owner's, not on disk for a reader)."""
        if self.store is not None:
            return self.store.topic_config(self.topic)
        row = self._dirs.topic_table().get(self.topic)
        return LogConfig(row.config if row is not None else {})

    def readers(self) -> list[PartitionReader]:
        """The partitions that are online now (an offline one keeps its watermark)."""
        if self.store is not None:
            return [_LivePartition(self.store, self.topic, p.partition, p.log_dir)
                    for p in self.store.describe_topic(self.topic).partitions if p.online]
        count = self._dirs.topics().get(self.topic, 0)
        return [_DirPartition(self.topic, p, self._dirs.partition(self.topic, p).directory)
                for p in range(count)]

    def first_dir(self) -> str:
        """The log dir holding partition 0 (where a local catalog's table files go)."""
        if self.store is not None:
            parts = self.store.describe_topic(self.topic).partitions
            if parts and parts[0].log_dir:
                return parts[0].log_dir
            return self.log_dirs[0]
        return os.path.dirname(self._dirs.partition(self.topic, 0).directory)


def _schema_hook(topic: str, tc: TableConfig):
    """pylog.table.schema's hook for typed value columns, when pylog.table.schema.* is set."""
    if not tc.schema_properties:
        return None
    from pylog.table import schema as typed     # imported by typed topics only
    return typed.hook_for(topic, tc)


class TableConverter:
    """Converts one topic into its table: ``TableConverter(store_or_log_dirs, topic)``.

    ``run_once()`` makes at most one commit. Not thread-safe: one converter per topic
    per process (two processes converting the same table stay exact: one's commit fails)."""

    def __init__(self, source: Any, topic: str) -> None:
        self.topic = topic
        self._partitions = _Partitions(source, topic)
        self._catalog = None
        self._catalog_key: tuple | None = None
        self.last_table = None          # the table as the last run_once left it
        self._kept: tuple | None = None  # (TableConfig, table) of the last load or commit

    def table_config(self) -> TableConfig:
        config = self._partitions.config()
        check_convertible(self.topic, config)
        return table_config(self.topic, config)

    def table(self, tc: TableConfig | None = None):
        """The topic's Iceberg table (created on first use)."""
        tc = tc or self.table_config()
        key = (tc.catalog, tuple(sorted(tc.catalog_properties.items())))
        if self._catalog is None or self._catalog_key != key:
            self._catalog = open_catalog(self._partitions.log_dirs, tc)
            self._catalog_key = key
        table = load_or_create_table(self._catalog, tc, self._partitions.first_dir())
        self._kept = (tc, table)
        return table

    def _kept_table(self, tc: TableConfig):
        """(table, loaded now): the table as this converter last loaded or committed it
        (a commit updates the object), else loaded now. A run on a table someone else has
        committed to since cannot commit: pyiceberg's commit asserts the table's uuid and
        the snapshot its main branch was at, so it fails, and run_once loads the table
        again and redoes the run from the watermark it then reads. A kept table's
        watermark is never ahead of the table's own, except when the table was dropped
        (a rebuild elsewhere): a run that finds nothing to convert loads it again."""
        if self._kept is not None and self._kept[0] == tc:
            return self._kept[1], False
        return self.table(tc), True

    def run_once(self) -> CommitResult:
        """Converts what is eligible now, in one commit (at most MAX_COMMIT_BYTES: see
        ``more``). A commit refused because the table moved on meanwhile (another
        converter, a maintenance commit) is redone from the table as it is now."""
        from pyiceberg.exceptions import CommitFailedException
        for attempt in range(3):
            try:
                return self._run_once()
            except CommitFailedException:
                self._kept = None
                if attempt == 2:
                    raise
                log.info("table of topic %r changed under this run's commit: converting again "
                         "from its new watermark", self.topic)
            except BaseException:
                self._kept = None        # (its state is unknown: the next run loads it)
                raise
        raise AssertionError("unreachable")

    def _run_once(self) -> CommitResult:
        tc = self.table_config()
        hook = _schema_hook(self.topic, tc)
        table, loaded = self._kept_table(tc)
        self.last_table = table
        if hook is not None:
            table = self.last_table = hook.evolve(table) or table
            self._kept = (tc, table)
        before = watermarks(table)
        result = CommitResult(self.topic, (tc.namespace, tc.name), watermark=dict(before))
        batches: list[pa.RecordBatch] = []
        budget = MAX_COMMIT_BYTES
        for reader in self._partitions.readers():
            p = reader.partition
            start = before.get(p, 0)
            for _attempt in range(10):
                first = reader.log_start_offset()
                if first > start:    # (a second attempt extends the first one's skip)
                    result.skipped[p] = (result.skipped.get(p, (start, first))[0], first)
                    start = first
                end = reader.last_stable_offset()
                if end <= start:
                    break
                if isinstance(reader, _LivePartition):
                    reader.make_durable(end)
                taken: list[pa.RecordBatch] = []
                to, used = end, 0
                try:
                    for rows in reader.read_arrow(start, end, max(1, min(8 << 20, budget)),
                                                  isolation_level="read_committed",
                                                  timestamp_type=True):
                        if rows.num_rows:
                            taken.append(to_table_batch(rows, self.topic, p))
                            used += rows.nbytes
                        if used >= budget:
                            # Offsets after the last row read and up to where this read
                            # stopped are aborted or control records: skipping them is exact.
                            to = int(taken[-1].column("offset")[-1].as_py()) + 1
                            result.more = to < end
                            break
                except OffsetOutOfRangeError:
                    continue          # deleted under the read: again from the new log start
                batches.extend(taken)
                budget -= used
                result.offsets[p] = (start, to)
                result.watermark[p] = to
                break
            if p in result.skipped:
                result.watermark[p] = max(result.watermark.get(p, 0), result.skipped[p][1])
            if budget <= 0:
                result.more = True
                break
        if not result.offsets and not result.skipped:
            if not loaded:
                self._kept = None
                return self._run_once()         # from the table as it is now (see _kept_table)
            return result
        _kill_point("read")
        rows = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
        if hook is not None:
            rows = hook.transform(rows, table)
        result.records = rows.num_rows
        props = {WATERMARK: _encode_map(result.watermark), OFFSETS: _encode_map(result.offsets),
                 "pylog.topic": self.topic}
        if result.skipped:
            props[SKIPPED] = _encode_map(result.skipped)
            for p, (a, b) in sorted(result.skipped.items()):
                log.warning("table %s.%s: %s-%d offsets %d..%d were deleted from the log "
                            "before they were converted: recorded in %s, not in the table",
                            tc.namespace, tc.name, self.topic, p, a, b - 1, SKIPPED)
        with transaction(table) as txn:
            # The snapshot is staged before the property: see writer.transaction.
            if can_write(table):
                data_file = write_data_file(table, rows)
                with txn.update_snapshot(snapshot_properties=props).fast_append() as append:
                    append.append_data_file(data_file)
            else:                   # a partitioned table: pyiceberg splits the rows
                txn.append(rows, snapshot_properties=props)
            properties = {WATERMARK: props[WATERMARK]}
            if result.skipped:      # cumulative, so that snapshot expiry loses no skip
                properties[SKIPPED_RANGES] = _add_skipped(table, result.skipped)
            txn.set_properties(properties)
            _kill_point("written")
        _kill_point("committed")
        result.committed = True
        snapshot = table.current_snapshot()
        result.snapshot_id = snapshot.snapshot_id if snapshot is not None else None
        return result

    def drop(self) -> None:
        """Drops the table from its catalog (and a local catalog's files)."""
        tc = self.table_config()
        table = self.table(tc)
        location = table.location()
        self._kept = None
        self._catalog.drop_table((tc.namespace, tc.name))
        if tc.local_catalog and location.startswith("file://"):
            shutil.rmtree(location[len("file://"):], ignore_errors=True)


def convert(store: Any, topic: str) -> CommitResult:
    """Converts everything eligible now (several commits for a large backlog); the
    result sums them (offsets from the first commit's start to the last one's end)."""
    converter = TableConverter(store, topic)
    total: CommitResult | None = None
    while True:
        r = converter.run_once()
        if total is None:
            total = r
        else:
            total.committed |= r.committed
            total.snapshot_id = r.snapshot_id if r.committed else total.snapshot_id
            total.records += r.records
            for p, (_a, b) in r.offsets.items():
                total.offsets[p] = (total.offsets.get(p, (_a, b))[0], b)
            total.skipped.update({p: v for p, v in r.skipped.items() if p not in total.skipped})
            total.watermark = r.watermark
        if not r.more:
            return total


def rebuild(store: Any, topic: str) -> CommitResult:
    """Drops the topic's table and converts it again from the log start (records the log
    no longer has are gone from the table too, and reported as skipped)."""
    TableConverter(store, topic).drop()
    return convert(store, topic)
