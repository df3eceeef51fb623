"""Transactions in one Log, through the storage API the transaction coordinator uses:
transactional batches, COMMIT/ABORT markers (Kafka's bytes), the .txnindex (34-byte
entries), the last stable offset, read_committed reads, fencing, producer snapshots,
truncation and retention. Markers and entries are checked byte by byte against Kafka's
layout and with an independent decoder (kafka-python's record reader)."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch
from txn_support import TxnProducer, txn_batch

from pylog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pylog.record import decode_arrow, encode_batch, iter_batches
from pylog.storage import Log
from pylog.storage.producer_state import read_snapshot_file
from pylog.storage.transaction_index import AbortedTxn

T0 = 1_700_000_000_000


def values_committed(log, start=0):
    """What a read_committed reader gets, decoded by decode_arrow in C."""
    out, offset = [], start
    while offset < log.last_stable_offset:
        read = log.read_committed(offset)
        if not read.records.size:
            break
        rows = decode_arrow(read.records.read(), aborted_transactions=read.aborted_transactions)
        out += [v for o, v in zip(rows.column("offset").to_pylist(), rows.column("value").to_pylist())
                if o >= offset]
        offset = read.records.last_offset + 1
    return out


def raw_batches(log):
    out = []
    for segment in log.segments:
        out += [bytes(b.raw) for b in iter_batches(segment.log.read(0, segment.size))]
    return out


def txnindex_bytes(log, base=0):
    with open(os.path.join(log.path, f"{base:020d}.txnindex"), "rb") as f:
        return f.read()


@pytest.fixture
def log(log_dir):
    lg = Log(log_dir, {"segment.bytes": 1 << 20})
    yield lg
    lg.close()


def test_markers_are_kafkas_end_transaction_marker_read_by_kafka_python(log):
    p = TxnProducer(log, pid=7, epoch=3, coordinator_epoch=11)
    p.send([b"a", b"b"])
    commit = p.commit()
    p.send([b"c"])
    abort = p.abort(bump=True)           # transactions v2: the marker carries epoch 4
    assert (commit.first_offset, abort.first_offset) == (2, 4)
    # kafka-python's batches iterate once: (batch, its records) pairs.
    batches = [(b, list(b)) for b in map(DefaultRecordBatch, raw_batches(log))]
    markers = [(b.base_offset, b.producer_epoch, recs[0]) for b, recs in batches if b.is_control_batch]
    assert [(o, e, r.type, r.version) for o, e, r in markers] == [(2, 3, 1, 0), (4, 4, 0, 0)]
    for b, _ in batches:
        assert b.is_transactional and b.producer_id == 7
    for raw in raw_batches(log):
        assert DefaultRecordBatch(raw).validate_crc()
    for b, recs in ((b, recs) for b, recs in batches if b.is_control_batch):
        assert b.base_sequence == -1 and b.last_offset_delta == 0 and len(recs) == 1
        record = recs[0]
        # Kafka's EndTransactionMarker: key version int16 + type int16, value version
        # int16 + coordinatorEpoch int32.
        assert record.key == struct.pack(">hh", 0, record.type)
        assert record.value == struct.pack(">hi", 0, 11)
    # pylog's own reader agrees.
    controls = [b for raw in raw_batches(log) for b in iter_batches(raw) if b.is_control]
    assert [(b.control_type, b.coordinator_epoch) for b in controls] == [("commit", 11), ("abort", 11)]


def test_txnindex_holds_kafkas_34_byte_entries_for_aborted_transactions_only(log):
    a, b = TxnProducer(log, pid=1), TxnProducer(log, pid=2)
    log.append(encode_batch([b"plain"]))             # 0
    a.send([b"a0", b"a1"])                           # 1-2
    b.send([b"b0"])                                  # 3
    a.send([b"a2"])                                  # 4
    a.abort()                                        # 5: LSO now b's first offset, 3
    b.commit()                                       # 6: committed: no entry
    c = TxnProducer(log, pid=3)
    c.send([b"c0"])                                  # 7
    c.abort()                                        # 8: nothing else open: LSO 9
    data = txnindex_bytes(log)
    assert len(data) == 2 * 34
    assert data == struct.pack(">hqqqq", 0, 1, 1, 5, 3) + struct.pack(">hqqqq", 0, 3, 7, 8, 9)
    assert log.aborted_transactions(0, 9) == [AbortedTxn(1, 1, 5, 3), AbortedTxn(3, 7, 8, 9)]
    # Kafka's search: overlap [start, bound), stop at an entry whose LSO reaches the bound.
    assert log.aborted_transactions(6, 9) == [AbortedTxn(3, 7, 8, 9)]
    assert log.aborted_transactions(0, 3) == [AbortedTxn(1, 1, 5, 3)]


def test_last_stable_offset_stops_at_the_oldest_open_transaction(log):
    a, b = TxnProducer(log, pid=1), TxnProducer(log, pid=2)
    log.append(encode_batch([b"x"] * 3))
    assert log.last_stable_offset == log.log_end_offset == 3
    a.send([b"a"])                                    # 3
    assert log.last_stable_offset == 3
    b.send([b"b"])                                    # 4
    log.append(encode_batch([b"y"]))                  # 5: plain records pass nothing
    assert (log.last_stable_offset, log.high_watermark) == (3, 6)
    b.commit()                                        # 6
    assert log.last_stable_offset == 3                # a is still open
    assert [p.producer_id for p in log.ongoing_transactions()] == [1]
    a.abort()                                         # 7
    assert log.last_stable_offset == log.log_end_offset == 8
    assert log.ongoing_transactions() == []


def test_read_committed_returns_committed_and_plain_records_below_the_lso(log):
    a, b = TxnProducer(log, pid=1), TxnProducer(log, pid=2)
    log.append(encode_batch([b"p0"]))
    a.send([b"a0", b"a1"])
    b.send([b"b0"])
    a.send([b"a2"])
    log.append(encode_batch([b"p1"]))
    assert values_committed(log) == [b"p0"]           # a's open transaction holds the LSO
    read = log.read_committed(log.last_stable_offset)
    assert read.records.size == 0 and read.last_stable_offset == 1
    a.abort()
    assert values_committed(log) == [b"p0"]           # b is open from offset 3 now
    b.commit()
    assert values_committed(log) == [b"p0", b"b0", b"p1"]
    # read_uncommitted sees everything, markers skipped.
    assert decode_arrow(log.read(0).read()).column("value").to_pylist() == \
        [b"p0", b"a0", b"a1", b"b0", b"a2", b"p1"]


def test_transactional_batch_needs_the_coordinators_verification(log):
    batch = txn_batch(5, 0, 0, [b"x"])
    with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
        log.append(batch)
    with pytest.raises(InvalidTxnStateError):
        log.append(batch, verification_guard=object())
    assert log.log_end_offset == 0
    guard = log.maybe_start_transaction_verification(5, 0, 0)
    assert log.maybe_start_transaction_verification(5, 0, 0) is guard
    log.append(batch, verification_guard=guard)
    assert log.maybe_start_transaction_verification(5, 1, 0) is None     # open here now
    log.append(txn_batch(5, 0, 1, [b"y"]))           # later batches need none


def test_a_marker_retires_a_verification_answered_too_late(log):
    """KIP-890's ABA case: verification starts, the transaction is aborted meanwhile, the
    stale verification must not open a new transaction."""
    p = TxnProducer(log, pid=5)
    p.send([b"x"])
    p.abort()
    guard = log.maybe_start_transaction_verification(5, 1, 0)
    log.write_txn_marker(5, 0, 1, committed=False)   # an abort by a new coordinator meanwhile
    with pytest.raises(InvalidTxnStateError):
        log.append(txn_batch(5, 0, 1, [b"late"]), verification_guard=guard)


def test_non_transactional_batch_during_an_open_transaction_is_refused(log):
    p = TxnProducer(log, pid=5)
    p.send([b"x"])
    with pytest.raises(InvalidTxnStateError, match="non-transactional"):
        log.append(txn_batch(5, 0, 1, [b"y"], transactional=False))
    assert log.log_end_offset == 1


def test_fencing_by_epoch_and_coordinator_epoch(log):
    p = TxnProducer(log, pid=5, epoch=2, coordinator_epoch=4)
    p.send([b"x"])
    with pytest.raises(InvalidProducerEpochError, match="epoch 1, older than its current epoch 2"):
        log.append(txn_batch(5, 1, 1, [b"zombie"]))
    with pytest.raises(InvalidProducerEpochError):
        log.write_txn_marker(5, 1, 4, committed=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        p.commit()
        log.write_txn_marker(5, 2, 3, committed=False)
    end = log.log_end_offset
    # A bumped epoch (transactions v2) fences the old one at the log.
    p.send([b"y"])
    p.abort(bump=True)
    with pytest.raises(InvalidProducerEpochError):
        log.append(txn_batch(5, 2, p.seq, [b"zombie"]))
    guard = log.maybe_start_transaction_verification(5, 5, 3)
    with pytest.raises(OutOfOrderSequenceError):     # a new epoch starts at sequence 0
        log.append(txn_batch(5, 3, 5, [b"gap"]), verification_guard=guard)
    assert log.log_end_offset == end + 2
    assert InvalidProducerEpochError.code == 47 and InvalidTxnStateError.code == 48
    assert TransactionCoordinatorFencedError.code == 52


def test_a_retried_marker_writes_nothing(log):
    p = TxnProducer(log, pid=5)
    p.send([b"x"])
    first = log.write_txn_marker(5, 0, 0, committed=True)
    again = log.write_txn_marker(5, 0, 0, committed=True)
    assert (again.first_offset, again.size) == (first.first_offset, 0)
    assert log.log_end_offset == first.last_offset + 1
    # An empty transaction's marker (no data here) is written: it moves the epochs.
    empty = log.write_txn_marker(9, 0, 0, committed=False)
    assert empty.size > 0 and log.aborted_transactions(0, log.log_end_offset) == []


def test_snapshot_keeps_open_transactions_and_coordinator_epochs(log_dir):
    log = Log(log_dir)
    a, b = TxnProducer(log, pid=1, coordinator_epoch=6), TxnProducer(log, pid=2, epoch=3)
    a.send([b"a0"])
    a.commit(bump=True)                               # v2: its last record is a marker, epoch 1
    b.send([b"b0", b"b1"])                            # open at close
    log.close()
    snapshots = sorted(n for n in os.listdir(log_dir) if n.endswith(".snapshot"))
    entries = {e.producer_id: e for e in read_snapshot_file(os.path.join(log_dir, snapshots[-1]))}
    assert entries[2].txn_first_offset == 2 and entries[2].coordinator_epoch == -1
    # The producer whose epoch a marker bumped has no batch of that epoch: last sequence
    # and offset -1, as Kafka writes it.
    with open(os.path.join(log_dir, snapshots[-1]), "rb") as f:
        raw = f.read()
    fields = [struct.unpack_from(">qhiqiqiq", raw, 10 + 46 * i) for i in range(2)]
    by_pid = {f[0]: f for f in fields}
    assert by_pid[1][1:5] == (1, -1, -1, 0) and by_pid[1][6:] == (6, -1)
    assert by_pid[2][1:5] == (3, 1, 3, 1) and by_pid[2][6:] == (-1, 2)
    log = Log(log_dir)
    try:
        assert log.last_stable_offset == 2
        b.log = log
        b.commit()
        assert log.last_stable_offset == log.log_end_offset
    finally:
        log.close()


def test_transaction_across_segments_and_its_entry_in_the_markers_segment(log_dir):
    log = Log(log_dir, {"segment.bytes": 4096})
    try:
        p, q = TxnProducer(log, pid=1), TxnProducer(log, pid=2)
        p.send([b"first"])
        for _ in range(40):
            q.send([b"q" * 200])
            q.commit()
        p.send([b"last"])
        p.abort()
        assert len(log.segments) > 3
        marker_segment = log.segments[-1].base_offset
        assert os.listdir(log_dir).count(f"{marker_segment:020d}.txnindex") == 1
        assert not os.path.exists(os.path.join(log_dir, f"{0:020d}.txnindex"))
        # A read in the first segment finds the entry segments later.
        assert log.aborted_transactions(0, 5) == [AbortedTxn(1, 0, log.log_end_offset - 1,
                                                             log.log_end_offset)]
        assert values_committed(log) == [b"q" * 200] * 40
    finally:
        log.close()


def test_truncation_reopens_a_transaction_whose_marker_it_cut(log_dir):
    log = Log(log_dir, {"segment.bytes": 4096})
    try:
        keep = TxnProducer(log, pid=1)
        keep.send([b"k"])
        marker = keep.abort()
        assert log.last_stable_offset == log.log_end_offset
        log.truncate_to(marker.first_offset)
        assert log.last_stable_offset == 0 and [p.producer_id for p in log.ongoing_transactions()] == [1]
        assert log.aborted_transactions(0, 10) == [] and txnindex_bytes(log) == b""
        keep.abort()
        assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    finally:
        log.close()


def test_retention_deletes_txnindex_files_and_the_lso_follows_the_log_start(log_dir):
    log = Log(log_dir, {"segment.bytes": 4096, "retention.bytes": 8192,
                        "file.delete.delay.ms": 0})
    try:
        p = TxnProducer(log, pid=1)
        p.send([b"v" * 100])
        p.abort()
        open_one = TxnProducer(log, pid=2)
        open_one.send([b"w" * 100])                   # open, its first offset soon deleted
        for _ in range(60):
            log.append(encode_batch([b"z" * 300]))
        first_segment_txnindex = os.path.join(log_dir, f"{0:020d}.txnindex")
        assert os.path.exists(first_segment_txnindex)
        assert log.apply_retention() > 0
        assert not os.path.exists(first_segment_txnindex)
        assert log.log_start_offset > 2
        assert log.last_stable_offset == log.log_start_offset      # never below the start
        assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == []
    finally:
        log.close()


def test_read_only_reader_sees_the_owners_lso_and_reads_committed(log_dir):
    """PartitionReader (Spark's reader, beside a live owner): the LSO and open
    transactions rebuilt without writing a byte, read_committed ranges skipping aborted
    records (from the .txnindex files, in C)."""
    from pylog.storage import PartitionReader
    log = Log(log_dir, {"segment.bytes": 2048})
    try:
        a, b = TxnProducer(log, pid=1), TxnProducer(log, pid=2)
        for i in range(15):
            a.send([b"a%d" % i])
            b.send([b"b%d" % i])
            log.append(encode_batch([b"p%d" % i]))
            a.end(i % 2 == 0)
            if i < 14:
                b.end(i % 3 != 0, bump=True)
        assert len(log.segments) > 2 and log.last_stable_offset < log.log_end_offset
        before = {n: os.stat(os.path.join(log_dir, n)).st_mtime_ns for n in os.listdir(log_dir)}
        reader = PartitionReader("events", 0, log_dir)
        assert reader.last_stable_offset() == log.last_stable_offset
        assert [p.producer_id for p in reader.ongoing_transactions()] == [2]
        got = [v for rows in reader.read_arrow(0, 10**6, max_bytes=700,
                                               isolation_level="read_committed")
               for v in rows.column("value").to_pylist()]
        assert got == values_committed(log)
        assert len([v for rows in reader.read_arrow(0, 10**6) for v in
                    rows.column("value").to_pylist()]) == 15 * 3
        after = {n: os.stat(os.path.join(log_dir, n)).st_mtime_ns for n in os.listdir(log_dir)}
        assert after == before
    finally:
        log.close()
