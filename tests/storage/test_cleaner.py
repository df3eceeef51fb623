"""Log compaction (pylog.storage.cleaner, LogManager.clean_once): the latest value of every
key survives at its original offset, tombstones go after delete.retention.ms, the map
overflows into later passes, batches keep their producer fields, Kafka's reader reads the
cleaned files, readers never see a missing file, and a process killed at any step of a
cleaning reopens with nothing lost, nothing duplicated and no leftover files."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from pylog.storage import LogManager

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 2000, "delete.retention.ms": 60_000}


def latest_values(lg) -> dict[bytes, tuple[int, bytes | None]]:
    """key -> (offset, value) of its last record, reading the whole log."""
    out = {}
    offsets = []
    for r in read_all(lg):
        offsets.append(r.offset)
        out[r.key] = (r.offset, r.value)
    assert offsets == sorted(set(offsets)), "offsets must be unique and increasing"
    return out


def read_all(lg) -> list:
    """Every record, through Log.read (one segment a read; gaps left by the cleaner are
    skipped as Kafka's fetch skips them)."""
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        piece = lg.read(offset, 1 << 30)
        if not piece.size:
            break
        out += [r for r in piece.records() if r.offset >= offset]
        offset = piece.last_offset + 1
    return out


def test_model_random_writes_deletes_and_cleanings(dirs, open_manager, clock):
    """Random keyed writes and deletes between cleanings, against a dict: after each
    cleaning the latest value of every live key is readable at its original offset,
    and a deleted key's tombstone is gone once delete.retention.ms has passed since
    its segment was cleaned."""
    rng = random.Random(7)
    store = open_manager(dirs[:1])
    store.create_topic("m", 1, config={**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    lg = store.log("m", 0)
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for round_ in range(12):
        for _ in range(rng.randrange(50, 300)):
            key = b"k%d" % rng.randrange(40)
            value = None if rng.random() < 0.15 else b"v%d-%d" % (round_, rng.randrange(10**6))
            info = lg.append_records([value], [key], timestamps=[clock.now])
            model[key] = (info.first_offset, value)
        clock.advance(rng.choice([1_000, 20_000, 70_000]))
        store.clean_once()
        seen = latest_values(lg)
        for key, (offset, value) in model.items():
            if value is not None:
                assert seen[key] == (offset, value), (round_, key)
            elif key in seen:
                assert seen[key] == (offset, None)          # a tombstone, not an old value
        assert not set(seen) - set(model)
    # Past the retention, two more cleanings (the tombstones' segments are clean by then)
    # remove every tombstone of a key that was not written again.
    lg.roll()
    store.clean_once()
    clock.advance(120_000)
    lg.append_records([b"x"], [b"other"], timestamps=[clock.now])
    lg.roll()
    store.clean_once()
    seen = latest_values(lg)
    assert all(v is not None for _o, v in seen.values()), "tombstones past delete.retention.ms"
    assert {k for k, (_o, v) in model.items() if v is not None} <= set(seen)


def test_the_checkpoint_records_progress_and_a_clean_log_is_left_alone(dirs, open_manager, clock):
    store = open_manager(dirs[:1])
    store.create_topic("c", 1, config=COMPACT)
    lg = store.log("c", 0)
    for i in range(200):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 5)], timestamps=[clock.now])
    stats = store.clean_once()
    assert stats is not None and stats.first_dirty == 0
    assert stats.end_offset == lg.segments[-1].base_offset
    path = os.path.join(dirs[0], "cleaner-offset-checkpoint")
    with open(path) as f:
        assert f.read().splitlines() == ["0", "1", f"c 0 {stats.end_offset}"]   # Kafka's format
    assert store.clean_once() is None                       # nothing dirty: nothing to do
    store.close()
    again = open_manager(dirs[:1])
    assert again.clean_once() is None                       # the checkpoint survived the restart
    assert {k: v for k, (_o, v) in latest_values(again.log("c", 0)).items()} == \
        {b"key%d" % k: b"value %d" % (195 + k) for k in range(5)}


