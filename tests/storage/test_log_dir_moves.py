"""Moving a partition between log dirs (storage/log_dir_moves.py, Kafka's KIP-113): while
it is appended to and read, cancelled, after a topic deletion, and SIGKILLed at each step
of the copy and the swap: the move resumes (or rolls forward) at the reopen, every
acknowledged record is there once, and the partition is in exactly one log dir (kill -9
at random points of a big move: test_log_dir_move_resume.py)."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import pylog
from pylog.errors import (
    KafkaStorageError,
    LogDirNotFoundError,
    NotLeaderOrFollowerError,
)
from pylog.storage import log_dir_moves
from pylog.storage.segment import LogSegment

from .log_dir_move_child import expected_value
from .test_offline import loop_fs  # noqa: F401 - the loop-mounted file systems fixture

CHILD = os.path.join(os.path.dirname(__file__), "log_dir_move_child.py")


def wait_for(condition, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def all_values(lg) -> list[bytes]:
    values, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        batch = list(lg.read(offset, 1 << 20).records())
        values += [r.value for r in batch]
        offset = batch[-1].offset + 1
    return values


def partition_dirs(dirs, name="moving-0"):
    """Every dir entry of the partition in the log dirs but ``-delete`` ones."""
    return sorted(os.path.join(d, e) for d in dirs for e in os.listdir(d)
                  if e.startswith(name) and not e.endswith("-delete"))


@pytest.fixture
def two_dirs(tmp_path):
    return [str(tmp_path / "a"), str(tmp_path / "b")]


@pytest.fixture
def paused_moves():
    """stage_hook that holds a move at a step until released."""
    reached, release = {}, threading.Event()

    def hook(name):
        reached.setdefault(name, threading.Event()).set()
        if name in hold:
            release.wait(60)
    hold: set[str] = set()
    log_dir_moves.stage_hook = hook
    try:
        yield hold, reached, release
    finally:
        release.set()
        log_dir_moves.stage_hook = None


def test_move_keeps_every_record_while_appends_and_reads_go_on(two_dirs):
    with pylog.open(two_dirs, log_segment_bytes=16 * 1024) as store:
        store.create_topic("moving", 2)
        source = store.log_dir_of("moving", 0)
        dest = next(d for d in store.log_dirs if d != source)
        for i in range(100):
            store.log("moving", 0).append_records([expected_value(o) for o in
                                                   range(i * 10, i * 10 + 10)])
        stop, errors, reads = threading.Event(), [], [0]

        def append():
            while not stop.is_set():
                try:
                    lg = store.log("moving", 0)
                    start = lg.log_end_offset
                    lg.append_records([expected_value(o) for o in range(start, start + 3)])
                except NotLeaderOrFollowerError:
                    continue
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

        def read():
            while not stop.is_set():
                try:
                    values = all_values(store.log("moving", 0))
                except NotLeaderOrFollowerError:
                    continue
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return
                assert values == [expected_value(o) for o in range(len(values))]
                reads[0] += 1
        threads = [threading.Thread(target=append), threading.Thread(target=read)]
        for t in threads:
            t.start()
        assert store.alter_log_dir("moving", 0, dest) is True
        assert store.alter_log_dir("moving", 0, dest) is False     # already moving there
        wait_for(lambda: store.moving("moving", 0) is None, "the move")
        wait_for(lambda: store.log("moving", 0).log_end_offset > 2000, "appends after the move")
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors
        assert reads[0] > 0
        assert store.log_dir_of("moving", 0) == dest
        lg = store.log("moving", 0)
        assert all_values(lg) == [expected_value(o) for o in range(lg.log_end_offset)]
        assert partition_dirs(two_dirs) == [os.path.join(dest, "moving-0")]
        end = lg.log_end_offset
    with pylog.open(two_dirs) as store:
        assert store.log_dir_of("moving", 0) == dest
        assert all_values(store.log("moving", 0)) == [expected_value(o) for o in range(end)]


def test_describe_shows_the_future_replica_until_the_swap(two_dirs, paused_moves):
    hold, reached, release = paused_moves
    hold.add("swap-copied")
    with pylog.open(two_dirs) as store:
        store.create_topic("moving", 1)
        store.log("moving", 0).append_records([b"x" * 1000] * 50)
        source = store.log_dir_of("moving", 0)
        dest = next(d for d in store.log_dirs if d != source)
        store.alter_log_dir("moving", 0, dest)
        wait_for(lambda: "swap-copied" in reached, "the swap")
        described = {d.path: d for d in store.describe_log_dirs()}
        [current] = described[source].replicas
        assert (current.topic, current.partition, current.is_future) == ("moving", 0, False)
        [future] = described[dest].replicas
        assert (future.topic, future.partition, future.is_future) == ("moving", 0, True)
        assert future.size == current.size > 50_000
        # The swap holds the partition: a caller of the old Log is told to retry.
        with pytest.raises(NotLeaderOrFollowerError):
            store.log("moving", 0).append_records([b"z"])
        assert [f for f in os.listdir(dest) if f.endswith("-future")]
        release.set()
        wait_for(lambda: store.moving("moving", 0) is None, "the move")
        described = {d.path: d for d in store.describe_log_dirs()}
        assert described[source].replicas == ()
        assert [(r.topic, r.is_future, r.offset_lag) for r in described[dest].replicas] == \
            [("moving", False, 0)]
        assert described[dest].total_bytes >= described[dest].usable_bytes > 0


def test_cancelled_and_deleted_moves_leave_no_future_dir(two_dirs, paused_moves):
    hold, reached, release = paused_moves
    hold.add("copy-pass")
    with pylog.open(two_dirs) as store:
        store.create_topic("moving", 1)
        for _ in range(20):
            store.log("moving", 0).append_records([b"y" * 1000] * 20)
        source = store.log_dir_of("moving", 0)
        dest = next(d for d in store.log_dirs if d != source)
        with pytest.raises(LogDirNotFoundError):
            store.alter_log_dir("moving", 0, two_dirs[0] + "-not-a-log-dir")
        old = log_dir_moves.SWAP_WHEN_BELOW
        log_dir_moves.SWAP_WHEN_BELOW = 0
        try:
            store.alter_log_dir("moving", 0, dest)
            wait_for(lambda: "copy-pass" in reached, "a copy pass")
            assert store.alter_log_dir("moving", 0, source) is False   # back home: cancelled
            release.set()
            wait_for(lambda: not [f for f in os.listdir(dest) if f.endswith("-future")],
                     "the future dir to go")
            assert store.moving("moving", 0) is None and store.log_dir_of("moving", 0) == source
            release.clear()
            reached.clear()
            store.alter_log_dir("moving", 0, dest)
            wait_for(lambda: "copy-pass" in reached, "a copy pass")
            store.delete_topic("moving")
            release.set()
            wait_for(lambda: not [f for f in os.listdir(dest) if f.endswith("-future")],
                     "the future dir to go")
        finally:
            log_dir_moves.SWAP_WHEN_BELOW = old
        assert "moving" not in store.list_topics()


# ============================================================ kill -9 mid-move

def run_child(dirs, stage):
    """Starts the child, waits for `stage` (or, with "none", for the move to be done and
    more appends), SIGKILLs it; returns (acknowledged last offset, source, dest)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, CHILD, *dirs, stage], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    acked, seen = [-1], {}
    opened, stopped = threading.Event(), threading.Event()

    def reader():
        for line in child.stdout:
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "open":
                seen["source"] = fields[2]
                opened.set()
            elif fields[0] == "ack":
                acked[0] = int(fields[1])
            elif fields[0] == "stage":
                seen["dest"] = fields[3]
                seen["acked_at_stage"] = acked[0]
                stopped.set()
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert opened.wait(60), "the child did not open the store"
        if stage == "none":
            source = seen["source"]
            dest = next(d for d in dirs if os.path.abspath(d) != source)
            wait_for(lambda: os.path.exists(os.path.join(dest, "moving-0")), "the move")
            mark = acked[0]
            wait_for(lambda: acked[0] > mark + 100, "appends after the move")
        else:
            assert stopped.wait(60), f"the child did not reach {stage}"
            if stage == "copy-pass":
                mark = acked[0]
                wait_for(lambda: acked[0] > mark + 50, "appends during the copy")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        t.join(10)
        stderr = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert "Traceback" not in stderr, stderr[-3000:]
    return acked[0], seen["source"]


