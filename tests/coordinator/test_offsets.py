"""Committed offsets in __consumer_offsets: Kafka's key and value schemas byte
for byte, Kafka's group -> partition mapping, restart round trips, tombstones."""

import struct

import pytest

from pylog import records
from pylog.coordinator.offsets import (
    OffsetAndMetadata,
    decode_offset_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for_group,
    read_committed_offsets,
)
from pylog.errors import UnknownTopicOrPartitionError
from pylog.storage import LogDirsReader


def test_key_bytes_are_offset_commit_key_v1():
    """int16 version 1, then group, topic (int16 length + UTF-8) and int32 partition."""
    assert (b"\x00\x01" + b"\x00\x03etl" + b"\x00\x06clicks" + b"\x00\x00\x00\x07"
            == encode_offset_key("etl", "clicks", 7))
    assert ("etl", "clicks", 7) == decode_offset_key(encode_offset_key("etl", "clicks", 7))
    assert decode_offset_key(b"\x00\x02\x00\x03etl") is None         # group metadata key


def test_value_bytes_are_offset_commit_value_v3():
    """int16 version 3, int64 offset, int32 leaderEpoch, string metadata, int64 commitTimestamp."""
    value = OffsetAndMetadata(42, "m", -1, 1_700_000_000_000)
    expected = (b"\x00\x03" + struct.pack(">q", 42) + b"\xff\xff\xff\xff" + b"\x00\x01m"
                + struct.pack(">q", 1_700_000_000_000))
    assert expected == encode_offset_value(value)
    assert value == decode_offset_value(expected)


@pytest.mark.parametrize("raw, expected", [
    (b"\x00\x00" + struct.pack(">q", 5) + b"\x00\x02md" + struct.pack(">q", 9), OffsetAndMetadata(5, "md", -1, 9)),
    (b"\x00\x01" + struct.pack(">q", 5) + b"\x00\x00" + struct.pack(">qq", 9, 99), OffsetAndMetadata(5, "", -1, 9)),
    (b"\x00\x02" + struct.pack(">q", 5) + b"\xff\xff" + struct.pack(">q", 9), OffsetAndMetadata(5, "", -1, 9)),
    (b"\x00\x04" + struct.pack(">qi", 5, 3) + b"\x03ab" + struct.pack(">q", 9) + b"\x00",
     OffsetAndMetadata(5, "ab", 3, 9)),
])
def test_reads_every_value_version_kafka_wrote(raw, expected):
    """v0; v1 (expireTimestamp); v2; v4 (flexible: compact string, tagged fields)."""
    assert expected == decode_offset_value(raw)


def test_java_string_hash_and_partitioning():
    """Kafka's Utils.abs(group.hashCode()) % partitions, including Integer.MIN_VALUE."""
    assert 0 == java_string_hash("")
    assert 96354 == java_string_hash("abc")
    assert 99162322 == java_string_hash("hello")
    assert -(1 << 31) == java_string_hash("polygenelubricants")
    assert 0 == partition_for_group("polygenelubricants", 50)
    assert 96354 % 50 == partition_for_group("abc", 50)
    assert java_string_hash("\U0001F600") == (0xD83D * 31 + 0xDE00)     # UTF-16 surrogates


def test_commit_and_restart_round_trip(dirs, open_manager, clock):
    manager = open_manager(dirs, {"offsets.topic.num.partitions": 5})
    manager.create_topic("clicks", 3)
    manager.create_topic("views", 1)
    assert manager.committed("etl", "clicks", 0) is None
    manager.commit_offsets("etl", {("clicks", 0): 10, ("clicks", 1): 20})
    manager.commit_offsets("etl", {("clicks", 0): 15})
    manager.commit_offsets("audit", {("views", 0): OffsetAndMetadata(3, "note", 7)})
    assert 15 == manager.committed("etl", "clicks", 0)
    assert ["__consumer_offsets"] == [t for t in manager.list_topics(include_internal=True)
                                      if t.startswith("__")]
    assert ["clicks", "views"] == manager.list_topics()
    log = manager.log("__consumer_offsets", partition_for_group("etl", 5))
    got = [(r.key, r.value, r.timestamp) for r in log.read_records(0)]
    assert (encode_offset_key("etl", "clicks", 0),
            encode_offset_value(OffsetAndMetadata(10, "", -1, clock.now)), clock.now) == got[0]
    manager.close()
    again = open_manager(dirs, {"offsets.topic.num.partitions": 5})
    assert 15 == again.committed("etl", "clicks", 0)
    assert 20 == again.committed("etl", "clicks", 1)
    assert OffsetAndMetadata(3, "note", 7, clock.now) == again.committed_offsets("audit")[("views", 0)]
    assert ["audit", "etl"] == again.consumer_groups()
    assert 5 == len(again.describe_topic("__consumer_offsets").partitions)


def test_commit_errors(dirs, open_manager):
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.commit_offsets("g", {("t", 1): 0})
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.commit_offsets("g", {("nope", 0): 0})
    with pytest.raises(ValueError, match="non-empty"):
        manager.commit_offsets("", {("t", 0): 0})
    with pytest.raises(ValueError, match=">= 0"):
        manager.commit_offsets("g", {("t", 0): -1})
    assert manager.committed("g", "t", 0) is None


