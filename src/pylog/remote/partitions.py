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
each call opens its own (what a Spark task, which lives for one range, wants). Every
connection authenticates as its ``security`` says (:class:`ClientSecurity`: TLS, SASL;
PLAINTEXT when not given).
"""

from __future__ import annotations

from contextlib import contextmanager

from pylog.errors import (
    ErrorCode,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from pylog.protocol.api_keys import ApiKey
from pylog.protocol.client import ProtocolClient, ProtocolError
from pylog.record import decode_arrow, scan_batches, slice_offsets
from pylog.record.batch_layout import SEQUENCE_SPACE

from .security import PLAINTEXT, ClientSecurity

__all__ = ["RemoteTopics", "RemotePartition", "RemoteProducer", "RemoteTransaction", "leaders"]

FETCH_BYTES = 8 << 20


def _first(bootstrap: str) -> str:
    return bootstrap.split(",")[0].strip()


def _cluster(bootstrap: str, topics: list[str] | None, client_id: str, security: ClientSecurity):
    """(topic -> partition count, (topic, partition) -> "host:port" of its leader,
    the internal topics) from one Metadata request."""
    with security.connect(_first(bootstrap), client_id) as client:
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


def leaders(bootstrap: str, topics: list[str] | None, client_id: str = "pylog",
            security: ClientSecurity = PLAINTEXT) -> tuple[dict[str, int], dict[tuple[str, int], str]]:
    """(topic -> partition count, (topic, partition) -> "host:port" of its leader)."""
    counts, where, _ = _cluster(bootstrap, topics, client_id, security)
    return counts, where


class RemoteTopics:
    """What planning needs of a cluster: ``topics()`` and ``partition(topic, p)``."""

    def __init__(self, bootstrap: str, client_id: str = "pylog",
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.security = security
        self.paths = [bootstrap]              # for messages ("... does not exist in <where>")
        self._counts, self._leaders, self.internal = _cluster(bootstrap, None, client_id, security)
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
        return RemotePartition(topic, partition, leader, self.client_id, self._pool, self.security)


class RemotePartition:
    """One partition on a broker. ``directory`` is its leader's address (a Spark task's
    OffsetRange carries it, as it carries a partition dir in path mode)."""

    def __init__(self, topic: str, partition: int, leader: str, client_id: str = "pylog",
                 pool: dict[str, ProtocolClient] | None = None,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = leader
        self.client_id = client_id
        self.security = security
        self._pool = pool

    @contextmanager
    def _client(self):
        if self._pool is None:
            with self.security.connect(self.directory, self.client_id) as client:
                yield client
            return
        client = self._pool.get(self.directory)
        if client is None:
            client = self._pool[self.directory] = self.security.connect(self.directory,
                                                                        self.client_id)
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
                if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
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
    written, and the error is raised for a record too large on its own.

    With ``transactional_id`` it is Kafka's transactional producer (``init_transactions``,
    ``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
    ``abort_transaction``; :class:`RemoteTransaction`): each batch sent joins the open
    transaction, stamped with the producer's id, epoch and sequence."""

    def __init__(self, leaders: dict[tuple[str, int], str], client_id: str = "pylog",
                 acks: int = -1, *, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000, bootstrap: str | None = None,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.leaders = leaders
        self.client_id = client_id
        self.acks = acks
        self.security = security
        self.clients: dict[str, ProtocolClient] = {}
        # Transactions (Kafka's producer API names): see RemoteTransaction.
        self.txn = None if transactional_id is None else RemoteTransaction(
            self, transactional_id, transaction_timeout_ms,
            bootstrap or next(iter(leaders.values()), None))

    def client(self, address: str) -> ProtocolClient:
        client = self.clients.get(address)
        if client is None:
            client = self.clients[address] = self.security.connect(address, self.client_id)
        return client

    # Kafka's transactional producer API, when made with a transactional_id.

    def init_transactions(self) -> None:
        self._transactional("init_transactions").init()

    def begin_transaction(self) -> None:
        self._transactional("begin_transaction").begin()

    def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        self._transactional("send_offsets_to_transaction").send_offsets(offsets, group_id)

    def commit_transaction(self) -> None:
        self._transactional("commit_transaction").end(True)

    def abort_transaction(self) -> None:
        self._transactional("abort_transaction").end(False)

    def _transactional(self, what: str) -> RemoteTransaction:
        if self.txn is None:
            raise InvalidTxnStateError(f"{what}(): this producer has no transactional_id")
        return self.txn

    def send(self, topic: str, partition: int, data: bytes, records: int) -> None:
        leader = self.leaders.get((topic, partition))
        if leader is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no leader")
        client = self.client(leader)
        tid = None
        if self.txn is not None:
            data = self.txn.stamp(topic, partition, data, records)
            tid = self.txn.transactional_id
        response = client.produce(topic, partition, data, acks=self.acks, transactional_id=tid)
        if response is not None and response.error_code == ErrorCode.MESSAGE_TOO_LARGE and records > 1:
            self._send_split(topic, partition, data)
            return
        if response is not None and response.error_code:
            raise ProtocolError(response.error_code,
                                f"Produce of {records} records to {topic}-{partition} at {leader}")
        if tid is not None:
            self.txn.sent(topic, partition, records)

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


#: Kafka's retriable answers of a transaction coordinator: ask again after a pause.
_COORDINATOR_RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS}


