"""Operating a topic's table (``pylog tables``, docs/TABLES.md "Operations" and
"Maintenance"): what it holds and how far behind the log it is; small-file compaction,
snapshot expiry and orphan-file removal, as commands and as the store's schedule
(:func:`maintain`, run by the TableService between the topic's conversion commits).

Compaction and expiry each make one commit through the catalog's optimistic concurrency:
a commit of another writer in between (a converter in another process) makes theirs
fail, and they plan again from the table as it is then, never on a stale base (so no
file is rewritten twice, no converter data disappears). Compaction changes files, not
rows: its snapshot carries the base's watermark unchanged, so the exactness rule (each
commit's ``pylog.watermark``) holds across it.

Orphan removal deletes the files under the table's location that no snapshot (nor the
metadata log) references and whose age is past a floor. A writer's files are
unreferenced between their write and its commit: the floor must exceed the longest such
window of any writer (a conversion's commit follows its write within seconds; a killed
one's files are never committed by anyone, docs/TABLES.md "How a table stays exact").
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pylog.storage import LogConfig, LogDirsReader

from .catalog import local_catalog_path, log_dirs_of, open_catalog
from .config import TableConfig, table_config
from .converter import WATERMARK, _kill_point, watermarks

__all__ = ["PartitionStatus", "TableStatus", "describe", "compact", "expire_snapshots",
           "remove_orphans", "compact_table", "expire_table_snapshots",
           "remove_table_orphans", "maintain", "dead_letter_table", "open_table", "tabled_topics", "MAINTENANCE",
           "SMALL_FILE_RATIO"]

log = logging.getLogger(__name__)

#: Snapshot summary key of a maintenance commit ("compact"); its rows are unchanged.
MAINTENANCE = "pylog.maintenance"

#: A data file below this share of the compaction target is small (Iceberg's
#: rewrite_data_files: min-file-size-bytes defaults to 75% of the target). A compacted
#: file of about the target is then never rewritten again.
SMALL_FILE_RATIO = 0.75

#: Attempts of a maintenance commit that another writer's commit made stale.
COMMIT_ATTEMPTS = 3


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


def dead_letter_table(table, tc: TableConfig):
    """A typed topic's dead-letter table; None for an untyped topic or none made yet."""
    from pyiceberg.exceptions import NoSuchTableError

    from .schema import schema_settings
    settings = schema_settings(tc.schema_properties)
    if not settings.enabled:
        return None
    try:
        return table.catalog.load_table(
            (tc.namespace, settings.dead_letter or f"{tc.name}__dead_letter"))
    except NoSuchTableError:
        return None


def _dead_letters(table, tc) -> int | None:
    """The records of a typed topic's dead-letter table (0: none yet); None: untyped."""
    from .schema import schema_settings
    if not schema_settings(tc.schema_properties).enabled:
        return None
    dead = dead_letter_table(table, tc)
    snapshot = dead.current_snapshot() if dead is not None else None
    return int(snapshot.summary.additional_properties.get("total-records", 0)) if snapshot else 0


def _local_path(uri: str) -> str | None:
    return uri[len("file://"):] if uri.startswith("file://") else (uri if "://" not in uri else None)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _retrying(what: str, table, attempt_once):
    """attempt_once(table) again on the table reloaded when another writer's commit made
    its base stale (CommitFailedException), at most COMMIT_ATTEMPTS times."""
    from pyiceberg.exceptions import CommitFailedException
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            return attempt_once(table)
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS - 1:
                raise
            log.info("table %s changed under its %s: planning again from its new state",
                     ".".join(table.name()), what)
            table = table.refresh()
    raise AssertionError("unreachable")


def _live_entries(table, snapshot):
    """The manifest entries of the data files `snapshot` holds (deleted ones left out)."""
    return [entry for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]


def _bins(files: list, target_bytes: int) -> list[list]:
    """Consecutive runs of `files` (oldest first) of about `target_bytes` together; a run
    of one file is not a rewrite."""
    bins, current, size = [], [], 0
    for f in files:
        current.append(f)
        size += f.file_size_in_bytes
        if size >= target_bytes:
            bins.append(current)
            current, size = [], 0
    bins.append(current)
    return [b for b in bins if len(b) > 1]


def compact_table(table, topic: str, target_bytes: int = 128 << 20, min_files: int = 5) -> dict:
    """Rewrites the small data files (below SMALL_FILE_RATIO of `target_bytes`) of each
    Iceberg partition that has at least `min_files` of them: runs of them, oldest first,
    of about `target_bytes` together, each into one file sorted by (partition, offset),
    all in one overwrite commit that carries the base's ``pylog.watermark`` and
    ``pylog.maintenance=compact``. Returns what it did."""
    return _retrying("compaction", table,
                     lambda t: _compact_once(t, topic, target_bytes, min_files))