@pytest.mark.parametrize("stage,moved", [("copy-pass", False), ("swap-copied", False),
                                         ("committed", True), ("renamed", True),
                                         ("none", True)])
def test_kill_9_during_a_move(two_dirs, stage, moved):
    """`moved`: the kill came after the commit point (the copy is the partition); before
    it, the move resumes from its copy at the reopen and completes."""
    acked, source = run_child(two_dirs, stage)
    assert acked > 6000
    dest = next(d for d in two_dirs if os.path.abspath(d) != source)
    with pylog.open(two_dirs) as store:
        wait_for(lambda: store.moving("moving", 0) is None, "the resumed move")
        where = store.log_dir_of("moving", 0)
        assert where == os.path.abspath(dest)
        if not moved:
            resumed = store.last_log_dir_move("moving", 0)
            assert resumed is not None and resumed.kept > 0      # its copy was kept
        lg = store.log("moving", 0)
        assert lg.log_end_offset > acked
        values = all_values(lg)
        assert values == [expected_value(o) for o in range(len(values))]   # each once, intact
        # The partition is in exactly one dir: no future dir, no second copy.
        assert partition_dirs(two_dirs) == [os.path.join(where, "moving-0")]
        # The store goes on: a move after the crash works.
        back = source
        store.alter_log_dir("moving", 0, back)
        wait_for(lambda: store.moving("moving", 0) is None, "the second move")
        assert store.log_dir_of("moving", 0) == back
        assert all_values(store.log("moving", 0)) == values


