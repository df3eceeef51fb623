"""O_DIRECT appends (pylog.io.direct): the file's shape while open and after close, a
reader in another process at the tail, torn tails at unaligned sizes, tmpfs refused.

The Log suite and the crash tests also run whole in O_DIRECT mode (the ``io_mode``
fixture); this module checks what is particular to it."""

import logging
import os
import random
import uuid

import pytest
from log_support import ManualScheduler, all_records

from pylog import records
from pylog.errors import ConfigError
from pylog.storage import LogDirsReader, LogManager
from pylog.storage.log import Log

from .conftest import o_direct_available

O_DIRECT = os.O_DIRECT


@pytest.fixture
def direct_dir(tmp_path):
    if not o_direct_available(str(tmp_path)):
        pytest.skip(f"O_DIRECT is unavailable under {tmp_path}")
    return str(tmp_path / "events-0")


def open_direct(path, engine_kind, **config):
    return Log(path, {"pylog.io.engine": engine_kind, "pylog.io.direct": "true", **config},
               scheduler=ManualScheduler())


def write_flags(path):
    """The open flags of this process's descriptors of `path` (from /proc)."""
    flags = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != path:
                continue
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags.append(int(f.read().split("flags:")[1].split()[0], 8))
        except (FileNotFoundError, IndexError):
            continue
    return flags


def test_appends_bypass_the_page_cache_in_whole_blocks(direct_dir, engine_kind):
    log = open_direct(direct_dir, engine_kind, **{"segment.bytes": 16 << 10})
    try:
        active = log.segments[-1]
        align = active.log.direct_alignment
        assert align >= 512 and align & (align - 1) == 0
        assert any(f & O_DIRECT for f in write_flags(active.log.path))   # a real O_DIRECT fd
        for i in range(40):
            log.append(records.encode_batch([b"%d" % i * 300] * 5))
            active = log.segments[-1]
            # Open: the file ends at a block boundary, zero padding after the last batch.
            on_disk = os.path.getsize(active.log.path)
            assert on_disk % align == 0 and 0 <= on_disk - active.size < align
            with open(active.log.path, "rb") as f:
                f.seek(active.size)
                assert f.read() == bytes(on_disk - active.size)
        assert len(log.segments) > 2
        for segment in log.segments[:-1]:                        # rolled: trimmed, buffered
            assert os.path.getsize(segment.log.path) == segment.size
            assert segment.log.direct_alignment == 0
            assert not any(f & O_DIRECT for f in write_flags(segment.log.path))
        expected = [(r.offset, r.value) for r in all_records(log)]
        assert len(expected) == 200
    finally:
        log.close()
    assert os.path.getsize(active.log.path) == active.size           # close trims the padding
    with open_direct(direct_dir, engine_kind) as log:
        assert log.recovery.clean_shutdown
        assert [(r.offset, r.value) for r in all_records(log)] == expected


def test_a_reader_in_another_process_stops_at_the_last_batch(tmp_path, engine_kind):
    """What Spark's executors and the CLI see at the tail of an open O_DIRECT segment:
    zero padding after the published end, which ends their walk without an error."""
    if not o_direct_available(str(tmp_path)):
        pytest.skip(f"O_DIRECT is unavailable under {tmp_path}")
    store = LogManager([str(tmp_path / "d")], {"pylog.io.engine": engine_kind,
                                               "pylog.io.direct": "true",
                                               "log.cleaner.enable": False})
    try:
        store.create_topic("t", 1)
        log = store.log("t", 0)
        appended = 0
        rng = random.Random(7)
        for _ in range(30):
            n = rng.randint(1, 40)
            log.append(records.encode_batch([os.urandom(rng.randint(0, 700)) for _ in range(n)]))
            appended += n
            assert os.path.getsize(log.segments[-1].log.path) % log.segments[-1].log.direct_alignment == 0
            reader = LogDirsReader([str(tmp_path / "d")]).partition("t", 0)
            assert reader.log_end_offset() == appended
            offsets = [o for b in reader.read_arrow(0, appended) for o in b.column("offset").to_pylist()]
            assert offsets == list(range(appended))
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(4))
def test_torn_tail_at_unaligned_sizes_after_a_crash(direct_dir, engine_kind, seed):
    rng = random.Random(seed)
    log = open_direct(direct_dir, engine_kind)
    ends = []
    for _ in range(25):
        log.append(records.encode_batch([os.urandom(rng.randint(1, 3000))] * rng.randint(1, 4)))
        ends.append((log.segments[-1].size, log.log_end_offset))
    path = log.segments[-1].log.path
    align = log.segments[-1].log.direct_alignment
    log.abandon()                                   # a crash: padding and all stay
    # The crash cut the file somewhere inside the last few batches, at any byte.
    cut = rng.randint(ends[-6][0] + 1, ends[-1][0] - 1)
    os.truncate(path, cut)
    whole = max((e for e in ends if e[0] <= cut), key=lambda e: e[0])
    with open_direct(direct_dir, engine_kind) as log:
        assert log.segments[-1].size == whole[0] and log.log_end_offset == whole[1]
        assert log.recovery.bytes_truncated == cut - whole[0]
        # Appends continue at the unaligned end: the partial block is read back first.
        assert whole[0] % align != 0 or cut == whole[0]
        info = log.append(records.encode_batch([b"after"] * 3))
        assert info.first_offset == whole[1]
        expected = [(r.offset, r.value) for r in all_records(log)]
        assert expected[-3:] == [(whole[1] + i, b"after") for i in range(3)]
    with open_direct(direct_dir, engine_kind) as log:
        assert [(r.offset, r.value) for r in all_records(log)] == expected