def _compact_once(table, topic: str, target_bytes: int, min_files: int) -> dict:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    from pyiceberg.table import FileScanTask

    from .writer import can_write, transaction, write_data_file

    snapshot = table.current_snapshot()
    if snapshot is None:
        return {"topic": topic, "files_before": 0, "files_after": 0, "rewritten": 0, "written": 0}
    total_files = int(snapshot.summary.additional_properties.get("total-data-files", 0))
    groups: dict[Any, list] = {}
    for entry in sorted(_live_entries(table, snapshot), key=lambda e: e.sequence_number or 0):
        f = entry.data_file
        if f.file_size_in_bytes < SMALL_FILE_RATIO * target_bytes:
            groups.setdefault((f.spec_id, f.partition), []).append(f)
    bins = [b for files in groups.values() if len(files) >= min_files
            for b in _bins(files, target_bytes)]
    if not bins:
        return {"topic": topic, "files_before": total_files, "files_after": total_files,
                "rewritten": 0, "written": 0, "snapshot_id": snapshot.snapshot_id}
    schema = table.schema()
    marks = watermarks(table)
    props = {MAINTENANCE: "compact", "pylog.topic": topic}
    if marks or WATERMARK in snapshot.summary.additional_properties:
        props[WATERMARK] = json.dumps({str(p): o for p, o in sorted(marks.items())},
                                      separators=(",", ":"))
    scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
    written: list = []
    with transaction(table) as txn:
        for files in bins:      # one bin in memory at a time
            rows = scan.to_table([FileScanTask(f) for f in files])
            rows = rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
            if can_write(table):
                written.append(write_data_file(table, rows))
            else:               # a partitioned table: pyiceberg's writer, one partition value
                written.extend(_dataframe_to_data_files(txn.table_metadata, rows, table.io))
        _kill_point("compact-written")
        with txn.update_snapshot(snapshot_properties=props).overwrite() as rewrite:
            for new in written:
                rewrite.append_data_file(new)
            for old in (f for files in bins for f in files):
                rewrite.delete_data_file(old)
    after = table.current_snapshot()
    return {"topic": topic, "files_before": total_files,
            "files_after": int(after.summary.additional_properties.get("total-data-files", 0)),
            "rewritten": sum(len(b) for b in bins), "written": len(written),
            "snapshot_id": after.snapshot_id}


def _data_files(table, snapshot, deleted: bool = False) -> set[str]:
    """The data files `snapshot` holds; with `deleted`, also those its manifests record as
    deleted by it (still the files of its parent)."""
    return {entry.data_file.file_path for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=not deleted)}


def _metadata_files(table, snapshot) -> set[str]:
    return {snapshot.manifest_list} | {m.manifest_path for m in snapshot.manifests(table.io)}


def expire_table_snapshots(table, topic: str, older_than_ms: int, retain_last: int = 1) -> dict:
    """Expires the snapshots committed before `older_than_ms` (epoch ms), keeping the newest
    `retain_last` and the current one; deletes the local files only they referenced (data
    files, manifests, manifest lists). The watermark survives: it is in the current
    snapshot's lineage and in the table's properties."""
    return _retrying("snapshot expiry", table,
                     lambda t: _expire_once(t, topic, older_than_ms, retain_last))


def _expire_once(table, topic: str, older_than_ms: int, retain_last: int) -> dict:
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    keep = {s.snapshot_id for s in snapshots[-max(retain_last, 1):]}
    current = table.current_snapshot()
    if current is not None:
        keep.add(current.snapshot_id)
    doomed = [s for s in snapshots if s.timestamp_ms < older_than_ms and s.snapshot_id not in keep]
    if not doomed:
        return {"topic": topic, "expired": 0, "files_deleted": 0, "snapshots_left": len(snapshots)}
    gone = {d.snapshot_id for d in doomed}
    kept = [s for s in snapshots if s.snapshot_id not in gone]
    candidates = set().union(*(_data_files(table, s, deleted=True) | _metadata_files(table, s) for s in doomed))
    still = set().union(*(_data_files(table, s) | _metadata_files(table, s) for s in kept))
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in doomed]).commit()
    # Only after the commit: a refused one leaves every file its snapshots need (and a
    # process killed here leaves orphans, for orphan removal).
    _kill_point("expire-committed")
    deleted = 0
    for uri in sorted(candidates - still):
        if _remove(_local_path(uri)):
            deleted += 1
    return {"topic": topic, "expired": len(doomed), "files_deleted": deleted,
            "snapshots_left": len(kept)}


def _remove(path: str | None) -> bool:
    if path is None:
        return False
    try:
        os.remove(path)
        return True
    except FileNotFoundError:      # removed meanwhile (another maintenance run)
        return False


