"""Log: appends, reads, rolls, indexes, flushes, truncation and deletion on real files.
Every test runs against both I/O engines (conftest.engine_kind)."""

import os
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch
from log_support import T0, Clock, ManualScheduler, all_records, read_file

from pylog import records
from pylog.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from pylog.storage.log import Log

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct).
pytestmark = pytest.mark.usefixtures("io_mode")


def batch(n=10, size=100, ts=T0, **kw):
    return records.encode_batch([bytes([i % 256]) * size for i in range(n)],
                                timestamps=[ts] * n, **kw)


@pytest.fixture
def open_log(log_dir, engine_kind):
    opened = []

    def make(config=None, **kw):
        cfg = {"pylog.io.engine": engine_kind, **(config or {})}
        kw.setdefault("scheduler", ManualScheduler())
        log = Log(log_dir, cfg, **kw)
        opened.append(log)
        return log
    yield make
    for log in opened:
        log.close()


def test_append_assigns_offsets_and_reads_back(open_log):
    log = open_log()
    info = log.append(batch(10))
    assert (info.first_offset, info.last_offset, info.records, info.batches) == (0, 9, 10, 1)
    info = log.append(batch(5) + batch(7))                  # two batches, one write
    assert (info.first_offset, info.last_offset, info.batches) == (10, 21, 2)
    assert log.log_end_offset == 22
    got = all_records(log)
    assert [r.offset for r in got] == list(range(22))
    assert got[12].value == bytes([2]) * 100


def test_stored_bytes_are_kafka_batches_with_offsets_and_epoch(open_log, log_dir):
    log = open_log(leader_epoch=7)
    log.append(batch(3))
    log.append(batch(4))
    raw = read_file(os.path.join(log_dir, f"{0:020d}.log"))
    first = DefaultRecordBatch(raw[:len(batch(3))])
    assert first.validate_crc() and first.base_offset == 0
    assert struct.unpack(">i", raw[12:16])[0] == 7              # partitionLeaderEpoch stamped
    # An open O_DIRECT segment ends in zero padding to its block size: stop at the log's size.
    second = DefaultRecordBatch(raw[len(batch(3)):log.segments[-1].size])
    assert second.validate_crc() and second.base_offset == 3
    assert [r.offset for r in second] == [3, 4, 5, 6]


def test_log_append_time_rewrites_timestamp_and_crc(open_log, log_dir):
    clock = Clock(T0 + 5000)
    log = open_log({"message.timestamp.type": "LogAppendTime"}, clock=clock)
    info = log.append(batch(3, ts=T0))
    assert info.log_append_time == T0 + 5000 and info.max_timestamp == T0 + 5000
    raw = read_file(os.path.join(log_dir, f"{0:020d}.log"))[:log.segments[-1].size]
    kb = DefaultRecordBatch(raw)
    assert kb.validate_crc()                                  # CRC recomputed
    assert kb.timestamp_type == 1
    assert [r.timestamp for r in kb] == [T0 + 5000] * 3
    assert [r.timestamp for r in log.read(0).records()] == [T0 + 5000] * 3


def test_read_returns_whole_batches_at_least_one(open_log):
    log = open_log()
    for _ in range(5):
        log.append(batch(10, size=1000))
    one = log.read(0, max_bytes=10)                          # smaller than one batch
    assert (one.first_offset, one.last_offset) == (0, 9)
    mid = log.read(25, max_bytes=2 * one.size)
    assert (mid.first_offset, mid.last_offset) == (20, 39)
    assert mid.size == 2 * one.size
    limited = log.read(0, max_bytes=1 << 20, max_offset=30)
    assert limited.last_offset == 29
    end = log.read(log.log_end_offset)
    assert end.size == 0


def test_read_out_of_range(open_log):
    log = open_log()
    log.append(batch(10))
    with pytest.raises(OffsetOutOfRangeError, match="offset 11 is out of range.*log end offset 10"):
        log.read(11)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1)


