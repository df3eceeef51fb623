"""A commit's rows as one Parquet data file of an unpartitioned table, written by pyarrow's
ParquetWriter directly (pyiceberg's append re-projects every batch in Python first).

The file is what pyiceberg's own writer makes of the same rows: the table's field ids in
``PARQUET:field_id``, its ``write.parquet.*`` settings (codec, level, page and dictionary
sizes, rows per row group), a new ``<uuid>.parquet`` name from the table's location
provider (a file of a run that died before its commit is never reused: an orphan). Column
statistics are written only for the columns whose ``write.metadata.metrics.*`` mode keeps
them (the manifests use nothing else), and the DataFile's metrics come from the written
footer by pyiceberg's own function. Dictionary encoding is on for every column but those
whose values never repeat within a partition (``offset``): for them Arrow would hash every
value into a dictionary until it overflows the page limit and falls back to plain, work
that buys nothing (the pages are the plain ones either way, readable by every reader).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["can_write", "write_data_file", "transaction"]

#: Top-level columns whose values never repeat within a partition: written without a
#: dictionary (plain encoding, as Arrow's own fallback would end with).
UNIQUE_COLUMNS = frozenset({"offset"})


def can_write(table) -> bool:
    """This writer covers unpartitioned Parquet tables (others take pyiceberg's append)."""
    from pyiceberg.table import TableProperties
    fmt = table.properties.get(TableProperties.WRITE_FILE_FORMAT, TableProperties.WRITE_FILE_FORMAT_DEFAULT)
    return table.spec().is_unpartitioned() and str(fmt).lower() == "parquet"


def _with_ids(field: pa.Field, iceberg_field) -> pa.Field:
    """``field`` with the Iceberg field ids of ``iceberg_field`` on it and its children."""
    from pyiceberg.types import ListType, MapType, StructType
    t, it = field.type, iceberg_field.field_type
    if pa.types.is_struct(t) and isinstance(it, StructType):
        t = pa.struct([_with_ids(t.field(i), it.field_by_name(t.field(i).name) or _missing(t.field(i)))
                       for i in range(t.num_fields)])
    elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and isinstance(it, ListType):
        element = _with_ids(t.value_field, it.element_field)
        t = pa.list_(element) if pa.types.is_list(t) else pa.large_list(element)
    elif pa.types.is_map(t) and isinstance(it, MapType):
        t = pa.map_(_with_ids(t.key_field, it.key_field), _with_ids(t.item_field, it.value_field))
    return pa.field(field.name, t, field.nullable, {b"PARQUET:field_id": str(iceberg_field.field_id).encode()})


def _missing(field: pa.Field):
    raise ValueError(f"column {field.name!r} of the rows is not in the table's schema")


def _writer_options(properties) -> dict:
    from pyiceberg.table import TableProperties as P
    from pyiceberg.utils.properties import property_as_int
    codec = properties.get(P.PARQUET_COMPRESSION, P.PARQUET_COMPRESSION_DEFAULT)
    return {
        "compression": "none" if codec == "uncompressed" else codec,
        "compression_level": property_as_int(properties, P.PARQUET_COMPRESSION_LEVEL,
                                             P.PARQUET_COMPRESSION_LEVEL_DEFAULT),
        "data_page_size": property_as_int(properties, P.PARQUET_PAGE_SIZE_BYTES,
                                          P.PARQUET_PAGE_SIZE_BYTES_DEFAULT),
        "dictionary_pagesize_limit": property_as_int(properties, P.PARQUET_DICT_SIZE_BYTES,
                                                     P.PARQUET_DICT_SIZE_BYTES_DEFAULT),
        "write_batch_size": property_as_int(properties, P.PARQUET_PAGE_ROW_LIMIT,
                                            P.PARQUET_PAGE_ROW_LIMIT_DEFAULT),
    }


def write_data_file(table, rows: pa.Table):
    """Writes ``rows`` (columns named as the table's schema) as one new data file of
    ``table``; returns its pyiceberg DataFile (not yet committed: an orphan until then)."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table import TableProperties as P
    from pyiceberg.table.locations import load_location_provider
    from pyiceberg.typedef import Record
    from pyiceberg.utils.properties import property_as_int

    schema, properties = table.schema(), table.properties
    arrow_schema = pa.schema([_with_ids(f, schema.find_field(f.name)) for f in rows.schema])
    rows = pa.Table.from_arrays(rows.columns, schema=arrow_schema)      # metadata only: no copy
    plan = compute_statistics_plan(schema, properties)
    path_ids = parquet_path_to_id_mapping(schema)
    with_stats = [path for path, fid in path_ids.items()
                  if plan[fid].mode.type.value != "none"]
    with_dictionary = [path for path in path_ids if path.split(".", 1)[0] not in UNIQUE_COLUMNS]
    path = load_location_provider(table.location(), properties).new_data_location(
        f"00000-0-{uuid.uuid4()}.parquet")
    output = table.io.new_output(path)
    with output.create(overwrite=False) as stream:
        with pq.ParquetWriter(stream, arrow_schema, write_statistics=with_stats or False,
                              use_dictionary=with_dictionary or False,
                              store_decimal_as_integer=True, **_writer_options(properties)) as writer:
            writer.write_table(rows, row_group_size=property_as_int(
                properties, P.PARQUET_ROW_GROUP_LIMIT, P.PARQUET_ROW_GROUP_LIMIT_DEFAULT))
        metadata = writer.writer.metadata
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata, stats_columns=plan, parquet_column_mapping=path_ids)
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record(), file_size_in_bytes=len(output), sort_order_id=None,
        spec_id=table.metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict())


def transaction(table):
    """``table.transaction()``, whose ``table_metadata`` (the base with the staged updates
    applied) is computed once per staged state instead of at every read: pyiceberg's
    snapshot producer reads it about a dozen times a commit, each a deep copy of the
    whole table metadata (all snapshots), which grows with the table's history. With
    nothing staged it is the table's own metadata (pyiceberg's models are frozen): stage
    the snapshot first and the properties after it, and the producer copies nothing."""
    from pyiceberg.table import Transaction

    class _Transaction(Transaction):
        _applied: tuple | None = None

        @property
        def table_metadata(self):
            if not self._updates:
                return self._table.metadata
            state = (self._table.metadata, self._updates)
            if self._applied is None or any(a is not b for a, b in zip(self._applied[0], state)):
                self._applied = (state, Transaction.table_metadata.fget(self))
            return self._applied[1]

    return _Transaction(table)
