"""Idempotent appends: producer ids, epochs and sequences, deduplicated across restarts."""

import os
import struct

import crc32c as crc32c_oracle
import pytest
from log_support import ManualScheduler, read_file

from pylog import records
from pylog.errors import DuplicateSequenceError, InvalidProducerEpochError, OutOfOrderSequenceError
from pylog.storage.log import Log


def pbatch(n, pid=7, epoch=0, seq=0, tag=b""):
    return records.encode_batch([tag + b"%d" % i for i in range(n)], producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq)


def open_log(log_dir, engine_kind, **config):
    return Log(log_dir, {"pylog.io.engine": engine_kind, **config}, scheduler=ManualScheduler())


def test_retry_of_a_batch_is_written_once(log_dir, engine_kind):
    with open_log(log_dir, engine_kind) as log:
        first = log.append(pbatch(5, seq=0))
        second = log.append(pbatch(3, seq=5))
        retry = log.append(pbatch(5, seq=0))          # a retry of the first batch
        assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
        assert retry.size == 0
        assert log.log_end_offset == 8
        assert (second.first_offset, second.last_offset) == (5, 7)


def test_sequence_gap_and_fenced_epoch(log_dir, engine_kind):
    with open_log(log_dir, engine_kind) as log:
        log.append(pbatch(5, seq=0))
        with pytest.raises(OutOfOrderSequenceError, match="sent sequence 7, expected 5") as e:
            log.append(pbatch(2, seq=7))
        assert e.value.code == 45
        log.append(pbatch(2, epoch=1, seq=0))          # a new epoch starts at 0
        with pytest.raises(InvalidProducerEpochError, match="epoch 0, older than its current epoch 1"):
            log.append(pbatch(1, epoch=0, seq=7))
        with pytest.raises(OutOfOrderSequenceError, match="starts epoch 2 at sequence 3"):
            log.append(pbatch(1, epoch=2, seq=3))
        assert log.log_end_offset == 7
        other = log.append(pbatch(4, pid=8, seq=100))  # an unknown producer: any sequence
        assert other.first_offset == 7


def test_several_batches_in_one_append_are_checked_in_order(log_dir, engine_kind):
    with open_log(log_dir, engine_kind) as log:
        log.append(pbatch(2, seq=0) + pbatch(3, seq=2))
        with pytest.raises(OutOfOrderSequenceError):
            log.append(pbatch(2, seq=5) + pbatch(2, seq=9))
        assert log.log_end_offset == 5                 # nothing of the rejected append
        log.append(pbatch(2, seq=5) + pbatch(2, seq=7))
        assert log.log_end_offset == 9


def test_a_duplicate_inside_a_multi_batch_append_writes_nothing_and_says_so(log_dir, engine_kind):
    """A duplicate batch followed by new ones returned the duplicate's offsets and
    silently dropped the new batches (issue 12, item 6)."""
    with open_log(log_dir, engine_kind) as log:
        log.append(pbatch(2, seq=0))
        with pytest.raises(DuplicateSequenceError, match="1 already written .* and 1 new ones") as e:
            log.append(pbatch(2, seq=0) + pbatch(3, seq=2))
        assert e.value.code == 46
        assert log.log_end_offset == 2                 # nothing written
        info = log.append(pbatch(3, seq=2))            # the new batch alone is accepted
        assert (info.first_offset, info.last_offset) == (2, 4)
        assert [r.offset for r in log.read(0).records()] == [0, 1, 2, 3, 4]


def test_a_retry_of_a_whole_multi_batch_append_returns_all_of_it(log_dir, engine_kind):
    with open_log(log_dir, engine_kind) as log:
        first = log.append(pbatch(2, seq=0) + pbatch(3, seq=2))
        retry = log.append(pbatch(2, seq=0) + pbatch(3, seq=2))
        assert (retry.first_offset, retry.last_offset, retry.records, retry.batches, retry.size) == \
            (first.first_offset, first.last_offset, 5, 2, 0)
        assert log.log_end_offset == 5


