"""Produce, Fetch, ListOffsets, InitProducerId, DeleteRecords: the APIs that move records
(InitProducerId with a transactional id, and the other transaction APIs: transactions.py).

Records are never decoded here. Produce hands each partition's bytes (a memoryview of
the request) to ``Log.append``, which validates them in C and assigns offsets. Fetch
puts each partition's ``FileSlice`` into the response as a file region: the connection
sends it with sendfile(2), so the records go from the page cache to the socket.
"""

from __future__ import annotations

import asyncio

from pylog.common.acl import CLUSTER_NAME, Operation
from pylog.coordinator.transactions import authorize_transactional_id
from pylog.errors import (
    ConcurrentTransactionsError,
    ErrorCode,
    KafkaError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from pylog.protocol import messages as m
from pylog.record import batch_layout as at
from pylog.compression import ZSTD
from pylog.storage import INTERNAL_TOPICS

from . import admin, fetch_sessions, transactions
from .authorizer import CLUSTER, TOPIC, TRANSACTIONAL_ID, allowed
from .errors import NONE, RequestError, error_code
from .leader_epochs import check_current_leader_epoch

__all__ = ["produce", "produce_may_block", "fetch", "FetchPlan", "list_offsets",
           "init_producer_id", "delete_records"]

#: A Produce request whose records take more bytes than this runs in the I/O pool:
#: its append copies and walks them all on the thread that runs it.
LOOP_PRODUCE_MAX_BYTES = 256 * 1024
#: An incremental fetch whose session holds more partitions than this is read in the
#: CPU pool, as a request of that many elements is (connection.LOOP_ELEMENTS).
LOOP_FETCH_PARTITIONS = 256
#: The smallest batch length field: a header with no records.
_MIN_LENGTH = at.RECORD_BATCH_OVERHEAD - at.LOG_OVERHEAD


def _int(records, pos: int, size: int) -> int:
    return int.from_bytes(records[pos:pos + size], "big", signed=True)


def _length(records, pos: int) -> int:
    """The length field of the batch at `pos` (the bytes after it)."""
    return _int(records, pos + at.LENGTH_OFFSET, 4)


def produce_may_block(req) -> bool:
    """Whether a Produce request must run off the event loop: acks=all (an fsync);
    a batch compressed, or a legacy (magic 0/1) message set, whose validation
    decompresses (a bounded but unknown amount: docs/FORMAT.md, section 10);
    or more than LOOP_PRODUCE_MAX_BYTES of records; a transactional one (the
    coordinator's verification). Reads batch headers only."""
    if req.acks == -1 or req.transactional_id is not None:
        return True             # (a transactional one may wait on the coordinator's lock)
    total = 0
    for topic in req.topic_data:
        for p in topic.partition_data:
            records = p.records
            if records is None:
                continue
            n = len(records)
            total += n
            pos = 0
            while pos + at.RECORD_BATCH_OVERHEAD <= n:   # every batch's magic and codec bits
                if records[pos + at.MAGIC_OFFSET] != 2 \
                        or records[pos + at.ATTRIBUTES_LOW_BYTE] & at.ATTR_COMPRESSION_MASK:
                    return True
                length = _length(records, pos)
                if length < _MIN_LENGTH:
                    break                       # malformed: refused at once, on the loop
                pos += at.LOG_OVERHEAD + length
    return total > LOOP_PRODUCE_MAX_BYTES

READ_COMMITTED = 1          # Fetch and ListOffsets isolation_level (Kafka's IsolationLevel)


def _check_records(records, version: int) -> tuple[int, str] | None:
    """Kafka's ProduceRequest.validateRecords (v3+): exactly one v2 batch; zstd needs v7.
    (v0-2 carry magic 0/1 message sets: Log.append validates and up-converts them.)"""
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE, "no records"
    if version < 3:
        return None
    if len(records) < at.RECORD_BATCH_OVERHEAD:
        return (ErrorCode.CORRUPT_MESSAGE,
                f"a record batch shorter than a v2 batch header ({at.RECORD_BATCH_OVERHEAD} bytes)")
    if records[at.MAGIC_OFFSET] != 2:
        return (ErrorCode.INVALID_RECORD,
                f"record batch magic {records[at.MAGIC_OFFSET]}: produce v3+ carries magic 2 only")
    if at.LOG_OVERHEAD + _length(records, 0) < len(records):
        return ErrorCode.INVALID_RECORD, "more than one record batch for a partition"
    if records[at.ATTRIBUTES_LOW_BYTE] & at.ATTR_COMPRESSION_MASK == ZSTD and version < 7:
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs produce version 7 or later"
    return None


def _check_transactional(records) -> tuple[int, str] | None:
    """Kafka's handleProduceRequest: transactional batches need the producer's
    transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without one). A header walk."""
    pos, size = 0, len(records)
    while pos + at.RECORD_BATCH_OVERHEAD <= size and records[pos + at.MAGIC_OFFSET] == 2:
        if records[pos + at.ATTRIBUTES_LOW_BYTE] & at.ATTR_TRANSACTIONAL:
            return (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "a transactional record batch needs the producer's transactional id")
        length = _length(records, pos)
        if length < _MIN_LENGTH:
            break
        pos += at.LOG_OVERHEAD + length
    return None


def _check_producer_ids(store, records) -> tuple[int, str] | None:
    """Every v2 batch's producer id must be one InitProducerId handed out: a client that
    names an id of its own would share it with the client the id is (or was) handed to.
    A header walk (one batch for produce v3+); lengths are checked again by Log.append."""
    pos, size = 0, len(records)
    # magic 0/1 carry no producer id
    while pos + at.RECORD_BATCH_OVERHEAD <= size and records[pos + at.MAGIC_OFFSET] == 2:
        pid = _int(records, pos + at.PRODUCER_ID_OFFSET, 8)
        if pid >= 0 and not store.producer_id_handed_out(pid):
            return (ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                    f"producer id {pid} was never handed out by this broker: an idempotent "
                    f"producer takes its id from InitProducerId")
        length = _length(records, pos)
        if length < _MIN_LENGTH:
            break
        pos += at.LOG_OVERHEAD + length
    return None


#: What a partition of a topic the principal may not use gets (Kafka's message).
TOPIC_DENIED = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
_TXN_DENIED = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.")


#: The first Produce version that names topics by id (KIP-516): an id no topic has is
#: UNKNOWN_TOPIC_ID in each of its partitions.
PRODUCE_BY_TOPIC_ID = 13

#: The first Produce version of transactions v2 (KIP-890 part 2): the partition joins
#: the transaction with its first batch, the producer sends no AddPartitionsToTxn.
PRODUCE_ADDS_PARTITIONS = 12


def _verify_transactional(broker, conn, transactional_id: str, log, topic: str, partition: int,
                          records, version: int):
    """KIP-890 part 1, on one node: the guard a transactional batch needs to open its
    producer's transaction in this partition, given once the coordinator says the
    partition is in that transaction, or (part 2, Produce v12+) once the coordinator
    added it (None: one is open here, later batches need none). Raises the
    coordinator's error as Kafka's produce path answers it: a fenced epoch is
    INVALID_PRODUCER_EPOCH, a transaction completing NOT_ENOUGH_REPLICAS (retriable)."""
    if not authorize_transactional_id(getattr(conn, "principal", None), transactional_id, "WRITE"):
        raise RequestError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           f"not authorized for transactional id {transactional_id!r}")
    if len(records) < at.RECORD_BATCH_OVERHEAD or records[at.MAGIC_OFFSET] != 2 \
            or not records[at.ATTRIBUTES_LOW_BYTE] & at.ATTR_TRANSACTIONAL:
        return None                 # not transactional: the log's producer state judges it
    pid = _int(records, at.PRODUCER_ID_OFFSET, 8)
    epoch = _int(records, at.PRODUCER_EPOCH_OFFSET, 2)
    guard = log.maybe_start_transaction_verification(pid)
    if guard is None:
        return None
    coordinator = broker.store.transactions
    try:
        if version >= PRODUCE_ADDS_PARTITIONS:
            coordinator.add_partitions(transactional_id, pid, epoch, [(topic, partition)], tv2=True)
        else:
            coordinator.verify_partition(transactional_id, pid, epoch, topic, partition)
    except ProducerFencedError as exc:
        raise RequestError(ErrorCode.INVALID_PRODUCER_EPOCH, str(exc)) from None
    except ConcurrentTransactionsError as exc:
        raise RequestError(ErrorCode.NOT_ENOUGH_REPLICAS, str(exc)) from None
    return guard


