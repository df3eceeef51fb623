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

A typed topic (``pylog.table.schema.type`` set) keeps the records whose value did not
parse in its dead-letter table, not in the table. That table is pinned too, loaded
*after* the table: a conversion commits its dead letters before the table's commit, so
the pinned dead-letter snapshot holds every dead letter below the pinned table's
watermark. Below it, the union reads the table's rows and the dead-letter rows of the
same ranges (tasks of their own; a dead-letter table older than its timestampType and
headers columns gives them as null): every offset of the log, each once.

Offsets the converter found deleted from the log before it took them (``pylog.skipped``,
retention or DeleteRecords) are below the watermark but in neither the table nor the
log: a range of the table part that covers any of them is data loss, refused with
failOnDataLoss=true (the default, as Spark's Kafka source) and read without them with
failOnDataLoss=false. ``startingOffsets=earliest`` starts past a skip that precedes
everything the table holds (as Kafka's earliest is the log start: nothing is lost).

Executors read the Parquet files with pyarrow (row groups outside the partition and
offset range are skipped by their statistics) and never open the catalog.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .options import OptionError
from .schema import _HEADER, _HEADERS, arrow_schema

__all__ = ["TablePin", "TableRange", "pin_table", "table_ranges", "read_table_range",
           "skipped_ranges"]

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
    dead_letters: bool = False      # a file of the dead-letter table


class TablePin:
    """A topic's table at one snapshot: its watermarks and the means to plan reads of it."""

    def __init__(self, topic: str, table, snapshot_id: int | None,
                 watermarks: dict[int, int], dead_letters: TablePin | None = None,
                 skipped: dict[int, list[tuple[int, int]]] | None = None) -> None:
        self.topic = topic
        self.table = table
        self.snapshot_id = snapshot_id
        self.watermarks = watermarks
        #: {partition: sorted disjoint [from, to)}: deleted before conversion (pylog.skipped).
        self.skipped = skipped or {}
        #: A typed topic's dead-letter table, pinned after this one (None: none yet).
        self.dead_letters = dead_letters

    def watermark(self, partition: int) -> int:
        """The first offset of ``partition`` the pinned snapshot does not hold (0: none)."""
        return self.watermarks.get(partition, 0)

    def lost(self, partition: int, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) that were deleted before conversion (pylog.skipped)."""
        return [(max(a, start), min(b, end)) for a, b in self.skipped.get(partition, ())
                if a < end and start < b]

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
        pins = [self] if self.dead_letters is None else [self, self.dead_letters]
        bounds = [b for pin in pins for _, b in pin.files([(partition, 0, w)])]
        if not bounds:
            return None
        low = 0 if None in bounds else min(bounds)
        for a, b in self.skipped.get(partition, ()):   # a bound from another partition's rows
            if a <= low < b:
                low = b
        return low


def _lower_bound(data_file, field_id: int) -> int | None:
    raw = (data_file.lower_bounds or {}).get(field_id)
    if raw is None:
        return None
    return int.from_bytes(raw, "little", signed=True)


def skipped_ranges(table, snapshot_id: int | None) -> dict[int, list[tuple[int, int]]]:
    """{partition: sorted, merged [from, to)} that the converter recorded as deleted from
    the log before conversion, up to ``snapshot_id``: the ``pylog.skipped`` of each
    snapshot of its lineage, and the table property ``pylog.skipped.ranges`` (every skip,
    cumulative: it survives snapshot expiry)."""
    from pylog.table.converter import SKIPPED, SKIPPED_RANGES
    found: dict[int, list[tuple[int, int]]] = {}
    for p, ranges in json.loads(table.properties.get(SKIPPED_RANGES) or "{}").items():
        found.setdefault(int(p), []).extend((int(a), int(b)) for a, b in ranges)
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    while snapshot is not None:
        summary = snapshot.summary
        value = summary.additional_properties.get(SKIPPED) if summary is not None else None
        for p, (a, b) in json.loads(value or "{}").items():
            found.setdefault(int(p), []).append((int(a), int(b)))
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return {p: _merged(ranges) for p, ranges in found.items()}


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(r for r in ranges if r[0] < r[1]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


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
    # The dead letters are loaded after the table (see the module's docstring).
    return TablePin(topic, table, snapshot.snapshot_id, watermarks(table),
                    _pin_dead_letters(catalog, topic, topic_config),
                    skipped_ranges(table, snapshot.snapshot_id))


def _pin_dead_letters(catalog, topic: str, topic_config: dict[str, str]) -> TablePin | None:
    """A typed topic's dead-letter table at its current snapshot (None: untyped, or no
    dead letter yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    from pylog.table.config import table_config
    from pylog.table.schema import schema_settings
    tc = table_config(topic, topic_config)
    settings = schema_settings(tc.schema_properties)
    if not settings.enabled:
        return None
    identifier = (tc.namespace, settings.dead_letter or f"{tc.name}__dead_letter")
    try:
        dead = catalog.load_table(identifier)
    except NoSuchTableError:
        return None
    snapshot = dead.current_snapshot()
    if snapshot is None:
        return None
    return TablePin(topic, dead, snapshot.snapshot_id, {})


def table_ranges(pin: TablePin, ranges: list[tuple[int, int, int]]) -> list[TableRange]:
    """Tasks for ``ranges`` ((partition, start, end), each end <= its watermark) of the
    pinned snapshot: one per data file that can hold any of them. Each record is in
    exactly one file, so the tasks, each reading its file's rows of the ranges, are
    disjoint and together complete (whatever the table's partitioning: one file may hold
    several Kafka partitions, and is then read once for all of them)."""
    ranges = tuple(sorted(r for r in ranges if r[1] < r[2]))
    tasks = [TableRange(pin.topic, ranges, path, pin.snapshot_id)
             for path, _ in pin.files(list(ranges))]
    dead = pin.dead_letters
    if dead is not None:        # the offsets below the watermark that are not in the table
        tasks += [TableRange(pin.topic, ranges, path, dead.snapshot_id, dead_letters=True)
                  for path, _ in dead.files(list(ranges))]
    return tasks


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
    if r.dead_letters:          # written before the dead-letter table had them: null
        missing = [c for c in missing if c not in _LATER_DEAD_LETTER_COLUMNS]
    if missing:
        raise OptionError(f"table file {r.file} has no column(s) {', '.join(missing)}: "
                          "not a pylog table")
    present = [c for c in columns if c in dataset.schema.names]
    for batch in dataset.to_batches(columns=present, filter=where):
        if batch.num_rows:
            yield _to_spark(batch, schema, include_headers)


#: Dead-letter columns that a dead-letter table made before them lacks in its old files.
_LATER_DEAD_LETTER_COLUMNS = ("timestampType", "headers")


def _to_spark(batch: pa.RecordBatch, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    columns = []
    for field in schema:
        if field.name not in batch.schema.names:
            columns.append(pa.nulls(batch.num_rows, field.type))
            continue
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