def test_roll_on_segment_bytes_and_index_lookups_across_segments(open_log, log_dir):
    log = open_log({"segment.bytes": 20_000, "index.interval.bytes": 1500})
    sizes = len(batch(10))
    for _ in range(100):
        log.append(batch(10))
    per_segment = 20_000 // sizes
    assert len(log.segments) == -(-100 // per_segment)
    names = sorted(os.listdir(log_dir))
    assert f"{per_segment * 10:020d}.log" in names and f"{per_segment * 10:020d}.index" in names
    # Kafka's rule, simulated: an entry for a batch when more than
    # index.interval.bytes were appended since the last entry.
    since = entries = 0
    for _ in range(per_segment):
        if since > 1500:
            entries, since = entries + 1, 0
        since += sizes
    for segment in log.segments[:-1]:
        assert segment.size <= 20_000
        assert segment.offset_index.entries == entries > 0
        assert os.path.getsize(segment.offset_index.path) == 8 * segment.offset_index.entries  # trimmed
    for offset in (0, 1, 155, 499, 500, 731, 999):
        assert log.read(offset, 1).first_offset == offset // 10 * 10


def test_append_larger_than_max_message_bytes(open_log):
    log = open_log({"max.message.bytes": 2000})
    with pytest.raises(MessageTooLargeError, match=r"larger than max.message.bytes \(2000\)"):
        log.append(batch(30, size=100))
    assert log.log_end_offset == 0


def test_append_larger_than_segment(open_log):
    log = open_log({"segment.bytes": 14 * 1024, "max.message.bytes": 1 << 20})
    with pytest.raises(RecordListTooLargeError, match="exceeds segment.bytes"):
        log.append(batch(20, size=1000))


def test_corrupt_batch_rejected_and_log_intact(open_log):
    log = open_log()
    log.append(batch(3))
    bad = bytearray(batch(3))
    bad[-1] ^= 0x40
    with pytest.raises(CorruptRecordError, match="stored crc = 0x[0-9a-f]{8}, computed crc"):
        log.append(bytes(batch(2)) + bytes(bad))            # nothing of the append lands
    assert log.log_end_offset == 3
    assert [r.offset for r in all_records(log)] == [0, 1, 2]


def test_invalid_appends_named(open_log):
    log = open_log()
    with pytest.raises(InvalidRecordError, match="empty"):
        log.append(b"")
    with pytest.raises(InvalidRecordError, match="end inside a batch"):
        log.append(batch(3)[:-5])
    control = records.encode_control_batch("commit", producer_id=5, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="control batch"):
        log.append(control)
    assert log.append(control, origin="coordinator").records == 1


def test_timestamp_window(open_log):
    clock = Clock()
    log = open_log({"message.timestamp.after.max.ms": 1000}, clock=clock)
    with pytest.raises(InvalidTimestampError, match="timestamp 1700000005000"):
        log.append(batch(2, ts=T0 + 5000))
    log.append(batch(2, ts=T0 + 500))


def test_append_records_encodes(open_log):
    log = open_log({"compression.type": "zstd"})
    info = log.append_records([b"a", b"b", None], keys=[b"k", None, b"k"])
    assert info.last_offset == 2
    assert [(r.key, r.value) for r in log.read_records(0)] == [(b"k", b"a"), (None, b"b"), (b"k", None)]
    assert log.read(0).batches()[0].compression == "zstd"


def test_reopen_after_clean_close_keeps_everything_without_scanning(open_log, log_dir, engine_kind):
    log = open_log({"segment.bytes": 10_000})
    for i in range(40):
        log.append(batch(5, ts=T0 + i))
    expected = [(r.offset, r.value) for r in all_records(log)]
    log.close()
    again = open_log({"segment.bytes": 10_000})
    assert again.recovery.clean_shutdown and again.recovery.bytes_scanned == 0
    assert again.log_end_offset == 200 and again.recovery_point == 200
    assert [(r.offset, r.value) for r in all_records(again)] == expected
    again.append(batch(5))
    assert again.log_end_offset == 205


def test_segment_ms_roll_uses_first_batch_timestamp(open_log):
    clock = Clock()
    log = open_log({"segment.ms": 60_000, "segment.jitter.ms": 0}, clock=clock)
    log.append(batch(2, ts=T0))
    log.append(batch(2, ts=T0 + 59_000))
    assert len(log.segments) == 1
    log.append(batch(2, ts=T0 + 61_000))
    assert len(log.segments) == 2 and log.segments[1].base_offset == 4


def test_segment_jitter_rolls_each_segment_at_its_own_moment(open_log):
    """segment.jitter.ms: each segment draws its own jitter in [0, jitter) and rolls
    once a batch is more than segment.ms - jitter after its first batch."""
    log = open_log({"segment.ms": 60_000, "segment.jitter.ms": 30_000})
    rolls = []
    for i in range(400):
        active = log.active_segment
        log.append(batch(1, ts=T0 + i * 1000))
        if log.active_segment is not active:
            first_ts = active.rolling_based_timestamp
            rolls.append((active.roll_jitter_ms, (T0 + i * 1000) - first_ts))
    assert len(rolls) > 6
    jitters = [j for j, _ in rolls]
    assert all(0 <= j < 30_000 for j in jitters) and len(set(jitters)) > 1
    for jitter, waited in rolls:
        # The first batch (1 s apart) past the deadline rolled it: not earlier, not later.
        assert 60_000 - jitter < waited <= 60_000 - jitter + 1000, (jitter, waited)


def test_roll_when_index_full(open_log):
    log = open_log({"segment.index.bytes": 8 * 4, "index.interval.bytes": 0})
    for _ in range(12):
        log.append(batch(1))
    # The time index (12 bytes an entry) has 2 slots, the last kept for the roll
    # (Kafka's TimeIndex.isFull: entries >= maxEntries - 1). One entry per batch
    # but the segment's first: the second batch fills it, 2 batches a segment.
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8, 10]
    assert [r.offset for r in all_records(log)] == list(range(12))