class RemoteTransaction:
    """A RemoteProducer's transactions over Kafka's wire protocol (against ``pylog
    serve`` or Kafka): FindCoordinator (type 1), InitProducerId with the transactional
    id, AddPartitionsToTxn before a partition's first batch of a transaction (v3, the
    client form), Produce with the transactional id (each batch stamped with the
    producer id, epoch, its partition's sequence and the transactional attribute),
    AddOffsetsToTxn and TxnOffsetCommit, EndTxn (v5, transactions v2: the producer goes
    on with the producer id and epoch it answers). Errors raise ProtocolError with Kafka's
    code (PRODUCER_FENCED: another producer took the id)."""

    def __init__(self, producer: RemoteProducer, transactional_id: str, timeout_ms: int,
                 bootstrap: str | None) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        if bootstrap is None:
            raise ValueError("a transactional RemoteProducer needs bootstrap (or leaders)")
        self.producer = producer
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.bootstrap = _first(bootstrap)
        self.producer_id = self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}
        self.partitions: set[tuple[str, int]] | None = None     # None: no transaction open

    def _coordinator(self, key: str, key_type: int) -> ProtocolClient:
        from pylog.protocol import messages as m
        client = self.producer.client(self.bootstrap)
        resp = client.request(ApiKey.FIND_COORDINATOR, m.FindCoordinatorRequest(
            key=key, key_type=key_type, coordinator_keys=[key]))
        if client.version(ApiKey.FIND_COORDINATOR) >= 4:
            resp = resp.coordinators[0]
        if resp.error_code:
            raise ProtocolError(resp.error_code, f"FindCoordinator for {key!r}")
        return self.producer.client(f"{resp.host}:{resp.port}")

    def _call(self, key: str, key_type: int, api_key: int, request, error_of, what: str,
              version: int | None = None):
        """One coordinator request, asked again (for up to 30 s) while the answer is
        retriable; raises ProtocolError for any other error."""
        import time
        deadline = time.monotonic() + 30
        while True:
            client = self._coordinator(key, key_type)
            resp = client.request(api_key, request,
                                  None if version is None else min(version, client.version(api_key)))
            code = error_of(resp)
            if not code:
                return resp
            if code not in _COORDINATOR_RETRY or time.monotonic() > deadline:
                raise ProtocolError(code, f"{what} of transactional id {self.transactional_id!r}")
            time.sleep(0.05)

    def init(self) -> None:
        from pylog.protocol import messages as m
        resp = self._call(self.transactional_id, 1, 22, m.InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch),
            lambda r: r.error_code, "InitProducerId")
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self.sequences = {}
        self.partitions = None

    def _ready(self, what: str) -> None:
        if self.producer_id < 0:
            raise InvalidTxnStateError(f"{what}: call init_transactions() first")

    def begin(self) -> None:
        self._ready("begin_transaction()")
        if self.partitions is not None:
            raise InvalidTxnStateError("begin_transaction(): a transaction is already open")
        self.partitions = set()

    def stamp(self, topic: str, partition: int, data: bytes, records: int) -> bytes:
        """The batch as this producer's transactional batch, its partition added to the
        transaction first."""
        from pylog.protocol import messages as m
        from pylog.record import with_header_fields
        if self.partitions is None:
            raise InvalidTxnStateError(
                f"transactional producer {self.transactional_id!r}: a send outside a "
                f"transaction (call begin_transaction() first)")
        tp = (topic, partition)
        if tp not in self.partitions:
            def errors(resp):
                return next((p.partition_error_code for t in resp.results_by_topic_v3_and_below
                             for p in t.results_by_partition if p.partition_error_code), 0)
            self._call(self.transactional_id, 1, 24, m.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=[m.AddPartitionsToTxnRequestAddPartitionsToTxnTopic(
                    name=topic, partitions=[partition])]), errors,
                f"AddPartitionsToTxn {topic}-{partition}", version=3)   # v4+: brokers' batched form
            self.partitions.add(tp)
        sequence = self.sequences.get(tp, 0)      # moved on by sent(), once written
        return with_header_fields(data, producer_id=self.producer_id,
                                  producer_epoch=self.producer_epoch, base_sequence=sequence,
                                  transactional=True)

    def sent(self, topic: str, partition: int, records: int) -> None:
        """A stamped batch was written: the partition's next sequence follows it."""
        tp = (topic, partition)
        self.sequences[tp] = (self.sequences.get(tp, 0) + records) % SEQUENCE_SPACE

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        from pylog.protocol import messages as m
        if self.partitions is None:
            raise InvalidTxnStateError("send_offsets_to_transaction(): no transaction is open")
        self._call(self.transactional_id, 1, 25, m.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, group_id=group_id),
            lambda r: r.error_code, "AddOffsetsToTxn")
        by_topic: dict[str, list] = {}
        for (t, p), offset in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                m.TxnOffsetCommitRequestTxnOffsetCommitRequestPartition(
                    partition_index=p, committed_offset=int(offset)))
        self._call(group_id, 0, 28, m.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group_id,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            topics=[m.TxnOffsetCommitRequestTxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()]),
            lambda r: next((p.error_code for t in r.topics for p in t.partitions if p.error_code), 0),
            "TxnOffsetCommit")

    def end(self, committed: bool) -> None:
        from pylog.protocol import messages as m
        what = "commit_transaction()" if committed else "abort_transaction()"
        self._ready(what)
        if self.partitions is None:
            raise InvalidTxnStateError(f"{what}: no transaction is open")
        if self.partitions or committed:
            resp = self._call(self.transactional_id, 1, 26, m.EndTxnRequest(
                transactional_id=self.transactional_id, producer_id=self.producer_id,
                producer_epoch=self.producer_epoch, committed=committed),
                lambda r: r.error_code, "EndTxn")
            if resp.producer_id >= 0 and resp.producer_epoch >= 0 and \
                    (resp.producer_id, resp.producer_epoch) != (self.producer_id, self.producer_epoch):
                # EndTxn v5 (transactions v2) bumped the epoch: a new epoch's sequences
                # start at 0.
                self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                self.sequences = {}
        self.partitions = None
