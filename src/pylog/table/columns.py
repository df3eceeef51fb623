"""What a row of a topic's table is: Spark's Kafka source columns, as an Iceberg schema
with stable field ids, and the C decoder's Arrow batches turned into them.

``key binary, value binary, topic string, partition int, offset long,
timestamp timestamptz (the record's ms, in us), timestampType int,
headers list<struct<key string, value binary>>`` (null for a record without
headers, as Spark's Kafka source gives). Field ids 1-11 never change: a schema
with typed value columns (pylog.table.schema) adds fields after them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ARROW_SCHEMA", "iceberg_schema", "partition_spec", "to_table_batch"]

_HEADER = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
_HEADERS = pa.list_(pa.field("element", _HEADER, nullable=False))

ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("timestampType", pa.int32(), nullable=False),
    pa.field("headers", _HEADERS),
])


def iceberg_schema():
    """The table's Iceberg schema (ids 1-11)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )
    header = StructType(NestedField(10, "key", StringType(), required=True),
                        NestedField(11, "value", BinaryType(), required=False))
    return Schema(
        NestedField(1, "key", BinaryType(), required=False),
        NestedField(2, "value", BinaryType(), required=False),
        NestedField(3, "topic", StringType(), required=True),
        NestedField(4, "partition", IntegerType(), required=True),
        NestedField(5, "offset", LongType(), required=True),
        NestedField(6, "timestamp", TimestamptzType(), required=True),
        NestedField(7, "timestampType", IntegerType(), required=True),
        NestedField(8, "headers", ListType(9, header, element_required=True), required=False),
    )


def partition_spec(partition_by: str):
    """The table's partition spec for ``pylog.table.partition.by``."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform
    if partition_by == "none":
        return PartitionSpec()
    source, transform, name = {
        "partition": (4, IdentityTransform(), "partition"),
        "hour(timestamp)": (6, HourTransform(), "timestamp_hour"),
        "day(timestamp)": (6, DayTransform(), "timestamp_day"),
    }[partition_by]
    return PartitionSpec(PartitionField(source_id=source, field_id=1000, transform=transform,
                                        name=name))


def _constant_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)],
                                 null_count=0)


def _headers_or_null(headers: pa.ListArray) -> pa.Array:
    """null for a record without headers (Spark's Kafka source does the same); new
    offsets from 0, because from_arrays refuses a mask beside sliced offsets."""
    empty = pc.equal(pc.list_value_length(headers), 0)
    offsets = headers.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    offsets = pc.subtract(offsets, pa.scalar(first, pa.int32()))
    values = headers.values.slice(first, last - first).cast(_HEADER)
    return pa.ListArray.from_arrays(offsets, values, type=_HEADERS, mask=empty)


def to_table_batch(rows: pa.RecordBatch, topic: str, partition: int) -> pa.RecordBatch:
    """A ``pylog.record.decode_arrow(..., timestamp_type=True)`` batch as the table's
    columns, by vectorised kernels (no per-record Python)."""
    n = rows.num_rows
    micros = pc.multiply(rows.column("timestamp").cast(pa.int64()), 1000)
    return pa.RecordBatch.from_arrays([
        rows.column("key"),
        rows.column("value"),
        _constant_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        rows.column("offset"),
        micros.cast(pa.timestamp("us", tz="UTC")),
        rows.column("timestamp_type"),
        _headers_or_null(rows.column("headers")),
    ], schema=ARROW_SCHEMA)
