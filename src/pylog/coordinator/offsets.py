"""Committed consumer offsets in ``__consumer_offsets``, in Kafka's record schemas
(docs/FORMAT.md, section 11).

Each commit of one ``(group, topic, partition)`` is one record of the
internal compacted topic ``__consumer_offsets``, in the partition Kafka's
group coordinator would use (``abs(javaHashCode(group)) %
offsets.topic.num.partitions``):

- key, ``OffsetCommitKey`` version 1: ``int16 version=1 | string group |
  string topic | int32 partition``;
- value, ``OffsetCommitValue`` version 3: ``int16 version=3 | int64 offset |
  int32 leaderEpoch | string metadata | int64 commitTimestamp``;
- a null value (tombstone) deletes the offset.

``string`` is an int16 length then UTF-8 bytes (Kafka's non-flexible
STRING). Values of versions 0-4 are read; keys of version 2 (group metadata)
are skipped. The store is loaded into memory when the LogManager opens and
kept in step with every commit; :func:`read_committed_offsets` loads the same
from the files alone, read-only (beside a running owner, or offline).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from pylog.errors import CorruptRecordError, UnknownTopicOrPartitionError
from pylog.storage import OFFSETS_TOPIC, LogDirsReader

__all__ = ["OffsetAndMetadata", "encode_offset_key", "decode_offset_key", "encode_offset_value",
           "decode_offset_value", "partition_for_group", "java_string_hash", "OffsetStore",
           "read_committed_offsets"]

KEY_VERSION = 1          # 0 and 1: OffsetCommitKey; 2: GroupMetadataKey
VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    commit_timestamp: int = -1


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit Kafka's int16 length")
    return struct.pack(">h", len(raw)) + raw


class _Reader:
    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: needs {n} bytes at position {self.pos}, "
                                     f"has {len(self.data) - self.pos}", position=self.pos)
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptRecordError(f"{self.what}: varint too long at {self.pos}")

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            return ""        # null string
        return self.take(n).decode("utf-8")

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        return "" if n < 0 else self.take(n).decode("utf-8")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def decode_offset_key(data: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset-commit key; None for other key types."""
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    if version not in (0, 1):
        return None
    return r.string(), r.string(), r.int32()


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return (struct.pack(">hqi", VALUE_VERSION, value.offset, value.leader_epoch)
            + _string(value.metadata) + struct.pack(">q", value.commit_timestamp))


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = _Reader(data, "__consumer_offsets value")
    version = r.int16()
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"__consumer_offsets value has unknown version {version}")
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.compact_string() if version >= 4 else r.string()
    timestamp = r.int64()
    if version == 1:
        r.int64()            # expireTimestamp
    if version >= 4:
        r.skip_tagged_fields()
    return OffsetAndMetadata(offset, metadata, epoch, timestamp)


class OffsetStore:
    """Committed offsets in memory: group -> {(topic, partition): OffsetAndMetadata}.

    Thread-safe. The LogManager appends to ``__consumer_offsets`` first and
    then calls :meth:`put`, so memory never holds a commit the log lacks.
    """

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self._lock = threading.Lock()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replays one record of ``__consumer_offsets`` (loading)."""
        if key is None:
            return
        parsed = decode_offset_key(key)
        if parsed is None:
            return
        group, topic, partition = parsed
        if value is None:
            self.remove(group, [(topic, partition)])
        else:
            self.put(group, {(topic, partition): decode_offset_value(value)})

    def put(self, group: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
        with self._lock:
            self._groups.setdefault(group, {}).update(offsets)

    def remove(self, group: str, partitions) -> None:
        with self._lock:
            current = self._groups.get(group)
            if current is None:
                return
            for tp in partitions:
                current.pop(tp, None)
            if not current:
                del self._groups[group]

    def get(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        with self._lock:
            return self._groups.get(group, {}).get((topic, partition))

    def group(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        with self._lock:
            return dict(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def for_topic(self, topic: str) -> dict[str, list[tuple[str, int]]]:
        """group -> the partitions of `topic` it has offsets for."""
        with self._lock:
            found = {g: [tp for tp in offs if tp[0] == topic] for g, offs in self._groups.items()}
        return {g: tps for g, tps in found.items() if tps}


def read_committed_offsets(reader: LogDirsReader) -> OffsetStore:
    """Every group's committed offsets, from the files of ``__consumer_offsets`` in the
    dirs `reader` reads (no lock taken, nothing written): each partition's records
    replayed in offset order, control records skipped, as a store loads them when it
    opens. An offline tool's path (one Python call per record)."""
    store = OffsetStore()
    for p in range(reader.topics().get(OFFSETS_TOPIC, 0)):
        try:
            partition = reader.partition(OFFSETS_TOPIC, p)
        except UnknownTopicOrPartitionError:
            continue                    # no dir yet: nothing committed there
        for rows in partition.read_arrow(partition.log_start_offset(),
                                         partition.log_end_offset(), timestamp_type=False):
            for key, value in zip(rows.column("key").to_pylist(), rows.column("value").to_pylist()):
                store.apply(key, value)
    return store