def produce(broker, conn, header, req):
    """Produce. With an authorizer (Kafka's order): WRITE on the transactional id, if the
    request names one, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition;
    WRITE on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions (whether the
    topic exists or not: its existence is not told)."""
    v = header.api_version
    store = broker.store
    acks = req.acks
    out = []
    to_flush = {}
    txn_denied = req.transactional_id is not None and not allowed(
        broker, conn, Operation.WRITE, TRANSACTIONAL_ID, req.transactional_id)
    ids = admin.topic_ids(broker) if v >= PRODUCE_BY_TOPIC_ID else None
    for topic in req.topic_data:
        parts = []
        # v13+: the topic's name from its id ("" for an id no topic has).
        name = topic.name if ids is None else ids.by_id.get(bytes(topic.topic_id), "")
        unknown_id = ids is not None and not name
        denied = not unknown_id and (
            txn_denied or not allowed(broker, conn, Operation.WRITE, TOPIC, name))
        for p in topic.partition_data:
            resp = m.ProduceResponsePartitionProduceResponse(
                index=p.index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
            problem = None
            if unknown_id:
                problem = ErrorCode.UNKNOWN_TOPIC_ID, "no topic has that topic id"
            elif denied:
                problem = _TXN_DENIED if txn_denied else TOPIC_DENIED
            elif acks not in (-1, 0, 1):
                problem = ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {acks}"
            elif name in INTERNAL_TOPICS:
                problem = ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot produce to internal topic {name}"
            else:
                problem = _check_records(p.records, v) or \
                    (None if req.transactional_id is not None else _check_transactional(p.records)) \
                    or _check_producer_ids(store, p.records)
            if problem is None:
                try:
                    log = store.log(name, p.index)
                    guard = None
                    if req.transactional_id is not None:
                        guard = _verify_transactional(broker, conn, req.transactional_id, log,
                                                      name, p.index, p.records, v)
                    info = log.append(p.records, verification_guard=guard)
                    resp.base_offset = info.first_offset
                    resp.log_append_time_ms = info.log_append_time
                    resp.log_start_offset = info.log_start_offset
                    broker.stats["bytes_in"] += info.size
                    broker.stats["records_in"] += info.records
                    if acks == -1 and not info.flushed:
                        to_flush[id(log)] = (log, info.last_offset + 1, resp)
                except Exception as exc:        # noqa: BLE001 - every error goes to the client
                    problem = error_code(exc)
            if problem is not None:
                resp.error_code, resp.error_message = problem
            parts.append(resp)
        out.append(m.ProduceResponseTopicProduceResponse(name=name, topic_id=topic.topic_id,
                                                         partition_responses=parts))
    # acks=all: pylog acknowledges what an fsync covers (as its in-process Producer does);
    # one flush per log serves every partition batch of this request.
    for log, end, resp in to_flush.values():
        try:
            log.flush(end)
        except Exception as exc:                # noqa: BLE001
            resp.error_code, resp.error_message = error_code(exc)
    if acks == 0:
        if any(r.error_code for t in out for r in t.partition_responses):
            conn.close()                        # acks=0: Kafka's only way to say "failed"
        return None
    return m.ProduceResponse(responses=out, throttle_time_ms=0)


class FetchPlan:
    """A fetch's partitions resolved to logs once; read again on each wake-up."""

    def __init__(self, broker, req, version: int, conn=None, quota_bytes: int | None = None) -> None:
        self.broker = broker
        self.req = req
        self.version = version
        self.quota_bytes = quota_bytes          # consumer_byte_rate's bound on one answer
        self.logs: dict[tuple[str, int], object] = {}
        for topic in req.topics:
            # One error for every partition of a topic that does not exist (not an
            # exception each: a hostile fetch names thousands); READ on the topic first.
            # (v13+ names topics by id: an id no topic has resolves to the name "", and is
            # UNKNOWN_TOPIC_ID before any authorization, as Kafka answers it.)
            exists = broker.store.partition_count(topic.topic) is not None
            if not exists and version >= 13:
                missing = RequestError(ErrorCode.UNKNOWN_TOPIC_ID, "no topic has that topic id")
            elif conn is not None and not allowed(broker, conn, Operation.READ, TOPIC, topic.topic):
                missing = RequestError(*TOPIC_DENIED)
            elif exists:
                missing = None
            else:
                missing = UnknownTopicOrPartitionError(f"topic {topic.topic!r} does not exist")
            for p in topic.partitions:
                if missing is not None:
                    self.logs[(topic.topic, p.partition)] = missing
                    continue
                try:
                    self.logs[(topic.topic, p.partition)] = broker.store.log(topic.topic, p.partition)
                except Exception as exc:        # noqa: BLE001 - answered per partition
                    # Without its traceback: frames kept per partition cost ~1 KB each.
                    self.logs[(topic.topic, p.partition)] = exc.with_traceback(None)

    def build(self):
        """(response, record bytes in it, any partition error). A read_committed fetch
        (v4+, isolation_level 1) reads below each log's last stable offset and answers
        the aborted transactions overlapping what it returns (Kafka's
        FetchIsolation.TXN_COMMITTED); read_uncommitted reads below the high watermark
        and answers null there, as Kafka does."""
        budget = min(self.req.max_bytes if self.version >= 3 else 1 << 31,
                     self.broker.server_config["fetch.max.bytes"], self.quota_bytes or 1 << 31)
        committed = self.version >= 4 and self.req.isolation_level == READ_COMMITTED
        total = 0
        failed = False
        topics = []
        for topic in self.req.topics:
            parts = []
            for p in topic.partitions:
                resp = m.FetchResponsePartitionData(partition_index=p.partition, high_watermark=-1,
                                                    last_stable_offset=-1, log_start_offset=-1,
                                                    aborted_transactions=[] if committed else None,
                                                    records=b"")
                log = self.logs[(topic.topic, p.partition)]
                try:
                    if isinstance(log, Exception):
                        raise log
                    if self.version >= 9:       # the consumer's view of the leader (KIP-320)
                        check_current_leader_epoch(log, p.current_leader_epoch)
                    hw = log.high_watermark
                    lso = log.last_stable_offset
                    resp.high_watermark, resp.last_stable_offset = hw, lso
                    resp.log_start_offset = log.log_start_offset
                    limit = min(p.partition_max_bytes, budget - total)
                    if limit > 0 or total == 0:
                        # Log.read returns whole batches and always at least one: the first
                        # partition with data may exceed the budget (KIP-74).
                        part = log.read(p.fetch_offset, max(limit, 1),
                                        max_offset=lso if committed else hw)
                        if part.size and (total == 0 or part.size <= budget - total):
                            resp.records = part
                            total += part.size
                            if committed:
                                resp.aborted_transactions = [
                                    m.FetchResponseAbortedTransaction(
                                        producer_id=t.producer_id, first_offset=t.first_offset)
                                    for t in log.aborted_transactions(p.fetch_offset,
                                                                      part.last_offset + 1)]
                except Exception as exc:        # noqa: BLE001
                    resp.error_code = error_code(exc)[0]
                    failed = True
                parts.append(resp)
            topics.append(m.FetchResponseFetchableTopicResponse(topic=topic.topic,
                                                                topic_id=topic.topic_id,
                                                                partitions=parts))
        return m.FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0,
                               responses=topics), total, failed