def test_cleaned_segments_group_and_an_empty_one_has_no_time_index_entry(dirs, open_manager,
                                                                        clock):
    """Five keys written over and over fill 8 segments; cleaning keeps one record per
    key. An emptied segment kept a time index entry with timestamp -1 (Kafka's
    TimeIndex.maybeAppend writes none: its empty index's last timestamp is already
    -1), which Kafka's DumpLogSegments reports as an indexed offset missing from the
    log; and every emptied segment stayed a segment of its own. A group whose
    cleaning writes nothing now joins the next group's cleaned segment (it holds no
    record, so no tombstone's clock changes), and later passes merge the small
    cleaned segments, clean and dirty apart, as Kafka's groupSegmentsBySize does."""
    store = open_manager(dirs[:1])
    store.create_topic("e", 1, config={**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    lg = store.log("e", 0)
    model = {}

    def write(count, tag):
        for i in range(count):
            key, value = b"key%d" % (i % 5), b"%s %d" % (tag, i)
            model[key] = lg.append_records([value], [key], timestamps=[clock.now + i]).first_offset, value

    def check():
        for segment in lg.segments:
            entries = segment.time_index.to_list()
            assert all(ts >= 0 for ts, _ in entries), (segment, entries)
            assert segment.active or bool(entries) == bool(segment.size), (segment, entries)
        assert latest_values(lg) == model

    write(200, b"value")
    assert len(lg.segments) == 9
    stats = store.clean_once()
    assert stats.segments_before == 8
    check()
    # One cleaned segment holds the survivors of the 8: nothing empty is left behind.
    assert [s.size > 0 for s in lg.segments] == [True, True] and stats.segments_after == 1
    # More rounds: each pass leaves the cleaned section in few segments, none empty.
    for round_ in range(6):
        write(60, b"round %d" % round_)
        lg.roll()
        store.clean_once()
        check()
        assert len(lg.segments) <= 3 and all(s.size for s in lg.segments[:-1]), lg.segments


def test_groups_follow_kafkas_group_segments_by_size(dirs, open_manager, clock):
    """Consecutive segments are cleaned into one while their sizes sum to at most
    segment.bytes and their offset and time index entries to at most
    segment.index.bytes (Kafka's groupSegmentsBySize); an index that would overflow
    starts a new group."""
    from pylog.storage.cleaner import _groups

    store = open_manager(dirs[:1])
    # index.interval.bytes 1: an index entry per batch after the first of a segment;
    # 96 B of index: 12 offset entries or 8 time entries.
    store.create_topic("g", 1, config={**COMPACT, "segment.bytes": 100_000,
                                       "segment.index.bytes": 96, "index.interval.bytes": 1})
    lg = store.log("g", 0)
    for i in range(40):
        lg.append_records([b"v%d" % i], [b"k%d" % i], timestamps=[clock.now + i])
        if i % 4 == 3:
            lg.roll()
    segments = lg.segments[:-1]
    assert [(s.offset_index.entries, s.time_index.entries) for s in segments] == [(3, 3)] * 10
    # Offset entries: 4 segments (12 entries, 96 B) would fit; time entries (12 B each):
    # 2 segments (6 entries, 72 B) do, a third would take 108 B.
    assert [len(g) for g in _groups(segments, 100_000, 96)] == [2] * 5
    assert [len(g) for g in _groups(segments, 100_000, 1 << 20)] == [10]
    largest = max(s.size for s in segments)
    assert [len(g) for g in _groups(segments, largest * 3, 1 << 20)] == [3, 3, 3, 1]


def test_min_cleanable_dirty_ratio_and_lag(dirs, open_manager, clock):
    store = open_manager(dirs[:1])
    store.create_topic("r", 1, config={**COMPACT, "min.cleanable.dirty.ratio": "0.9",
                                       "min.compaction.lag.ms": "10000"})
    lg = store.log("r", 0)
    for i in range(200):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 5)], timestamps=[clock.now])
    assert store.clean_once() is None                       # younger than min.compaction.lag.ms
    clock.advance(20_000)
    assert store.clean_once() is not None
    for i in range(20):                                     # a little dirty data: ratio < 0.9
        lg.append_records([b"again %d" % i], [b"key%d" % (i % 5)], timestamps=[clock.now])
    lg.roll()
    clock.advance(20_000)
    assert store.clean_once() is None


def test_max_compaction_lag_rolls_and_cleans_the_active_segment(dirs, open_manager, clock):
    store = open_manager(dirs[:1])
    store.create_topic("x", 1, config={**COMPACT, "segment.bytes": 1 << 20,
                                       "min.cleanable.dirty.ratio": "0.99",
                                       "max.compaction.lag.ms": "5000"})
    lg = store.log("x", 0)
    for i in range(100):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 3)], timestamps=[clock.now])
    assert len(lg.segments) == 1 and store.clean_once() is None
    clock.advance(6_000)
    stats = store.clean_once()
    assert stats is not None and stats.records_kept == 3
    assert len(latest_values(lg)) == 3


