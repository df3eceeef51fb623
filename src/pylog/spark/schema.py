"""The DataFrame shape of a pylog topic: Spark's Kafka source schema, and the
conversion of the C decoder's Arrow batches into it.

Spark checks every Arrow batch a Python source yields against the Arrow form of
the declared schema (types and nullability exactly), so both are built here in
code (no DDL parsing: that needs a live SparkContext).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["spark_schema", "arrow_schema", "to_spark_batch"]

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS = pa.list_(pa.field("element", _HEADER))

_COLUMNS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_COLUMNS)
ARROW_SCHEMA_HEADERS = pa.schema([*_COLUMNS, pa.field("headers", _HEADERS)])


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA_HEADERS if include_headers else ARROW_SCHEMA


def spark_schema(include_headers: bool):
    """Spark's Kafka source schema (``headers`` only with ``includeHeaders``)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def _constant_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)], null_count=0)


def _headers_or_null(headers: pa.ListArray) -> pa.Array:
    """Spark's Kafka source gives null, not [], for a record without headers (checked
    against spark-sql-kafka-0-10 in tests/spark/test_spark_kafka_connector.py)."""
    empty = pc.equal(pc.list_value_length(headers), 0)
    offsets = headers.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    # Always a new offsets array from 0 over the slice's children: from_arrays refuses a
    # mask beside sliced offsets, which a read starting inside a batch hands over even
    # when offsets[0] is 0 (the batch's earlier records had no headers).
    offsets = pc.subtract(offsets, pa.scalar(first, pa.int32()))
    values = headers.values.slice(first, last - first).cast(_HEADER)
    return pa.ListArray.from_arrays(offsets, values, type=_HEADERS, mask=empty)


def to_spark_batch(rows: pa.RecordBatch, topic: str, partition: int,
                   include_headers: bool) -> pa.RecordBatch:
    """A ``pylog.record.decode_arrow(..., timestamp_type=True)`` batch in the Kafka
    source's columns: no per-record Python objects (buffers are reused or built
    by vectorised kernels)."""
    n = rows.num_rows
    micros = pc.multiply(rows.column("timestamp").cast(pa.int64()), 1000)
    columns = [
        rows.column("key"),
        rows.column("value"),
        _constant_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        rows.column("offset"),
        micros.cast(pa.timestamp("us", tz="UTC")),
        rows.column("timestamp_type"),
    ]
    if include_headers:
        columns.append(_headers_or_null(rows.column("headers")))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
