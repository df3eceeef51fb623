"""Remote mode: ``kafka.bootstrap.servers`` instead of ``path``.

The same source and sink over Kafka's wire protocol (pylog's own ProtocolClient), so
a job reads and writes a ``pylog serve`` broker or a Kafka cluster without Spark's JVM
connector. :class:`RemoteTopics` and :class:`RemotePartition` answer what planning and
the tasks ask of :class:`pylog.storage.LogDirsReader` (topics, log start and end offsets,
offsets for times, Arrow batches of a range), so everything above them is shared.

Each request goes to the partition's leader (from Metadata). Fetches return raw
batches that the C decoder turns into Arrow; a task's next offset comes from the batch
headers (``scan_batches``), so control batches never stall it. Writes are produced by
the tasks with ``acks=all``: at least once, as Spark's Kafka sink.
"""

from __future__ import annotations

from pylog.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from pylog.protocol.client import ProtocolClient, ProtocolError
from pylog.record import decode_arrow, scan_batches, slice_offsets

__all__ = ["RemoteTopics", "RemotePartition", "RemoteProducer", "leaders"]

FETCH_BYTES = 8 << 20
_OFFSET_OUT_OF_RANGE = 1
_UNKNOWN_TOPIC_OR_PARTITION = 3


def _first(bootstrap: str) -> str:
    return bootstrap.split(",")[0].strip()


def leaders(bootstrap: str, topics: list[str] | None) -> tuple[dict[str, int], dict[tuple[str, int], str]]:
    """(topic -> partition count, (topic, partition) -> "host:port" of its leader)."""
    with ProtocolClient(_first(bootstrap), client_id="pylog-spark") as client:
        meta = client.metadata(topics)
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
    counts, where = {}, {}
    for t in meta.topics:
        if t.error_code:
            continue
        counts[t.name] = len(t.partitions)
        for p in t.partitions:
            where[(t.name, p.partition_index)] = brokers.get(p.leader_id, _first(bootstrap))
    return counts, where


class RemoteTopics:
    """What planning needs of a cluster: ``topics()`` and ``partition(topic, p)``."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.paths = [bootstrap]              # for messages ("... does not exist in <where>")
        self._counts, self._leaders = leaders(bootstrap, None)

    def topics(self) -> dict[str, int]:
        return dict(self._counts)

    def partition(self, topic: str, partition: int) -> RemotePartition:
        leader = self._leaders.get((topic, partition))
        if leader is None:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {partition} at {self.bootstrap}")
        return RemotePartition(topic, partition, leader)


class RemotePartition:
    """One partition on a broker. ``directory`` is its leader's address (the task's
    OffsetRange carries it, as it carries a partition dir in path mode)."""

    def __init__(self, topic: str, partition: int, leader: str) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = leader

    def _list(self, timestamp: int) -> int:
        with ProtocolClient(self.directory, client_id="pylog-spark") as client:
            return client.list_offset(self.topic, self.partition, timestamp)

    def log_start_offset(self) -> int:
        return self._list(-2)

    def log_end_offset(self) -> int:
        return self._list(-1)

    def segment_bases(self) -> list[int]:
        return []                             # not visible remotely: tasks split at midpoints

    def offset_for_timestamp(self, timestamp: int, start: int | None = None) -> int | None:
        offset = self._list(timestamp)
        if offset < 0:
            return None
        return offset if start is None else max(offset, start)

    def read_arrow(self, start: int, end: int, max_bytes: int = FETCH_BYTES,
                   timestamp_type: bool = True):
        """Decoder batches of [start, end), fetched from the leader."""
        offset = start
        with ProtocolClient(self.directory, client_id="pylog-spark") as client:
            while offset < end:
                part = client.fetch(self.topic, self.partition, offset, max_bytes=max_bytes,
                                    max_wait_ms=500)
                if part.error_code == _OFFSET_OUT_OF_RANGE:
                    raise OffsetOutOfRangeError(
                        f"{self.topic}-{self.partition}: offset {offset} is out of range at "
                        f"{self.directory} (log start {part.log_start_offset}, high watermark "
                        f"{part.high_watermark})", offset=offset,
                        log_start_offset=part.log_start_offset)
                if part.error_code:
                    raise ProtocolError(part.error_code,
                                        f"Fetch {self.topic}-{self.partition} at {offset}")
                records = part.records or b""
                scanned = scan_batches(records)
                if scanned.batches == 0:
                    if part.high_watermark <= offset:
                        raise OffsetOutOfRangeError(
                            f"{self.topic}-{self.partition}: offsets up to {end - 1} were asked "
                            f"for but the log ends at {part.high_watermark}", offset=offset)
                    continue                  # nothing yet (or a batch larger than max_bytes)
                rows = decode_arrow(memoryview(records)[:scanned.valid_bytes],
                                    timestamp_type=timestamp_type)
                if rows.num_rows:
                    yield slice_offsets(rows, offset, end)
                offset = scanned.last_offset + 1


class RemoteProducer:
    """A task's producer: one connection per leader, ``acks=all``, raises on an error code."""

    def __init__(self, leaders: dict[tuple[str, int], str]) -> None:
        self.leaders = leaders
        self.clients: dict[str, ProtocolClient] = {}

    def send(self, topic: str, partition: int, data: bytes, records: int) -> None:
        leader = self.leaders.get((topic, partition))
        if leader is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no leader")
        client = self.clients.get(leader)
        if client is None:
            client = self.clients[leader] = ProtocolClient(leader, client_id="pylog-spark")
        response = client.produce(topic, partition, data, acks=-1)
        if response.error_code:
            raise ProtocolError(response.error_code,
                                f"Produce of {records} records to {topic}-{partition} at {leader}")

    def __enter__(self) -> RemoteProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients.values():
            client.close()
