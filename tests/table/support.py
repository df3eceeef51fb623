"""Helpers of pylog.table's tests: reading a table back with pyiceberg, and the records a
test wrote, in one shape to compare."""

from __future__ import annotations

import json

import pyarrow as pa

from pylog.table import TableConverter


def table_of(source, topic):
    return TableConverter(source, topic).table()


def rows_of(table) -> list[tuple]:
    """Every row of the table's current snapshot, read by pyiceberg, as
    (partition, offset, key, value, headers, timestamp ms, timestampType, topic), sorted.
    A record without headers reads as () (Spark's Kafka source gives null)."""
    t = table.refresh().scan().to_arrow()
    ms = pa.compute.divide(t.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    out = []
    for r, m in zip(t.to_pylist(), ms):
        headers = tuple((h["key"], h["value"]) for h in (r["headers"] or ()))
        out.append((r["partition"], r["offset"], r["key"], r["value"], headers, m,
                    r["timestampType"], r["topic"]))
    return sorted(out)


def commits_of(table) -> list[dict]:
    """The converter's commits, oldest first: each snapshot's pylog.* summary entries
    decoded (JSON), with the snapshot id."""
    out = []
    for snapshot in table.refresh().snapshots():
        extra = snapshot.summary.additional_properties
        if "pylog.offsets" not in extra:      # none of the converter's (maintenance, ...)
            continue
        entry = {k: json.loads(v) for k, v in extra.items() if k in (
            "pylog.watermark", "pylog.offsets", "pylog.skipped")}
        entry["snapshot_id"] = snapshot.snapshot_id
        out.append(entry)
    return out


def assert_commit_chain(table, partitions: int, expired: bool = False) -> None:
    """Each commit's ranges start where the previous watermark ended (or where its
    recorded skip ends): no range converted twice, none passed over unrecorded.
    `expired`: older snapshots may have been expired, so the chain is checked from the
    first commit left (its ranges' starts, its watermark elsewhere)."""
    commits = commits_of(table)
    mark = {p: 0 for p in range(partitions)}
    if expired and commits:
        first = commits[0]
        starts = {**{int(p): a for p, (a, _) in first["pylog.offsets"].items()},
                  **{int(p): a for p, (a, _) in first.get("pylog.skipped", {}).items()}}
        mark = {p: starts.get(p, first["pylog.watermark"].get(str(p), 0))
                for p in range(partitions)}
    for c in commits:
        for p, (a, b) in c.get("pylog.skipped", {}).items():
            assert a == mark[int(p)], (c, mark)
            mark[int(p)] = b
        for p, (a, b) in c["pylog.offsets"].items():
            assert a == mark[int(p)] and b >= a, (c, mark)
            mark[int(p)] = b
        assert {int(p): v for p, v in c["pylog.watermark"].items()} == {
            p: v for p, v in mark.items() if v or str(p) in c["pylog.watermark"]}, (c, mark)
