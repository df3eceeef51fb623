"""The data files the converter writes itself (pylog.table.writer): Parquet with the
table's field ids and settings, the manifests' metrics from the written footer, read back
exactly by pyiceberg and by pyarrow alone; a table's write.parquet.* settings are obeyed."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
from .support import rows_of, table_of
from .test_converter import write

from pylog.table import convert

FIELD_IDS = {"key": 1, "value": 2, "topic": 3, "partition": 4, "offset": 5, "timestamp": 6,
             "timestampType": 7, "headers": 8}


def _data_files(table):
    return [task.file for task in table.refresh().scan().plan_files()]


def test_the_file_carries_field_ids_settings_and_footer_metrics(store):
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    expected = write(store, "t", 0, 50) + write(store, "t", 1, 30)
    result = convert(store, "t")
    table = table_of(store, "t")
    assert rows_of(table) == sorted(expected)
    [data_file] = _data_files(table)
    path = data_file.file_path[len("file://"):]
    assert path.endswith(".parquet")
    meta = pq.read_metadata(path)
    arrow_schema = meta.schema.to_arrow_schema()
    assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in arrow_schema} == FIELD_IDS
    element = arrow_schema.field("headers").type.value_field
    assert int(element.metadata[b"PARQUET:field_id"]) == 9
    assert [int(element.type.field(i).metadata[b"PARQUET:field_id"]) for i in range(2)] == [10, 11]
    group = meta.row_group(0)
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    assert {c.compression for c in columns.values()} == {"ZSTD"}       # pyiceberg's default codec
    # a dictionary for every column but offset, whose values never repeat
    assert "RLE_DICTIONARY" not in columns["offset"].encodings
    assert all("RLE_DICTIONARY" in c.encodings for p, c in columns.items() if p != "offset")
    # statistics for the columns whose metrics the table keeps, none for the opaque bytes
    assert {p for p, c in columns.items() if c.is_stats_set} == {
        "topic", "partition", "offset", "timestamp", "timestampType"}
    # the DataFile's metrics are the footer's
    assert data_file.record_count == meta.num_rows == result.records == 80
    assert data_file.file_size_in_bytes == os.path.getsize(path)
    assert data_file.lower_bounds[5] == (0).to_bytes(8, "little")
    assert data_file.upper_bounds[5] == (49).to_bytes(8, "little")
    assert data_file.null_value_counts[5] == 0 and 1 not in data_file.lower_bounds
    # a filter on offset prunes by those bounds, and reads exactly
    assert table.scan(row_filter="offset >= 45").to_arrow().num_rows == 5


def test_a_tables_parquet_settings_are_obeyed(store):
    store.create_topic("t", 1, {"pylog.table.enable": "true"})
    table = table_of(store, "t")
    with table.transaction() as txn:
        txn.set_properties({"write.parquet.compression-codec": "snappy",
                            "write.parquet.row-group-limit": "40"})
    expected = write(store, "t", 0, 100)
    convert(store, "t")
    table = table_of(store, "t")
    assert rows_of(table) == sorted(expected)
    [data_file] = _data_files(table)
    meta = pq.read_metadata(data_file.file_path[len("file://"):])
    assert meta.num_row_groups == 3
    assert meta.row_group(0).column(0).compression == "SNAPPY"
    assert list(data_file.split_offsets) == sorted(data_file.split_offsets) and len(data_file.split_offsets) == 3
