"""Recovery after unclean shutdowns: torn tails, bit flips, garbage, bad indexes.

Each test builds a log and leaves it as a crash does: ``Log.abandon()`` closes
the descriptors without the final flush, index trimming or clean-shutdown
state (the files are what a kill -9 leaves; tests/storage/test_crash.py and
tests/durability kill real processes). Then it damages real files, reopens,
and asserts the exact truncation point and that every record returned is
intact."""

import os

import pytest
from log_support import T0, ManualScheduler, all_records, read_file

from pylog import records
from pylog.storage.log import Log

from .test_log import batch

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct).
pytestmark = pytest.mark.usefixtures("io_mode")

SEGMENT = 20_000


def build(log_dir, engine_kind, batches=60, keep_padding=False, **config):
    """A log left open (no clean shutdown). An O_DIRECT segment's file ends in zero
    padding to its block size: unless `keep_padding`, it is cut, so that the tests
    damage the file right after the last batch, as in buffered mode."""
    log = Log(log_dir, {"pylog.io.engine": engine_kind, "segment.bytes": SEGMENT,
                        "index.interval.bytes": 1000, **config}, scheduler=ManualScheduler())
    sizes = []
    for i in range(batches):
        b = batch(5, size=50 + i, ts=T0 + i)
        log.append(b)
        sizes.append(len(b))
    expected = [(r.offset, r.value) for r in all_records(log)]
    if not keep_padding:
        os.truncate(log.segments[-1].log.path, log.segments[-1].size)
    log.abandon()
    return expected, sizes


def reopen(log_dir, engine_kind):
    return Log(log_dir, {"pylog.io.engine": engine_kind, "segment.bytes": SEGMENT,
                         "index.interval.bytes": 1000}, scheduler=ManualScheduler())


def segment_files(log_dir, suffix=".log"):
    return sorted(os.path.join(log_dir, n) for n in os.listdir(log_dir) if n.endswith(suffix))


def test_unclean_reopen_without_damage_keeps_everything(log_dir, engine_kind, io_mode):
    expected, _ = build(log_dir, engine_kind, keep_padding=True)
    scanned = sum(os.path.getsize(p) for p in segment_files(log_dir))
    with reopen(log_dir, engine_kind) as log:
        assert not log.recovery.clean_shutdown
        seg = log.recovery.segments_recovered[-1]
        # O_DIRECT: the zero padding after the last batch is cut, nothing else.
        padding = seg.truncated_bytes
        assert padding == 0 if io_mode == "buffered" else 0 <= padding < 65536
        assert padding == 0 or seg.reason.startswith("torn tail: zero-filled")
        assert log.recovery.bytes_truncated == padding
        assert log.recovery.bytes_scanned == scanned
        assert [(r.offset, r.value) for r in all_records(log)] == expected


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, 100])
def test_torn_tail_truncated_at_last_whole_batch(log_dir, engine_kind, cut):
    expected, sizes = build(log_dir, engine_kind)
    last = segment_files(log_dir)[-1]
    full = os.path.getsize(last)
    os.truncate(last, full - sizes[-1] + cut)           # the last batch, cut after `cut` bytes
    with reopen(log_dir, engine_kind) as log:
        seg = log.recovery.segments_recovered[-1]
        assert seg.truncated_bytes == cut and seg.valid_bytes == full - sizes[-1]
        assert seg.reason.startswith("torn")
        assert [(r.offset, r.value) for r in all_records(log)] == expected[:-5]
        assert log.log_end_offset == expected[-5][0]
        assert os.path.getsize(last) == full - sizes[-1]
        log.append(batch(2))                            # appends continue at the cut
        assert log.log_end_offset == expected[-5][0] + 2


def test_bit_flip_truncates_at_the_corrupt_batch_and_drops_later_segments(log_dir, engine_kind):
    expected, sizes = build(log_dir, engine_kind, batches=120)
    logs = segment_files(log_dir)
    assert len(logs) >= 3
    victim = logs[0]
    # Flip one bit inside the 4th batch's records (covered by its CRC).
    position = sum(sizes[:3])
    with open(victim, "r+b") as f:
        f.seek(position + 70)
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0x10]))
    with reopen(log_dir, engine_kind) as log:
        first = log.recovery.segments_recovered[0]
        assert first.valid_bytes == position and first.reason == "corrupt batch"
        assert f"record batch at byte {position} is corrupt: stored crc" in first.error
        assert log.recovery.segments_deleted == len(logs) - 1
        assert segment_files(log_dir) == [victim]
        assert [(r.offset, r.value) for r in all_records(log)] == expected[:15]
        assert log.log_end_offset == 15


