"""LogManager: log dirs, locking, placement, loading, checkpoints, clean and
unclean shutdown, restart round trips. Real files; both I/O engines."""

import logging
import os
import subprocess
import sys

import pytest
from log_support import T0

import pylog
from pylog import records
from pylog.errors import LogDirLockedError
from pylog.storage import checkpoints

HERE = os.path.dirname(os.path.abspath(__file__))


def batch(n=10, size=100, ts=T0):
    return records.encode_batch([bytes([i % 256]) * size for i in range(n)], timestamps=[ts] * n)


def values(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        got = [r for r in log.read(offset).records() if r.offset >= offset]
        out += [r.value for r in got]
        offset = got[-1].offset + 1
    return out


def test_new_dirs_get_kafkas_root_files(dirs, open_manager):
    manager = open_manager(dirs)
    metas = [checkpoints.MetaProperties.read(d) for d in dirs]
    assert 1 == len({m.cluster_id for m in metas})
    assert 3 == len({m.directory_id for m in metas})
    assert all(m.node_id == 0 for m in metas)
    manager.close()
    for d in dirs:
        names = set(os.listdir(d))
        assert {".lock", "meta.properties", ".kafka_cleanshutdown", "recovery-point-offset-checkpoint",
                "log-start-offset-checkpoint", "pylog-topics.json"} == names


def test_placement_spreads_partitions_over_three_dirs(dirs, open_manager, engine_kind):
    """Each new partition goes to the dir with the fewest partitions."""
    manager = open_manager(dirs, {"pylog.io.engine": engine_kind})
    manager.create_topic("a", 4)
    manager.create_topic("b", 5)
    per_dir = {d: sorted(n for n in os.listdir(d) if n[0] in "ab") for d in dirs}
    assert [3, 3, 3] == [len(v) for v in per_dir.values()]
    assert ["a-0", "a-3", "b-2"] == per_dir[dirs[0]]
    assert ["a-1", "b-0", "b-3"] == per_dir[dirs[1]]
    assert ["a-2", "b-1", "b-4"] == per_dir[dirs[2]]
    # A fourth, empty dir added later gets the next partitions.
    manager.close()
    more = dirs + [dirs[0] + "-extra"]
    again = open_manager(more, {"pylog.io.engine": engine_kind})
    again.create_topic("c", 2)
    assert {"c-0", "c-1"} <= set(os.listdir(more[3]))
    # One engine per dir, shared by its partitions.
    engines = {}
    for t in ("a", "b", "c"):
        for p in range(again.partition_count(t)):
            lg = again.log(t, p)
            engines.setdefault(os.path.dirname(lg.path), set()).add(id(lg.engine))
    assert len(engines) == 4 and all(len(e) == 1 for e in engines.values())
    assert len({e for ids in engines.values() for e in ids}) == 4


def test_data_survives_restart_on_both_engines(dirs, open_manager, engine_kind):
    manager = open_manager(dirs, {"pylog.io.engine": engine_kind, "log.segment.bytes": 4096})
    manager.create_topic("t", 3)
    for p in range(3):
        for _ in range(10):
            manager.log("t", p).append(batch(5, 100))
    expected = {p: values(manager.log("t", p)) for p in range(3)}
    manager.close()
    again = open_manager(dirs, {"pylog.io.engine": engine_kind})
    assert all(d.had_clean_shutdown for d in again.dirs)
    assert 0 == again.startup.bytes_scanned                    # clean: nothing rescanned
    assert expected == {p: values(again.log("t", p)) for p in range(3)}
    assert again.startup.segments > 3


def test_second_process_gets_a_clear_error(dirs, open_manager):
    """A real second process cannot open locked dirs; the error names the holder's pid."""
    open_manager(dirs)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run([sys.executable, "-c", "import sys, pylog\n"
                            "try:\n    pylog.open(sys.argv[1:])\n"
                            "except pylog.errors.LogDirLockedError as e:\n    print(e); sys.exit(3)\n",
                            *dirs], capture_output=True, text=True, env=env, timeout=60)
    assert 3 == child.returncode, child.stderr
    assert f"locked by process {os.getpid()}" in child.stdout
    assert dirs[0] in child.stdout


def test_dirs_held_by_another_process(dirs, open_manager):
    """The reverse: this process fails while a child holds the dirs, and succeeds after it exits."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "lock_child.py"), *dirs],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert "READY" == child.stdout.readline().strip()
        with pytest.raises(LogDirLockedError, match=f"locked by process {child.pid}"):
            pylog.open(dirs)
    finally:
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()
    open_manager(dirs)                                          # free again


def test_same_process_twice_is_refused(dirs, open_manager):
    open_manager(dirs[:1])
    with pytest.raises(LogDirLockedError, match="another LogManager"):
        open_manager(dirs[:1])


def test_marker_is_deleted_when_loading_starts(dirs, open_manager):
    manager = open_manager(dirs[:1])
    assert not os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    manager.close()
    assert os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))


_KILLED_WRITER = """
import sys, time
from pylog import records
from pylog.storage import LogManager
def batch():
    return records.encode_batch([bytes([i]) * 200 for i in range(5)], timestamps=[1_700_000_000_000] * 5)
m = LogManager([sys.argv[1]], {"pylog.io.engine": sys.argv[2], "log.segment.bytes": 8192},
               background=False)
m.create_topic("t", 1)
log = m.log("t", 0)
for _ in range(20):
    log.append(batch())
log.flush()
m.checkpoint()
print(log.recovery_point, flush=True)
for _ in range(6):                         # appended after the last checkpoint
    log.append(batch())
print(log.log_end_offset, log.active_segment.base_offset, flush=True)
time.sleep(60)                             # SIGKILLed here: nothing closed
"""


def test_unclean_shutdown_recovers_from_checkpointed_recovery_points(dirs, open_manager, engine_kind):
    """A store killed with SIGKILL (no marker, the last checkpoint older than the
    log end), plus a torn batch at the end of its active segment: segments below
    the checkpointed recovery point are trusted, the rest is scanned, the torn
    batch is cut."""
    config = {"pylog.io.engine": engine_kind, "log.segment.bytes": 8192}
    child = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, dirs[0], engine_kind],
                             stdout=subprocess.PIPE, text=True)
    flushed_to = int(child.stdout.readline())
    end, active_base = (int(x) for x in child.stdout.readline().split())
    child.kill()
    child.wait(30)
    child.stdout.close()
    assert flushed_to == 100 and end == 130
    with open(os.path.join(dirs[0], "t-0", f"{active_base:020d}.log"), "ab") as f:
        f.write(batch(5, 200)[:150])        # a torn write at the end
    again = open_manager(dirs[:1], config)
    assert not again.dirs[0].had_clean_shutdown
    report = again.log("t", 0).recovery
    assert end == again.log("t", 0).log_end_offset
    assert 150 == report.bytes_truncated == again.startup.bytes_truncated
    scanned_segments = {r.base_offset for r in report.segments_recovered}
    assert min(scanned_segments) >= max(s.base_offset for s in again.log("t", 0).segments
                                        if s.next_offset <= flushed_to) or not scanned_segments
    assert len(report.segments_recovered) < report.segments   # not everything rescanned
    assert 26 * 5 == len(values(again.log("t", 0)))


def test_corrupt_checkpoint_means_full_recovery(dirs, open_manager):
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 1)
    manager.log("t", 0).append(batch())
    manager.close()
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint"), "w") as f:
        f.write("7\ngarbage\n")
    again = open_manager(dirs[:1])
    assert not again.dirs[0].had_clean_shutdown
    assert 1 == len(again.log("t", 0).recovery.segments_recovered)
    assert 10 == again.log("t", 0).log_end_offset


def test_checkpoints_are_written_periodically(dirs, open_manager, clock):
    manager = open_manager(dirs[:1], {"log.flush.offset.checkpoint.interval.ms": 1000,
                                      "log.flush.start.offset.checkpoint.interval.ms": 1000})
    manager.create_topic("t", 2)
    log = manager.log("t", 1)
    log.append(batch())
    log.flush()
    path = os.path.join(dirs[0], "recovery-point-offset-checkpoint")
    assert {} == checkpoints.read_offset_checkpoint(path)       # written at startup, before "t"
    clock.advance(999)
    manager.run_background_tasks()
    assert {} == checkpoints.read_offset_checkpoint(path)
    clock.advance(2)
    manager.run_background_tasks()
    assert {("t", 0): 0, ("t", 1): 10} == checkpoints.read_offset_checkpoint(path)


def test_summary_line_is_logged(dirs, open_manager, caplog):
    manager = open_manager(dirs[:2])
    manager.create_topic("t", 4)
    manager.close()
    with caplog.at_level(logging.INFO, logger="pylog.storage"):
        again = open_manager(dirs[:2])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pylog: loaded")]
    assert 1 == len(lines)
    assert "loaded 4 partitions (4 segments) from 2 log dirs" in lines[0]
    assert "clean shutdown in 2/2 dirs" in lines[0]
    assert lines[0] == again.startup.summary()


def test_parallel_loading_with_many_recovery_threads(dirs, open_manager):
    """num.recovery.threads.per.data.dir logs of a dir load at once; with one thread
    and one dir, one at a time."""
    def load(log_dirs, threads):
        config = {"num.recovery.threads.per.data.dir": threads, "log.segment.bytes": 2048}
        manager = open_manager(log_dirs, config)
        manager.create_topic("t", 24)
        for p in range(24):
            for _ in range(12):
                manager.log("t", p).append(batch(3, 200))
        manager.close()
        active = 0      # unclean: each log's segment holding its recovery point is scanned
        for d in log_dirs:
            os.remove(os.path.join(d, ".kafka_cleanshutdown"))
            for part in os.listdir(d):
                if part.startswith("t-"):
                    last = max(f for f in os.listdir(os.path.join(d, part)) if f.endswith(".log"))
                    active += os.path.getsize(os.path.join(d, part, last))
        again = open_manager(log_dirs, config)
        assert 24 == again.startup.partitions and again.startup.segments_recovered == 24
        assert again.startup.bytes_scanned == active > 0
        assert all(again.log("t", p).log_end_offset == 36 for p in range(24))
        peak = again.startup.peak_loaders
        again.close()
        return peak

    assert load(dirs, 4) > 1
    assert load([dirs[0] + "-single"], 1) == 1


def test_open_entry_point(tmp_path):
    with pylog.open(str(tmp_path / "a") + "," + str(tmp_path / "b"), log_retention_hours=1,
                    num_recovery_threads_per_data_dir=2) as store:
        store.create_topic("t", 2)
        assert 3600_000 == store.log("t", 0).config.retention_ms
        assert 2 == len(store.log_dirs)
    assert store.closed
    with pytest.raises(ValueError, match="closed"):
        store.log("t", 0)
