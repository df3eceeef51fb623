"""``pylog tables`` on a real store and its real Iceberg table: describe (watermark and lag
per partition), compact (fewer files, same rows, same watermark), expire snapshots (files
only they used deleted, rows intact), remove orphans (past the age only), rebuild."""

from __future__ import annotations

import json
import os

import pytest

import pylog

from .test_cli import run

pytest.importorskip("pyiceberg", reason="pylog.table needs pyiceberg: pip install -e '.[table]'")

from pylog.table import TableConverter, convert  # noqa: E402


def produce(path: str, start: int, n: int) -> None:
    with pylog.open(path, background=False) as store:
        if "events" not in store.list_topics():
            store.create_topic("events", partitions=2, config={"pylog.table.enable": "true"})
        producer = pylog.Producer(store, linger_ms=5)
        for i in range(start, start + n):
            producer.send("events", value=b"v%d" % i, key=b"k%d" % (i % 7), partition=i % 2)
        producer.flush()
        producer.close()


def table_rows(path: str) -> list[tuple]:
    t = TableConverter(path, "events").table().scan().to_arrow()
    return sorted(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(),
                      t.column("value").to_pylist()))


def log_rows(path: str, n: int) -> list[tuple]:
    return sorted((i % 2, i // 2, b"v%d" % i) for i in range(n))


def describe(path: str) -> dict:
    return json.loads(run("tables", "--log-dirs", path, "--describe", "--json").stdout)[0]


def test_describe_compact_expire_rebuild(tmp_path):
    path = str(tmp_path / "logs")
    total = 0
    for _ in range(4):                       # four commits: four small files per partition
        produce(path, total, 200)
        total += 200
        convert(path, "events")
    produce(path, total, 60)                 # not converted yet: the lag
    status = describe(path)
    assert status["table"] == "pylog.events" and status["enabled"]
    assert [(p["watermark"], p["log_end_offset"], p["lag_records"]) for p in status["partitions"]] \
        == [(400, 430, 30), (400, 430, 30)]
    assert all(p["lag_seconds"] >= 0 for p in status["partitions"])
    assert status["records"] == 800 and status["data_files"] == 4 and status["bytes"] > 0
    text = run("tables", "--log-dirs", path, "--describe", "--topic", "events").stdout
    assert "LAG-RECORDS" in text and "pylog.events" in text

    out = json.loads(run("tables", "--log-dirs", path, "--compact", "--topic", "events",
                         "--json").stdout)
    assert out["rewritten"] == 0          # 4 small files: fewer than pylog.table.compact.min.files
    out = json.loads(run("tables", "--log-dirs", path, "--compact", "--topic", "events",
                         "--min-files", "2", "--json").stdout)
    assert out["rewritten"] == 4 and out["files_after"] < out["files_before"] == 4
    after = describe(path)
    assert [p["watermark"] for p in after["partitions"]] == [400, 400]     # kept
    assert table_rows(path) == log_rows(path, 800)

    out = json.loads(run("tables", "--log-dirs", path, "--expire-snapshots", "--topic",
                         "events", "--older-than", "0ms", "--json").stdout)
    assert out["expired"] == 4 and out["files_deleted"] >= 4 and out["snapshots_left"] == 1
    assert table_rows(path) == log_rows(path, 800)
    convert(path, "events")                  # the converter goes on from the kept watermark
    assert table_rows(path) == log_rows(path, 860)
    parquet = [f for _, _, fs in os.walk(tmp_path / "logs" / "__tables") for f in fs
               if f.endswith(".parquet")]
    assert len(parquet) == after["data_files"] + 1

    out = json.loads(run("tables", "--log-dirs", path, "--rebuild", "--topic", "events",
                         "--json").stdout)
    assert out["records"] == 860 and out["watermark"] == {"0": 430, "1": 430}
    assert table_rows(path) == log_rows(path, 860)


def test_remove_orphans(tmp_path):
    """A Parquet file written for the table and never committed (what a converter killed
    between its write and its commit leaves) is removed once older than the floor (the
    topic's pylog.table.orphan.min.age.ms, or --older-than), never a referenced one."""
    from pylog.table.writer import write_data_file
    path = str(tmp_path / "logs")
    produce(path, 0, 40)
    convert(path, "events")
    table = TableConverter(path, "events").table()
    orphan = write_data_file(table, table.scan().to_arrow()).file_path[len("file://"):]
    assert os.path.exists(orphan)
    out = json.loads(run("tables", "--log-dirs", path, "--remove-orphans", "--topic", "events",
                         "--json").stdout)
    assert (out["orphans"], out["files_deleted"], out["kept_younger"]) == (1, 0, 1)
    assert os.path.exists(orphan)
    out = json.loads(run("tables", "--log-dirs", path, "--remove-orphans", "--topic", "events",
                         "--older-than", "0ms", "--json").stdout)
    assert (out["orphans"], out["files_deleted"]) == (1, 1) and not os.path.exists(orphan)
    assert table_rows(path) == log_rows(path, 40)
    bad = run("tables", "--log-dirs", path, "--remove-orphans", check=False)
    assert bad.returncode != 0 and "--remove-orphans needs --topic" in bad.stderr


def test_errors_are_one_line(tmp_path):
    path = str(tmp_path / "logs")
    produce(path, 0, 10)
    bad = run("tables", "--log-dirs", path, "--compact", check=False)
    assert bad.returncode != 0 and "--compact needs --topic" in bad.stderr
    bad = run("tables", "--log-dirs", path, "--describe", "--topic", "nope", check=False)
    assert bad.returncode != 0 and "'nope' does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad = run("tables", "--log-dirs", path, "--expire-snapshots", "--topic", "events",
              "--older-than", "soon", check=False)
    assert bad.returncode != 0 and "duration" in bad.stderr


def test_describe_counts_a_typed_topics_dead_letters(tmp_path):
    path, schema = str(tmp_path / "logs"), tmp_path / "events.json"
    schema.write_text(json.dumps({"type": "object", "required": ["id"],
                                  "properties": {"id": {"type": "integer"}}}))
    with pylog.open(path, background=False) as store:
        store.create_topic("events", partitions=1, config={
            "pylog.table.enable": "true", "pylog.table.schema.type": "json",
            "pylog.table.schema.file": str(schema)})
        with pylog.Producer(store) as producer:
            for v in (b'{"id":1}', b"bad", b'{"x":2}', b'{"id":3}'):
                producer.send("events", value=v, partition=0)
    convert(path, "events")
    status = describe(path)
    assert (status["records"], status["dead_letters"]) == (2, 2)
    text = run("tables", "--log-dirs", path, "--describe", "--topic", "events").stdout
    assert "2 records, 1 snapshots, 2 dead letters" in text
    produce(str(tmp_path / "plain"), 0, 4)
    assert describe(str(tmp_path / "plain"))["dead_letters"] is None
