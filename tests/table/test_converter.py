"""The converter against a real Store, a real SQL catalog (SQLite) and real Parquet: the
table's rows equal the log's records (offset, key, value, headers, timestamp), commit
after commit, partitioned or not, from a Store or from its log dirs read beside it."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from .support import assert_commit_chain, commits_of, rows_of, table_of

from pylog.table import TableConverter, convert, open_catalog, rebuild, table_identifier, watermarks
from pylog.table import converter as converter_module

T0 = 1_700_000_000_000


def write(store, topic, partition, n, start=0, *, ts=T0):
    """n records of one batch; returns the rows the table must hold for them."""
    log = store.log(topic, partition)
    keys = [None if i % 3 == 0 else b"k%d" % (start + i) for i in range(n)]
    values = [b"v%d-%d" % (partition, start + i) for i in range(n)]
    headers = [[("h", b"%d" % i), ("second", None)] if i % 2 else None for i in range(n)]
    stamps = [ts + i for i in range(n)]
    first = log.append_records(values, keys, stamps, headers).first_offset
    return [(partition, first + i, keys[i], values[i],
             tuple((k, v) for k, v in headers[i]) if headers[i] else (), stamps[i], 0, topic)
            for i in range(n)]


def test_rows_equal_the_log_commit_after_commit(store):
    store.create_topic("clicks.eu", 3, {"pylog.table.enable": "true"})
    expected = []
    for p in range(3):
        expected += write(store, "clicks.eu", p, 20 + p)
    first = convert(store, "clicks.eu")
    assert first.committed and first.records == 63
    assert first.offsets == {0: (0, 20), 1: (0, 21), 2: (0, 22)}
    assert first.table == ("pylog", "clicks_eu") == table_identifier("clicks.eu", {})
    table = table_of(store, "clicks.eu")
    assert rows_of(table) == sorted(expected)
    assert watermarks(table) == {0: 20, 1: 21, 2: 22}
    # what the table holds was fsync'd in the log first
    assert [store.log("clicks.eu", p).recovery_point for p in range(3)] == [20, 21, 22]

    expected += write(store, "clicks.eu", 1, 5, 100)
    second = convert(store, "clicks.eu")
    assert second.offsets == {1: (21, 26)} and second.watermark == {0: 20, 1: 26, 2: 22}
    assert rows_of(table) == sorted(expected)
    nothing = convert(store, "clicks.eu")
    assert not nothing.committed and nothing.offsets == {}
    assert len(commits_of(table)) == 2
    assert_commit_chain(table, 3)
    # the files are real Parquet under the first log dir's warehouse, read by pyarrow alone
    data = [f.file.file_path for f in table.scan().plan_files()]
    assert data and all(p.startswith("file://" + os.path.join(store.log_dirs[0], "__tables",
                                                              "warehouse", "pylog", "clicks_eu"))
                        for p in data)
    assert sum(pq.read_metadata(p[len("file://"):]).num_rows for p in data) == len(expected)


@pytest.mark.parametrize("partition_by", ["partition", "hour(timestamp)", "day(timestamp)"])
def test_partitioned_tables(store, partition_by):
    store.create_topic("t", 2, {"pylog.table.enable": "true", "pylog.table.partition.by": partition_by})
    expected = write(store, "t", 0, 10) + write(store, "t", 1, 10, ts=T0 + 2 * 86_400_000)
    convert(store, "t")
    table = table_of(store, "t")
    assert rows_of(table) == sorted(expected)
    assert len(table.spec().fields) == 1
    assert len(list(table.scan().plan_files())) == 2       # one file per partition value


def test_a_backlog_is_converted_in_bounded_commits(store, monkeypatch):
    monkeypatch.setattr(converter_module, "MAX_COMMIT_BYTES", 300)
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    expected = []
    for i in range(6):
        for p in range(2):
            expected += write(store, "t", p, 10, 10 * i)
    result = convert(store, "t")
    table = table_of(store, "t")
    assert len(commits_of(table)) > 2 and result.offsets == {0: (0, 60), 1: (0, 60)}
    assert rows_of(table) == sorted(expected)
    assert_commit_chain(table, 2)


def test_converting_from_the_log_dirs_beside_the_open_store(store):
    """A converter in another process reads the log dirs read-only (no store lock)."""
    store.create_topic("t", 1, {"pylog.table.enable": "true", "pylog.table.name": "events"})
    expected = write(store, "t", 0, 30)
    result = TableConverter(store.log_dirs, "t").run_once()
    assert result.committed and result.table == ("pylog", "events")
    assert rows_of(table_of(store, "t")) == sorted(expected)
    assert not convert(store, "t").committed             # same table, same watermark


def test_rebuild_drops_and_converts_again_from_the_log_start(store):
    store.create_topic("t", 1, {"pylog.table.enable": "true"})
    expected = write(store, "t", 0, 12)
    convert(store, "t")
    old_files = [f.file.file_path for f in table_of(store, "t").scan().plan_files()]
    result = rebuild(store, "t")
    assert result.offsets == {0: (0, 12)}
    table = table_of(store, "t")
    assert rows_of(table) == sorted(expected) and len(commits_of(table)) == 1
    assert not any(os.path.exists(p[len("file://"):]) for p in old_files)


def test_open_catalog_is_the_local_sql_catalog_by_default(store):
    catalog = open_catalog(store, {})
    assert type(catalog).__name__ == "SqlCatalog"
    assert os.path.exists(os.path.join(store.log_dirs[0], "__tables", "catalog.db"))
    other = open_catalog(store, {"pylog.table.catalog": "elsewhere",
                                 "pylog.table.catalog.type": "sql",
                                 "pylog.table.catalog.uri": f"sqlite:///{store.log_dirs[0]}/other.db",
                                 "pylog.table.catalog.warehouse": f"file://{store.log_dirs[0]}/wh"})
    assert other.name == "elsewhere" and os.path.exists(os.path.join(store.log_dirs[0], "other.db"))


def test_the_store_reopens_with_its_tables_dir(tmp_path):
    import pylog
    s = pylog.open(str(tmp_path), background=False)
    s.create_topic("t", 1, {"pylog.table.enable": "true"})
    expected = write(s, "t", 0, 5)
    convert(s, "t")
    s.close()
    s = pylog.open(str(tmp_path), background=False)
    try:
        assert s.list_topics() == ["t"]
        assert rows_of(table_of(s, "t")) == sorted(expected)
    finally:
        s.close()
