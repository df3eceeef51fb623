"""Partitions at a broker: the read-only questions of :class:`pylog.storage.LogDirsReader`
answered over Kafka's wire protocol (pylog's own ProtocolClient), and a producer of
pre-encoded batches.

:class:`RemoteTopics` and :class:`RemotePartition` answer what the Spark source's planning
and tasks and the CLI's ``--bootstrap-server`` forms ask of log dirs (topics, log start
and end offsets, offsets for times, Arrow batches of a range), so everything above them
is shared between a ``pylog serve`` broker or a Kafka cluster and local log dirs.

Each request goes to the partition's leader (from Metadata). Fetches return raw
batches that the C decoder turns into Arrow; the next offset comes from the batch
headers (``scan_batches``), so control batches never stall a reader. Inside
``with RemoteTopics(...)`` the partitions share one connection per leader; outside it,
each call opens its own (what a Spark task, which lives for one range, wants).
"""

from __future__ import annotations

from contextlib import contextmanager

from pylog.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from pylog.protocol.client import ProtocolClient, ProtocolError
from pylog.record import decode_arrow, scan_batches, slice_offsets

__all__ = ["RemoteTopics", "RemotePartition", "RemoteProducer", "leaders"]

FETCH_BYTES = 8 << 20
_OFFSET_OUT_OF_RANGE = 1
_UNKNOWN_TOPIC_OR_PARTITION = 3
_MESSAGE_TOO_LARGE = 10


def _first(bootstrap: str) -> str:
    return bootstrap.split(",")[0].strip()


def _cluster(bootstrap: str, topics: list[str] | None, client_id: str):
    """(topic -> partition count, (topic, partition) -> "host:port" of its leader,
    the internal topics) from one Metadata request."""
    with ProtocolClient(_first(bootstrap), client_id=client_id) as client:
        meta = client.metadata(topics)
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
    counts, where, internal = {}, {}, set()
    for t in meta.topics:
        if t.error_code:
            continue
        counts[t.name] = len(t.partitions)
        if t.is_internal:
            internal.add(t.name)
        for p in t.partitions:
            where[(t.name, p.partition_index)] = brokers.get(p.leader_id, _first(bootstrap))
    return counts, where, internal


def leaders(bootstrap: str, topics: list[str] | None, client_id: str = "pylog"
            ) -> tuple[dict[str, int], dict[tuple[str, int], str]]:
    """(topic -> partition count, (topic, partition) -> "host:port" of its leader)."""
    counts, where, _ = _cluster(bootstrap, topics, client_id)
    return counts, where


class RemoteTopics:
    """What planning needs of a cluster: ``topics()`` and ``partition(topic, p)``."""

    def __init__(self, bootstrap: str, client_id: str = "pylog") -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.paths = [bootstrap]              # for messages ("... does not exist in <where>")
        self._counts, self._leaders, self.internal = _cluster(bootstrap, None, client_id)
        self._pool: dict[str, ProtocolClient] | None = None   # leader -> client, inside `with`

    def __enter__(self) -> RemoteTopics:
        self._pool = {}
        return self

    def __exit__(self, *exc: object) -> None:
        pool, self._pool = self._pool or {}, None
        for client in pool.values():
            client.close()

    def topics(self) -> dict[str, int]:
        return dict(self._counts)

    def partition(self, topic: str, partition: int) -> RemotePartition:
        leader = self._leaders.get((topic, partition))
        if leader is None:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {partition} at {self.bootstrap}")
        return RemotePartition(topic, partition, leader, self.client_id, self._pool)