class Waker:
    """A Log listener (``set()`` after every append) that wakes a parked fetch on the
    broker's event loop."""

    __slots__ = ("loop", "event")

    def __init__(self, loop, event) -> None:
        self.loop = loop
        self.event = event

    def set(self) -> None:
        self.loop.call_soon_threadsafe(self.event.set)


async def fetch(broker, conn, header, req, heavy: bool = False):
    """Fetch, on the event loop: answer at once when min_bytes are there (or max_wait_ms
    is 0), else park until an append to one of the logs, one of them going offline (its
    topic deleted: UNKNOWN_TOPIC_OR_PARTITION at once, or its dir failed), max_wait_ms,
    or shutdown. A `heavy` fetch (too many partitions for the loop) resolves and reads
    its partitions in the broker's CPU pool."""
    loop = asyncio.get_running_loop()

    async def run(fn, *args):
        return await loop.run_in_executor(broker.cpu_pool, fn, *args) if heavy else fn(*args)

    session = fetch_sessions.begin(broker, header.api_version, req)
    if session.error is not None:
        return session.error
    heavy = heavy or session.size > LOOP_FETCH_PARTITIONS
    quota_bytes = broker.quotas.fetch_window_bytes(conn, header.client_id) if broker.quotas.active else None
    plan = await run(FetchPlan, broker, req, header.api_version, conn, quota_bytes)
    response, total, failed = await run(plan.build)
    if total >= req.min_bytes or req.max_wait_ms <= 0 or failed or broker.stopping:
        broker.stats["bytes_out"] += total
        return session.finish(response)
    deadline = loop.time() + req.max_wait_ms / 1000
    coalesce = broker.server_config["pylog.fetch.coalesce.ms"] / 1000
    event = asyncio.Event()
    waker = Waker(loop, event)
    logs = [lg for lg in plan.logs.values() if not isinstance(lg, Exception)]
    for lg in logs:
        lg.add_listener(waker)          # Log.mark_offline sets its listeners too
    if any(lg.offline for lg in logs):
        event.set()                     # went offline before its listener was there
    conn.resume_collector()             # a heavy fetch's objects wait with the collector on
    broker.park(event)
    try:
        while not broker.stopping:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(event.wait(), left)
            except asyncio.TimeoutError:
                break                            # max_wait_ms passed: answer as we are
            # Coalesce: one response for the appends of the next few ms, not one per
            # append (a consumer at the log's tail otherwise costs a round trip per record).
            await asyncio.sleep(min(coalesce, max(0.0, deadline - loop.time())))
            event.clear()
            response, total, failed = await run(plan.build)
            if total >= req.min_bytes or failed:
                break
    finally:
        broker.unpark(event)
        for lg in logs:
            lg.remove_listener(waker)
    broker.stats["bytes_out"] += total
    return session.finish(response)


