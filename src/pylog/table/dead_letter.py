"""The dead-letter table: the records of a typed topic whose value did not parse.

Columns: topic, partition, offset, timestamp, key, value, reason (ids 1-7),
then timestampType and headers (ids 8-12, the types of the topic table's
columns in :mod:`pylog.table.columns`, optional so that a dead-letter table
made before they existed evolves to them: its old rows read them as null).
Nothing is dropped silently: a record is either a row of the topic's table
or a row here, and Spark's union reader (option table=true) reads both.

Exactly once without a multi-table transaction (pyiceberg commits one table
at a time). The rule: a conversion commits the dead letters of its range
*before* the table's commit, and the dead-letter snapshot carries its own
``pylog.watermark`` ({partition: one past the last offset of the range it
covered}, cumulative). A conversion appends only the dead letters at or past
the dead-letter table's watermark. So a crash before the dead-letter commit
leaves both tables as they were (the range is redone); a crash between the
two commits leaves the dead letters committed and the table's watermark
behind: the redo skips the dead letters already there and commits the table.
No order of crashes loses a dead letter or writes one twice.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pyarrow as pa

from pylog.table.columns import _HEADERS
from pylog.table.converter import KILL_AT_ENV, OFFSETS, WATERMARK, watermarks

__all__ = ["ARROW_SCHEMA", "iceberg_schema", "load_or_create_dead_letters",
           "commit_dead_letters", "KILL_AFTER_DEAD_LETTERS"]

#: PYLOG_TABLE_KILL_AT step: SIGKILL after the dead-letter commit, before the table's.
KILL_AFTER_DEAD_LETTERS = "dead-letters"

ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", _HEADERS),
])


def iceberg_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import (BinaryType, IntegerType, ListType, LongType, NestedField,
                                 StringType, StructType, TimestamptzType)
    header = StructType(NestedField(11, "key", StringType(), required=True),
                        NestedField(12, "value", BinaryType(), required=False))
    return Schema(
        NestedField(1, "topic", StringType(), required=True),
        NestedField(2, "partition", IntegerType(), required=True),
        NestedField(3, "offset", LongType(), required=True),
        NestedField(4, "timestamp", TimestamptzType(), required=True),
        NestedField(5, "key", BinaryType(), required=False),
        NestedField(6, "value", BinaryType(), required=False),
        NestedField(7, "reason", StringType(), required=True),
        NestedField(8, "timestampType", IntegerType(), required=False),
        NestedField(9, "headers", ListType(10, header, element_required=True), required=False),
    )


def load_or_create_dead_letters(table, identifier: tuple[str, str]):
    """The dead-letter table beside `table` (same catalog; for a file:// table
    location, a sibling directory), created on first use; one made before
    timestampType and headers existed gains them (optional columns: its older
    rows read them as null)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    catalog = table.catalog
    try:
        dead = catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    else:
        if "headers" not in dead.schema().column_names:
            with dead.update_schema() as update:
                update.union_by_name(iceberg_schema())
            dead = catalog.load_table(identifier)
        return dead
    location = None
    if table.location().startswith("file://"):
        location = os.path.join(os.path.dirname(table.location().rstrip("/")), identifier[1])
    try:
        return catalog.create_table(identifier, iceberg_schema(), location=location,
                                    properties={"pylog.table.dead-letter-of": ".".join(
                                        table.name())})
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def _encode(values: dict[int, object]) -> str:
    return json.dumps({str(p): v for p, v in sorted(values.items())}, separators=(",", ":"))


def commit_dead_letters(table, identifier: tuple[str, str], topic: str, bad: pa.Table,
                        reasons: pa.Array, converted: pa.Table) -> int:
    """Commits the `bad` rows (Kafka columns) with their `reasons` to the
    dead-letter table, skipping those a previous run committed (the rule
    above); `converted` is the whole range being converted (its offsets give
    the new watermark). Returns how many rows were appended."""
    dead = load_or_create_dead_letters(table, identifier)
    before = watermarks(dead)
    partitions = bad.column("partition").to_numpy()
    offsets = bad.column("offset").to_numpy()
    if before:
        floor = np.zeros(max(max(before), int(partitions.max(initial=0))) + 1, dtype=np.int64)
        for p, w in before.items():
            floor[p] = w
        fresh = offsets >= floor[partitions]
    else:
        fresh = np.ones(len(offsets), dtype=bool)
    if not fresh.any():
        return 0
    keep = pa.array(fresh)
    rows = bad.filter(keep)
    appended = pa.Table.from_arrays([
        rows.column("topic"), rows.column("partition"), rows.column("offset"),
        rows.column("timestamp"), rows.column("key"), rows.column("value"),
        reasons.filter(keep), rows.column("timestampType"), rows.column("headers")],
        schema=ARROW_SCHEMA)
    ranges = converted.group_by("partition").aggregate([("offset", "min"), ("offset", "max")])
    watermark = dict(before)
    span = {}
    for p, lo, hi in zip(ranges.column("partition").to_pylist(),
                         ranges.column("offset_min").to_pylist(),
                         ranges.column("offset_max").to_pylist(), strict=True):
        watermark[p] = max(watermark.get(p, 0), hi + 1)
        span[p] = [lo, hi + 1]
    props = {WATERMARK: _encode(watermark), OFFSETS: _encode(span), "pylog.topic": topic}
    with dead.transaction() as txn:
        txn.set_properties({WATERMARK: props[WATERMARK]})
        txn.append(appended, snapshot_properties=props)
    if os.environ.get(KILL_AT_ENV) == KILL_AFTER_DEAD_LETTERS:
        os.kill(os.getpid(), signal.SIGKILL)
    return len(appended)
