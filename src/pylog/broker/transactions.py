"""The transaction APIs: InitProducerId (with a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, WriteTxnMarkers, DescribeProducers,
DescribeTransactions, ListTransactions.

The store's :class:`pylog.coordinator.transactions.TransactionCoordinator` keeps the
state; these handlers translate requests and Kafka's error codes. The ones that change
state fsync ``__transaction_state`` (and write markers): they run in the I/O pool.
Every handler that names a transactional id asks :func:`authorize_transactional_id`.
"""

from __future__ import annotations

import time

from pylog.common.acl import CLUSTER_NAME, Operation
from pylog.coordinator import OffsetAndMetadata
from pylog.coordinator.transaction_state import TxnState
from pylog.coordinator.transactions import authorize_transactional_id
from pylog.errors import ErrorCode, ProducerFencedError
from pylog.protocol import ApiKey
from pylog.protocol import messages as m

from .authorizer import CLUSTER, GROUP, TOPIC, TRANSACTIONAL_ID, allowed
from .errors import NONE, error_code

__all__ = ["init_producer_id", "add_partitions_to_txn", "add_offsets_to_txn", "end_txn",
           "txn_offset_commit", "write_txn_markers", "describe_producers",
           "describe_transactions", "list_transactions"]

#: The first version of each API that carries PRODUCER_FENCED (KIP-588); older versions
#: get INVALID_PRODUCER_EPOCH, as Kafka answers them.
_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                 ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3}


def _code(exc: BaseException, header) -> int:
    code = error_code(exc)[0]
    if isinstance(exc, ProducerFencedError) and header.api_version < _FENCED_SINCE.get(header.api_key, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _authorized(conn, transactional_id: str, operation: str = "WRITE") -> bool:
    """WRITE or DESCRIBE on the transactional id: the broker's authorizer (authorizer.py),
    when it has one, and the coordinator's hook."""
    op = Operation.WRITE if operation == "WRITE" else Operation.DESCRIBE
    return allowed(conn.broker, conn, op, TRANSACTIONAL_ID, transactional_id) and \
        authorize_transactional_id(getattr(conn, "principal", None), transactional_id, operation)


def init_producer_id(broker, conn, header, req):
    """InitProducerId with a transactional id (Kafka's TransactionCoordinator)."""
    if not _authorized(conn, req.transactional_id):
        return m.InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                        producer_id=-1, producer_epoch=-1)
    pid = req.producer_id if header.api_version >= 3 else -1
    epoch = req.producer_epoch if header.api_version >= 3 else -1
    try:
        pid, epoch = broker.store.transactions.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, pid, epoch)
    except Exception as exc:                    # noqa: BLE001 - every error goes to the client
        return m.InitProducerIdResponse(error_code=_code(exc, header), producer_id=-1,
                                        producer_epoch=-1)
    return m.InitProducerIdResponse(error_code=NONE, producer_id=pid, producer_epoch=epoch)


