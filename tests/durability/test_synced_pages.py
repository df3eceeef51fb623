"""Every acknowledged byte has left the page cache (issue 14): an observer
independent of pylog's own bookkeeping.

A kill -9 keeps the page cache, so it cannot tell an fsync from no fsync,
and the fault layer (faultfs.c) hears of an io_uring fsync from the engine
itself. The kernel can: cachestat(2) (Linux 6.5+) counts the dirty pages of
a file. Once an append is acknowledged as durable (flush.messages, acks=all,
flush(), a returned offset commit, a handed-out producer id), no page of the
files holding it may still be dirty. Each test also shows the page dirty
before the sync, so it cannot pass by accident.
"""

import ctypes
import errno
import os
import struct

import pytest
from log_support import ManualScheduler, wait_until

import pylog
from pylog import Producer, records
from pylog.storage import files
from pylog.storage.log import Log

# Tests that dirty gigabytes or change vm.dirty_* (tests/core/test_io_engine.py's 2 GiB
# write, the tuning rig) would start the kernel's background writeback, which could clean
# a page before a test shows it dirty: they share one xdist worker with these (conftest).
pytestmark = pytest.mark.xdist_group("writeback")

SYS_CACHESTAT = 451     # x86_64 and aarch64
_libc = ctypes.CDLL(None, use_errno=True)


def dirty_pages(path: str) -> int:
    """Dirty plus under-writeback pages of the whole file (cachestat(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        whole_file = struct.pack("QQ", 0, 0)
        out = ctypes.create_string_buffer(40)
        if _libc.syscall(SYS_CACHESTAT, fd, ctypes.c_char_p(whole_file), out, 0) != 0:
            err = ctypes.get_errno()
            if err in (errno.ENOSYS, errno.EPERM):
                pytest.skip(f"cachestat(2) unavailable here ({os.strerror(err)}; Linux 6.5+)")
            raise OSError(err, os.strerror(err))
        _cached, dirty, writeback, _evicted, _recent = struct.unpack("5Q", out.raw)
        return dirty + writeback
    finally:
        os.close(fd)


def active_log(lg: Log) -> str:
    return files.log_file(lg.path, lg.active_segment.base_offset)


def segment_paths(lg: Log, suffix: str = ".log") -> list[str]:
    return sorted(os.path.join(lg.path, n) for n in os.listdir(lg.path) if n.endswith(suffix))


def batch(n=50, size=200):
    return records.encode_batch([os.urandom(size) for _ in range(n)])


def test_flush_messages_syncs_every_acknowledged_append(tmp_path, engine_kind):
    path = str(tmp_path / "t-0")
    with Log(path, {"pylog.io.engine": engine_kind, "flush.messages": 1,
                    "segment.bytes": 64 * 1024}) as lg:
        for _ in range(20):                     # several rolls
            info = lg.append(batch())
            assert info.flushed
            assert dirty_pages(active_log(lg)) == 0
        rolled = [p for p in segment_paths(lg) if not p.startswith(active_log(lg)[:-4])]
        assert all(dirty_pages(p) == 0 for p in rolled)     # acknowledged data: synced
        # A rolled segment's indexes are synced by the flush its roll schedules (as
        # Kafka's), on the scheduler's thread: wait for it, well inside the kernel's own
        # writeback (vm.dirty_expire_centisecs, 30 s), which would clean them anyway.
        indexes = [p for p in segment_paths(lg, ".index") + segment_paths(lg, ".timeindex")
                   if not p.startswith(active_log(lg)[:-4])]
        assert wait_until(lambda: all(dirty_pages(p) == 0 for p in indexes), timeout=10), \
            [p for p in indexes if dirty_pages(p)]


def test_flush_syncs_what_was_appended_and_nothing_is_synced_before(tmp_path, engine_kind):
    path = str(tmp_path / "t-0")
    # A ManualScheduler: no background flush of rolled segments cleans pages meanwhile.
    with Log(path, {"pylog.io.engine": engine_kind, "segment.bytes": 64 * 1024},
             scheduler=ManualScheduler()) as lg:
        for _ in range(20):
            lg.append(batch())
        dirty = sum(dirty_pages(p) for p in segment_paths(lg))
        assert dirty > 0                        # the observer sees unsynced appends
        lg.flush()
        assert [dirty_pages(p) for p in segment_paths(lg)] == [0] * len(segment_paths(lg))


@pytest.fixture
def store(tmp_path, engine_kind):
    s = pylog.Store([str(tmp_path / "d0")], {"pylog.io.engine": engine_kind})
    yield s
    s.close()


def test_acks_all_future_completes_after_the_sync(store):
    store.create_topic("t", 1)
    lg = store.log("t", 0)
    with Producer(store, acks=1, linger_ms=0) as producer:
        producer.send("t", b"x" * 5000, key=b"k").result()
        assert dirty_pages(active_log(lg)) > 0      # acks=1: in the log only
    with Producer(store, acks="all", linger_ms=0) as producer:
        for _ in range(5):
            producer.send("t", b"y" * 5000, key=b"k").result()
            assert dirty_pages(active_log(lg)) == 0


def test_producer_flush_covers_every_record_sent(store):
    store.create_topic("t", 3)
    with Producer(store, acks="all", linger_ms=50) as producer:
        for i in range(300):
            producer.send("t", b"z" * 300, key=b"%d" % i)
        producer.flush()
        for p in range(3):
            assert dirty_pages(active_log(store.log("t", p))) == 0


def test_a_returned_offset_commit_is_synced_when_the_topic_says_so(store):
    store.create_topic("t", 1)
    store.commit_offsets("g", {("t", 0): 1})
    logs = [store.log("__consumer_offsets", p) for p in range(store.partition_count("__consumer_offsets"))]
    assert sum(dirty_pages(active_log(lg)) for lg in logs) > 0
    store.alter_topic_config("__consumer_offsets", {"flush.messages": 1})
    store.commit_offsets("g", {("t", 0): 2})
    assert [dirty_pages(active_log(lg)) for lg in logs] == [0] * len(logs)


def test_state_files_are_synced_before_they_are_used(store, tmp_path):
    store.create_topic("t", 1)
    store.init_producer_id()
    d0 = str(tmp_path / "d0")
    for name in ("pylog-producer-ids", "pylog-topics.json", "meta.properties"):
        assert dirty_pages(os.path.join(d0, name)) == 0, name
    store.log("t", 0).append(batch())
    store.log("t", 0).flush()
    store.checkpoint()
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        assert dirty_pages(os.path.join(d0, name)) == 0, name