#: ListOffsets v9 (KIP-1005): the last offset in tiered storage, -1 without it.
LATEST_TIERED_TIMESTAMP = -5
#: The ListOffsets version each special timestamp needs (measured, Kafka 4.1: older
#: versions get UNSUPPORTED_VERSION for the partition): -4 the local log start (KIP-405),
#: -5 the last tiered offset.
_LIST_OFFSETS_SPEC_VERSION = {-4: 8, LATEST_TIERED_TIMESTAMP: 9}


def list_offsets(broker, conn, header, req):
    v = header.api_version
    topics = []
    for topic in req.topics:
        parts = []
        denied = not allowed(broker, conn, Operation.DESCRIBE, TOPIC, topic.name)
        for p in topic.partitions:
            resp = m.ListOffsetsResponseListOffsetsPartitionResponse(
                partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1)
            if denied or v < _LIST_OFFSETS_SPEC_VERSION.get(p.timestamp, 0):
                resp.error_code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied
                                   else ErrorCode.UNSUPPORTED_VERSION)
                parts.append(resp)
                continue
            try:
                log = broker.store.log(topic.name, p.partition_index)
                if v >= 4:                      # the client's view of the leader (KIP-320)
                    check_current_leader_epoch(log, p.current_leader_epoch)
                # Kafka's fetchOffsetForTimestamp: what the isolation level may read is the
                # bound (the latest offset, and a timestamp's answer must lie below it).
                bound = log.last_stable_offset if v >= 2 and req.isolation_level == \
                    READ_COMMITTED else log.high_watermark
                if p.timestamp == -1:
                    resp.timestamp, resp.offset = -1, bound
                elif p.timestamp == LATEST_TIERED_TIMESTAMP:
                    pass                        # no tiered storage: -1, as Kafka's answer
                else:
                    found = log.offset_for_timestamp(p.timestamp)
                    if found is not None and (p.timestamp in (-2, -4) or found.offset < bound):
                        resp.timestamp, resp.offset = found.timestamp, found.offset
                if v >= 4 and resp.offset >= 0:     # the epoch its record was written in
                    resp.leader_epoch = log.leader_epochs.epoch_for_offset(resp.offset)
            except Exception as exc:            # noqa: BLE001
                resp.error_code = error_code(exc)[0]
            parts.append(resp)
        topics.append(m.ListOffsetsResponseListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return m.ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def init_producer_id(broker, conn, header, req):
    """Kafka's InitProducerId for an idempotent producer (no transactional id): a fresh
    producer id at epoch 0, whatever id and epoch the request names (KIP-360's fields
    are for transactional producers; TransactionCoordinator.handleInitProducerId hands an
    idempotent one a new id). An id is never taken on a client's word: two clients naming
    one id would share it, and a stranger naming a live producer's id would fence it.

    With an authorizer: WRITE on the transactional id (else
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED), as Kafka."""
    if req.transactional_id is not None and not allowed(
            broker, conn, Operation.WRITE, TRANSACTIONAL_ID, req.transactional_id):
        return m.InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                        producer_id=-1, producer_epoch=-1)
    if req.transactional_id is None and broker.authorizer is not None and not (
            allowed(broker, conn, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
            or broker.authorizer.authorize_any(conn.principal, conn.host, Operation.WRITE, TOPIC)):
        return m.InitProducerIdResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                        producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        return transactions.init_producer_id(broker, conn, header, req)
    if (req.producer_id == -1) != (req.producer_epoch == -1):
        return m.InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1,
                                        producer_epoch=-1)
    try:
        pid, epoch = broker.store.init_producer_id()
    except KafkaError as exc:
        return m.InitProducerIdResponse(error_code=error_code(exc)[0], producer_id=-1,
                                        producer_epoch=-1)
    return m.InitProducerIdResponse(error_code=NONE, producer_id=pid, producer_epoch=epoch)


def delete_records(broker, conn, header, req):
    topics = []
    for topic in req.topics:
        parts = []
        denied = not allowed(broker, conn, Operation.DELETE, TOPIC, topic.name)
        for p in topic.partitions:
            resp = m.DeleteRecordsResponseDeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1)
            if denied:
                resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(resp)
                continue
            try:
                log = broker.store.log(topic.name, p.partition_index)
                offset = log.high_watermark if p.offset == -1 else p.offset
                if offset < 0:
                    raise OffsetOutOfRangeError(
                        f"{topic.name}-{p.partition_index}: cannot delete records before offset "
                        f"{offset}: the offset must be in [{log.log_start_offset}, "
                        f"{log.high_watermark}] (or -1 for the high watermark)", offset=offset,
                        topic_partition=(topic.name, p.partition_index))
                log.advance_log_start_offset(offset)
                resp.low_watermark = log.log_start_offset
            except Exception as exc:            # noqa: BLE001
                resp.error_code = error_code(exc)[0]
            parts.append(resp)
        topics.append(m.DeleteRecordsResponseDeleteRecordsTopicResult(name=topic.name, partitions=parts))
    return m.DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