@pytest.mark.parametrize("shutdown", ["clean", "unclean", "unclean-after-roll"])
def test_duplicates_detected_across_restarts(log_dir, engine_kind, shutdown):
    log = open_log(log_dir, engine_kind, **{"segment.bytes": 2000})
    appended = []
    for i in range(30 if shutdown == "unclean-after-roll" else 3):
        b = pbatch(4, seq=4 * i, tag=b"x" * 30)
        appended.append((b, log.append(b)))
    if shutdown == "clean":
        log.close()
    else:
        log.flush()
        log.abandon()                                  # drop without close(): a crash
    with open_log(log_dir, engine_kind, **{"segment.bytes": 2000}) as log:
        end = log.log_end_offset
        last_bytes, last_info = appended[-1]
        retry = log.append(last_bytes)
        assert (retry.first_offset, retry.last_offset) == (last_info.first_offset, last_info.last_offset)
        assert log.log_end_offset == end
        nxt = log.append(pbatch(1, seq=4 * len(appended)))
        assert nxt.first_offset == end


def test_state_is_rebuilt_from_the_log_start_without_a_snapshot(log_dir, engine_kind):
    """A crash between a log's first roll and its snapshot leaves segments and no
    snapshot (found by tests/durability/test_kill9.py): the producer state must
    come from every segment, not only the active one."""
    log = open_log(log_dir, engine_kind, **{"segment.bytes": 2000})
    for i in range(30):
        log.append(pbatch(4, seq=4 * i, tag=b"x" * 30))
    log.roll()                                  # the crash came right after a roll
    assert len(log.segments) > 3 and log.active_segment.size == 0
    log.abandon()
    for name in os.listdir(log_dir):
        if name.endswith(".snapshot"):
            os.remove(os.path.join(log_dir, name))
    with open_log(log_dir, engine_kind, **{"segment.bytes": 2000}) as log:
        entry = log.producer_state.producers[7]
        assert entry.last_seq == 4 * 30 - 1
        assert log.append(pbatch(1, seq=4 * 30)).first_offset == 120


def test_every_roll_writes_a_snapshot(log_dir, engine_kind):
    log = open_log(log_dir, engine_kind, **{"segment.bytes": 2000})
    for _ in range(30):
        log.append(records.encode_batch([b"x" * 50] * 4))      # no producer at all
    snapshots = sorted(int(n[:20]) for n in os.listdir(log_dir) if n.endswith(".snapshot"))
    assert snapshots == [s.base_offset for s in log.segments[1:]]
    log.close()


def test_snapshot_files_are_kafkas_format(log_dir, engine_kind):
    log = open_log(log_dir, engine_kind)
    log.append(pbatch(5, pid=42, epoch=3, seq=10))
    log.append(pbatch(2, pid=43, epoch=0, seq=0))
    log.close()
    path = os.path.join(log_dir, f"{7:020d}.snapshot")
    data = read_file(path)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1 and count == 2 and len(data) == 10 + 2 * 46
    assert crc == crc32c_oracle.crc32c(data[6:])
    entries = [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(2)]
    # producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, txnFirstOffset
    assert sorted(e[:5] for e in entries) == [(42, 3, 14, 4, 4), (43, 0, 1, 6, 1)]
    assert all(e[6:] == (-1, -1) for e in entries)


def test_corrupt_snapshot_is_ignored_and_state_rebuilt(log_dir, engine_kind):
    log = open_log(log_dir, engine_kind)
    b = pbatch(5, seq=0)
    info = log.append(b)
    log.close()
    path = os.path.join(log_dir, f"{5:020d}.snapshot")
    raw = bytearray(read_file(path))
    raw[-1] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(raw))
    with open_log(log_dir, engine_kind) as log:
        assert not os.path.exists(path)                             # dropped, not trusted
        assert log.append(b).first_offset == info.first_offset     # still a duplicate


def test_truncation_forgets_truncated_batches(log_dir, engine_kind):
    with open_log(log_dir, engine_kind) as log:
        log.append(pbatch(5, seq=0))
        log.append(pbatch(5, seq=5))
        log.truncate_to(5)
        # The second batch is gone, so its retry is new data, not a duplicate.
        assert log.append(pbatch(5, seq=5)).first_offset == 5
        assert log.log_end_offset == 10