def test_deleting_a_topic_tombstones_its_offsets(dirs, open_manager):
    manager = open_manager(dirs[:1], {"offsets.topic.num.partitions": 1})
    manager.create_topic("a", 1)
    manager.create_topic("b", 1)
    manager.commit_offsets("g", {("a", 0): 1, ("b", 0): 2})
    manager.delete_topic("a")
    assert manager.committed("g", "a", 0) is None
    last = manager.log("__consumer_offsets", 0).read_records(2)
    assert [(encode_offset_key("g", "a", 0), None)] == [(r.key, r.value) for r in last]
    manager.close()
    again = open_manager(dirs[:1], {"offsets.topic.num.partitions": 1})
    assert again.committed("g", "a", 0) is None
    assert 2 == again.committed("g", "b", 0)


def test_read_committed_offsets_from_the_files_alone(dirs, open_manager):
    """What `pylog export-to-kafka --offsets-dir` reads: the committed offsets a store
    loads at open, from __consumer_offsets's files (a LogDirsReader), tombstones
    applied, beside the open store."""
    manager = open_manager(dirs[:2], {"offsets.topic.num.partitions": 5})
    manager.create_topic("a", 2)
    manager.create_topic("b", 1)
    for i in range(30):
        manager.commit_offsets(f"g{i % 7}", {("a", i % 2): i, ("b", 0): 100 + i})
    manager.commit_offsets("meta", {("b", 0): OffsetAndMetadata(9, "note", 4)})
    manager.delete_topic("a")
    read = read_committed_offsets(LogDirsReader(dirs[:2]))
    assert read.groups() == manager.consumer_groups() == ["g0", "g1", "g2", "g3", "g4", "g5",
                                                          "g6", "meta"]
    for group in read.groups():
        assert read.group(group) == manager.committed_offsets(group)
    assert list(read.group("g3")) == [("b", 0)] and read.get("g3", "b", 0).offset == 124
    assert read.get("meta", "b", 0).metadata == "note"


def test_reads_offsets_written_with_other_versions(dirs, open_manager):
    """Records as an older Kafka wrote them (key v0, value v1) and group metadata keys load fine."""
    manager = open_manager(dirs[:1], {"offsets.topic.num.partitions": 1})
    manager.create_topic("t", 1)
    manager.commit_offsets("g", {("t", 0): 1})
    key_v0 = b"\x00\x00" + encode_offset_key("g", "t", 0)[2:]
    value_v1 = b"\x00\x01" + struct.pack(">q", 77) + b"\x00\x00" + struct.pack(">qq", 5, 6)
    group_meta = b"\x00\x02\x00\x01g"
    manager.log("__consumer_offsets", 0).append(
        records.encode_batch([value_v1, b"\x00\x03junk"], keys=[key_v0, group_meta]))
    manager.close()
    again = open_manager(dirs[:1], {"offsets.topic.num.partitions": 1})
    assert 77 == again.committed("g", "t", 0)


def test_format_doc_worked_example_matches_the_encoder():
    """docs/FORMAT.md section 11's hex dump of a commit is what the encoder writes."""
    import os
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "FORMAT.md")) as f:
        doc = f.read()
    lines = {line.split(":", 1)[0]: bytes.fromhex(line.split(":", 1)[1].replace("|", ""))
             for line in doc.splitlines() if line.startswith(("key:   00", "value: 00"))}
    assert encode_offset_key("etl", "clicks", 7) == lines["key"]
    assert encode_offset_value(OffsetAndMetadata(42, "m", -1, 1_700_000_000_000)) == lines["value"]


def test_consumer_offsets_stay_bounded_and_survive_compaction(dirs, open_manager):
    """Many commits roll __consumer_offsets (a compacted topic); the log cleaner keeps
    the latest commit of each (group, topic, partition) and a restart reads the same
    state back."""
    config = {"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 4096}
    manager = open_manager(dirs, config)
    manager.create_topic("t", 4)
    for i in range(400):
        manager.commit_offsets("g", {("t", i % 4): i})
        manager.commit_offsets("h", {("t", 0): 1000 + i})
    offsets_log = manager.log("__consumer_offsets", 0)
    size_before = offsets_log.size
    assert len(offsets_log.segments) > 10
    stats = manager.clean_once()
    assert stats is not None and stats.records_kept <= 5 + 5   # at most one per key per section
    assert offsets_log.size < size_before / 5
    expected = {("t", p): 396 + p for p in range(4)}
    assert {tp: o.offset for tp, o in manager.committed_offsets("g").items()} == expected
    manager.close()
    again = open_manager(dirs, config)
    assert {tp: o.offset for tp, o in again.committed_offsets("g").items()} == expected
    assert again.committed("h", "t", 0) == 1399


def test_committed_offsets_never_go_backwards_across_a_cleaning(dirs, open_manager):
    """Commits go on while the cleaner compacts __consumer_offsets: the newest commit
    wins, before and after a restart (the cleaner keeps the latest offset of a key;
    it never rewrites values)."""
    import threading

    config = {"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 200}
    manager = open_manager(dirs[:1], config)
    manager.create_topic("t", 1)
    stop = threading.Event()

    def clean():
        while not stop.is_set():
            manager.clean_once()
    cleaner = threading.Thread(target=clean)
    cleaner.start()
    try:
        for i in range(300):
            manager.commit_offsets("g", {("t", 0): i})
    finally:
        stop.set()
        cleaner.join(30)
    manager.clean_once()
    assert manager.committed("g", "t", 0) == 299
    manager.close()
    again = open_manager(dirs[:1], config)
    assert again.committed("g", "t", 0) == 299
