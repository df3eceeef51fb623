"""What the table takes of a topic: committed records only (a transactional producer's
aborted records never, an open transaction's when it commits), history kept after
retention deletes segments, records deleted before conversion reported (pylog.skipped),
compacted topics refused with the reason, and the pylog.table.* configs validated."""

from __future__ import annotations

import logging

import pytest

import pylog
from pylog.errors import ConfigError
from pylog.storage import LogConfig
from pylog.table import TableConfigError, TableConverter, convert, table_identifier, watermarks

from pylog.table import table_config

from .support import assert_commit_chain, commits_of, rows_of, table_of


def settings_of(overrides):
    return table_config("t", LogConfig(overrides))


def values_of(table):
    return sorted(r[3] for r in rows_of(table))


def test_aborted_records_never_appear_and_an_open_transaction_waits(store):
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    with pylog.Producer(store, transactional_id="app", linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(6):
            p.send("t", b"c%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send_batch("t", [b"a%d" % i for i in range(4)], partition=1)
        p.abort_transaction()
        p.begin_transaction()
        p.send("t", b"open0", partition=0)
        p.flush()
        with pylog.Producer(store, linger_ms=1) as plain:      # after the open one: waits too
            plain.send("t", b"plain", partition=0).result()
            plain.send("t", b"plain1", partition=1).result()
        first = convert(store, "t")
        table = table_of(store, "t")
        assert values_of(table) == sorted([b"c%d" % i for i in range(6)] + [b"plain1"])
        # partition 0 stops at the open transaction's first offset (the LSO)
        assert first.watermark[0] == store.log("t", 0).last_stable_offset
        assert first.watermark[1] == store.log("t", 1).log_end_offset   # past the abort marker
        p.commit_transaction()
    convert(store, "t")
    table = table_of(store, "t")
    assert values_of(table) == sorted([b"c%d" % i for i in range(6)] + [b"open0", b"plain", b"plain1"])
    assert watermarks(table) == {p: store.log("t", p).log_end_offset for p in range(2)}
    assert_commit_chain(table, 2)


def test_the_table_keeps_history_and_reports_records_deleted_before_conversion(store, caplog):
    store.create_topic("t", 1, {"pylog.table.enable": "true", "segment.bytes": 200})
    log = store.log("t", 0)
    for i in range(10):
        log.append_records([b"r%d" % i])
    convert(store, "t")
    assert log.delete_segments_before(log.log_end_offset) > 0          # retention's work
    assert log.log_start_offset > 0
    table = table_of(store, "t")
    assert values_of(table) == sorted(b"r%d" % i for i in range(10))    # history kept
    assert not convert(store, "t").committed                            # nothing new, no failure

    for i in range(10, 20):
        log.append_records([b"r%d" % i])
    log.advance_log_start_offset(15)                # DeleteRecords, before conversion
    assert log.log_start_offset == 15
    with caplog.at_level(logging.WARNING, logger="pylog.table.converter"):
        result = convert(store, "t")
    assert result.skipped == {0: (10, 15)} and result.offsets == {0: (15, 20)}
    assert "offsets 10..14 were deleted from the log before they were converted" in caplog.text
    table = table_of(store, "t")
    assert commits_of(table)[-1]["pylog.skipped"] == {"0": [10, 15]}
    assert values_of(table) == sorted([b"r%d" % i for i in range(10)] + [b"r%d" % i for i in range(15, 20)])
    assert_commit_chain(table, 1)


def test_a_compacted_topic_is_refused_with_the_reason(store):
    store.create_topic("c", 1, {"pylog.table.enable": "true", "cleanup.policy": "compact"})
    with pytest.raises(TableConfigError, match=r"cleanup.policy=compact is refused: the log "
                                               r"cleaner removes records"):
        TableConverter(store, "c").run_once()


def test_table_configs_are_validated_like_every_topic_config(store):
    with pytest.raises(ConfigError, match=r"pylog.table.retention = 'follow': follow is not built"):
        store.create_topic("x", 1, {"pylog.table.retention": "follow"})
    with pytest.raises(ConfigError, match=r"pylog.table.partition.by = 'month\(timestamp\)': must be "
                                          r"one of none, partition, hour\(timestamp\), day\(timestamp\)"):
        store.create_topic("x", 1, {"pylog.table.partition.by": "month(timestamp)"})
    with pytest.raises(ConfigError, match=r"pylog.table.commit.interval.ms = 0: must be at least 1"):
        store.create_topic("x", 1, {"pylog.table.commit.interval.ms": 0})
    with pytest.raises(ConfigError, match=r"unknown topic config 'pylog.table.enabled'; did you "
                                          r"mean 'pylog.table.enable'\?"):
        store.create_topic("x", 1, {"pylog.table.enabled": "true"})
    with pytest.raises(ConfigError, match=r"pylog.table.name = 'a.b': must not contain '.'"):
        LogConfig({"pylog.table.name": "a.b"})
    with pytest.raises(ConfigError, match=r"pylog.table.orphan.min.age.ms = '1000': must be -1 "
                                          r"\(never remove\) or at least 60000: a younger "
                                          r"unreferenced file may be one a conversion has written"):
        store.create_topic("x", 1, {"pylog.table.orphan.min.age.ms": "1000"})
    with pytest.raises(ConfigError, match=r"pylog.table.compact.min.files = 1: must be at least 2"):
        LogConfig({"pylog.table.compact.min.files": 1})
    with pytest.raises(ConfigError, match=r"pylog.table.maintenance.interval.ms = -2: must be "
                                          r"at least -1"):
        LogConfig({"pylog.table.maintenance.interval.ms": -2})
    with pytest.raises(ConfigError, match=r"pylog.table.snapshot.retain.last = 0: must be at least 1"):
        LogConfig({"pylog.table.snapshot.retain.last": 0})
    tc = settings_of({"pylog.table.maintenance.interval.ms": "0",
                         "pylog.table.compact.target.file.bytes": str(64 << 20),
                         "pylog.table.snapshot.max.age.ms": "-1", "pylog.table.orphan.min.age.ms": "-1"})
    assert (tc.maintenance_interval_ms, tc.compact_target_file_bytes, tc.compact_min_files,
            tc.snapshot_max_age_ms, tc.snapshot_retain_last, tc.orphan_min_age_ms) == (
        0, 64 << 20, 5, -1, 1, -1)
    # catalog properties and schema settings are families by prefix, kept as strings
    store.create_topic("x", 1, {"pylog.table.catalog": "lake", "pylog.table.catalog.type": "rest",
                                "pylog.table.catalog.uri": "http://127.0.0.1:1",
                                "pylog.table.schema.file": "/s.json"})
    d = store.describe_topic("x")
    assert d.overrides["pylog.table.catalog.uri"] == "http://127.0.0.1:1"
    assert d.config["pylog.table.schema.file"] == "/s.json" and d.config["pylog.table.enable"] is False
    store.alter_topic_config("x", {"pylog.table.catalog.uri": "http://127.0.0.1:2"})
    assert store.describe_topic("x").config["pylog.table.catalog.uri"] == "http://127.0.0.1:2"
    assert table_identifier("my.topic-1", {}) == ("pylog", "my_topic-1")
    assert table_identifier("t", {"pylog.table.namespace": "raw", "pylog.table.name": "T"}) == ("raw", "T")


def test_prefixed_configs_survive_a_reopen(tmp_path):
    s = pylog.open(str(tmp_path), background=False)
    s.create_topic("x", 1, {"pylog.table.catalog.warehouse": "file:///w"})
    s.close()
    s = pylog.open(str(tmp_path), background=False)
    try:
        assert s.describe_topic("x").overrides == {"pylog.table.catalog.warehouse": "file:///w"}
    finally:
        s.close()


def test_the_stores_background_converts_enabled_topics(tmp_path):
    from log_support import wait_until
    s = pylog.open(str(tmp_path))
    try:
        s.create_topic("on", 1, {"pylog.table.enable": "true", "pylog.table.commit.interval.ms": 10})
        s.create_topic("off", 1)
        s.log("on", 0).append_records([b"a", b"b"])
        s.log("off", 0).append_records([b"z"])
        assert wait_until(lambda: s.tables.last_results.get("on") is not None
                 and watermarks(table_of(s, "on")) == {0: 2}, timeout=60)
        assert "off" not in s.tables.last_results
        assert values_of(table_of(s, "on")) == [b"a", b"b"]
    finally:
        s.close()


def test_records_all_deleted_before_conversion_make_one_commit_that_says_so(store):
    store.create_topic("t", 1, {"pylog.table.enable": "true"})
    log = store.log("t", 0)
    for i in range(5):
        log.append_records([b"x%d" % i])
    log.advance_log_start_offset(5)
    result = convert(store, "t")
    assert result.committed and result.records == 0 and result.skipped == {0: (0, 5)}
    table = table_of(store, "t")
    assert rows_of(table) == [] and watermarks(table) == {0: 5}
    assert commits_of(table)[-1]["pylog.skipped"] == {"0": [0, 5]}
    assert not convert(store, "t").committed        # the skip is recorded once


def test_a_broker_level_default_enables_tables_for_every_topic(tmp_path):
    s = pylog.Store(str(tmp_path), {"pylog.table.enable": "true",
                                    "pylog.table.partition.by": "partition"}, background=False)
    try:
        s.create_topic("a", 2)
        s.create_topic("b", 1, {"pylog.table.enable": "false"})
        assert s.topic_config("a")["pylog.table.enable"] is True
        assert s.topic_config("b")["pylog.table.enable"] is False
        s.log("a", 1).append_records([b"x"])
        assert s.tables.run_due(s.clock() + 10 ** 9) == 0      # first due one interval on
        assert s.tables.run_due(s.clock() + 2 * 10 ** 9) == 1  # "a" only
        assert values_of(table_of(s, "a")) == [b"x"] and "b" not in s.tables.last_results
        assert len(table_of(s, "a").spec().fields) == 1
    finally:
        s.close()
