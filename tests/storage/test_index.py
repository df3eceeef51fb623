"""OffsetIndex and TimeIndex against bisect on real mmap'd files."""

import bisect
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pylog._core.storage import OffsetIndex, TimeIndex

from pylog import records
from pylog.errors import CorruptIndexError

BASE = 1000


def _offset_index(tmp_path, entries, max_size=4096, base=BASE):
    ix = OffsetIndex.open(str(tmp_path / f"{base:020d}.index"), base, max_size)
    for offset, position in entries:
        ix.append(offset, position)
    return ix


increasing_pairs = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)),
                            max_size=400).map(
    lambda steps: [(BASE + sum(s[0] for s in steps[:i + 1]), sum(s[1] for s in steps[:i + 1]))
                   for i in range(len(steps))])


@settings(max_examples=60, deadline=None)
@given(entries=increasing_pairs, targets=st.lists(st.integers(BASE - 5, BASE + 20_000), max_size=40))
def test_offset_lookup_matches_bisect(tmp_path_factory, entries, targets):
    tmp = tmp_path_factory.mktemp("ix")
    ix = _offset_index(tmp, entries, max_size=8 * 1024 * 4)   # > 8 KiB: warm and cold halves
    keys = [o for o, _ in entries]
    for target in targets:
        i = bisect.bisect_right(keys, target) - 1
        assert ix.lookup(target) == (entries[i] if i >= 0 else (BASE, 0))
    positions = [p for _, p in entries]
    for target in targets:
        i = bisect.bisect_right(positions, target - BASE) - 1
        assert ix.floor_position(target - BASE) == (entries[i] if i >= 0 else (BASE, 0))
    ix.close()


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(-3, 40), st.integers(0, 3)), max_size=300),
       targets=st.lists(st.integers(0, 10_000), max_size=30))
def test_time_lookup_matches_bisect(tmp_path_factory, steps, targets):
    tmp = tmp_path_factory.mktemp("tx")
    ix = TimeIndex.open(str(tmp / f"{BASE:020d}.timeindex"), BASE, 12 * 4000)
    model, ts, offset = [], 0, BASE
    for dts, doff in steps:
        ts += dts
        offset += doff
        ix.maybe_append(ts, offset)
        if ts > (model[-1][0] if model else -1):    # only a new maximum (over NO_TIMESTAMP)
            model.append((ts, offset))
    assert ix.to_list() == model
    keys = [t for t, _ in model]
    for target in targets:
        i = bisect.bisect_right(keys, target) - 1
        assert ix.lookup(target) == (model[i] if i >= 0 else (-1, BASE))
    ix.close()


def test_entries_are_big_endian_kafka_layout(tmp_path):
    ix = _offset_index(tmp_path, [(BASE + 5, 4096), (BASE + 9, 8192)])
    ix.trim()
    ix.close()
    raw = (tmp_path / f"{BASE:020d}.index").read_bytes()
    assert raw == bytes.fromhex("00000005 00001000 00000009 00002000".replace(" ", ""))
    tx = TimeIndex.open(str(tmp_path / "t.timeindex"), BASE, 120)
    tx.maybe_append(1_700_000_000_000, BASE + 3)
    tx.trim()
    tx.close()
    assert (tmp_path / "t.timeindex").read_bytes() == (1_700_000_000_000).to_bytes(8, "big") + \
        (3).to_bytes(4, "big")


def test_preallocated_zero_tail_is_not_entries_and_reopen_finds_entries(tmp_path):
    path = str(tmp_path / "a.index")
    ix = _offset_index(tmp_path, [(BASE + 1, 100), (BASE + 2, 200)], max_size=1 << 16)
    ix.close()
    assert os.path.getsize(path.replace("a.index", f"{BASE:020d}.index")) == 1 << 16
    ix = OffsetIndex.open(path.replace("a.index", f"{BASE:020d}.index"), BASE, 0)
    assert ix.entries == 2 and ix.max_entries == (1 << 16) // 8
    assert ix.to_list() == [(BASE + 1, 100), (BASE + 2, 200)]
    ix.sanity_check(log_size=1000)
    ix.close()


def test_resize_and_trim_keep_entries(tmp_path):
    ix = _offset_index(tmp_path, [(BASE + i, i * 10) for i in range(1, 11)], max_size=800)
    ix.trim()
    assert ix.file_size == 80 and ix.is_full
    with pytest.raises(CorruptIndexError, match="full"):
        ix.append(BASE + 20, 500)
    ix.resize(8000)
    assert ix.file_size == 8000 and not ix.is_full and ix.entries == 10
    ix.append(BASE + 20, 500)
    ix.resize(44)                       # rounded down to whole entries, keeps a prefix
    assert ix.file_size == 40 and ix.entries == 5
    ix.close()


