"""Table maintenance as the store's schedule and as commands, on a real store, a real
pyiceberg SQL catalog and real Parquet files: the schedule compacts and expires on its
own while a producer writes and the table still equals the log; kill -9 inside a
scheduled compaction leaves the table exact; a compaction whose commit another writer's
commit made stale plans again (no row twice); the files of a converter killed between
writing Parquet and committing are removed once past pylog.table.orphan.min.age.ms and
not before, and the age floor is what keeps the files of a conversion in flight."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import pytest
from log_support import wait_until

import pylog
from pylog.table import TableConverter, convert, watermarks
from pylog.table import converter as converter_module
from pylog.table import maintenance
from pylog.table.converter import KILL_AT_ENV

from .support import assert_commit_chain, rows_of, table_of
from .test_exactness import Producer, data_files_on_disk, reap, referenced_files, run_child, wait_ready
from .test_table_metrics import scrape

DAY_MS = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def live_files(table) -> set[str]:
    """The data files of the current snapshot (local paths)."""
    return {t.file.file_path[len("file://"):] for t in table.refresh().scan().plan_files()}


def held_files(table) -> set[str]:
    """The data files some snapshot of the table holds (local paths)."""
    table = table.refresh()
    return {t.file.file_path[len("file://"):] for s in table.snapshots()
            for t in table.scan(snapshot_id=s.snapshot_id).plan_files()}


def small_commits(store, producer, topic, n):
    for _ in range(n):
        producer.one()
        producer.one()
        convert(store, topic)


def test_the_schedule_compacts_and_expires_while_a_producer_writes(tmp_path):
    """A store with its background thread (as `pylog serve` runs it): conversions every
    50 ms, maintenance each second; the schedule alone compacts and expires while a
    producer writes, and the table then holds every record of the log once."""
    with pylog.open(str(tmp_path / "logs")) as store:
        store.create_topic("t", 2, {
            "pylog.table.enable": "true", "pylog.table.commit.interval.ms": "50",
            "pylog.table.maintenance.interval.ms": "1000", "pylog.table.compact.min.files": "2",
            "pylog.table.snapshot.max.age.ms": "0", "pylog.table.snapshot.retain.last": "2"})
        producer = Producer(store, "t", 2, seed="schedule")
        stop = threading.Event()

        def produce():
            while not stop.wait(0.005):
                producer.one()
        thread = threading.Thread(target=produce)
        thread.start()
        try:
            def maintained():
                s = store.tables.stats.snapshot().get("t")
                return (s is not None and s.maintenance_runs >= 3 and s.files_compacted > 0
                        and s.snapshots_expired > 0)
            assert wait_until(maintained, timeout=240), (store.tables.stats.snapshot(),
                                                         store.tables.errors())
        finally:
            stop.set()
            thread.join()
        ends = {p: store.log("t", p).log_end_offset for p in range(2)}
        assert wait_until(lambda: watermarks(table_of(store, "t")) == ends, timeout=120), \
            store.tables.errors()
        stats = store.tables.stats.snapshot()["t"]
        m = scrape(store)
        table = table_of(store, "t")
        rows = rows_of(table)
    assert len({(r[0], r[1]) for r in rows}) == len(rows)        # no record twice
    assert rows == sorted(producer.rows)                         # none missing, all equal
    assert_commit_chain(table, 2, expired=True)
    assert m['pylog_table_maintenance_runs_total{topic="t"}'] == stats.maintenance_runs >= 3
    assert m['pylog_table_files_compacted_total{topic="t"}'] == stats.files_compacted > 0
    assert m['pylog_table_snapshots_expired_total{topic="t"}'] == stats.snapshots_expired > 0


def test_compaction_keeps_the_watermark_and_bins_by_size(store):
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 2, seed="bins")
    small_commits(store, producer, "t", 6)
    table = table_of(store, "t")
    before = watermarks(table)
    sizes = sorted(os.path.getsize(f) for f in live_files(table))
    assert len(sizes) == 6
    # Fewer small files than min_files: nothing to do.
    assert maintenance.compact_table(table, "t", 1 << 20, min_files=7)["rewritten"] == 0
    # Files at or above 3/4 of the target are not small: none to rewrite.
    assert maintenance.compact_table(table, "t", sizes[0], min_files=2)["rewritten"] == 0
    # A target above all six together: one run, one file.
    out = maintenance.compact_table(table, "t", sum(sizes) + 1, min_files=2)
    assert out["rewritten"] == 6 and out["written"] == 1 and out["files_after"] == 1, out
    table = table_of(store, "t")
    assert watermarks(table) == before
    assert table.current_snapshot().summary.additional_properties["pylog.maintenance"] == "compact"
    assert rows_of(table) == sorted(producer.rows)
    small_commits(store, producer, "t", 1)                 # the converter goes on from it
    table = table_of(store, "t")
    assert rows_of(table) == sorted(producer.rows)
    assert_commit_chain(table, 2)


@pytest.mark.parametrize("by", ["partition", "hour(timestamp)"])
def test_compacting_a_partitioned_table(store, by):
    """Each Iceberg partition's small files are compacted apart (pyiceberg's writer)."""
    store.create_topic("t", 2, {"pylog.table.enable": "true", "pylog.table.partition.by": by})
    producer = Producer(store, "t", 2, seed=by)
    small_commits(store, producer, "t", 4)
    table = table_of(store, "t")
    before = watermarks(table)
    groups = {t.file.partition for t in table.scan().plan_files()}
    out = maintenance.compact_table(table, "t", 1 << 20, min_files=2)
    assert out["rewritten"] > 0
    table = table_of(store, "t")
    after = [t.file for t in table.scan().plan_files()]
    assert {f.partition for f in after} == groups
    assert len(after) <= len(groups) + (out["files_before"] - out["rewritten"])
    assert watermarks(table) == before and rows_of(table) == sorted(producer.rows)


def test_runs_of_files_of_about_the_target():
    from types import SimpleNamespace
    files = [SimpleNamespace(file_size_in_bytes=n) for n in (40, 70, 10, 50, 45, 5, 30)]
    runs = maintenance._bins(files, 100)
    assert [[f.file_size_in_bytes for f in run] for run in runs] == [[40, 70], [10, 50, 45], [5, 30]]
    assert maintenance._bins(files[:1], 100) == [] and maintenance._bins(files[1:2] + files[:1], 60) == []


def test_a_compaction_made_stale_by_a_conversion_plans_again(store, monkeypatch):
    """Another process's converter commits between the compaction's writes and its commit:
    the catalog refuses the compaction's commit; it plans again on the new snapshot (its
    watermark, the new file among the small ones), so no row is lost or doubled."""
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 2, seed="stale")
    small_commits(store, producer, "t", 4)
    other = TableConverter(store.log_dirs, "t")          # a second process's converter
    raced = []

    def convert_in_between(step):
        if step == "compact-written" and not raced:
            producer.one()
            raced.append(other.run_once())
    monkeypatch.setattr(maintenance, "_kill_point", convert_in_between)
    out = maintenance.compact_table(table_of(store, "t"), "t", 1 << 20, min_files=2)
    assert raced and raced[0].committed
    assert out["rewritten"] == 5, out                      # the winner's file too
    table = table_of(store, "t")
    assert watermarks(table) == raced[0].watermark
    rows = rows_of(table)
    assert len({(r[0], r[1]) for r in rows}) == len(rows)
    assert rows == sorted(producer.rows)
    assert len(live_files(table)) == 1


def _fork(target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)    # fork beside pyiceberg's pool
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            target()
            code = 0
        finally:
            os._exit(code)
    return pid


@pytest.mark.parametrize("step", ["compact-written", "metadata"])
def test_kill_9_in_a_scheduled_compaction_leaves_the_table_exact(tmp_path, step):
    """The store (in a child process) runs its schedule: the conversion, then the due
    maintenance, whose compaction is SIGKILLed after writing its files (or inside the
    catalog's commit, its metadata file written). The table is as before it, exact; the
    compaction's files are orphans, removed by the next maintenance once past the age."""
    path = str(tmp_path / "logs")
    config = {"pylog.table.enable": "true", "pylog.table.commit.interval.ms": "1",
              "pylog.table.maintenance.interval.ms": "1", "pylog.table.compact.min.files": "2"}
    with pylog.open(path, background=False) as store:
        store.create_topic("t", 2, config)
        producer = Producer(store, "t", 2, seed=step)
        small_commits(store, producer, "t", 5)
        table = table_of(store, "t")
        before_files, before_marks = live_files(table), watermarks(table)
        on_disk = data_files_on_disk(table)

    def scheduled_maintenance():
        with pylog.open(path, background=False) as child:
            t0 = now_ms()
            child.tables.run_due(t0)            # schedules the conversion
            child.tables.run_due(t0 + 10)       # converts (nothing new), schedules maintenance
            os.environ[KILL_AT_ENV] = step
            if step == "metadata":              # inside the catalog's commit
                from pyiceberg.catalog.sql import SqlCatalog
                write = SqlCatalog._write_metadata

                def write_then_die(*args, **kwargs):
                    write(*args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)
                SqlCatalog._write_metadata = staticmethod(write_then_die)
            child.tables.run_due(t0 + 20)       # maintenance: killed in its compaction
    pid = _fork(scheduled_maintenance)
    assert reap(pid) == -signal.SIGKILL

    with pylog.open(path, background=False) as store:
        table = table_of(store, "t")
        assert live_files(table) == before_files and watermarks(table) == before_marks
        assert rows_of(table) == sorted(producer.rows)
        orphans = data_files_on_disk(table) - referenced_files(table)
        assert orphans and orphans == data_files_on_disk(table) - on_disk   # the compaction's
        producer.store = store
        producer.one()
        convert(store, "t")
        table = table_of(store, "t")
        assert rows_of(table) == sorted(producer.rows)
        assert_commit_chain(table, 2)
        t0 = now_ms()                            # the schedule again, now not killed
        store.tables.run_due(t0)
        store.tables.run_due(t0 + 10)
        store.tables.run_due(t0 + 20)
        first = store.tables.last_maintenance["t"]
        assert first["compact"]["rewritten"] == 6
        assert first["orphans"]["files_deleted"] == 0                 # younger than a day
        assert first["orphans"]["kept_younger"] >= len(orphans)
        assert orphans <= data_files_on_disk(table)
        store.tables.run_due(t0 + DAY_MS + 60_000)                     # a day later
        later = store.tables.last_maintenance["t"]
        assert later["orphans"]["files_deleted"] >= len(orphans)
        table = table_of(store, "t")
        assert not orphans & data_files_on_disk(table)
        assert rows_of(table) == sorted(producer.rows)


def test_a_killed_converters_orphans_go_after_the_age_and_not_before(store):
    store.create_topic("t", 2, {"pylog.table.enable": "true", "pylog.table.commit.interval.ms": "1",
                                "pylog.table.maintenance.interval.ms": "1"})
    producer = Producer(store, "t", 2, seed="orphans")
    small_commits(store, producer, "t", 2)
    producer.one()
    pid, pipe = run_child(store.log_dirs, "t", kill_at="written")   # Parquet written, no commit
    assert wait_ready(pipe)
    assert reap(pid) == -signal.SIGKILL
    table = table_of(store, "t")
    orphans = data_files_on_disk(table) - referenced_files(table)
    assert len(orphans) == 1
    t0 = now_ms()
    store.tables.run_due(t0)
    store.tables.run_due(t0 + 10)               # converts the killed run's range again
    store.tables.run_due(t0 + 20)               # maintenance: the orphan is younger than a day
    assert store.tables.last_maintenance["t"]["orphans"]["files_deleted"] == 0
    assert orphans <= data_files_on_disk(table)
    store.tables.run_due(t0 + DAY_MS - 60_000)  # still younger
    assert orphans <= data_files_on_disk(table)
    store.tables.run_due(t0 + DAY_MS + 60_000)  # past the floor (its manifests go too)
    removed = store.tables.last_maintenance["t"]["orphans"]["files_deleted"]
    assert removed >= 1
    table = table_of(store, "t")
    assert not orphans & data_files_on_disk(table)
    assert data_files_on_disk(table) == referenced_files(table)
    assert rows_of(table) == sorted(producer.rows)
    assert scrape(store)['pylog_table_orphan_files_removed_total{topic="t"}'] == removed


def test_the_age_floor_keeps_the_files_of_a_conversion_in_flight(store, monkeypatch):
    """Orphan removal while a conversion has written its Parquet file and not committed it
    yet: the file is unreferenced (it is counted as an orphan) and kept by the floor, and
    the commit that follows makes it the table's. Without the floor the same run deletes
    it, and the committed table names a file that is gone: that is why the floor exists."""
    store.create_topic("t", 1, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 1, seed="floor")
    small_commits(store, producer, "t", 1)
    seen = []

    def orphan_removal_now(floor_ms):
        def at(step):
            if step == "written":
                table = table_of(store, "t")
                seen.append(maintenance.remove_table_orphans(table, "t", now_ms() - floor_ms))
        return at
    monkeypatch.setattr(converter_module, "_kill_point", orphan_removal_now(DAY_MS))
    producer.one()
    assert convert(store, "t").committed
    assert seen[0]["orphans"] >= 1 and seen[0]["files_deleted"] == 0
    table = table_of(store, "t")
    assert rows_of(table) == sorted(producer.rows)           # the in-flight file is read

    monkeypatch.setattr(converter_module, "_kill_point", orphan_removal_now(-1000))
    producer.one()
    assert convert(store, "t").committed
    assert seen[1]["files_deleted"] >= 1                     # the in-flight files, deleted
    with pytest.raises(OSError):
        rows_of(table_of(store, "t"))


def test_a_typed_topics_dead_letter_table_is_maintained_too(store, tmp_path):
    """The schedule compacts a typed topic's table and its dead-letter table alike; each
    keeps its own watermark and its rows (the dead letters: offset, value, reason)."""
    import json
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "required": ["id"],
                                  "properties": {"id": {"type": "integer"}}}))
    store.create_topic("t", 1, {"pylog.table.enable": "true", "pylog.table.schema.type": "json",
                                "pylog.table.schema.file": str(schema),
                                "pylog.table.commit.interval.ms": "1",
                                "pylog.table.maintenance.interval.ms": "1",
                                "pylog.table.compact.min.files": "2"})
    log = store.log("t", 0)
    for i in range(4):                                   # four commits, each good and bad
        log.append_records([b'{"id":%d}' % i, b"bad %d" % i])
        convert(store, "t")
    table = table_of(store, "t")
    dead = maintenance.dead_letter_table(table, maintenance.open_table(store.log_dirs, "t")[0])

    def state(t):
        t = t.refresh()
        rows = sorted(t.scan().to_arrow().select(["offset", "value"]).to_pylist(),
                      key=lambda r: r["offset"])
        return rows, watermarks(t), len(live_files(t))
    before = [state(table), state(dead)]
    assert before[0][2] == before[1][2] == 4
    t0 = now_ms()
    for d in (0, 10, 20):
        store.tables.run_due(t0 + d)
    after = [state(table), state(dead)]
    assert [(rows, marks) for rows, marks, _ in after] == [(rows, marks) for rows, marks, _ in before]
    assert [files for _, _, files in after] == [1, 1]
    assert [r["value"] for r in after[1][0]] == [b"bad %d" % i for i in range(4)]
    assert store.tables.stats.snapshot()["t"].files_compacted == 8