def test_a_full_offset_map_cleans_in_several_passes(dirs, open_manager, clock):
    """A map with room for about 120 records: each pass maps what fits (at least one
    segment) and the next pass continues; the end state is the same as one big pass."""
    store = open_manager(dirs[:1], {"log.cleaner.dedupe.buffer.size": 3200})
    store.create_topic("o", 1, config={**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    lg = store.log("o", 0)
    for i in range(2000):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 300)], timestamps=[clock.now])
    passes = 0
    while (stats := store.clean_once()) is not None:
        passes += 1
        assert stats.map_fill <= 1.0 or stats.segments_before - 1 <= stats.end_offset
        assert passes < 100
    assert passes > 2
    seen = latest_values(lg)
    assert {k: v for k, (_o, v) in seen.items()} == \
        {b"key%d" % k: b"value %d" % (1800 + k if k < 200 else 1500 + k) for k in range(300)}


def test_batches_keep_their_offsets_and_producer_fields_and_kafka_python_reads_them(
        dirs, open_manager, clock):
    """An idempotent producer's compressed batches lose some records: the rewritten
    batch keeps base offset, last offset (so the last sequence), producer id, epoch
    and codec; an emptied batch that is its producer's last stays as an empty header;
    the producer keeps appending after the cleaning; kafka-python's reader reads every
    cleaned file."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    import pylog
    store = pylog.Store(dirs[0], clock=clock, background=False)
    try:
        store.create_topic("p", 1, config=COMPACT)
        with pylog.Producer(store, compression_type="lz4", linger_ms=0) as producer:
            for i in range(60):
                producer.send_batch("p", [b"v%d-%d" % (i, j) for j in range(4)],
                                    keys=[b"a%d" % (i % 7), b"b", b"c%d" % i, b"b"],
                                    partition=0).result()
            lg = store.log("p", 0)
            lg.roll()
            before = {(b.base_offset, b.last_offset, b.producer_id, b.producer_epoch,
                       b.base_sequence) for b in _batches(lg)}
            assert store.clean_once() is not None
            after = list(_batches(lg))
            assert {(b.base_offset, b.last_offset, b.producer_id, b.producer_epoch,
                     b.base_sequence) for b in after} <= before
            assert {b.compression for b in after if b.records_count} == {"lz4"}
            producer.send_batch("p", [b"after"], keys=[b"b"], partition=0).result()   # in sequence
        for name in sorted(os.listdir(lg.path)):
            if not name.endswith(".log"):
                continue
            with open(os.path.join(lg.path, name), "rb") as f:
                records = MemoryRecords(f.read())
            ours = {(r.offset, r.key, r.value) for r in _records_of(lg, name)}
            theirs = set()
            while records.has_next():
                batch = records.next_batch()
                assert isinstance(batch, DefaultRecordBatch) and batch.validate_crc()
                theirs |= {(r.offset, r.key, r.value) for r in batch}
            assert theirs == ours, name
        seen = latest_values(lg)
        assert seen[b"b"][1] == b"after"
        assert {k for k in seen} == {b"a%d" % i for i in range(7)} | {b"b"} | \
            {b"c%d" % i for i in range(60)}
    finally:
        store.close()


def _batches(lg):
    from pylog.record import iter_batches
    for segment in lg.segments:
        with open(segment.log.path, "rb") as f:
            yield from iter_batches(f.read())


def _records_of(lg, name):
    from pylog.record import iter_batches
    with open(os.path.join(lg.path, name), "rb") as f:
        for batch in iter_batches(f.read()):
            yield from batch.records()


def test_records_without_a_key_are_refused_by_a_compacted_topic(dirs, open_manager):
    from pylog.errors import InvalidRecordError
    store = open_manager(dirs[:1])
    store.create_topic("k", 1, config=COMPACT)
    with pytest.raises(InvalidRecordError, match="key"):
        store.log("k", 0).append_records([b"no key"])


def test_readers_during_cleaning_never_miss_a_file(dirs, open_manager, clock):
    store = open_manager(dirs[:1])
    store.create_topic("d", 1, config={**COMPACT, "file.delete.delay.ms": "0"})
    lg = store.log("d", 0)
    errors, stop = [], threading.Event()

    def read():
        try:
            while not stop.is_set():
                offsets = [r.offset for r in read_all(lg)]
                assert offsets == sorted(set(offsets))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for _ in range(15):
            for i in range(100):
                lg.append_records([b"v%d" % i], [b"key%d" % (i % 10)], timestamps=[clock.now])
            store.clean_once()
            store.run_background_tasks()                    # the delayed deletes
    finally:
        stop.set()
        for t in readers:
            t.join(30)
    assert not errors, errors[0]


_CRASH_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pylog.storage import LogManager
    path, stage_to_kill, occurrence = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = LogManager(path, background=False)
    lg = store.log("z", 0)
    seen = [0]
    def stage(name):
        if name == stage_to_kill:
            seen[0] += 1
            if seen[0] == occurrence:
                os.kill(os.getpid(), signal.SIGKILL)
    store.clean_once(stage=stage)
    print("finished")
""")


