"""Damage found at open stays where it is (issue 12, items 3, 9 and 12).

Recovery never deletes data below the recovery point: a segment there whose
index disagrees with its .log gets its index rebuilt and keeps every byte,
and the segments after it stay; corruption is reported where it is read.
Only data that may not have been flushed is truncated, and each truncation
and deletion is logged at WARNING with its offsets and bytes.
"""

import logging
import os
import subprocess
import sys

import pytest

from log_support import all_records
from pylog import records
from pylog.errors import CorruptRecordError, KafkaStorageError, MissingOffsetsError
from pylog.storage import LogManager
from pylog.storage import log_loader
from pylog.storage.log import Log

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct).
pytestmark = pytest.mark.usefixtures("io_mode")

SEGMENT = {"segment.bytes": 1000}
VALUES = [b"v%03d-" % i + b"x" * 20 for i in range(300)]


def fill(log):
    for i in range(0, 300, 10):
        log.append(records.encode_batch(VALUES[i:i + 10]))


def segment_files(path):
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))


def tear(path, cut=7):
    os.truncate(path, os.path.getsize(path) - cut)


def flip_magic(path):
    with open(path, "r+b") as f:          # byte 16 is the first batch's magic
        f.seek(16)
        f.write(b"\x07")


def test_a_tear_in_a_middle_segment_keeps_every_segment_after_it(log_dir, caplog):
    """Cutting 7 bytes from segment 2 of 9 after a clean shutdown used to delete the 7
    intact segments after it (log end 300 -> 73) and report only "truncated 72 bytes"."""
    with Log(log_dir, SEGMENT) as log:
        fill(log)
        count = len(log.segments)
    assert count >= 9
    damaged = segment_files(log_dir)[2]
    tear(damaged)
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        log = Log(log_dir, SEGMENT)
    try:
        assert log.log_end_offset == 300 and len(log.segments) == count
        assert log.recovery.segments_deleted == 0 and log.recovery.bytes_truncated == 0
        assert os.path.getsize(damaged) > 0                    # every byte kept
        base, after = log.segments[2].base_offset, log.segments[3].base_offset
        end = log.segments[2].next_offset
        assert base < end < after
        assert log.recovery.missing_offsets == ((end, after),)
        assert f"segment {base} (below the recovery point 300) is damaged" in caplog.text
        assert f"offsets {end}..{after - 1} are missing" in caplog.text
        # The lost offsets are reported where they are read, never skipped in silence.
        for offset in range(end, after):
            with pytest.raises(MissingOffsetsError, match=f"offsets {end}..{after - 1} are missing"):
                log.read(offset, 1 << 20)
        got = {r.offset: r.value for r in all_records(log, 0, end) + all_records(log, after)}
        assert sorted(got) == [o for o in range(300) if not end <= o < after]
        assert all(got[o] == VALUES[o] for o in got)
    finally:
        log.close()


def test_a_corrupt_header_below_the_recovery_point_is_reported_where_it_is_read(log_dir):
    with Log(log_dir, SEGMENT) as log:
        fill(log)
    flip_magic(segment_files(log_dir)[3])
    with Log(log_dir, SEGMENT) as log:
        assert log.log_end_offset == 300
        base = log.segments[3].base_offset
        with pytest.raises(CorruptRecordError, match="position 0|byte 0") as info:
            log.read(base + 1, 1 << 20)
        assert "closed" not in str(info.value)
        before = log.read(0, 1 << 20).records()
        assert before[0].value == VALUES[0]
        after = log.segments[4].base_offset
        assert log.read(after, 1 << 20).records()[0].value == VALUES[after]


def test_one_bad_byte_in_a_store_affects_only_its_partition(tmp_path):
    """One corrupt first-batch header below the recovery point stopped the whole store
    from opening."""
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_topic("bad", 1, SEGMENT)
        manager.create_topic("good", 1, SEGMENT)
        fill(manager.log("bad", 0))
        fill(manager.log("good", 0))
    flip_magic(segment_files(str(tmp_path / "bad-0"))[2])
    with LogManager(str(tmp_path), background=False) as manager:
        assert manager.offline_log_dirs == {}
        assert [r.value for r in all_records(manager.log("good", 0))] == VALUES
        bad = manager.log("bad", 0)
        assert bad.log_end_offset == 300
        with pytest.raises(CorruptRecordError):
            bad.read(bad.segments[2].base_offset, 1 << 20)


def test_a_partition_that_cannot_load_is_the_only_one_unavailable(tmp_path, monkeypatch):
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_topic("bad", 1)
        manager.create_topic("good", 1)
        manager.log("bad", 0).append(records.encode_batch([b"kept"]))
        manager.log("good", 0).append(records.encode_batch([b"fine"]))
    real = log_loader.load_segments

    def failing(path, *args):
        if path.endswith("bad-0"):
            raise CorruptRecordError(f"{path}: simulated damage nothing can repair")
        return real(path, *args)
    monkeypatch.setattr("pylog.storage.log.load_segments", failing)
    with LogManager(str(tmp_path), background=False) as manager:
        assert manager.log("good", 0).read(0).records()[0].value == b"fine"
        with pytest.raises(KafkaStorageError, match="bad-0 .*could not be loaded: CorruptRecordError"):
            manager.log("bad", 0)
        assert manager.describe_topic("bad").partitions[0].online is False
    monkeypatch.undo()
    with LogManager(str(tmp_path), background=False) as manager:
        # Its checkpointed offsets were kept: it loads as before, nothing recovered.
        bad = manager.log("bad", 0)
        assert bad.read(0).records()[0].value == b"kept"
        assert bad.recovery.segments_recovered == ()


