"""Operating a topic's table (``pylog tables``, docs/TABLES.md "Operations"): what it
holds and how far behind the log it is, small-file compaction and snapshot expiry.

Both maintenance operations commit one snapshot through the catalog's optimistic
concurrency: a converter commit in between makes the maintenance commit fail (run it
again), never the converter's data disappear. Compaction changes files, not rows: its
snapshot carries the table's watermark unchanged, so the exactness rule (each commit's
``pylog.watermark``) holds across it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pylog.storage import LogConfig, LogDirsReader

from .catalog import local_catalog_path, log_dirs_of, open_catalog
from .config import table_config
from .converter import WATERMARK, watermarks

__all__ = ["PartitionStatus", "TableStatus", "describe", "compact", "expire_snapshots",
           "open_table", "tabled_topics", "MAINTENANCE"]

#: Snapshot summary key of a maintenance commit ("compact"); its rows are unchanged.
MAINTENANCE = "pylog.maintenance"


def _topic_config(reader: LogDirsReader, topic: str) -> LogConfig:
    row = reader.topic_table().get(topic)
    if row is None and topic not in reader.topics():
        from pylog.errors import UnknownTopicOrPartitionError
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist in "
                                           f"{','.join(reader.paths)}")
    return LogConfig(row.config if row is not None else {})


def tabled_topics(log_dirs: Any) -> list[str]:
    """The topics with ``pylog.table.enable=true``, sorted."""
    reader = LogDirsReader(log_dirs_of(log_dirs))
    return sorted(name for name, row in reader.topic_table().items()
                  if LogConfig(row.config)["pylog.table.enable"])


def open_table(log_dirs: Any, topic: str):
    """(TableConfig, the topic's Iceberg table or None where none was created yet)."""
    from pyiceberg.exceptions import NoSuchTableError
    dirs = log_dirs_of(log_dirs)
    tc = table_config(topic, _topic_config(LogDirsReader(dirs), topic))
    if tc.local_catalog and not os.path.exists(local_catalog_path(dirs[0])):
        return tc, None      # no table was ever made here: describing creates nothing
    try:
        return tc, open_catalog(dirs, tc).load_table((tc.namespace, tc.name))
    except NoSuchTableError:
        return tc, None


@dataclass
class PartitionStatus:
    partition: int
    watermark: int            # next offset not in the table
    log_end_offset: int       # last stable offset: what the converter may take
    lag_records: int
    lag_seconds: float        # age of the oldest record not yet in the table (0: none)


@dataclass
class TableStatus:
    topic: str
    table: str                # namespace.name
    enabled: bool
    snapshot_id: int | None
    last_commit_ms: int | None
    data_files: int
    bytes: int
    records: int
    snapshots: int
    partitions: list[PartitionStatus] = field(default_factory=list)
    dead_letters: int | None = None   # a typed topic's dead-letter table's records

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["partitions"] = [p.__dict__ for p in self.partitions]
        return out


def describe(log_dirs: Any, topic: str, now_ms: int | None = None) -> TableStatus:
    """The table of `topic` beside its log: per partition the watermark and the lag in
    records and seconds; the current snapshot's files, bytes, records and time."""
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    dirs = log_dirs_of(log_dirs)
    reader = LogDirsReader(dirs)
    tc, table = open_table(dirs, topic)
    snapshot = table.current_snapshot() if table is not None else None
    summary = snapshot.summary.additional_properties if snapshot is not None else {}
    status = TableStatus(
        topic=topic, table=f"{tc.namespace}.{tc.name}", enabled=tc.enable,
        snapshot_id=snapshot.snapshot_id if snapshot else None,
        last_commit_ms=snapshot.timestamp_ms if snapshot else None,
        data_files=int(summary.get("total-data-files", 0)),
        bytes=int(summary.get("total-files-size", 0)),
        records=int(summary.get("total-records", 0)),
        snapshots=len(table.snapshots()) if table is not None else 0)
    if table is not None:
        status.dead_letters = _dead_letters(table, tc)
    marks = watermarks(table) if table is not None else {}
    for p in range(reader.topics().get(topic, 0)):
        pr = reader.partition(topic, p)
        end = pr.last_stable_offset()
        w = marks.get(p, 0)
        lag = max(end - w, 0)
        seconds = 0.0
        if lag:     # the oldest record the table lacks (from the log start if deleted)
            for rows in pr.read_arrow(max(w, pr.log_start_offset()), end, max_bytes=1 << 16):
                if rows.num_rows:
                    first_ms = rows.column("timestamp").cast("int64")[0].as_py()     # ms
                    seconds = max((now_ms - first_ms) / 1000, 0.0)
                    break
        status.partitions.append(PartitionStatus(p, w, end, lag, seconds))
    return status


def _dead_letters(table, tc) -> int | None:
    """The records of a typed topic's dead-letter table (0: none yet); None: untyped."""
    from pyiceberg.exceptions import NoSuchTableError

    from .schema import schema_settings
    settings = schema_settings(tc.schema_properties)
    if not settings.enabled:
        return None
    try:
        dead = table.catalog.load_table(
            (tc.namespace, settings.dead_letter or f"{tc.name}__dead_letter"))
    except NoSuchTableError:
        return 0
    snapshot = dead.current_snapshot()
    return int(snapshot.summary.additional_properties.get("total-records", 0)) if snapshot else 0


def _local_path(uri: str) -> str | None:
    return uri[len("file://"):] if uri.startswith("file://") else (uri if "://" not in uri else None)


def compact(log_dirs: Any, topic: str, small_bytes: int = 32 << 20) -> dict:
    """Rewrites the data files smaller than `small_bytes` of each Iceberg partition into as
    few files as the table's target size allows, sorted by (partition, offset), in one
    overwrite commit that keeps the watermark. Returns what it did."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import _dataframe_to_data_files   # pyiceberg's own writer

    _tc, table = open_table(log_dirs, topic)
    if table is None or table.current_snapshot() is None:
        return {"topic": topic, "files_before": 0, "files_after": 0, "rewritten": 0}
    snapshot = table.current_snapshot()
    groups: dict[Any, list] = {}
    for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
        if task.file.file_size_in_bytes < small_bytes:
            groups.setdefault(task.file.partition, []).append(task.file)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    rewritten = sum(len(v) for v in groups.values())
    total_files = int(snapshot.summary.additional_properties.get("total-data-files", 0))
    if not groups:
        return {"topic": topic, "files_before": total_files, "files_after": total_files,
                "rewritten": 0, "snapshot_id": snapshot.snapshot_id}
    schema = table.schema().as_arrow()
    marks = watermarks(table)
    props = {WATERMARK: json.dumps({str(p): o for p, o in sorted(marks.items())},
                                   separators=(",", ":")),
             MAINTENANCE: "compact", "pylog.topic": topic}
    written = 0
    with table.transaction() as txn:
        with txn.update_snapshot(snapshot_properties=props).overwrite() as rewrite:
            for files in groups.values():
                parts = [_read_file(table, f.file_path, schema) for f in files]
                rows = pa.concat_tables(parts).sort_by([("partition", "ascending"),
                                                        ("offset", "ascending")])
                for new in _dataframe_to_data_files(txn.table_metadata, rows, table.io,
                                                    write_uuid=uuid.uuid4()):
                    rewrite.append_data_file(new)
                    written += 1
                for old in files:
                    rewrite.delete_data_file(old)
    after = table.refresh().current_snapshot()
    return {"topic": topic, "files_before": total_files,
            "files_after": int(after.summary.additional_properties.get("total-data-files", 0)),
            "rewritten": rewritten, "written": written, "snapshot_id": after.snapshot_id}


def _read_file(table, uri: str, schema):
    import pyarrow.parquet as pq
    from pyarrow import fs
    filesystem, path = (fs.FileSystem.from_uri(uri) if "://" in uri else (fs.LocalFileSystem(), uri))
    return pq.read_table(path, filesystem=filesystem, schema=schema)


def _data_files(table, snapshot) -> set[str]:
    return {entry.data_file.file_path for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}


def _metadata_files(table, snapshot) -> set[str]:
    return {snapshot.manifest_list} | {m.manifest_path for m in snapshot.manifests(table.io)}


def expire_snapshots(log_dirs: Any, topic: str, older_than_ms: int, retain_last: int = 1) -> dict:
    """Expires the snapshots committed before `older_than_ms` (epoch ms), keeping the newest
    `retain_last` and the current one; deletes the local files only they referenced (data
    files, manifests, manifest lists). The watermark survives: it is in the current
    snapshot's lineage and in the table's properties."""
    _tc, table = open_table(log_dirs, topic)
    if table is None:
        return {"topic": topic, "expired": 0, "files_deleted": 0}
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    keep = {s.snapshot_id for s in snapshots[-max(retain_last, 1):]}
    current = table.current_snapshot()
    if current is not None:
        keep.add(current.snapshot_id)
    doomed = [s for s in snapshots if s.timestamp_ms < older_than_ms and s.snapshot_id not in keep]
    if not doomed:
        return {"topic": topic, "expired": 0, "files_deleted": 0}
    kept = [s for s in snapshots if s.snapshot_id not in {d.snapshot_id for d in doomed}]
    candidates = set().union(*(_data_files(table, s) | _metadata_files(table, s) for s in doomed))
    still = set().union(*(_data_files(table, s) | _metadata_files(table, s) for s in kept))
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in doomed]).commit()
    deleted = 0
    for uri in sorted(candidates - still):
        path = _local_path(uri)
        if path is not None and os.path.exists(path):
            os.remove(path)
            deleted += 1
    return {"topic": topic, "expired": len(doomed), "files_deleted": deleted,
            "snapshots_left": len(kept)}