def test_truncation_then_appends_keep_every_byte(direct_dir, engine_kind):
    log = open_direct(direct_dir, engine_kind)
    try:
        for i in range(10):
            log.append(records.encode_batch([b"%d" % i * 999] * 3))
        log.truncate_to(15)                         # inside the block kept in memory
        log.append(records.encode_batch([b"new"] * 2))
        got = [(r.offset, r.value) for r in all_records(log)]
    finally:
        log.close()
    assert [o for o, _ in got] == list(range(17)) and got[-1][1] == b"new"
    with open_direct(direct_dir, engine_kind) as log:
        assert [(r.offset, r.value) for r in all_records(log)] == got


def _tmpfs_dir():
    if not os.path.isdir("/dev/shm") or os.statvfs("/dev/shm").f_bsize == 0:
        return None
    with open("/proc/mounts") as f:
        if not any(line.split()[1] == "/dev/shm" and line.split()[2] == "tmpfs" for line in f):
            return None
    return "/dev/shm"


def test_tmpfs_is_refused_with_a_clear_error_or_auto_falls_back(engine_kind, caplog):
    shm = _tmpfs_dir()
    if shm is None:
        pytest.skip("no tmpfs at /dev/shm")
    base = os.path.join(shm, f"pylog-direct-{uuid.uuid4().hex}")
    try:
        with pytest.raises(OSError) as err:
            Log(base + "-0", {"pylog.io.engine": engine_kind, "pylog.io.direct": True})
        assert "O_DIRECT is not available for " + base + "-0/" in str(err.value)
        assert "tmpfs" in str(err.value)
        assert not os.path.exists(base + "-0/00000000000000000000.log")    # nothing left
        with caplog.at_level(logging.WARNING, logger="pylog.storage"):
            with Log(base + "-1", {"pylog.io.engine": engine_kind, "pylog.io.direct": "auto"}) as log:
                log.append(records.encode_batch([b"x"]))
                assert log.segments[-1].log.direct_alignment == 0
        assert any("pylog.io.direct = auto: appending through the page cache" in r.message
                   and "tmpfs" in r.message for r in caplog.records)
    finally:
        import shutil
        for suffix in ("-0", "-1"):
            shutil.rmtree(base + suffix, ignore_errors=True)


def test_bad_values_are_refused():
    with pytest.raises(ConfigError, match="pylog.io.direct = 'sometimes': expected true, false or auto"):
        Log("/nonexistent/x-0", {"pylog.io.direct": "sometimes"})
    with pytest.raises(ConfigError, match="pylog.io.direct.queue.depth"):
        Log("/nonexistent/x-0", {"pylog.io.direct.queue.depth": 0})


def test_switching_modes_on_a_live_log(direct_dir, engine_kind):
    log = Log(direct_dir, {"pylog.io.engine": engine_kind}, scheduler=ManualScheduler())
    try:
        log.append(records.encode_batch([b"buffered"] * 3))
        assert log.segments[-1].log.direct_alignment == 0
        log.update_config(log.config.with_overrides({"pylog.io.direct": "true"}))
        assert log.segments[-1].log.direct_alignment > 0
        log.append(records.encode_batch([b"direct"] * 3))
        log.update_config(log.config.with_overrides({"pylog.io.direct": "false"}))
        log.append(records.encode_batch([b"buffered again"] * 3))
        got = [r.value for r in all_records(log)]
    finally:
        log.close()
    assert got == [b"buffered"] * 3 + [b"direct"] * 3 + [b"buffered again"] * 3