def test_preallocate_trims_on_roll_and_close(open_log, log_dir):
    log = open_log({"preallocate": True, "segment.bytes": 64 * 1024})
    first = os.path.join(log_dir, f"{0:020d}.log")
    log.append(batch(5))
    assert os.path.getsize(first) == 64 * 1024
    for _ in range(150):
        log.append(batch(5))
    assert len(log.segments) > 1
    assert os.path.getsize(first) == log.segments[0].size < 64 * 1024
    log.close()
    last = log.segments[-1]
    assert os.path.getsize(last.log.path) == last.size


def test_flush_messages_advances_recovery_point(open_log):
    log = open_log({"flush.messages": 10})
    assert not log.append(batch(4)).flushed
    assert log.recovery_point == 0
    info = log.append(batch(6))
    assert info.flushed and log.recovery_point == 10
    log.append(batch(1))
    assert log.recovery_point == 10
    log.flush()
    assert log.recovery_point == 11


def test_flush_ms_with_injected_clock(open_log):
    clock = Clock()
    log = open_log({"flush.ms": 1000}, clock=clock)
    log.append(batch(2))
    assert not log.maybe_flush()
    clock.now += 1001
    assert log.maybe_flush() and log.recovery_point == 2


def test_offset_for_timestamp_kafka_semantics(open_log):
    log = open_log({"segment.bytes": 4000})
    for i in range(30):
        log.append(batch(3, ts=T0 + 10 * i))
    assert log.offset_for_timestamp(-2).offset == 0
    assert log.offset_for_timestamp(-1).offset == 90
    mx = log.offset_for_timestamp(-3)
    assert mx.timestamp == T0 + 290 and mx.offset == 87
    hit = log.offset_for_timestamp(T0 + 55)
    assert (hit.timestamp, hit.offset) == (T0 + 60, 18)
    assert log.offset_for_timestamp(T0 + 10_000) is None
    with pytest.raises(ValueError):
        log.offset_for_timestamp(-7)


def test_truncate_to_mid_log(open_log):
    log = open_log({"segment.bytes": 5000})
    for i in range(50):
        log.append(batch(4, ts=T0 + i))
    assert log.truncate_to(101) == 100                   # the batch holding 101 goes whole
    assert log.log_end_offset == 100
    assert [r.offset for r in all_records(log)] == list(range(100))
    log.append(batch(4))
    assert [r.offset for r in all_records(log)][-4:] == [100, 101, 102, 103]
    assert log.offset_for_timestamp(-3).timestamp == T0 + 24


