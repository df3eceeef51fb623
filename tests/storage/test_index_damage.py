"""Index entries that lie, after a clean shutdown (issue 42, item 9).

The cheap checks at open (file size, increasing entries, the last offset entry
naming its batch, the time index's last entry) cannot see every entry. An entry
in the middle of an offset index that does not name the batch starting at its
position is found where a read or a timestamp lookup meets it: the Log rebuilds
the segment's indexes from its .log (a WARNING naming the file and the entry)
and answers from the rebuilt index, never CorruptRecordError on intact records,
never skipping a batch. ``pylog recover --force`` rebuilds every index. Real
files, byte edits, a real reopen.
"""

import logging
import os
import struct

import pytest
from log_support import all_records, read_file

from pylog import records
from pylog.record import iter_batches
from pylog.storage import LogDirsReader, LogManager
from pylog.storage.log import Log

# Every Log test runs with buffered and with O_DIRECT appends (pylog.io.direct).
pytestmark = pytest.mark.usefixtures("io_mode")

T0 = 1_000_000
# Batches of ~270 bytes and an entry every second batch: entries sit at batch starts
# with a whole batch between two of them.
CONFIG = {"segment.bytes": 5500, "index.interval.bytes": 400}
VALUES = [b"v%03d-" % i + b"x" * 30 for i in range(300)]
ENTRY = struct.Struct(">ii")


def fill(log):
    for i in range(0, 300, 5):
        log.append(records.encode_batch(VALUES[i:i + 5],
                                        timestamps=[T0 + j for j in range(i, i + 5)]))


def files_of(directory, suffix):
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(suffix))


def batch_starts(log_path):
    """Byte position -> (base offset, last offset) of every batch of a .log."""
    out, position = {}, 0
    for b in iter_batches(read_file(log_path)):
        out[position] = (b.base_offset, b.last_offset)
        position += b.size_in_bytes
    return out


def used_entries(index_path):
    raw = read_file(index_path)
    entries = [ENTRY.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % 8, 8)]
    return entries[:entries.index((0, 0))] if (0, 0) in entries else entries


def move_entry(index_path, how):
    """Rewrites one entry in the middle of `index_path` so that it no longer names the
    batch at its position, keeping offsets and positions increasing (what the checks
    at open accept). Returns the edited entry (relative offset, new position)."""
    log_path = index_path[:-len(".index")] + ".log"
    starts = sorted(batch_starts(log_path))
    entries = used_entries(index_path)
    assert len(entries) >= 4, entries
    i = len(entries) // 2
    rel, position = entries[i]
    if how == "+3":
        position += 3
    elif how == "-3":
        position -= 3
    else:       # "next batch": the start of the batch after the one it names, before entry i+1
        position = starts[starts.index(position) + 1]
        assert position < entries[i + 1][1]
    with open(index_path, "r+b") as f:
        f.seek(8 * i)
        f.write(ENTRY.pack(rel, position))
    return rel, position


def every_offset_reads_its_record(log):
    for offset in range(300):
        got = [r for r in log.read(offset, 1).records() if r.offset >= offset]
        assert got and got[0].offset == offset and got[0].value == VALUES[offset], offset
    assert [r.value for r in all_records(log)] == VALUES


@pytest.mark.parametrize("how", ["+3", "-3", "next batch"])
@pytest.mark.parametrize("which", ["inactive", "active"])
def test_a_moved_entry_is_rebuilt_where_a_read_meets_it(log_dir, caplog, how, which):
    """Today: CorruptRecordError on intact records (+3, -3), or a batch skipped in silence
    (next batch), after a clean shutdown; the index is never repaired."""
    with Log(log_dir, CONFIG) as log:
        fill(log)
        assert len(log.segments) == 3
    index = files_of(log_dir, ".index")[1 if which == "inactive" else -1]
    original = used_entries(index)
    move_entry(index, how)
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        with Log(log_dir, CONFIG) as log:
            assert log.recovery.indexes_rebuilt == 0          # not visible to the checks at open
            every_offset_reads_its_record(log)
            assert used_entries(index) == original            # rebuilt from the .log
    assert os.path.basename(index) in caplog.text
    assert caplog.text.count("does not start the batch") == 1         # rebuilt once
    assert "rebuilt the indexes of segment" in caplog.text


