"""The table pylog wrote, read without Spark and without pylog.table: pyiceberg's SQL
catalog opened on <log dir>/__tables/catalog.db, and pyarrow alone on the snapshot's
Parquet files; both equal to the log."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyiceberg.catalog.sql import SqlCatalog

import pylog
from pylog.storage import LogDirsReader
from pylog.table import convert


def log_records(path: str, topic: str) -> list[tuple]:
    out = []
    reader = LogDirsReader(path)
    for p in range(2):
        pr = reader.partition(topic, p)
        for batch in pr.read_arrow(0, pr.log_end_offset()):
            out += [(p, o, v) for o, v in zip(batch.column("offset").to_pylist(),
                                              batch.column("value").to_pylist())]
    return sorted(out)


def test_pyiceberg_and_pyarrow_read_the_table(tmp_path):
    path = str(tmp_path / "logs")
    with pylog.open(path, background=False) as store:
        store.create_topic("clicks.eu", 2, {"pylog.table.enable": "true"})
        for i in range(3):
            store.log("clicks.eu", 0).append_records([b"a%d-%d" % (i, j) for j in range(100)])
            store.log("clicks.eu", 1).append_records([b"b%d-%d" % (i, j) for j in range(70)])
            convert(store, "clicks.eu")
    expected = log_records(path, "clicks.eu")
    assert len(expected) == 510

    catalog = SqlCatalog("pylog", uri=f"sqlite:///{os.path.abspath(path)}/__tables/catalog.db",
                         warehouse=f"file://{os.path.abspath(path)}/__tables/warehouse")
    table = catalog.load_table(("pylog", "clicks_eu"))
    got = table.scan(selected_fields=("partition", "offset", "value")).to_arrow()
    assert sorted(zip(*(got.column(c).to_pylist() for c in ("partition", "offset", "value")))) \
        == expected
    one = table.scan(row_filter="partition == 1 and offset >= 200").to_arrow()
    assert sorted(one.column("offset").to_pylist()) == list(range(200, 210))

    files = [task.file.file_path for task in table.scan().plan_files()]
    assert len(files) == 3 and all(f.startswith("file://") for f in files)
    data = ds.dataset([f[len("file://"):] for f in files], format="parquet")
    rows = data.to_table(columns=["partition", "offset", "value", "timestamp"],
                         filter=pc.field("partition") == 0)
    assert rows.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert sorted(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
                      rows.column("value").to_pylist())) == [r for r in expected if r[0] == 0]