def test_garbage_appended_past_the_end(log_dir, engine_kind):
    """The seeds' 'nonsense block': bytes after the last batch that are not a batch."""
    expected, _ = build(log_dir, engine_kind)
    last = segment_files(log_dir)[-1]
    size = os.path.getsize(last)
    with open(last, "ab") as f:
        f.write(os.urandom(3000))
    with reopen(log_dir, engine_kind) as log:
        seg = log.recovery.segments_recovered[-1]
        assert seg.valid_bytes == size and seg.truncated_bytes == 3000
        assert [(r.offset, r.value) for r in all_records(log)] == expected


def test_zero_filled_tail_is_cut(log_dir, engine_kind):
    expected, _ = build(log_dir, engine_kind)
    last = segment_files(log_dir)[-1]
    size = os.path.getsize(last)
    os.truncate(last, size + 8192)                      # blocks allocated, never written
    with reopen(log_dir, engine_kind) as log:
        seg = log.recovery.segments_recovered[-1]
        assert seg.valid_bytes == size and seg.reason.startswith("torn")
        assert [(r.offset, r.value) for r in all_records(log)] == expected


def test_offsets_going_backwards_are_cut(log_dir, engine_kind):
    expected, sizes = build(log_dir, engine_kind, batches=3)
    last = segment_files(log_dir)[-1]
    with open(last, "ab") as f:
        f.write(read_file(last)[:sizes[0]])             # a valid batch, but offset 0 again
    with reopen(log_dir, engine_kind) as log:
        seg = log.recovery.segments_recovered[-1]
        assert seg.reason == "offsets do not increase"
        assert "below the next expected offset 15" in seg.error
        assert [(r.offset, r.value) for r in all_records(log)] == expected


def test_a_base_offset_whose_last_offset_passes_int64_is_cut(log_dir, engine_kind):
    """The base offset is outside the batch's CRC: damaged to 2^63 - 3, base offset +
    last offset delta (4) passes 2^63 - 1. Recovery cuts the log there, naming the
    offset; before, the sum wrapped to a negative last offset and the batch was kept."""
    expected, sizes = build(log_dir, engine_kind, batches=3)
    last = segment_files(log_dir)[-1]
    with open(last, "r+b") as f:
        f.seek(sizes[0])
        f.write((2**63 - 3).to_bytes(8, "big"))
    with reopen(log_dir, engine_kind) as log:
        seg = log.recovery.segments_recovered[-1]
        assert seg.valid_bytes == sizes[0]
        assert f"batch at byte {sizes[0]} has offset {2**63 - 3}, outside the segment's " \
               f"int32 range" in seg.error
        assert [(r.offset, r.value) for r in all_records(log)] == expected[:5]
        assert log.log_end_offset == 5


@pytest.mark.parametrize("damage", ["missing", "short", "garbage", "empty"])
def test_bad_index_files_are_rebuilt_not_trusted(log_dir, engine_kind, damage):
    expected, _ = build(log_dir, engine_kind, batches=80)
    # A clean shutdown: indexes would be trusted if they looked valid.
    path = os.path.join(log_dir, "pylog-log-state")
    with open(path, "w") as f:
        f.write("0\n3\nrecovery-point 400\nlog-start-offset 0\nclean-shutdown 1\n")
    index = segment_files(log_dir, ".index")[0]
    original = read_file(index)
    assert len(original) >= 16
    if damage == "missing":
        os.remove(index)
    elif damage == "short":
        os.truncate(index, len(original) - 3)
    elif damage == "garbage":
        with open(index, "wb") as f:
            f.write(os.urandom(len(original)))
    else:
        os.truncate(index, 0)
    with reopen(log_dir, engine_kind) as log:
        if damage != "empty":   # an empty index is valid (lookups scan from position 0)
            assert log.recovery.indexes_rebuilt == 1
            assert read_file(index) == original          # rebuilt byte for byte
        assert [(r.offset, r.value) for r in all_records(log)] == expected
        for offset in range(0, 400, 7):
            assert log.read(offset, 1).first_offset == offset // 5 * 5