class RemotePartition:
    """One partition on a broker. ``directory`` is its leader's address (a Spark task's
    OffsetRange carries it, as it carries a partition dir in path mode)."""

    def __init__(self, topic: str, partition: int, leader: str, client_id: str = "pylog",
                 pool: dict[str, ProtocolClient] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = leader
        self.client_id = client_id
        self._pool = pool

    @contextmanager
    def _client(self):
        if self._pool is None:
            with ProtocolClient(self.directory, client_id=self.client_id) as client:
                yield client
            return
        client = self._pool.get(self.directory)
        if client is None:
            client = self._pool[self.directory] = ProtocolClient(self.directory,
                                                                 client_id=self.client_id)
        yield client

    def _list(self, timestamp: int) -> int:
        with self._client() as client:
            return client.list_offset(self.topic, self.partition, timestamp)

    def log_start_offset(self) -> int:
        return self._list(-2)

    def log_end_offset(self) -> int:
        return self._list(-1)

    def last_stable_offset(self) -> int:
        """The end a read_committed reader reads to (ListOffsets latest, read_committed)."""
        with self._client() as client:
            return client.list_offset(self.topic, self.partition, -1, isolation_level=1)

    def segment_bases(self) -> list[int]:
        return []                             # not visible remotely: tasks split at midpoints

    def offset_for_timestamp(self, timestamp: int, start: int | None = None) -> int | None:
        offset = self._list(timestamp)
        if offset < 0:
            return None
        return offset if start is None else max(offset, start)

    def read_arrow(self, start: int, end: int, max_bytes: int = FETCH_BYTES,
                   timestamp_type: bool = True, isolation_level: str = "read_uncommitted"):
        """Decoder batches of [start, end), fetched from the leader. read_committed
        fetches below the last stable offset and skips aborted transactions' records
        (the response's aborted_transactions, in C)."""
        committed = isolation_level == "read_committed"
        offset = start
        with self._client() as client:
            while offset < end:
                part = client.fetch(self.topic, self.partition, offset, max_bytes=max_bytes,
                                    max_wait_ms=500, isolation_level=int(committed))
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
                                    timestamp_type=timestamp_type,
                                    aborted_transactions=part.aborted_transactions
                                    if committed else None)
                if rows.num_rows:
                    yield slice_offsets(rows, offset, end)
                offset = scanned.last_offset + 1


class RemoteProducer:
    """Produces pre-encoded batches: one connection per leader, ``acks=all`` by default
    (at least once, as Spark's Kafka sink), raises on an error code. A batch the broker
    refuses as too large (MESSAGE_TOO_LARGE) is split and its halves sent, as Kafka's
    producer splits one (RecordAccumulator.splitAndReenqueue): the other records are
    written, and the error is raised for a record too large on its own."""

    def __init__(self, leaders: dict[tuple[str, int], str], client_id: str = "pylog",
                 acks: int = -1) -> None:
        self.leaders = leaders
        self.client_id = client_id
        self.acks = acks
        self.clients: dict[str, ProtocolClient] = {}

    def send(self, topic: str, partition: int, data: bytes, records: int) -> None:
        leader = self.leaders.get((topic, partition))
        if leader is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no leader")
        client = self.clients.get(leader)
        if client is None:
            client = self.clients[leader] = ProtocolClient(leader, client_id=self.client_id)
        response = client.produce(topic, partition, data, acks=self.acks)
        if response is not None and response.error_code == _MESSAGE_TOO_LARGE and records > 1:
            self._send_split(topic, partition, data)
            return
        if response is not None and response.error_code:
            raise ProtocolError(response.error_code,
                                f"Produce of {records} records to {topic}-{partition} at {leader}")

    def _send_split(self, topic: str, partition: int, data: bytes) -> None:
        """Sends the records of a refused batch again in two batches (each split again
        while refused); raises the first error of a piece once every piece was sent."""
        from pylog.record import encode_batch, iter_batches
        rows = [(r, batch) for batch in iter_batches(data) for r in batch.records()]
        half = len(rows) // 2
        failed = None
        for piece in (rows[:half], rows[half:]):
            batch = piece[0][1]
            encoded = encode_batch(
                [r.value for r, _ in piece], [r.key for r, _ in piece],
                [r.timestamp for r, _ in piece], [list(r.headers) for r, _ in piece],
                compression=batch.compression, timestamp_type=batch.timestamp_type)
            try:
                self.send(topic, partition, encoded, len(piece))
            except ProtocolError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def __enter__(self) -> RemoteProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients.values():
            client.close()
