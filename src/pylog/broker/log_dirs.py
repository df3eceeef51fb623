"""Log dirs and replica placement on the wire, as a single KRaft broker answers them.

- **DescribeLogDirs** (35, ``kafka-log-dirs.sh --describe``): every log dir with its
  error (KAFKA_STORAGE_ERROR when offline), total and usable bytes of its file system
  (v4), and per partition its size, offset lag (0: a single replica is its own leader)
  and, for a partition moving there, a future replica (``is_future_key``, lag = the log
  end less what the copy holds). Needs DESCRIBE on the cluster.
- **AlterReplicaLogDirs** (34, KIP-113): moves partitions between log dirs
  (storage/log_dir_moves.py). LOG_DIR_NOT_FOUND for a path that is no log dir,
  KAFKA_STORAGE_ERROR for an offline one, REPLICA_NOT_AVAILABLE for a partition this
  broker does not hold (Kafka's answer, which kafka-reassign-partitions retries).
  Needs ALTER on the cluster.
- **AlterPartitionReassignments** (45) and **ListPartitionReassignments** (46): what
  kafka-reassign-partitions.sh sends before its log-dir moves. One broker holds every
  replica, so the only assignment is ``[node.id]``: it is accepted as already complete,
  another is INVALID_REPLICA_ASSIGNMENT, a cancellation NO_REASSIGNMENT_IN_PROGRESS, and
  no reassignment is ever ongoing (Kafka's controller answers a single-broker cluster
  so).
"""

from __future__ import annotations

import logging

from pylog.common.acl import CLUSTER_NAME, Operation
from pylog.errors import (
    KafkaStorageError,
    LogDirNotFoundError,
    UnknownTopicOrPartitionError,
)
from pylog.protocol import messages as m

from .authorizer import CLUSTER, allowed
from .errors import NONE, codes, error_code

__all__ = [
    "alter_partition_reassignments",
    "alter_replica_log_dirs",
    "describe_log_dirs",
    "list_partition_reassignments",
]

log = logging.getLogger(__name__)

REPLICA_NOT_AVAILABLE = 9
NO_REASSIGNMENT_IN_PROGRESS = 85


def describe_log_dirs(broker, conn, header, req):
    response = m.DescribeLogDirsResponse(throttle_time_ms=0, error_code=NONE, results=[])
    if not allowed(broker, conn, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        response.error_code = codes.CLUSTER_AUTHORIZATION_FAILED     # v0-2: just no results
        return response
    wanted = None if req.topics is None else \
        {(t.topic, p) for t in req.topics for p in t.partitions}
    for d in broker.store.describe_log_dirs(wanted):
        result = m.DescribeLogDirsResponseDescribeLogDirsResult(log_dir=d.path, topics=[])
        if d.error is not None:
            result.error_code = codes.KAFKA_STORAGE_ERROR
            log.warning("DescribeLogDirs: %s", d.error)
            response.results.append(result)
            continue
        result.error_code = NONE
        result.total_bytes, result.usable_bytes = d.total_bytes, d.usable_bytes
        topics: dict[str, m.DescribeLogDirsResponseDescribeLogDirsTopic] = {}
        for r in d.replicas:
            topic = topics.get(r.topic)
            if topic is None:
                topic = topics[r.topic] = m.DescribeLogDirsResponseDescribeLogDirsTopic(
                    name=r.topic, partitions=[])
                result.topics.append(topic)
            topic.partitions.append(m.DescribeLogDirsResponseDescribeLogDirsPartition(
                partition_index=r.partition, partition_size=r.size, offset_lag=r.offset_lag,
                is_future_key=r.is_future))
        response.results.append(result)
    return response


def alter_replica_log_dirs(broker, conn, header, req):
    results: dict[str, m.AlterReplicaLogDirsResponseAlterReplicaLogDirTopicResult] = {}

    def answer(topic: str, partition: int, code: int) -> None:
        entry = results.get(topic)
        if entry is None:
            entry = results[topic] = m.AlterReplicaLogDirsResponseAlterReplicaLogDirTopicResult(
                topic_name=topic, partitions=[])
        entry.partitions.append(m.AlterReplicaLogDirsResponseAlterReplicaLogDirPartitionResult(
            partition_index=partition, error_code=code))

    may = allowed(broker, conn, Operation.ALTER, CLUSTER, CLUSTER_NAME)
    for target in req.dirs:
        for t in target.topics:
            for p in t.partitions:
                if not may:
                    answer(t.name, p, codes.CLUSTER_AUTHORIZATION_FAILED)
                    continue
                try:
                    broker.store.alter_log_dir(t.name, p, target.path)
                except UnknownTopicOrPartitionError as exc:
                    # Kafka: NotLeaderOrFollower is answered REPLICA_NOT_AVAILABLE here.
                    log.warning("AlterReplicaLogDirs %s-%d: %s", t.name, p, exc)
                    answer(t.name, p, REPLICA_NOT_AVAILABLE)
                    continue
                except (LogDirNotFoundError, KafkaStorageError) as exc:
                    log.warning("AlterReplicaLogDirs %s-%d to %s: %s", t.name, p, target.path, exc)
                    answer(t.name, p, exc.code)
                    continue
                except Exception as exc:  # noqa: BLE001 - one partition's answer
                    answer(t.name, p, error_code(exc)[0])
                    continue
                answer(t.name, p, NONE)
    return m.AlterReplicaLogDirsResponse(throttle_time_ms=0, results=list(results.values()))


def alter_partition_reassignments(broker, conn, header, req):
    response = m.AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, allow_replication_factor_change=req.allow_replication_factor_change,
        error_code=NONE, error_message=None, responses=[])
    if not allowed(broker, conn, Operation.ALTER, CLUSTER, CLUSTER_NAME):
        response.error_code = codes.CLUSTER_AUTHORIZATION_FAILED
        response.error_message = "Cluster authorization failed."
        return response
    store = broker.store
    for t in req.topics:
        topic = m.AlterPartitionReassignmentsResponseReassignableTopicResponse(name=t.name,
                                                                               partitions=[])
        count = store.partition_count(t.name)
        for p in t.partitions:
            code, message = NONE, None
            if count is None or not 0 <= p.partition_index < count:
                code, message = codes.UNKNOWN_TOPIC_OR_PARTITION, \
                    f"Unable to find partition {t.name}-{p.partition_index}."
            elif p.replicas is None:
                code, message = NO_REASSIGNMENT_IN_PROGRESS, \
                    f"Unable to find an ongoing reassignment for {t.name}-{p.partition_index}."
            elif not p.replicas:
                code, message = codes.INVALID_REPLICA_ASSIGNMENT, \
                    "The manual partition assignment includes an empty replica list."
            elif len(set(p.replicas)) != len(p.replicas):
                code, message = codes.INVALID_REPLICA_ASSIGNMENT, \
                    "The manual partition assignment includes duplicate replicas."
            elif p.replicas != [broker.node_id]:
                code, message = codes.INVALID_REPLICA_ASSIGNMENT, (
                    f"The manual partition assignment includes broker(s) that are not "
                    f"registered: this cluster is the single broker {broker.node_id}.")
            topic.partitions.append(m.AlterPartitionReassignmentsResponseReassignablePartitionResponse(
                partition_index=p.partition_index, error_code=code, error_message=message))
        response.responses.append(topic)
    return response


def list_partition_reassignments(broker, conn, header, req):
    if not allowed(broker, conn, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return m.ListPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=codes.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.", topics=[])
    return m.ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=NONE,
                                                error_message=None, topics=[])
