"""The table converters' counters, for metrics (pylog.metrics): per topic, commits,
records, data files and bytes written, and the watermark of the last commit; and the
scheduled maintenance's runs, files compacted, snapshots expired, orphans removed."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

__all__ = ["TableStats", "TopicTableStats"]


@dataclass
class TopicTableStats:
    commits: int = 0
    records: int = 0
    files: int = 0
    bytes: int = 0
    watermark: dict[int, int] = field(default_factory=dict)
    maintenance_runs: int = 0
    files_compacted: int = 0        # small data files rewritten by compaction
    snapshots_expired: int = 0
    orphans_removed: int = 0


class TableStats:
    """Filled by the TableService after each run (thread-safe: read by a metrics scrape)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, TopicTableStats] = {}

    def record(self, topic: str, table, result) -> None:
        """`result`: the run's CommitResult; `table`: its table (for the snapshot's
        added-data-files and added-files-size)."""
        files = size = 0
        if result.committed and result.snapshot_id is not None and table is not None:
            snapshot = table.snapshot_by_id(result.snapshot_id)
            summary = snapshot.summary.additional_properties if snapshot is not None else {}
            files = int(summary.get("added-data-files", 0))
            size = int(summary.get("added-files-size", 0))
        with self._lock:
            s = self._topics.setdefault(topic, TopicTableStats())
            if result.committed:
                s.commits += 1
                s.records += result.records
                s.files += files
                s.bytes += size
            s.watermark = dict(result.watermark)

    def record_maintenance(self, topic: str, result: dict) -> None:
        """`result`: a pylog.table.maintenance.maintain() result."""
        with self._lock:
            s = self._topics.setdefault(topic, TopicTableStats())
            s.maintenance_runs += 1
            s.files_compacted += result.get("compact", {}).get("rewritten", 0)
            s.snapshots_expired += result.get("expire", {}).get("expired", 0)
            s.orphans_removed += result.get("orphans", {}).get("files_deleted", 0)

    def snapshot(self) -> dict[str, TopicTableStats]:
        with self._lock:
            return {t: dataclasses.replace(s, watermark=dict(s.watermark))
                    for t, s in self._topics.items()}
