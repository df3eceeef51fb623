"""The consumer rebalance protocol's APIs (KIP-848): ConsumerGroupHeartbeat and
ConsumerGroupDescribe.

The group logic is :class:`pylog.coordinator.consumer_group.ConsumerProtocolGroup`; this
module validates requests as Kafka's GroupMetadataManager does, converts topic ids (the
protocol names topics by id) to names and back, and applies the broker's
``group.consumer.*`` configs. With an authorizer: both need READ (heartbeat) or DESCRIBE
(describe) on the group, else GROUP_AUTHORIZATION_FAILED; a heartbeat subscribing to topic
names also needs DESCRIBE on those topics (TOPIC_AUTHORIZATION_FAILED), as Kafka checks.
"""

from __future__ import annotations

from pylog.common.acl import Operation
from pylog.coordinator.consumer_group import (LEAVE_GROUP_STATIC_EPOCH, GroupError, TopicsView)
from pylog.errors import ErrorCode
from pylog.protocol import messages as m

from .admin import TopicIds, topic_ids
from .authorizer import TOPIC, allowed, authorized_operations
from .authorizer import GROUP as GROUP_RESOURCE
from .share_groups import shares_of

__all__ = ["consumer_group_heartbeat", "consumer_group_describe"]

#: ConsumerGroupHeartbeat v1+: the client generates its member id (KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_VERSION = 1


def _invalid(request, version: int) -> str | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: the problem, or None."""
    epoch = request.member_epoch
    if (version >= CONSUMER_GENERATED_MEMBER_ID_VERSION or epoch > 0 or epoch == -1) \
            and not request.member_id.strip():
        return "MemberId can't be empty."
    if not request.group_id.strip():
        return "GroupId can't be empty."
    if request.instance_id is not None and not request.instance_id.strip():
        return "InstanceId can't be empty."
    if request.rack_id is not None and not request.rack_id.strip():
        return "RackId can't be empty."
    if epoch == 0:
        if request.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.topic_partitions is None or request.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        regex = request.subscribed_topic_regex if version >= 1 else None
        if request.subscribed_topic_names is None and regex is None:
            return "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
    elif epoch == LEAVE_GROUP_STATIC_EPOCH:
        if request.instance_id is None:
            return "InstanceId can't be null."
    elif epoch < LEAVE_GROUP_STATIC_EPOCH:
        return "MemberEpoch is invalid."
    return None


def consumer_group_heartbeat(broker, conn, header, req):
    v = header.api_version
    cfg = broker.server_config
    response = m.ConsumerGroupHeartbeatResponse(throttle_time_ms=0)

    def fail(code: int, message: str | None):
        # As Kafka: an error answer carries no member id, epoch 0, no interval.
        response.error_code, response.error_message = code, message
        return response

    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    problem = _invalid(req, v)
    if problem:
        return fail(ErrorCode.INVALID_REQUEST, problem)
    if req.subscribed_topic_names and any(
            not allowed(broker, conn, Operation.DESCRIBE, TOPIC, t) for t in req.subscribed_topic_names):
        return fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    store = broker.store
    coordinator = store.coordinator
    ids = topic_ids(broker)
    owned = None
    if req.topic_partitions is not None:
        owned = {}
        for tp in req.topic_partitions:
            name = ids.by_id.get(bytes(tp.topic_id))
            if name is not None and tp.partitions:        # a deleted topic's are gone anyway
                owned.setdefault(name, set()).update(tp.partitions)
    try:
        group = coordinator.consumer_group(
            req.group_id, create=req.member_epoch == 0,
            assignors=list(cfg["group.consumer.assignors"]),
            session_timeout_ms=cfg["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=cfg["group.consumer.heartbeat.interval.ms"],
            max_size=cfg["group.consumer.max.size"])
        if group is None:
            # A member of a group that is gone (deleted, or its records lost): Kafka answers
            # GROUP_ID_NOT_FOUND, fatal to the member; UNKNOWN_MEMBER_ID makes it rejoin
            # with epoch 0. (A restart keeps the group: restore_groups.)
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {req.group_id}.")
        topics = TopicsView(store.topic_epoch, store.partition_count,
                            lambda: [t for t in store.list_topics() if not t.startswith("__")])
        result = group.heartbeat(
            req.member_id, req.member_epoch, instance_id=req.instance_id, rack_id=req.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_names=req.subscribed_topic_names,
            subscribed_regex=req.subscribed_topic_regex if v >= 1 else None,
            server_assignor=req.server_assignor, owned=owned,
            client_id=header.client_id or "", client_host=conn.host, topics=topics)
    except GroupError as exc:
        return fail(exc.code, exc.message)
    response.member_id = result.member_id
    response.member_epoch = result.member_epoch
    response.heartbeat_interval_ms = cfg["group.consumer.heartbeat.interval.ms"]
    if result.assignment is not None:
        response.assignment = m.ConsumerGroupHeartbeatResponseAssignment(topic_partitions=[
            m.ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=ids.by_name[t], partitions=sorted(ps))
            for t, ps in sorted(result.assignment.items()) if t in ids.by_name])
    return response


def _assignment(ids: TopicIds, assignment: dict[str, set[int]]):
    return m.ConsumerGroupDescribeResponseAssignment(topic_partitions=[
        m.ConsumerGroupDescribeResponseTopicPartitions(topic_id=ids.by_name[t], topic_name=t,
                                                       partitions=sorted(ps))
        for t, ps in sorted(assignment.items()) if t in ids.by_name])


def consumer_group_describe(broker, conn, header, req):
    coordinator = broker.store.coordinator
    ids = topic_ids(broker)
    out = []
    for gid in req.group_ids:
        described = m.ConsumerGroupDescribeResponseDescribedGroup(group_id=gid, members=[])
        out.append(described)
        if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, gid):
            described.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            described.error_message = "Group authorization failed."
            continue
        group = coordinator.consumer_group(gid)
        if group is None:
            described.error_code = ErrorCode.GROUP_ID_NOT_FOUND
            classic = coordinator.classic_group(gid, create=False)
            other = classic is not None or shares_of(broker).group(gid, create=False) is not None
            described.error_message = (f"Group {gid} is not a consumer group." if other
                                       else f"Group {gid} not found.")
            continue
        with group.lock:
            described.group_state = group.state()
            described.group_epoch = group.group_epoch
            described.assignment_epoch = group.assignment_epoch
            described.assignor_name = group.assignor_name()
            members = group.describe_members()
        described.members = [m.ConsumerGroupDescribeResponseMember(
            member_id=mem["member_id"], instance_id=mem["instance_id"], rack_id=mem["rack_id"],
            member_epoch=mem["member_epoch"], client_id=mem["client_id"],
            client_host=mem["client_host"], subscribed_topic_names=mem["subscribed_topic_names"],
            subscribed_topic_regex=mem["subscribed_topic_regex"],
            assignment=_assignment(ids, mem["assignment"]),
            target_assignment=_assignment(ids, mem["target_assignment"]),
            member_type=1)                       # 1: a member of the consumer protocol
            for mem in members]
        if req.include_authorized_operations:
            described.authorized_operations = authorized_operations(broker, conn, GROUP_RESOURCE, gid)
    return m.ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)