def test_time_index_rebuilt_after_crash_answers_like_before(log_dir, engine_kind):
    build(log_dir, engine_kind)
    with reopen(log_dir, engine_kind) as log:     # batch i has timestamp T0 + i, offsets 5i..5i+4
        queries = [T0 - 1] + [T0 + i for i in range(0, 62)]
        answers = [log.offset_for_timestamp(ts) for ts in queries]
        log.abandon()
    assert [a.offset if a else None for a in answers] == [0] + [5 * i for i in range(60)] + [None] * 2
    before = [read_file(p) for p in segment_files(log_dir, ".timeindex")]
    for p in segment_files(log_dir, ".timeindex"):
        os.remove(p)
    with reopen(log_dir, engine_kind) as log:
        assert [log.offset_for_timestamp(ts) for ts in queries] == answers
        log.roll()
    # Recovered segments were rewritten with the same entries (the last
    # segment also gets its roll-time entry when it becomes inactive).
    after = [read_file(p) for p in segment_files(log_dir, ".timeindex")]
    assert after[:len(before) - 1] == before[:-1]


def test_recovery_point_limits_the_scan(log_dir, engine_kind):
    log = Log(log_dir, {"pylog.io.engine": engine_kind, "segment.bytes": SEGMENT,
                        "pylog.recovery.point.checkpoint.interval.ms": 0},
              scheduler=ManualScheduler())
    for i in range(60):
        log.append(batch(5, size=50 + i, ts=T0 + i))
    log.flush()                 # persists recovery point 300 (checkpoint interval 0)
    flushed_segments = len(log.segments)
    for _ in range(5):
        log.append(batch(5))
    log.abandon()
    with reopen(log_dir, engine_kind) as log:
        recovered = [s.base_offset for s in log.recovery.segments_recovered]
        assert recovered == [s.base_offset for s in log.segments][flushed_segments - 1:]
        assert log.log_end_offset == 325


def test_compressed_batches_recover(log_dir, engine_kind):
    log = Log(log_dir, {"pylog.io.engine": engine_kind}, scheduler=ManualScheduler())
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        log.append(records.encode_batch([b"x" * 500] * 20, compression=codec))
    end = log.segments[-1].size
    log.abandon()
    with reopen(log_dir, engine_kind) as log:
        assert log.log_end_offset == 80 and log.segments[-1].size == end
        assert log.recovery.segments_recovered[-1].valid_bytes == end
        assert len(all_records(log)) == 80


def test_leftover_files_are_cleaned_up_at_open(log_dir, engine_kind):
    """Kafka's first loading step: interrupted deletes (.deleted), half-written files
    (.cleaned, .tmp), swaps to complete (.swap) and indexes without a .log. A test
    that fails when that step is disabled (issue 14)."""
    with reopen(log_dir, engine_kind) as log:
        log.append(records.encode_batch([b"kept"] * 5))
    leftovers = {"00000000000000000007.log.deleted": b"x", "00000000000000000003.index.deleted": b"x",
                 "00000000000000000009.log.cleaned": b"x", "pylog-log-state.tmp": b"x",
                 "00000000000000000042.index": b"\\0" * 16, "00000000000000000042.timeindex": b"\\0" * 24}
    for name, data in leftovers.items():
        with open(os.path.join(log_dir, name), "wb") as f:
            f.write(data)
    os.replace(os.path.join(log_dir, "00000000000000000000.timeindex"),
               os.path.join(log_dir, "00000000000000000000.timeindex.swap"))
    with reopen(log_dir, engine_kind) as log:
        names = set(os.listdir(log_dir))
        assert not names & set(leftovers), names & set(leftovers)
        assert not [n for n in names if n.endswith((".swap", ".deleted", ".cleaned", ".tmp"))]
        assert "00000000000000000000.timeindex" in names          # the swap completed
        assert [r.value for r in log.read(0).records()] == [b"kept"] * 5
