"""``option("table", "true")``: the topic's Iceberg table below its watermark, the live
log from the watermark on, read as one source with Kafka's offsets.

The split is made on the driver, per partition, against one pinned snapshot: the
snapshot's ``pylog.watermark`` summary says which offsets it holds ([.., watermark)),
and the tasks of the table part read exactly that snapshot's data files. A converter
commit between planning and reading therefore changes nothing: the table tasks never
see the newer snapshot and the log tasks start at the pinned watermark, so no record
is read twice or missed. A task read again (a retry, a restarted stream re-planning a
batch from its offset log) returns the same records: a table part and a log part of
the same offsets hold the same records, whichever snapshot a re-plan pins.

Executors read the Parquet files with pyarrow (row groups outside the partition and
offset range are skipped by their statistics) and never open the catalog.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .options import OptionError
from .schema import _HEADER, _HEADERS, arrow_schema

__all__ = ["TablePin", "TableRange", "pin_table", "table_ranges", "read_table_range"]

#: The Kafka columns every pylog table has (pylog.table's default row).
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


@dataclass(frozen=True)
class TableRange:
    """The records of ``ranges`` ((partition, start, end), offsets [start, end)) that one
    Parquet file of one snapshot holds. Plain and picklable (a Spark task's whole
    description)."""

    topic: str
    ranges: tuple[tuple[int, int, int], ...]
    file: str
    snapshot_id: int


class TablePin:
    """A topic's table at one snapshot: its watermarks and the means to plan reads of it."""

    def __init__(self, topic: str, table, snapshot_id: int | None,
                 watermarks: dict[int, int]) -> None:
        self.topic = topic
        self.table = table
        self.snapshot_id = snapshot_id
        self.watermarks = watermarks

    def watermark(self, partition: int) -> int:
        """The first offset of ``partition`` the pinned snapshot does not hold (0: none)."""
        return self.watermarks.get(partition, 0)

    def files(self, ranges: list[tuple[int, int, int]]) -> list[tuple[str, int | None]]:
        """The snapshot's data files that can hold any of ``ranges`` ((partition, start,
        end)), with each file's lowest offset (None when its statistics do not say)."""
        ranges = [r for r in ranges if r[1] < r[2]]
        if self.snapshot_id is None or not ranges:
            return []
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan, Or
        where = None
        for p, start, end in ranges:
            one = And(EqualTo("partition", p),
                      And(GreaterThanOrEqual("offset", start), LessThan("offset", end)))
            where = one if where is None else Or(where, one)
        scan = self.table.scan(snapshot_id=self.snapshot_id, row_filter=where)
        offset_id = self.table.schema().find_field("offset").field_id
        out = []
        for task in scan.plan_files():      # metrics-pruned by partition and offset
            if task.delete_files:
                raise OptionError(
                    f"table {'.'.join(self.table.name())} snapshot {self.snapshot_id} has delete "
                    f"files ({task.delete_files.pop().file_path}): the pylog source reads "
                    "append-only tables (pylog's own commits, compaction and rebuild write none)")
            out.append((task.file.file_path, _lower_bound(task.file, offset_id)))
        return sorted(out, key=lambda f: (f[1] is None, f[1] or 0, f[0]))

    def low(self, partition: int) -> int | None:
        """An offset at or below the lowest of ``partition`` the snapshot holds (None:
        none): the files' lower bounds, exact when the table is partitioned by the Kafka
        partition and otherwise at most lower (no record of ``partition`` lies between)."""
        w = self.watermark(partition)
        bounds = [b for _, b in self.files([(partition, 0, w)])]
        if not bounds:
            return None
        return 0 if None in bounds else min(bounds)


def _lower_bound(data_file, field_id: int) -> int | None:
    raw = (data_file.lower_bounds or {}).get(field_id)
    if raw is None:
        return None
    return int.from_bytes(raw, "little", signed=True)


def pin_table(paths: list[str], topic: str, topic_config: dict[str, str]) -> TablePin | None:
    """The topic's table at its current snapshot; None when the topic has no table."""
    try:
        from pylog.table import open_catalog, table_identifier, watermarks
    except ImportError as exc:
        raise OptionError(f"option 'table': reading a topic's table needs pyiceberg "
                          f"(pip install 'pylog[table]'): {exc}") from None
    from pyiceberg.exceptions import NoSuchTableError

    from pylog.table.catalog import local_catalog_path
    from pylog.table.config import table_config
    if table_config(topic, topic_config).local_catalog and \
            not os.path.exists(local_catalog_path(paths[0])):
        return None          # no table was ever made here: a reader creates nothing
    catalog = open_catalog(paths, topic_config)
    identifier = table_identifier(topic, topic_config)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        return None
    snapshot = table.current_snapshot()
    if snapshot is None:
        return TablePin(topic, table, None, {})
    # watermarks() reads the loaded table's current snapshot: the one pinned here.
    return TablePin(topic, table, snapshot.snapshot_id, watermarks(table))


def table_ranges(pin: TablePin, ranges: list[tuple[int, int, int]]) -> list[TableRange]:
    """Tasks for ``ranges`` ((partition, start, end), each end <= its watermark) of the
    pinned snapshot: one per data file that can hold any of them. Each record is in
    exactly one file, so the tasks, each reading its file's rows of the ranges, are
    disjoint and together complete (whatever the table's partitioning: one file may hold
    several Kafka partitions, and is then read once for all of them)."""
    ranges = tuple(sorted(r for r in ranges if r[1] < r[2]))
    return [TableRange(pin.topic, ranges, path, pin.snapshot_id)
            for path, _ in pin.files(list(ranges))]


def _open(uri: str):
    from pyarrow import fs
    if "://" in uri:
        return fs.FileSystem.from_uri(uri)
    return fs.LocalFileSystem(), uri


def read_table_range(r: TableRange, include_headers: bool):
    """Executor side: Arrow batches of the Kafka source schema for one table task."""
    import pyarrow.dataset as ds
    schema = arrow_schema(include_headers)
    columns = list(schema.names)
    where = None
    for p, start, end in r.ranges:
        one = ((pc.field("partition") == p) & (pc.field("offset") >= start)
               & (pc.field("offset") < end))
        where = one if where is None else where | one
    filesystem, path = _open(r.file)
    dataset = ds.dataset(path, format="parquet", filesystem=filesystem)
    missing = [c for c in columns if c not in dataset.schema.names]
    if missing:
        raise OptionError(f"table file {r.file} has no column(s) {', '.join(missing)}: "
                          "not a pylog table")
    for batch in dataset.to_batches(columns=columns, filter=where):
        if batch.num_rows:
            yield _to_spark(batch, schema, include_headers)


def _to_spark(batch: pa.RecordBatch, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    columns = []
    for field in schema:
        column = batch.column(field.name)
        if field.name == "headers":
            column = _headers(column)
        elif column.type != field.type:
            column = column.cast(field.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers(column: pa.Array) -> pa.Array:
    """Spark's Kafka source gives null, not [], for a record without headers."""
    column = column.cast(pa.list_(pa.field("element", _HEADER)))
    empty = pc.fill_null(pc.equal(pc.list_value_length(column), 0), True)
    offsets = column.offsets
    first = offsets[0].as_py()
    offsets = pc.subtract(offsets, pa.scalar(first, pa.int32()))
    values = column.values.slice(first, offsets[-1].as_py())
    return pa.ListArray.from_arrays(offsets, values, type=_HEADERS, mask=empty)
