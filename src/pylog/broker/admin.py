"""ApiVersions, Metadata, DescribeCluster and the admin APIs of topics and partitions
(configs: configs.py).

A single node: the broker is every partition's leader and only replica, and the
controller. Metadata creates unknown topics when the request allows it and
``auto.create.topics.enable`` is true, as Kafka's AutoTopicCreationManager does (only
Metadata creates; Produce never does), at most
``pylog.max.auto.create.topics.per.request`` per request. It answers each topic named
once, however often the request names it (Kafka reads the names into a set): its
answer is bounded by the request's distinct names, not their repetitions.
"""

from __future__ import annotations

import base64

from pylog.errors import (
    InvalidTopicError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from pylog.errors import ErrorCode
from pylog.protocol import SUPPORTED
from pylog.protocol.api import FINALIZED_FEATURES, FINALIZED_FEATURES_EPOCH, SUPPORTED_FEATURES
from pylog.protocol import messages as m
from pylog.storage import validate_topic_name

from pylog.common.acl import CLUSTER_NAME, Operation

from .authorizer import CLUSTER, TOPIC, allowed, authorized_operations
from .configs import text as _text
from .errors import NONE, RequestError, error_code

__all__ = ["api_versions", "metadata", "describe_cluster", "create_topics", "delete_topics",
           "create_partitions", "topic_id_bytes"]


def topic_id_bytes(topic_id: str) -> bytes:
    """pylog's topic id (Kafka's base64 text form) as the 16 bytes of a wire Uuid."""
    return base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))


def api_versions_response(error: int = NONE, version: int = 4) -> m.ApiVersionsResponse:
    """The APIs and (v3+, tagged fields older versions leave out) the features. Below
    v4 a supported feature whose minimum is 0 is left out, as Kafka's broker does
    (KIP-1022: older clients refuse a 0 minimum; measured, Kafka 4.1: transaction.version
    0-2 listed at v4, not at v3)."""
    return m.ApiVersionsResponse(
        error_code=error, throttle_time_ms=0,
        api_keys=[m.ApiVersionsResponseApiVersion(api_key=k, min_version=lo, max_version=hi)
                  for k, (lo, hi) in sorted(SUPPORTED.items())],
        supported_features=[m.ApiVersionsResponseSupportedFeatureKey(
            name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in SUPPORTED_FEATURES.items() if lo > 0 or version >= 4],
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=[m.ApiVersionsResponseFinalizedFeatureKey(
            name=name, min_version_level=level, max_version_level=level)
            for name, level in FINALIZED_FEATURES.items()])


def api_versions(broker, conn, header, req):
    return api_versions_response(NONE, header.api_version)


def _partitions(broker, description) -> list:
    node = broker.node_id
    out = []
    for p in description.partitions:
        online = p.online
        out.append(m.MetadataResponseMetadataResponsePartition(
            error_code=NONE if online else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=p.partition,
            leader_id=node if online else -1, leader_epoch=p.leader_epoch, replica_nodes=[node],
            isr_nodes=[node] if online else [], offline_replicas=[] if online else [node]))
    return out


def _may_create_topic(broker, conn, name: str) -> bool:
    """CREATE on the cluster or on the topic (Kafka's order)."""
    return allowed(broker, conn, Operation.CREATE, CLUSTER, CLUSTER_NAME) or \
        allowed(broker, conn, Operation.CREATE, TOPIC, name)


def metadata(broker, conn, header, req):
    """Metadata. With an authorizer, as Kafka's: a request for every topic lists only
    those the principal may DESCRIBE; a topic named without DESCRIBE gets
    TOPIC_AUTHORIZATION_FAILED whether it exists or not; auto-creating one needs CREATE
    on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED)."""
    v = header.api_version
    store = broker.store
    if req.topics is None or (v == 0 and not req.topics):
        names = store.list_topics(include_internal=True)
        if broker.authorizer is not None:
            names = [n for n in names if allowed(broker, conn, Operation.DESCRIBE, TOPIC, n)]
        allow_create = False
    else:
        names = list(dict.fromkeys(t.name for t in req.topics))    # once each, in order
        allow_create = req.allow_auto_topic_creation if v >= 4 else True
    creations = broker.server_config["pylog.max.auto.create.topics.per.request"]
    topics = []
    for name in names:
        entry = m.MetadataResponseMetadataResponseTopic(name=name, is_internal=False)
        try:
            if name is None:
                raise InvalidTopicError("topics are named (topic ids are not served)")
            if not allowed(broker, conn, Operation.DESCRIBE, TOPIC, name):
                raise RequestError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
            try:
                description = store.describe_topic(name)
            except UnknownTopicOrPartitionError:
                if not (allow_create and store.config["auto.create.topics.enable"]):
                    raise
                if not _may_create_topic(broker, conn, name):
                    raise RequestError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                       "Topic authorization failed.") from None
                validate_topic_name(name)
                if creations <= 0:
                    # Retriable, as while Kafka creates a topic: the client asks again.
                    raise RequestError(ErrorCode.LEADER_NOT_AVAILABLE, "auto-creations per request "
                                       "used up (pylog.max.auto.create.topics.per.request)") from None
                creations -= 1
                description = store.auto_create_topic(name)
            entry.topic_id = topic_id_bytes(description.topic_id)
            entry.is_internal = description.internal
            entry.partitions = _partitions(broker, description)
            if v >= 8 and req.include_topic_authorized_operations:
                entry.topic_authorized_operations = authorized_operations(broker, conn, TOPIC, name)
        except Exception as exc:                # noqa: BLE001 - answered per topic
            entry.error_code = error_code(exc)[0]
        topics.append(entry)
    host, port = broker.advertised_address(conn.listener)   # as Kafka: this listener's
    response = m.MetadataResponse(
        throttle_time_ms=0, cluster_id=broker.cluster_id, controller_id=broker.node_id,
        brokers=[m.MetadataResponseMetadataResponseBroker(node_id=broker.node_id, host=host,
                                                          port=port, rack=None)],
        topics=topics)
    if 8 <= v <= 10 and req.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(broker, conn, CLUSTER, CLUSTER_NAME)
    return response