def test_append_rejects_non_increasing_and_out_of_range_offsets(tmp_path):
    ix = _offset_index(tmp_path, [(BASE + 10, 100)])
    with pytest.raises(CorruptIndexError, match="no larger"):
        ix.append(BASE + 10, 200)
    with pytest.raises(CorruptIndexError, match="int32"):
        ix.append(BASE + 2**31, 300)
    with pytest.raises(CorruptIndexError, match="int32"):
        ix.append(BASE - 1, 300)
    ix.close()


def test_time_index_keeps_last_slot_for_roll(tmp_path):
    tx = TimeIndex.open(str(tmp_path / "t.timeindex"), BASE, 36)     # 3 slots
    tx.maybe_append(10, BASE + 1)
    tx.maybe_append(20, BASE + 2)
    assert tx.is_full
    with pytest.raises(CorruptIndexError, match="full"):
        tx.maybe_append(30, BASE + 3)
    tx.maybe_append(30, BASE + 3, True)                               # the roll-time entry
    assert tx.to_list() == [(10, BASE + 1), (20, BASE + 2), (30, BASE + 3)]
    tx.close()


def test_time_index_takes_no_entry_without_a_timestamp(tmp_path):
    """An empty segment's roll (or the cleaner's emptied one) wrote an entry with
    timestamp -1, which Kafka's DumpLogSegments --verify-index-only reports as an
    indexed offset missing from the log. Kafka's TimeIndex.maybeAppend takes an empty
    index's last timestamp as -1 (no timestamp): such an entry is never written."""
    tx = TimeIndex.open(str(tmp_path / "t.timeindex"), BASE, 36)
    tx.maybe_append(-1, BASE, True)
    tx.maybe_append(-1, BASE + 5)
    assert tx.entries == 0 and tx.to_list() == []
    tx.maybe_append(0, BASE + 6)                  # timestamp 0 is a timestamp
    assert tx.to_list() == [(0, BASE + 6)]
    tx.close()


def test_truncate_to_removes_entries_at_and_after_offset(tmp_path):
    ix = _offset_index(tmp_path, [(BASE + i * 10, i * 100) for i in range(1, 6)])
    ix.truncate_to(BASE + 30)
    assert ix.to_list() == [(BASE + 10, 100), (BASE + 20, 200)]
    ix.append(BASE + 25, 250)           # appends continue after the cut
    ix.close()
    tx = TimeIndex.open(str(tmp_path / "t.timeindex"), BASE, 1200)
    for i in range(1, 6):
        tx.maybe_append(i * 1000, BASE + i * 10)
    tx.truncate_to(BASE + 31)
    assert tx.to_list() == [(1000, BASE + 10), (2000, BASE + 20), (3000, BASE + 30)]
    tx.close()


def test_garbage_index_fails_sanity_check(tmp_path):
    path = tmp_path / f"{BASE:020d}.index"
    ix = _offset_index(tmp_path, [(BASE + i, i * 100) for i in range(1, 9)])
    ix.trim()
    ix.close()
    raw = bytearray(path.read_bytes())
    raw[8 * 4:8 * 5] = bytes.fromhex("00000001 00000050".replace(" ", ""))   # goes backwards
    path.write_bytes(bytes(raw))
    ix = OffsetIndex.open(str(path), BASE, 0)
    assert ix.entries == 4                                # the valid prefix
    with pytest.raises(CorruptIndexError, match=r"entry 4 of 8 does not follow"):
        ix.sanity_check(log_size=10_000)
    ix.close()


def test_sanity_check_names_position_beyond_log(tmp_path):
    ix = _offset_index(tmp_path, [(BASE + 1, 100), (BASE + 2, 5000)])
    with pytest.raises(CorruptIndexError, match=r"position 5000, beyond the log's 4000 bytes"):
        ix.sanity_check(log_size=4000)
    ix.close()


def test_index_file_not_multiple_of_entry_size(tmp_path):
    path = tmp_path / f"{BASE:020d}.index"
    path.write_bytes(b"\x00\x00\x00\x01\x00\x00\x00\x10\x00\x00")     # 10 bytes
    ix = OffsetIndex.open(str(path), BASE, 0)
    with pytest.raises(CorruptIndexError, match="not a multiple of the entry size 8"):
        ix.sanity_check(log_size=100)
    ix.close()


def test_closed_index_raises(tmp_path):
    ix = _offset_index(tmp_path, [])
    ix.close()
    with pytest.raises(ValueError, match="closed"):
        ix.lookup(5)