# ================================================== between two file systems (JBOD)

def test_move_between_two_loop_mounted_file_systems(loop_fs):  # noqa: F811 - the fixture
    """Two ext4 file systems, as two disks: the copy crosses them (copy_file_range across
    file systems, or its fallback), the partition takes appends throughout."""
    dirs = [str(loop_fs.make(64) / "pylog"), str(loop_fs.make(64) / "pylog")]
    with pylog.open(dirs, log_segment_bytes=256 * 1024) as store:
        store.create_topic("moving", 1)
        source = store.log_dir_of("moving", 0)
        dest = next(d for d in dirs if d != source)
        for i in range(200):
            store.log("moving", 0).append_records([expected_value(o) for o in
                                                   range(i * 50, i * 50 + 50)])
        stop = threading.Event()

        def append():
            while not stop.is_set():
                try:
                    lg = store.log("moving", 0)
                    start = lg.log_end_offset
                    lg.append_records([expected_value(o) for o in range(start, start + 5)])
                except NotLeaderOrFollowerError:
                    continue
        writer = threading.Thread(target=append)
        writer.start()
        try:
            store.alter_log_dir("moving", 0, dest)
            wait_for(lambda: store.moving("moving", 0) is None, "the move")
        finally:
            stop.set()
            writer.join()
        assert store.log_dir_of("moving", 0) == dest
        described = {d.path: d for d in store.describe_log_dirs()}
        assert described[source].total_bytes != 0 and described[source].replicas == ()
        lg = store.log("moving", 0)
        end = lg.log_end_offset
        assert end > 10_000
        assert all_values(lg) == [expected_value(o) for o in range(end)]
    with pylog.open(dirs) as store:
        assert store.log_dir_of("moving", 0) == dest
        assert all_values(store.log("moving", 0)) == [expected_value(o) for o in range(end)]
        assert partition_dirs(dirs) == [os.path.join(dest, "moving-0")]


def test_a_move_onto_a_full_disk_fails_and_the_partition_stays(loop_fs, tmp_path):  # noqa: F811
    small = str(loop_fs.make(16) / "pylog")
    dirs = [str(tmp_path / "big"), small]
    with pylog.open(dirs, log_segment_bytes=1 << 20) as store:
        store.create_topic("moving", 2)
        here = next(p for p in range(2) if store.log_dir_of("moving", p) != small)
        lg = store.log("moving", here)
        for _ in range(30):                     # 30 MB: more than the small disk holds
            lg.append_records([b"z" * 10_000] * 100)
        store.alter_log_dir("moving", here, small)
        wait_for(lambda: store.moving("moving", here) is None, "the move to fail")
        assert store.log_dir_of("moving", here) == dirs[0]
        assert not [f for f in os.listdir(small) if f.endswith("-future")]
        assert store.offline_log_dirs == {}
        lg.append_records([b"after"])            # the partition still serves
        assert lg.log_end_offset == 3001


def test_retention_during_the_copy_is_followed(two_dirs, paused_moves):
    """Segments deleted from the source while the copy runs go from the copy too; the log
    start offset moves with the partition."""
    hold, reached, release = paused_moves
    hold.add("copy-pass")
    old = log_dir_moves.SWAP_WHEN_BELOW
    log_dir_moves.SWAP_WHEN_BELOW = 0
    try:
        with pylog.open(two_dirs, log_segment_bytes=8 * 1024) as store:
            store.create_topic("moving", 1)
            lg = store.log("moving", 0)
            for i in range(100):
                lg.append_records([expected_value(o) for o in range(i * 20, i * 20 + 20)])
            source = store.log_dir_of("moving", 0)
            dest = next(d for d in store.log_dirs if d != source)
            store.alter_log_dir("moving", 0, dest)
            wait_for(lambda: "copy-pass" in reached, "a copy pass")
            futures = [f for f in os.listdir(dest) if f.endswith("-future")]
            copied = set(os.listdir(os.path.join(dest, futures[0])))
            assert "00000000000000000000.log" in copied
            lg.advance_log_start_offset(1000)
            lg.delete_segments_before(1000)
            start = lg.log_start_offset
            kept = {f for f in os.listdir(lg.path) if f.endswith(".log")}
            hold.clear()
            release.set()
            wait_for(lambda: store.moving("moving", 0) is None, "the move")
            moved = store.log("moving", 0)
            assert moved.log_start_offset == start >= 1000 - 200
            assert {f for f in os.listdir(moved.path) if f.endswith(".log")} == kept
            assert "00000000000000000000.log" not in kept
            assert all_values(moved) == [expected_value(o) for o in range(start, 2000)]
        with pylog.open(two_dirs) as store:
            assert store.log("moving", 0).log_start_offset == start
    finally:
        log_dir_moves.SWAP_WHEN_BELOW = old