@pytest.mark.parametrize("how", ["+3", "-3"])
def test_offset_for_timestamp_meets_a_moved_entry(log_dir, how):
    with Log(log_dir, CONFIG) as log:
        fill(log)
    index = files_of(log_dir, ".index")[1]
    move_entry(index, how)
    with Log(log_dir, CONFIG) as log:
        for offset in range(0, 300, 5):
            found = log.offset_for_timestamp(T0 + offset)
            assert (found.timestamp, found.offset) == (T0 + offset, offset)


def test_a_read_only_reader_reads_past_a_moved_entry(tmp_path):
    """PartitionReader (Spark, dump tools) cannot rebuild: it walks the .log instead."""
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_topic("t", 1, CONFIG)
        fill(manager.log("t", 0))
    index = files_of(str(tmp_path / "t-0"), ".index")[1]
    original = read_file(index)
    for how in ("+3", "-3", "next batch"):
        with open(index, "wb") as f:
            f.write(original)
        move_entry(index, how)
        reader = LogDirsReader(str(tmp_path)).partition("t", 0)
        for start in range(100, 200, 5):             # every lookup in the damaged segment
            offsets = [o for rows in reader.read_arrow(start, start + 10)
                       for o in rows.column(0).to_pylist()]
            assert offsets == list(range(start, start + 10)), (how, start)


def test_recover_force_rebuilds_a_moved_offset_entry_and_a_moved_time_entry(tmp_path):
    """`pylog recover --force` on a cleanly shut down store used to leave both in place."""
    from pylog.cli import main
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_topic("t", 1, CONFIG)
        fill(manager.log("t", 0))
    directory = str(tmp_path / "t-0")
    index, time_index = files_of(directory, ".index")[1], files_of(directory, ".timeindex")[1]
    before = read_file(index), read_file(time_index)
    move_entry(index, "+3")
    raw = bytearray(before[1])
    ts, rel = struct.unpack_from(">qi", raw, 12)
    struct.pack_into(">qi", raw, 12, ts, rel + 3)          # names a later offset than it should
    with open(time_index, "wb") as f:
        f.write(raw)
    assert main(["recover", "--log-dirs", str(tmp_path), "--force"]) == 0
    assert (read_file(index), read_file(time_index)) == before


def test_a_lying_last_time_entry_is_rebuilt_at_open(log_dir, caplog):
    """The segment's max timestamp comes from its time index's last entry (retention,
    ListOffsets -3): one naming a later timestamp than its batch holds was trusted."""
    with Log(log_dir, CONFIG) as log:
        fill(log)
        true_max = log.segments[0].max_timestamp
    time_index = files_of(log_dir, ".timeindex")[0]
    raw = bytearray(read_file(time_index))
    ts, rel = struct.unpack_from(">qi", raw, len(raw) - 12)
    struct.pack_into(">qi", raw, len(raw) - 12, ts + 10**9, rel)      # still increasing
    with open(time_index, "wb") as f:
        f.write(raw)
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        with Log(log_dir, CONFIG) as log:
            assert log.recovery.indexes_rebuilt == 1
            assert log.segments[0].max_timestamp == true_max
            found = log.offset_for_timestamp(-3)                # MAX_TIMESTAMP
            assert (found.timestamp, found.offset) == (T0 + 299, 299)
    assert "does not match the batch holding offset" in caplog.text


def test_readers_and_a_writer_meet_a_lying_entry_of_the_active_segment_together(log_dir, caplog):
    """Four readers hit the lying entry while a writer appends to the same segment: every
    read is right, appends go on, and the index is rebuilt once (the others find the new
    index in place)."""
    import threading
    with Log(log_dir, {**CONFIG, "segment.bytes": 1 << 20}) as log:
        fill(log)
    move_entry(files_of(log_dir, ".index")[-1], "+3")
    errors = []
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        with Log(log_dir, {**CONFIG, "segment.bytes": 1 << 20}) as log:
            def reader(seed):
                try:
                    for offset in [(seed * 37 + i * 11) % 300 for i in range(150)]:
                        got = [r for r in log.read(offset, 1).records() if r.offset >= offset]
                        assert got[0].offset == offset and got[0].value == VALUES[offset]
                except BaseException as exc:       # noqa: BLE001 - reported below
                    errors.append(exc)
            threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
            for t in threads:
                t.start()
            for i in range(100):
                log.append(records.encode_batch([b"more %d" % i] * 5))
            for t in threads:
                t.join(60)
            assert not errors, errors[0]
            assert log.log_end_offset == 800
            assert [r.value for r in all_records(log)] == \
                VALUES + [b"more %d" % i for i in range(100) for _ in range(5)]
    assert caplog.text.count("rebuilt the indexes of segment") == 1