def _add_partitions(broker, conn, header, tid, pid, epoch, topics, verify_only=False):
    """[(topic, [(partition, error)])] for one transaction of AddPartitionsToTxn. Kafka's
    checks in its order: for a client's request (v0-3), WRITE on the transactional id and
    on each topic (TOPIC_AUTHORIZATION_FAILED, whether it exists or not), then the
    partition's existence; one failed partition fails them all, the others answering
    OPERATION_NOT_ATTEMPTED."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    errors: dict[tuple[str, int], int] = {}
    if header.api_version <= 3 and not _authorized(conn, tid):      # v4+: CLUSTER_ACTION
        errors = {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    elif verify_only:
        found = broker.store.transactions.verify_only(tid, pid, epoch, wanted)
        errors = {tp: NONE if e is None else _code(e, header) for tp, e in found.items()}
    else:
        store = broker.store
        may_write = {t: header.api_version >= 4 or allowed(broker, conn, Operation.WRITE, TOPIC, t)
                     for t, _ in wanted}
        failed = {(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED if not may_write[t]
                  else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for t, p in wanted
                  if not may_write[t] or not 0 <= p < (store.partition_count(t) or 0)}
        if failed:
            errors = {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        else:
            try:
                store.transactions.add_partitions(tid, pid, epoch, wanted)
                errors = {tp: NONE for tp in wanted}
            except Exception as exc:            # noqa: BLE001
                code = _code(exc, header)
                errors = {tp: code for tp in wanted}
    by_topic: dict[str, list] = {}
    for (t, p), code in errors.items():
        by_topic.setdefault(t, []).append(m.AddPartitionsToTxnResponseAddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=code))
    return [m.AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult(name=t, results_by_partition=r)
            for t, r in by_topic.items()]


def add_partitions_to_txn(broker, conn, header, req):
    """AddPartitionsToTxn: v0-3 one transaction (a client's), v4+ a batch of them with
    verify_only (a broker's verification, KIP-890 part 1), which needs CLUSTER_ACTION on
    the cluster (CLUSTER_AUTHORIZATION_FAILED), as Kafka's."""
    if header.api_version <= 3:
        results = _add_partitions(broker, conn, header, req.v3_and_below_transactional_id,
                                  req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                                  req.v3_and_below_topics)
        return m.AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=results)
    if not allowed(broker, conn, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        # v4+ is a broker's request (Kafka's KafkaApis: CLUSTER_ACTION on the cluster).
        return m.AddPartitionsToTxnResponse(throttle_time_ms=0,
                                            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                            results_by_transaction=[])
    out = []
    for txn in req.transactions:
        out.append(m.AddPartitionsToTxnResponseAddPartitionsToTxnResult(
            transactional_id=txn.transactional_id,
            topic_results=_add_partitions(broker, conn, header, txn.transactional_id,
                                          txn.producer_id, txn.producer_epoch, txn.topics,
                                          txn.verify_only)))
    return m.AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=NONE,
                                        results_by_transaction=out)


def add_offsets_to_txn(broker, conn, header, req):
    """AddOffsetsToTxn: WRITE on the transactional id, then READ on the group (Kafka's
    order and codes)."""
    if not _authorized(conn, req.transactional_id):
        return m.AddOffsetsToTxnResponse(throttle_time_ms=0,
                                         error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(broker, conn, Operation.READ, GROUP, req.group_id):
        return m.AddOffsetsToTxnResponse(throttle_time_ms=0,
                                         error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        broker.store.transactions.add_offsets(req.transactional_id, req.producer_id,
                                              req.producer_epoch, req.group_id)
    except Exception as exc:                    # noqa: BLE001
        return m.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_code(exc, header))
    return m.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=NONE)


#: The first TxnOffsetCommit and EndTxn versions of transactions v2 (KIP-890 part 2).
TXN_OFFSET_COMMIT_ADDS_GROUP = 5
END_TXN_BUMPS_EPOCH = 5


def txn_offset_commit(broker, conn, header, req):
    """TxnOffsetCommit: the offsets become the group's when the transaction commits
    (v5+, transactions v2: the group's partition joins the transaction here). Kafka's
    checks in its order: WRITE on the transactional id, READ on the group (either failing
    fails every partition), then per topic READ (TOPIC_AUTHORIZATION_FAILED) and the
    partition's existence (UNKNOWN_TOPIC_OR_PARTITION); the other partitions commit."""
    code = NONE
    per_partition: dict[tuple[str, int], int] = {}
    if not _authorized(conn, req.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(broker, conn, Operation.READ, GROUP, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        store = broker.store
        may_read = {t.name: allowed(broker, conn, Operation.READ, TOPIC, t.name) for t in req.topics}
        for t in req.topics:
            for p in t.partitions:
                if not may_read[t.name]:
                    per_partition[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif not 0 <= p.partition_index < (store.partition_count(t.name) or 0):
                    per_partition[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        offsets = {(t.name, p.partition_index): OffsetAndMetadata(
            p.committed_offset, p.committed_metadata or "",
            p.committed_leader_epoch if header.api_version >= 2 else -1)
            for t in req.topics for p in t.partitions if (t.name, p.partition_index) not in per_partition}
        if offsets:
            try:
                store.transactions.txn_offset_commit(
                    req.transactional_id, req.group_id, req.producer_id, req.producer_epoch,
                    offsets, tv2=header.api_version >= TXN_OFFSET_COMMIT_ADDS_GROUP)
            except Exception as exc:            # noqa: BLE001
                code = _code(exc, header)
    topics = [m.TxnOffsetCommitResponseTxnOffsetCommitResponseTopic(
        name=t.name, partitions=[m.TxnOffsetCommitResponseTxnOffsetCommitResponsePartition(
            partition_index=p.partition_index,
            error_code=per_partition.get((t.name, p.partition_index), code))
            for p in t.partitions])
        for t in req.topics]
    return m.TxnOffsetCommitResponse(throttle_time_ms=0, topics=topics)


def end_txn(broker, conn, header, req):
    """EndTxn; v5+ (transactions v2) bumps the epoch and answers the producer id and
    epoch the producer goes on with."""
    failed = m.EndTxnResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1)
    if not _authorized(conn, req.transactional_id):
        failed.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return failed
    try:
        pid, epoch = broker.store.transactions.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
            tv2=header.api_version >= END_TXN_BUMPS_EPOCH)
    except Exception as exc:                    # noqa: BLE001
        failed.error_code = _code(exc, header)
        return failed
    return m.EndTxnResponse(throttle_time_ms=0, error_code=NONE, producer_id=pid,
                            producer_epoch=epoch)


def write_txn_markers(broker, conn, header, req):
    """WriteTxnMarkers, as Kafka's tools send it (``kafka-transactions.sh abort``: an
    ABORT marker for a hanging transaction). The coordinator writes its own markers on
    one node; a COMMIT from outside is refused (INVALID_REQUEST: only the coordinator
    decides a commit)."""
    out = []
    for marker in req.markers:
        topics = []
        for t in marker.topics:
            parts = []
            for p in t.partition_indexes:
                code = NONE
                if marker.transaction_result:
                    code = ErrorCode.INVALID_REQUEST
                else:
                    try:
                        broker.store.transactions.abort_producer(
                            t.name, p, marker.producer_id, marker.producer_epoch,
                            marker.coordinator_epoch)
                    except Exception as exc:    # noqa: BLE001
                        code = _code(exc, header)
                parts.append(m.WriteTxnMarkersResponseWritableTxnMarkerPartitionResult(
                    partition_index=p, error_code=code))
            topics.append(m.WriteTxnMarkersResponseWritableTxnMarkerTopicResult(name=t.name,
                                                                                 partitions=parts))
        out.append(m.WriteTxnMarkersResponseWritableTxnMarkerResult(producer_id=marker.producer_id,
                                                                    topics=topics))
    return m.WriteTxnMarkersResponse(markers=out)


def describe_producers(broker, conn, header, req):
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partition_indexes:
            resp = m.DescribeProducersResponsePartitionResponse(partition_index=p, active_producers=[])
            try:
                lg = broker.store.log(t.name, p)
                resp.active_producers = [m.DescribeProducersResponseProducerState(
                    producer_id=i.producer_id, producer_epoch=i.producer_epoch,
                    last_sequence=i.last_sequence, last_timestamp=i.last_timestamp,
                    coordinator_epoch=i.coordinator_epoch,
                    current_txn_start_offset=i.current_txn_start_offset)
                    for i in lg.describe_producers()]
            except Exception as exc:            # noqa: BLE001
                resp.error_code, resp.error_message = error_code(exc)
            parts.append(resp)
        topics.append(m.DescribeProducersResponseTopicResponse(name=t.name, partitions=parts))
    return m.DescribeProducersResponse(throttle_time_ms=0, topics=topics)


def _topics(partitions) -> list:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    return [m.DescribeTransactionsResponseTopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]


def describe_transactions(broker, conn, header, req):
    out = []
    for tid in dict.fromkeys(req.transactional_ids):
        state = m.DescribeTransactionsResponseTransactionState(
            transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
            transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
        allowed = _authorized(conn, tid, "DESCRIBE")
        meta = broker.store.transactions.describe(tid) if allowed else None
        if not allowed:
            state.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif meta is None or meta.state == TxnState.DEAD:
            state.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        else:
            state.transaction_state = meta.state.kafka_name
            state.transaction_timeout_ms = meta.timeout_ms
            state.transaction_start_time_ms = meta.txn_start_ms
            state.producer_id, state.producer_epoch = meta.producer_id, meta.producer_epoch
            state.topics = _topics(meta.partitions)
        out.append(state)
    return m.DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=out)


def list_transactions(broker, conn, header, req):
    """ListTransactions with Kafka's filters: states (unknown names are answered back),
    producer ids, duration (v1+: open longer than this many ms), id pattern (v2+, a Java
    regular expression; pylog matches it as Python's ``re``)."""
    import re
    known = {s.kafka_name for s in TxnState}
    unknown = [s for s in req.state_filters if s not in known]
    states = set(req.state_filters)
    pids = set(req.producer_id_filters)
    now = int(time.time() * 1000)
    pattern = None
    if header.api_version >= 2 and req.transactional_id_pattern:
        try:
            pattern = re.compile(req.transactional_id_pattern)
        except re.error:
            return m.ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                              unknown_state_filters=[], transaction_states=[])
    out = []
    for meta in broker.store.transactions.list():
        if meta.state == TxnState.DEAD or (states and meta.state.kafka_name not in states):
            continue
        if pids and meta.producer_id not in pids:
            continue
        if header.api_version >= 1 and req.duration_filter >= 0 and \
                (meta.state != TxnState.ONGOING or now - meta.txn_start_ms < req.duration_filter):
            continue
        if pattern is not None and not pattern.fullmatch(meta.transactional_id):
            continue
        if not _authorized(conn, meta.transactional_id, "DESCRIBE"):
            continue
        out.append(m.ListTransactionsResponseTransactionState(
            transactional_id=meta.transactional_id, producer_id=meta.producer_id,
            transaction_state=meta.state.kafka_name))
    return m.ListTransactionsResponse(throttle_time_ms=0, error_code=NONE,
                                      unknown_state_filters=unknown, transaction_states=out)