WRITER = """
import sys, time
from pylog import records
from pylog.storage import LogManager
values = [b"v%03d-" % i + b"x" * 20 for i in range(300)]
manager = LogManager(sys.argv[1], background=False)
manager.create_topic("t", 1, {"segment.bytes": 1000})
log = manager.log("t", 0)
for i in range(0, 100, 10):
    log.append(records.encode_batch(values[i:i + 10]))
log.flush()
for i in range(100, 300, 10):
    log.append(records.encode_batch(values[i:i + 10]))
manager.checkpoint()
print(log.recovery_point, flush=True)
time.sleep(60)
"""


def test_an_unclean_truncation_logs_and_counts_what_it_deletes(tmp_path, caplog):
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True)
    flushed = int(child.stdout.readline())
    child.kill()                                            # kill -9: nothing closed cleanly
    child.wait(30)
    child.stdout.close()
    files = segment_files(str(tmp_path / "t-0"))
    bases = [int(os.path.basename(f)[:20]) for f in files]
    victim = next(i for i, b in enumerate(bases) if b >= flushed and i + 2 < len(bases))
    tear(files[victim])
    after = files[victim + 1:]
    after_bytes = sum(os.path.getsize(f) for f in after)
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        manager = LogManager(str(tmp_path), background=False)
    try:
        report = manager.startup
        assert report.clean_dirs == 0
        assert report.segments_deleted == len(after) and report.bytes_deleted == after_bytes
        assert f"deleted {len(after)} segments ({after_bytes} bytes)" in report.summary()
        for base in bases[victim + 1:]:
            assert f"deleting segment {base} (" in caplog.text
        assert f"truncated segment {bases[victim]} at byte" in caplog.text
        log = manager.log("t", 0)
        assert flushed <= log.log_end_offset < 300
        assert [r.value for r in all_records(log)] == VALUES[:log.log_end_offset]
    finally:
        manager.close()


@pytest.mark.parametrize("damage", ["removed", "emptied"])
def test_a_segment_log_lost_below_the_recovery_point_is_a_hole_reported_at_open_and_read(
        log_dir, caplog, damage):
    """Today: silent at open (the orphan indexes of a removed .log deleted without a word)
    and readers skip from the segment before it to the one after."""
    with Log(log_dir, SEGMENT) as log:
        fill(log)
    victim = segment_files(log_dir)[3]
    name = os.path.basename(victim)
    if damage == "removed":
        os.remove(victim)
    else:
        os.truncate(victim, 0)
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        log = Log(log_dir, SEGMENT)
    try:
        bases = [s.base_offset for s in log.segments]
        first = int(name[:20])
        after = min(b for b in bases if b > first)
        assert log.recovery.missing_offsets == ((first, after),)
        assert f"offsets {first}..{after - 1} are missing" in caplog.text
        if damage == "removed":
            for suffix in (".index", ".timeindex"):
                assert f"orphaned index file {name[:20]}{suffix}" in caplog.text
        for offset in (first, after - 1):
            with pytest.raises(MissingOffsetsError) as info:
                log.read(offset, 1 << 20)
            assert (info.value.first_missing, info.value.next_offset) == (first, after)
            assert info.value.code == 2                       # CORRUPT_MESSAGE on the wire
        # Around the hole every record reads, and a consumer goes on from next_offset.
        assert [r.value for r in all_records(log, 0, first)] == VALUES[:first]
        assert [r.value for r in all_records(log, after)] == VALUES[after:]
    finally:
        log.close()


@pytest.mark.parametrize("policy_after", ["compact", "delete"])
def test_a_compacted_logs_gaps_are_not_holes(tmp_path, caplog, policy_after):
    """The cleaner leaves gaps between segments (Kafka's fetch reads across them): no
    warning at open, and reads go on to the next segment; also once the topic's
    cleanup.policy no longer includes compact (the gaps are below the cleaner's
    checkpoint)."""
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 1000})
        log = manager.log("c", 0)
        # Every fifth record has a key of its own (it survives the cleaning); the rest
        # share three keys (superseded): each cleaned segment keeps records from its
        # middle, so it ends before the next one begins.
        for i in range(300):
            key = b"u%d" % i if i % 5 == 0 else b"k%d" % (i % 3)
            log.append(records.encode_batch([b"v%d" % i], keys=[key]))
        manager.clean_once()
        offsets = [r.offset for r in all_records(log)]
        segments = log.segments
        assert any(a.next_offset < b.base_offset for a, b in zip(segments, segments[1:]))
        manager.alter_topic_config("c", {"cleanup.policy": policy_after})
        assert [r.offset for r in all_records(log)] == offsets
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        with LogManager(str(tmp_path), background=False) as manager:
            log = manager.log("c", 0)
            assert log.recovery.missing_offsets == ()
            assert [r.offset for r in all_records(log)] == offsets
    assert "missing" not in caplog.text