def test_the_schedule_follows_the_interval_as_altered(store):
    """0 disables the schedule; an interval runs at its next multiple of the wall clock;
    an interval altered to a shorter one takes effect at the next pass."""
    store.create_topic("t", 1, {"pylog.table.enable": "true", "pylog.table.commit.interval.ms": "1",
                                "pylog.table.maintenance.interval.ms": "0"})
    store.log("t", 0).append_records([b"x"])
    hour = 3_600_000
    t0 = (now_ms() // hour + 1) * hour + 1000      # just past a whole hour
    for d in (0, 10, 20):
        store.tables.run_due(t0 + d)
    assert "t" not in store.tables.last_maintenance
    store.alter_topic_config("t", {"pylog.table.maintenance.interval.ms": str(hour)})
    for d in (30, 40, hour - 2000):
        store.tables.run_due(t0 + d)
    assert "t" not in store.tables.last_maintenance        # the next whole hour: not yet
    store.tables.run_due(t0 + hour)
    assert store.tables.stats.snapshot()["t"].maintenance_runs == 1
    store.alter_topic_config("t", {"pylog.table.maintenance.interval.ms": "1"})
    store.tables.run_due(t0 + hour + 10)                    # rescheduled to the next ms
    store.tables.run_due(t0 + hour + 20)
    assert store.tables.stats.snapshot()["t"].maintenance_runs == 2


def test_kill_9_between_expiry_and_its_deletions_leaves_orphans_only(tmp_path):
    """Expiry commits, then deletes the files only the expired snapshots used: killed in
    between, the table is exact and those files are orphans, which orphan removal takes
    once past the age."""
    path = str(tmp_path / "logs")
    with pylog.open(path, background=False) as store:
        store.create_topic("t", 1, {"pylog.table.enable": "true"})
        producer = Producer(store, "t", 1, seed="expire")
        small_commits(store, producer, "t", 4)
        maintenance.compact_table(table_of(store, "t"), "t", 1 << 20, min_files=2)
        table = table_of(store, "t")
        replaced = data_files_on_disk(table) - live_files(table)
        assert len(replaced) == 4

    def expire_then_die():
        os.environ[KILL_AT_ENV] = "expire-committed"
        maintenance.expire_snapshots(path, "t", now_ms() + 1000)
    assert reap(_fork(expire_then_die)) == -signal.SIGKILL
    table = table_of(path, "t")
    assert len(table.snapshots()) == 1 and rows_of(table) == sorted(producer.rows)
    assert replaced <= data_files_on_disk(table) - held_files(table)          # orphans now
    assert maintenance.remove_orphans(path, "t")["files_deleted"] == 0        # younger
    out = maintenance.remove_orphans(path, "t", now_ms() + 1000)
    assert out["files_deleted"] >= 4 and not replaced & data_files_on_disk(table)
    assert rows_of(table_of(path, "t")) == sorted(producer.rows)