def describe_cluster(broker, conn, header, req):
    host, port = broker.advertised_address(conn.listener)   # as Kafka: this listener's
    response = m.DescribeClusterResponse(
        throttle_time_ms=0, error_code=NONE, cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[m.DescribeClusterResponseDescribeClusterBroker(broker_id=broker.node_id, host=host,
                                                                port=port, rack=None)])
    if req.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(broker, conn, CLUSTER, CLUSTER_NAME)
    return response


def create_topics(broker, conn, header, req):
    store = broker.store
    try:
        # Kafka's controller refuses a request whose topics add up to more than 10,000
        # partitions as a whole (validateTotalNumberOfPartitions), before any check.
        store.check_partitions_per_request(sum(
            len(t.assignments) if t.assignments else
            store.config["num.partitions"] if t.num_partitions == -1 else max(t.num_partitions, 0)
            for t in req.topics))
    except PolicyViolationError as exc:
        code, message = error_code(exc)
        return m.CreateTopicsResponse(throttle_time_ms=0, topics=[
            m.CreateTopicsResponseCreatableTopicResult(
                name=t.name, num_partitions=-1, replication_factor=-1, error_code=code,
                error_message=message) for t in req.topics])
    results = []
    for t in req.topics:
        res = m.CreateTopicsResponseCreatableTopicResult(name=t.name, num_partitions=-1,
                                                         replication_factor=-1)
        if not _may_create_topic(broker, conn, t.name):
            res.error_code, res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, \
                "Authorization failed."
            results.append(res)
            continue
        try:
            count = None if t.num_partitions == -1 else t.num_partitions
            if t.assignments:
                if any(set(a.broker_ids) != {broker.node_id} for a in t.assignments):
                    raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"replica assignment must name only this broker "
                                       f"({broker.node_id})")
                count = len(t.assignments)
            configs = {c.name: c.value for c in t.configs}
            d = store.create_topic(t.name, count, configs, replication_factor=t.replication_factor,
                                   validate_only=req.validate_only)
            if d is None:                        # validate_only: every check passed
                res.num_partitions = count or store.config["num.partitions"]
                res.replication_factor = 1
            else:
                res.topic_id = topic_id_bytes(d.topic_id)
                res.num_partitions = len(d.partitions)
                res.replication_factor = 1
                if allowed(broker, conn, Operation.DESCRIBE_CONFIGS, TOPIC, t.name):
                    res.configs = [m.CreateTopicsResponseCreatableTopicConfigs(
                        name=k, value=_text(v), read_only=False,
                        config_source=_source(k, d.overrides), is_sensitive=False)
                        for k, v in sorted(d.config.items())]
                else:                            # Kafka withholds them, saying why
                    res.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        except Exception as exc:                # noqa: BLE001
            res.error_code, res.error_message = error_code(exc)
        results.append(res)
    return m.CreateTopicsResponse(throttle_time_ms=0, topics=results)