def test_cannot_instantiate_directly():
    with pytest.raises(TypeError, match="not supposed to be instantiated"):
        OffsetIndex()


def test_preallocated_indexes_are_sparse(tmp_path):
    """Index files are preallocated to segment.index.bytes sparsely, as Kafka's
    setLength does; blocks are allocated just ahead of the entries (issue 12,
    item 14: each open partition held about 20 MiB of real blocks)."""
    import pylog

    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 10)
        store.log("t", 0).append(records.encode_batch([b"x" * 100] * 100))
        store.commit_offsets("g", {("t", 0): 1})          # creates 50 __consumer_offsets partitions
        indexes = [os.path.join(root, n) for root, _, names in os.walk(tmp_path) for n in names
                   if n.endswith((".index", ".timeindex"))]
        assert len(indexes) == 120
        for path in indexes:
            st = os.stat(path)
            assert st.st_size >= (10 << 20) - 12 or "__consumer_offsets" in path
            assert st.st_blocks * 512 <= 64 * 1024, (path, st.st_blocks)
        assert sum(os.stat(p).st_blocks * 512 for p in indexes) <= 8 << 20


def test_flushes_without_the_gil_race_resizes_and_lookups_safely(tmp_path):
    """Index msync and ftruncate run without the GIL (issue 12, item 15); whatever
    remaps the index waits for a flush in progress, so a flush never syncs an
    unmapped range and a lookup never reads one."""
    import threading
    import time

    ix = OffsetIndex.open(str(tmp_path / "0.index"), BASE, 1 << 20)
    for i in range(1000):
        ix.append(BASE + i * 10, i * 100)
    stop = threading.Event()
    errors = []

    def flusher():
        while not stop.is_set():
            try:
                ix.flush()
            except Exception as exc:  # noqa: BLE001 - any error is a failure here
                errors.append(exc)

    def reader():
        while not stop.is_set():
            if ix.lookup(BASE + 5005) != (BASE + 5000, 50000):
                errors.append(ix.lookup(BASE + 5005))
    threads = [threading.Thread(target=flusher), threading.Thread(target=flusher),
               threading.Thread(target=reader)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        ix.trim()                                   # shrink: remap, then ftruncate
        ix.resize(1 << 20)                          # grow: ftruncate, then remap
        ix.release_fd()
        ix.resize(2 << 20)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert ix.entries == 1000
    ix.close()


def test_concurrent_remaps_and_a_close_keep_mapping_and_file_together(tmp_path):
    """Remaps wait for each other on the index's gate (a pthread mutex and condition,
    not a poll under the GIL): two threads growing and shrinking one index, with
    flushes beside them, leave the file exactly as long as the mapping, every entry
    in place; a close among them makes later calls fail as closed, never crash."""
    import threading

    path = tmp_path / "0.index"
    ix = OffsetIndex.open(str(path), BASE, 1 << 20)
    for i in range(1000):
        ix.append(BASE + i * 10, i * 100)
    errors = []

    def work(sizes):
        try:
            for _ in range(200):
                for size in sizes:
                    ix.resize(size)
                    ix.flush()
        except Exception as exc:  # noqa: BLE001 - any error is a failure here
            errors.append(exc)

    threads = [threading.Thread(target=work, args=([8000, 2 << 20],)),
               threading.Thread(target=work, args=([1 << 20, 16000],))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ix.file_size == os.path.getsize(path)
    assert ix.entries == 1000 and ix.lookup(BASE + 9995) == (BASE + 9990, 99900)

    def flusher():
        try:
            while True:
                ix.flush()
        except ValueError as exc:
            errors.append(exc)

    flushers = [threading.Thread(target=flusher) for _ in range(2)]
    for t in flushers:
        t.start()
    ix.close()
    for t in flushers:
        t.join(30)
    assert [f"index {path} is closed"] * 2 == [str(e) for e in errors]


def test_no_timestamp_is_never_a_time_index_entry(tmp_path):
    """Kafka's TimeIndex.maybeAppend: an empty index's maximum is NO_TIMESTAMP (-1), so a
    segment without timestamps, or closed without batches, gets no entry (pylog stored
    (-1, base), which the check at open must then explain away)."""
    tx = TimeIndex.open(str(tmp_path / f"{BASE:020d}.timeindex"), BASE, 12 * 10)
    tx.maybe_append(-1, BASE, True)
    assert tx.entries == 0
    tx.maybe_append(5, BASE + 3)
    assert tx.to_list() == [(5, BASE + 3)]
    tx.close()