def test_delete_segments_renames_then_deletes_after_delay(open_log, log_dir):
    sched = ManualScheduler()
    log = open_log({"segment.bytes": 5000, "file.delete.delay.ms": 60_000}, scheduler=sched)
    for _ in range(30):
        log.append(batch(4))
    held = log.read(0)                                       # a reader holds segment 0
    second = log.segments[1].base_offset
    assert log.delete_segments_before(second) == 1
    assert log.log_start_offset == second
    assert any(n.endswith(".log.deleted") for n in os.listdir(log_dir))
    assert [r.offset for r in held.records()][:2] == [0, 1]   # still readable after rename
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    sched.run()
    assert not any(n.endswith(".deleted") for n in os.listdir(log_dir))
    assert [r.offset for r in held.records()][:2] == [0, 1]   # the open fd survives unlink


def test_retention_bytes_and_ms(open_log):
    clock = Clock()
    log = open_log({"segment.bytes": 5000, "retention.bytes": 12_000}, clock=clock)
    for i in range(40):
        log.append(batch(4, ts=T0 + i * 1000))
    log.apply_retention()
    assert log.size <= 12_000 + 5000 and log.size >= 12_000 - 5000
    kept_before = len(log.segments)
    log.update_config(log.config.with_overrides({"retention.ms": 10_000}))
    clock.now = T0 + 45_000
    log.apply_retention()
    assert len(log.segments) < kept_before
    assert all(s.largest_timestamp >= clock.now - 10_000 for s in log.segments[:-1])


def test_advance_log_start_offset(open_log):
    log = open_log({"segment.bytes": 5000})
    for _ in range(30):
        log.append(batch(4))
    log.advance_log_start_offset(57)
    assert log.log_start_offset == 57
    assert log.read(57).first_offset <= 57
    with pytest.raises(OffsetOutOfRangeError):
        log.read(56)
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(1000)


def test_bad_config_key_and_value():
    with pytest.raises(ConfigError, match="segment.byte"):
        Log("/nonexistent/x-0", {"segment.byte": 1})
    with pytest.raises(ConfigError, match="segment.bytes"):
        Log("/nonexistent/x-0", {"segment.bytes": 10})


def test_concurrent_flushes_group_commit(log_dir, engine_kind):
    """Appends continue while a flush runs, and one fsync serves every append
    that landed before it: far fewer syncs than flush() calls. Each round, the four
    threads append before any of them flushes (a barrier), so the first flush covers
    all four however the threads are scheduled."""
    import threading

    from pylog._core.engine import IoEngine
    engine = IoEngine(engine_kind)
    log = Log(log_dir, {"pylog.io.engine": engine_kind}, engine=engine, scheduler=ManualScheduler())
    calls = 100
    appended = threading.Barrier(4, timeout=60)

    def producer():
        for _ in range(calls):
            info = log.append(batch(5))
            appended.wait()
            log.flush(info.last_offset + 1)
            assert log.recovery_point > info.last_offset    # durable when flush returns

    threads = [threading.Thread(target=producer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    syncs = engine.stats()["syncs"]
    assert log.recovery_point == log.log_end_offset == 4 * calls * 5
    assert 0 < syncs < 0.8 * 4 * calls, syncs
    log.close()


def test_inactive_segments_hold_one_descriptor(open_log):
    """Index mappings outlive their descriptors, so a log with many segments
    needs about one open file per segment (Kafka's ulimit advice scales with it)."""
    def open_fds():
        return len(os.listdir(f"/proc/{os.getpid()}/fd"))
    before = open_fds()
    log = open_log({"segment.bytes": 2000})
    for _ in range(200):
        log.append(batch(5))
    segments = len(log.segments)
    assert segments > 50
    assert open_fds() - before <= segments + 2 + 3
    log.truncate_to(13)                  # makes an old segment active: its index files reopen
    log.append(batch(5))
    assert [r.offset for r in log.read(0, 1 << 20).records()][-1] >= 10