def delete_topics(broker, conn, header, req):
    v = header.api_version
    store = broker.store
    if v >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(name, None) for name in req.topic_names]
    results = []
    for name, topic_id in wanted:
        res = m.DeleteTopicsResponseDeletableTopicResult(name=name)
        try:
            if name is None:
                name = _name_for_id(store, topic_id)
                res.name = name
            if not allowed(broker, conn, Operation.DELETE, TOPIC, name):
                raise RequestError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            res.topic_id = topic_id_bytes(store.describe_topic(name).topic_id)
            store.delete_topic(name)
        except Exception as exc:                # noqa: BLE001
            res.error_code, res.error_message = error_code(exc)
        results.append(res)
    return m.DeleteTopicsResponse(throttle_time_ms=0, responses=results)


def _name_for_id(store, topic_id: bytes) -> str:
    for name in store.list_topics(include_internal=True):
        if topic_id_bytes(store.describe_topic(name).topic_id) == topic_id:
            return name
    raise RequestError(ErrorCode.UNKNOWN_TOPIC_ID, "no topic has that topic id")


def create_partitions(broker, conn, header, req):
    store = broker.store
    try:
        # Kafka's controller fails the whole request when its new partitions overflow one
        # metadata batch (10,000 records): "Unable to perform excessively large batch
        # operation." Topics that do not exist or do not grow add none.
        store.check_partitions_per_request(sum(
            max(0, t.count - (store.partition_count(t.name) or t.count)) for t in req.topics),
            "Unable to perform excessively large batch operation")
    except PolicyViolationError as exc:
        code, message = error_code(exc)
        return m.CreatePartitionsResponse(throttle_time_ms=0, results=[
            m.CreatePartitionsResponseCreatePartitionsTopicResult(
                name=t.name, error_code=code, error_message=message) for t in req.topics])
    results = []
    for t in req.topics:
        res = m.CreatePartitionsResponseCreatePartitionsTopicResult(name=t.name)
        try:
            if not allowed(broker, conn, Operation.ALTER, TOPIC, t.name):
                raise RequestError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            broker.store.create_partitions(t.name, t.count, validate_only=req.validate_only)
        except Exception as exc:                # noqa: BLE001
            res.error_code, res.error_message = error_code(exc)
        results.append(res)
    return m.CreatePartitionsResponse(throttle_time_ms=0, results=results)


# ================================================================= configs
# DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: configs.py


def _source(key: str, overrides) -> int:
    return 1 if key in overrides else 5      # DYNAMIC_TOPIC_CONFIG / DEFAULT_CONFIG