def _referenced(table) -> set[str]:
    """The local paths of every file the table's metadata reaches: of each snapshot its
    manifest list, manifests and the data files it holds, the current metadata file and
    those of its metadata log, statistics files. (A file only an expired snapshot held
    is unreferenced: expiry deletes it, or this does after the age floor.)"""
    metadata = table.metadata
    uris = {table.metadata_location} | {e.metadata_file for e in metadata.metadata_log}
    uris |= {s.statistics_path for s in metadata.statistics}
    uris |= {s.statistics_path for s in metadata.partition_statistics}
    for snapshot in metadata.snapshots:
        uris |= _data_files(table, snapshot) | _metadata_files(table, snapshot)
    return {p for p in map(_local_path, uris) if p is not None}


#: The files orphan removal considers: Parquet data files, Avro manifests and manifest
#: lists, table metadata. Anything else under the location is left alone.
_ORPHAN_SUFFIXES = (".parquet", ".avro", ".metadata.json")


def remove_table_orphans(table, topic: str, older_than_ms: int) -> dict:
    """Deletes the files under the table's (local) location that its metadata does not
    reference and that were last written before `older_than_ms` (epoch ms): the files of
    a conversion or compaction killed before its commit, old metadata files past the
    metadata log. Lists the files first and reads the references after, so a file that a
    commit made before the read references is kept whatever its age; a file written
    before the listing and committed after the read is kept by the age floor."""
    root = _local_path(table.location())
    if root is None:
        return {"topic": topic, "orphans": 0, "files_deleted": 0, "bytes_deleted": 0,
                "skipped": f"not a local table location: {table.location()}"}
    listed = []
    for directory, _, names in os.walk(root):
        for name in names:
            if name.endswith(_ORPHAN_SUFFIXES):
                path = os.path.join(directory, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                listed.append((path, st.st_mtime_ns // 1_000_000, st.st_size))
    referenced = _referenced(table.refresh())
    orphans = [(p, m, n) for p, m, n in listed if p not in referenced]
    old = [(p, n) for p, m, n in orphans if m < older_than_ms]
    deleted = size = 0
    for path, n in old:
        if _remove(path):
            deleted += 1
            size += n
    return {"topic": topic, "orphans": len(orphans), "files_deleted": deleted,
            "bytes_deleted": size, "kept_younger": len(orphans) - len(old)}


def maintain(table, topic: str, tc: TableConfig, now_ms: int | None = None) -> dict:
    """One scheduled maintenance of `table` by the topic's settings (``pylog.table.compact.*``,
    ``pylog.table.snapshot.*``, ``pylog.table.orphan.min.age.ms``): compaction, then snapshot
    expiry (which then frees the compacted-away files once their snapshots expire), then
    orphan removal. Returns {"compact": ..., "expire": ..., "orphans": ...}."""
    now_ms = _now_ms() if now_ms is None else now_ms
    table = table.refresh()
    out: dict[str, Any] = {"compact": compact_table(table, topic, tc.compact_target_file_bytes,
                                                    tc.compact_min_files)}
    table = table.refresh()
    if tc.snapshot_max_age_ms >= 0:
        out["expire"] = expire_table_snapshots(table, topic, now_ms - tc.snapshot_max_age_ms,
                                               tc.snapshot_retain_last)
        table = table.refresh()
    if tc.orphan_min_age_ms >= 0:
        out["orphans"] = remove_table_orphans(table, topic, now_ms - tc.orphan_min_age_ms)
    return out


def compact(log_dirs: Any, topic: str, target_bytes: int | None = None,
            min_files: int | None = None) -> dict:
    """:func:`compact_table` on the topic's table in `log_dirs`, by its settings unless
    given."""
    tc, table = open_table(log_dirs, topic)
    if table is None:
        return {"topic": topic, "files_before": 0, "files_after": 0, "rewritten": 0, "written": 0}
    return compact_table(table, topic, target_bytes or tc.compact_target_file_bytes,
                         min_files or tc.compact_min_files)


def expire_snapshots(log_dirs: Any, topic: str, older_than_ms: int, retain_last: int = 1) -> dict:
    """:func:`expire_table_snapshots` on the topic's table in `log_dirs`."""
    _tc, table = open_table(log_dirs, topic)
    if table is None:
        return {"topic": topic, "expired": 0, "files_deleted": 0}
    return expire_table_snapshots(table, topic, older_than_ms, retain_last)


def remove_orphans(log_dirs: Any, topic: str, older_than_ms: int | None = None) -> dict:
    """:func:`remove_table_orphans` on the topic's table in `log_dirs`; the age floor is
    the topic's ``pylog.table.orphan.min.age.ms`` unless `older_than_ms` is given."""
    tc, table = open_table(log_dirs, topic)
    if table is None:
        return {"topic": topic, "orphans": 0, "files_deleted": 0, "bytes_deleted": 0}
    if older_than_ms is None:
        if tc.orphan_min_age_ms < 0:
            return {"topic": topic, "orphans": 0, "files_deleted": 0, "bytes_deleted": 0,
                    "skipped": "pylog.table.orphan.min.age.ms=-1"}
        older_than_ms = _now_ms() - tc.orphan_min_age_ms
    return remove_table_orphans(table, topic, older_than_ms)