def test_describe_and_moves_with_a_dir_offline(two_dirs, monkeypatch):
    with pylog.open(two_dirs) as store:
        store.create_topic("moving", 2)
        broken = store.log_dir_of("moving", 0)
        healthy = next(d for d in store.log_dirs if d != broken)

        def flush(self, engine, indexes=True):
            raise OSError(errno.EIO, "Input/output error (injected)", self.log.path)
        monkeypatch.setattr(LogSegment, "flush", flush)
        store.log("moving", 0).append_records([b"x"])
        with pytest.raises(KafkaStorageError):
            store.log("moving", 0).flush()
        monkeypatch.undo()
        described = {d.path: d for d in store.describe_log_dirs()}
        assert "offline" in described[broken].error and described[broken].replicas == ()
        assert described[healthy].error is None
        assert [(r.topic, r.partition) for r in described[healthy].replicas] == [("moving", 1)]
        with pytest.raises(KafkaStorageError, match="offline"):
            store.alter_log_dir("moving", 1, broken)          # onto the offline dir
        with pytest.raises(KafkaStorageError):
            store.alter_log_dir("moving", 0, healthy)         # from the offline dir


def test_a_future_dir_is_left_alone_while_a_log_dir_is_offline(two_dirs):
    """A future dir whose partition dir is in no online dir may be a complete copy, or an
    unfinished one whose source is on the offline dir: open neither promotes nor deletes
    it; once every dir is back, the move resumes from the copy and completes."""
    with pylog.open(two_dirs) as store:
        store.create_topic("moving", 2)
        for p in range(2):
            store.log("moving", p).append_records([b"v%d" % i for i in range(10)])
        source = store.log_dir_of("moving", 0)
    other = next(d for d in two_dirs if d != source)
    future = os.path.join(other, f"moving-0.{'ab' * 16}-future")
    shutil.copytree(os.path.join(source, "moving-0"), future)       # a copy under way
    meta = os.path.join(source, "meta.properties")
    with open(meta, "rb") as f:
        good = f.read()
    with open(meta, "wb") as f:
        f.write(b"garbage\n")
    with pylog.open(two_dirs) as store:
        assert list(store.offline_log_dirs) == [source]
        with pytest.raises(KafkaStorageError):
            store.log("moving", 0)
    assert os.path.isdir(future) and not os.path.exists(os.path.join(other, "moving-0"))
    with open(meta, "wb") as f:
        f.write(good)
    with pylog.open(two_dirs) as store:
        wait_for(lambda: store.moving("moving", 0) is None, "the resumed move")
        assert store.log_dir_of("moving", 0) == os.path.abspath(other)
        assert store.last_log_dir_move("moving", 0).kept > 0
        assert [r.value for r in store.log("moving", 0).read(0).records()] == \
            [b"v%d" % i for i in range(10)]
    assert partition_dirs(two_dirs) == [os.path.join(os.path.abspath(other), "moving-0")]


def test_a_swap_that_fails_before_its_commit_point_reopens_the_source(two_dirs, monkeypatch):
    with pylog.open(two_dirs) as store:
        store.create_topic("moving", 1)
        old = store.log("moving", 0)
        old.append_records([b"v%d" % i for i in range(100)])
        source = store.log_dir_of("moving", 0)
        dest = next(d for d in store.log_dirs if d != source)
        real = log_dir_moves._DirCopy.fsync

        def fsync(self):
            if old.closed:               # in the swap, after the source was closed
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return real(self)
        monkeypatch.setattr(log_dir_moves._DirCopy, "fsync", fsync)
        store.alter_log_dir("moving", 0, dest)
        wait_for(lambda: store.moving("moving", 0) is None, "the move to fail")
        assert old.closed and store.log_dir_of("moving", 0) == source
        again = store.log("moving", 0)
        assert again is not old
        again.append_records([b"after"])
        assert [r.value for r in again.read(0).records()] == \
            [b"v%d" % i for i in range(100)] + [b"after"]
        assert not [f for f in os.listdir(dest) if f.endswith("-future")]
        assert store.offline_log_dirs == {}