@pytest.mark.parametrize("stage,occurrence", [("group", 2), ("cleaned-written", 1),
                                              ("swap-written", 1), ("swap-written", 3),
                                              ("old-renamed", 1), ("old-renamed", 2)])
def test_a_process_killed_at_any_step_of_a_cleaning_reopens_intact(tmp_path, stage, occurrence):
    """SIGKILL at each step of a cleaning (before a group, after its .cleaned files are
    written, after the .swap rename, after the old segments were renamed .deleted),
    then reopen: every key's latest value at its offset, offsets unique, no .cleaned or
    .swap file left, and the next cleaning completes."""
    path = str(tmp_path / "store")
    store = LogManager(path, background=False)
    store.create_topic("z", 1, config={**COMPACT, "segment.bytes": "1500"})
    lg = store.log("z", 0)
    expected = {}
    for i in range(600):
        key = b"key%d" % (i % 25)
        info = lg.append_records([b"value %d" % i], [key])
        expected[key] = (info.first_offset, b"value %d" % i)
    lg.roll()
    store.close()
    child = subprocess.run([sys.executable, "-c", _CRASH_CHILD, path, stage, str(occurrence)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    store = LogManager(path, background=False)
    try:
        names = os.listdir(os.path.join(path, "z-0"))
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
        assert latest_values(store.log("z", 0)) == expected
        store.clean_once()
        assert latest_values(store.log("z", 0)) == expected
    finally:
        store.close()


def test_segments_deleted_under_the_cleaner_do_not_take_the_dir_offline(dirs, open_manager, clock):
    """Retention (compact,delete) removes the segments a cleaning is about to read: the
    cleaning stops or skips them, the dir stays online, nothing is left behind, and the
    next cleaning works."""
    store = open_manager(dirs[:1])
    store.create_topic("w", 1, config={**COMPACT, "cleanup.policy": "compact,delete",
                                       "file.delete.delay.ms": "0"})
    lg = store.log("w", 0)
    for i in range(400):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 50)], timestamps=[clock.now])
    cut = lg.segments[len(lg.segments) // 2].base_offset
    done = []

    def stage(name):
        if name == "group" and not done:
            done.append(lg.delete_segments_before(cut))     # as retention would
            store.run_background_tasks()                      # the files go now
    store.clean_once(stage=stage)
    assert done and done[0] > 0
    assert not store.offline_log_dirs
    assert not [n for n in os.listdir(lg.path) if n.endswith((".cleaned", ".swap"))]
    store.clean_once()
    seen = latest_values(lg)
    assert {k: v for k, (_o, v) in seen.items()} == \
        {b"key%d" % k: b"value %d" % (350 + k) for k in range(50)}


def test_a_read_only_reader_in_the_middle_of_a_range_follows_a_cleaning(dirs, open_manager, clock):
    """A PartitionReader (what Spark's tasks and the CLI read with, beside the owner)
    listed the segments, then the cleaner merged some of them away: it lists again and
    finishes the range with every surviving record, instead of reporting data loss."""
    from pylog.storage import PartitionReader
    store = open_manager(dirs[:1])
    store.create_topic("s", 1, config={**COMPACT, "segment.bytes": "600"})
    lg = store.log("s", 0)
    for i in range(100):                       # keys written once: they stay where they are
        lg.append_records([b"once %d" % i], [b"once%d" % i], timestamps=[clock.now])
    for i in range(300):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 5)], timestamps=[clock.now])
    lg.roll()
    store.clean_once()                       # many small clean segments: the next pass merges
    for i in range(300, 600):
        lg.append_records([b"value %d" % i], [b"key%d" % (i % 5)], timestamps=[clock.now])
    lg.roll()
    reader = PartitionReader("s", 0, lg.path)
    end = lg.log_end_offset
    batches = reader.read_arrow(0, end, max_bytes=64)
    got = [next(batches)]                      # listed and reading the first segment
    before = len(lg.segments)
    assert store.clean_once() is not None and len(lg.segments) < before
    got += list(batches)
    offsets = [o for rb in got for o in rb.column("offset").to_pylist()]
    assert offsets == sorted(set(offsets))
    values = dict(zip((k for rb in got for k in rb.column("key").to_pylist()),
                      (v for rb in got for v in rb.column("value").to_pylist())))
    assert values == {**{b"key%d" % k: b"value %d" % (595 + k) for k in range(5)},
                      **{b"once%d" % i: b"once %d" % i for i in range(100)}}
