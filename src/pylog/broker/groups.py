"""The group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.

With an authorizer (Kafka's checks): FindCoordinator needs DESCRIBE on the group (or
the transactional id); JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit
READ on the group, OffsetFetch and DescribeGroups DESCRIBE, DeleteGroups DELETE (else
GROUP_AUTHORIZATION_FAILED); OffsetCommit READ on each topic, OffsetFetch DESCRIBE
(else TOPIC_AUTHORIZATION_FAILED for its partitions, or left out of an "every topic"
answer); ListGroups lists every group with DESCRIBE on the cluster, else those the
principal may DESCRIBE. ListGroups and DeleteGroups see share groups too
(:mod:`pylog.broker.share_groups`): type and protocol type ``share``.

The broker is every group's coordinator. Membership is the store's coordinator's
(:class:`pylog.coordinator.classic_group.ClassicGroup`, Kafka's classic protocol);
committed offsets are the store's too (``__consumer_offsets``), so offsets committed by
a remote client and by an in-process ``pylog.Consumer`` of the same group are one table.
"""

from __future__ import annotations

from pylog.coordinator import OffsetAndMetadata
from pylog.coordinator.classic_group import JoinResult, SyncResult
from pylog.coordinator.consumer_group import ConsumerProtocolGroup, GroupError
from pylog.errors import ErrorCode
from pylog.protocol import messages as m

from pylog.common.acl import CLUSTER_NAME, Operation

from .authorizer import CLUSTER, TOPIC, TRANSACTIONAL_ID, allowed, authorized_operations
from .authorizer import GROUP as GROUP_RESOURCE
from .errors import NONE, error_code
from .share_groups import shares_of

__all__ = ["find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group",
           "offset_commit", "offset_fetch", "list_groups", "describe_groups", "delete_groups"]

GROUP, TRANSACTION = 0, 1


def find_coordinator(broker, conn, header, req):
    v = header.api_version
    host, port = broker.advertised_address(conn.listener)   # as Kafka: this listener's
    keys = req.coordinator_keys if v >= 4 else [req.key]

    def answer(key: str):
        if req.key_type == TRANSACTION:
            if not allowed(broker, conn, Operation.DESCRIBE, TRANSACTIONAL_ID, key):
                return (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "Transactional Id authorization failed.", -1, "", -1)
            if not key:
                return ErrorCode.INVALID_REQUEST, "empty transactional id", -1, "", -1
            return NONE, None, broker.node_id, host, port
        if req.key_type != GROUP:         # Kafka: share groups (2) and any later type
            return (ErrorCode.INVALID_REQUEST, f"coordinator type {req.key_type} is not supported "
                    f"(pylog coordinates consumer groups, type 0, and transactions, type 1)", -1, "", -1)
        if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1, "", -1
        if not key and v < 4:
            return ErrorCode.INVALID_GROUP_ID, "empty group id", -1, "", -1
        return NONE, None, broker.node_id, host, port

    if v >= 4:
        coordinators = []
        for key in keys:
            err, msg, node, h, p = answer(key)
            coordinators.append(m.FindCoordinatorResponseCoordinator(
                key=key, node_id=node, host=h, port=p, error_code=err, error_message=msg))
        return m.FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    err, msg, node, h, p = answer(req.key)
    return m.FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg,
                                     node_id=node, host=h, port=p)


def _group(broker, group_id: str, create: bool = True):
    return broker.store.coordinator.classic_group(
        group_id, broker.server_config["group.initial.rebalance.delay.ms"], create=create)


async def join_group(broker, conn, header, req):
    """JoinGroup, on the event loop: the group answers through a future when the
    rebalance completes (a parked join holds no thread, and its answer is built only
    then: a parked join holds as few objects as it can)."""
    v = header.api_version
    cfg = broker.server_config
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return _join_response(v, JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=req.member_id))
    if not req.group_id:
        return _join_response(v, JoinResult(ErrorCode.INVALID_GROUP_ID, member_id=req.member_id))
    if not cfg["group.min.session.timeout.ms"] <= req.session_timeout_ms <= cfg["group.max.session.timeout.ms"]:
        return _join_response(v, JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT,
                                            member_id=req.member_id))
    rebalance_timeout = req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms
    # Kafka creates a group for a member with no id only; a member id names a group.
    try:
        group = _group(broker, req.group_id, create=not req.member_id)
    except GroupError as exc:               # a consumer-protocol group with members
        return _join_response(v, JoinResult(exc.code, member_id=req.member_id))
    if group is None:
        return _join_response(v, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))
    # In-process pylog Consumers of this group join it too, as one member (bridge.py).
    broker.store.coordinator.bridge_if_shared(req.group_id)
    instance_id = req.group_instance_id if v >= 5 else None
    result = await broker.group_wait(
        group.join, req.member_id, header.client_id or "", conn.host, req.protocol_type,
        [(p.name, p.metadata) for p in req.protocols], req.session_timeout_ms, rebalance_timeout,
        require_known_member=v >= 4, group_instance_id=instance_id)
    if result is None:                     # the broker stopped: the client looks again
        result = JoinResult(ErrorCode.NOT_COORDINATOR, member_id=req.member_id)
    return _join_response(v, result)


def _join_response(v: int, result: JoinResult):
    response = m.JoinGroupResponse(throttle_time_ms=0, generation_id=-1, protocol_name=None if v >= 7 else "",
                                   leader="", member_id=result.member_id, error_code=result.error)
    if result.error == NONE:
        response.generation_id = result.generation
        response.protocol_type = result.protocol_type
        response.protocol_name = result.protocol
        response.leader = result.leader
        response.members = [m.JoinGroupResponseJoinGroupResponseMember(
            member_id=mem.member_id, group_instance_id=mem.group_instance_id,
            metadata=mem.metadata(result.protocol)) for mem in result.members]
    return response


async def sync_group(broker, conn, header, req):
    """SyncGroup, on the event loop: a follower's waits (as a future) for the leader's."""
    v = header.api_version
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return m.SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                   assignment=b"")
    group = _group(broker, req.group_id, create=False)
    if group is None:
        return m.SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.UNKNOWN_MEMBER_ID, assignment=b"")
    result = await broker.group_wait(
        group.sync, req.member_id, req.generation_id,
        {a.member_id: a.assignment for a in req.assignments},
        group_instance_id=req.group_instance_id if v >= 3 else None,
        protocol_type=req.protocol_type if v >= 5 else None,
        protocol=req.protocol_name if v >= 5 else None)
    if result is None:                     # the broker stopped: the client looks again
        result = SyncResult(ErrorCode.NOT_COORDINATOR)
    return m.SyncGroupResponse(throttle_time_ms=0, error_code=result.error, assignment=result.assignment,
                               protocol_type=result.protocol_type, protocol_name=result.protocol)


def heartbeat(broker, conn, header, req):
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return m.HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    group = _group(broker, req.group_id, create=False)
    instance_id = req.group_instance_id if header.api_version >= 3 else None
    error = ErrorCode.UNKNOWN_MEMBER_ID if group is None else \
        group.heartbeat(req.member_id, req.generation_id, instance_id)
    return m.HeartbeatResponse(throttle_time_ms=0, error_code=error)


def leave_group(broker, conn, header, req):
    v = header.api_version
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return m.LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                    members=[])
    group = _group(broker, req.group_id, create=False)
    if v >= 3:
        wanted = [(mem.member_id, mem.group_instance_id) for mem in req.members]
        if group is None:
            top, errors = NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(wanted)
        else:
            top, errors = group.leave_members(wanted)
        if top:
            return m.LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=[])
        return m.LeaveGroupResponse(throttle_time_ms=0, error_code=NONE, members=[
            m.LeaveGroupResponseMemberResponse(member_id=mid, group_instance_id=iid, error_code=err)
            for (mid, iid), err in zip(wanted, errors)])
    error = ErrorCode.UNKNOWN_MEMBER_ID if group is None else group.leave(req.member_id)
    return m.LeaveGroupResponse(throttle_time_ms=0, error_code=error)


def offset_commit(broker, conn, header, req):
    v = header.api_version
    coordinator = broker.store.coordinator
    group = _group(broker, req.group_id, create=False)
    generation = req.generation_id_or_member_epoch
    instance_id = req.group_instance_id if v >= 7 else None
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif group is not None:
        error = group.check_commit(req.member_id, generation, instance_id)
    elif (consumer := coordinator.consumer_group(req.group_id)) is not None:
        # A consumer-protocol group: v9+ carries the member epoch in the generation's place.
        error = consumer.validate_offset_commit(req.member_id, generation, v)
    elif coordinator.committed_offsets(req.group_id):
        # A group known by its committed offsets only: Kafka's Empty (simple) group.
        error = NONE if generation < 0 else ErrorCode.UNKNOWN_MEMBER_ID
    else:
        # No group at all: generation -1 creates a simple group; anything else is
        # ILLEGAL_GENERATION below v9 (Kafka's OffsetMetadataManager).
        error = NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
    now = broker.store.clock()
    topics = []
    offsets = {}
    for t in req.topics:
        parts = []
        for p in t.partitions:
            parts.append(m.OffsetCommitResponseOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=error))
            stamp = p.commit_timestamp if v == 1 and p.commit_timestamp >= 0 else now
            offsets[(t.name, p.partition_index)] = (parts[-1], OffsetAndMetadata(
                p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch, stamp))
        topics.append(m.OffsetCommitResponseOffsetCommitResponseTopic(name=t.name, partitions=parts))
    if error == NONE and offsets:
        known = {}
        max_metadata = broker.server_config["offset.metadata.max.bytes"]
        readable: dict[str, bool] = {}
        for tp, (resp, entry) in offsets.items():
            if tp[0] not in readable:
                readable[tp[0]] = allowed(broker, conn, Operation.READ, TOPIC, tp[0])
            count = broker.store.partition_count(tp[0])
            if not readable[tp[0]]:
                resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif count is None or not 0 <= tp[1] < count:
                resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(entry.metadata) > max_metadata:     # Kafka counts characters too
                resp.error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                known[tp] = entry
        try:
            if known:
                coordinator.commit_offsets(req.group_id, known)
        except Exception as exc:                # noqa: BLE001
            code = error_code(exc)[0]
            for tp in known:
                offsets[tp][0].error_code = code
    return m.OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def _fetch_offsets(broker, conn, group_id: str, topics):
    """OffsetFetch for one group: `topics` is a list of (name, partitions) or None (all).
    Returns [(name, [(partition, offset, leader epoch, metadata, error)])]: a topic the
    principal may not DESCRIBE is left out of "all", and named gets
    TOPIC_AUTHORIZATION_FAILED."""
    committed = broker.store.coordinator.committed_offsets(group_id)
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        for (t, p) in sorted(committed):
            by_topic.setdefault(t, []).append(p)
        topics = [(t, ps) for t, ps in by_topic.items()
                  if allowed(broker, conn, Operation.DESCRIBE, TOPIC, t)]
    out = []
    for name, partitions in topics:
        if not allowed(broker, conn, Operation.DESCRIBE, TOPIC, name):
            out.append((name, [(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in partitions]))
            continue
        parts = []
        for p in partitions:
            entry = committed.get((name, p))
            parts.append((p, entry.offset if entry else -1, entry.leader_epoch if entry else -1,
                          entry.metadata if entry else "", NONE))
        out.append((name, parts))
    return out


def offset_fetch(broker, conn, header, req):
    v = header.api_version
    if v >= 8:
        groups = []
        for g in req.groups:
            if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, g.group_id):
                groups.append(m.OffsetFetchResponseOffsetFetchResponseGroup(
                    group_id=g.group_id, topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
                continue
            consumer = broker.store.coordinator.consumer_group(g.group_id) if v >= 9 else None
            error = consumer.validate_offset_fetch(g.member_id, g.member_epoch) if consumer else NONE
            if error:
                groups.append(m.OffsetFetchResponseOffsetFetchResponseGroup(
                    group_id=g.group_id, topics=[], error_code=error))
                continue
            wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            topics = [m.OffsetFetchResponseOffsetFetchResponseTopics(name=name, partitions=[
                m.OffsetFetchResponseOffsetFetchResponsePartitions(
                    partition_index=p, committed_offset=off, committed_leader_epoch=ep, metadata=md,
                    error_code=err)
                for p, off, ep, md, err in parts])
                for name, parts in _fetch_offsets(broker, conn, g.group_id, wanted)]
            groups.append(m.OffsetFetchResponseOffsetFetchResponseGroup(group_id=g.group_id, topics=topics))
        return m.OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, req.group_id):
        # v2+ has a top-level error; before it, Kafka sets it on every partition named.
        return m.OffsetFetchResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                     topics=[m.OffsetFetchResponseOffsetFetchResponseTopic(
                                         name=t.name, partitions=[
                                             m.OffsetFetchResponseOffsetFetchResponsePartition(
                                                 partition_index=p, committed_offset=-1,
                                                 error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                                             for p in t.partition_indexes])
                                         for t in (req.topics or [])] if v < 2 else [])
    wanted = None if req.topics is None else [(t.name, t.partition_indexes) for t in req.topics]
    topics = [m.OffsetFetchResponseOffsetFetchResponseTopic(name=name, partitions=[
        m.OffsetFetchResponseOffsetFetchResponsePartition(
            partition_index=p, committed_offset=off, committed_leader_epoch=ep, metadata=md,
            error_code=err)
        for p, off, ep, md, err in parts])
        for name, parts in _fetch_offsets(broker, conn, req.group_id, wanted)]
    return m.OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=NONE)


def _all_groups(broker) -> dict[str, object]:
    """group id -> its ClassicGroup or ConsumerProtocolGroup, or None for groups known only
    by committed offsets."""
    coordinator = broker.store.coordinator
    groups: dict[str, object] = {g: None for g in coordinator.consumer_groups()}
    for g in coordinator.classic_groups():
        groups[g.group_id] = g
    for g in coordinator.consumer_groups_of_protocol():
        groups[g.group_id] = g
    return groups


#: Kafka's group types (Group.GroupType), as ListGroups v5 names and filters them.
CLASSIC_TYPE, CONSUMER_TYPE, SHARE_TYPE = "classic", "consumer", "share"


def _listed_groups(broker) -> list[tuple[str, str, str, str]]:
    """(group id, protocol type, state, group type) of every group: classic and
    consumer-protocol groups, groups known only by committed offsets (classic, Empty, as
    Kafka keeps them), and share groups (protocol type ``share``)."""
    listed = {}
    for gid, group in _all_groups(broker).items():
        info = group.describe() if group is not None else {"state": "Empty", "protocol_type": "consumer"}
        kind = CONSUMER_TYPE if isinstance(group, ConsumerProtocolGroup) else CLASSIC_TYPE
        listed[gid] = (gid, info["protocol_type"] or "consumer", info["state"], kind)
    for share in shares_of(broker).groups():
        if share.group_id not in listed:        # (a share heartbeat refuses a live other group)
            listed[share.group_id] = (share.group_id, SHARE_TYPE, share.state(), SHARE_TYPE)
    return [listed[g] for g in sorted(listed)]


def list_groups(broker, conn, header, req):
    """ListGroups: v4's StatesFilter and v5's TypesFilter match case-insensitively, as
    Kafka's group coordinator does (an unknown type matches no group)."""
    v = header.api_version
    states = {s.lower() for s in req.states_filter} if v >= 4 and req.states_filter else None
    types = {t.lower() for t in req.types_filter} if v >= 5 and req.types_filter else None
    listed = []
    every = allowed(broker, conn, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME)
    for gid, protocol_type, state, group_type in _listed_groups(broker):
        if not every and not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, gid):
            continue
        if (states is not None and state.lower() not in states) or \
                (types is not None and group_type not in types):
            continue
        listed.append(m.ListGroupsResponseListedGroup(group_id=gid, protocol_type=protocol_type,
                                                      group_state=state, group_type=group_type))
    return m.ListGroupsResponse(throttle_time_ms=0, error_code=NONE, groups=listed)


def describe_groups(broker, conn, header, req):
    known = _all_groups(broker)
    out = []
    for gid in req.groups:
        if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, gid):
            out.append(m.DescribeGroupsResponseDescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid, group_state="",
                protocol_type="", protocol_data="", members=[]))
            continue
        group = known.get(gid)
        if group is None or isinstance(group, ConsumerProtocolGroup):
            # Kafka answers Dead for a group of the consumer protocol below v6 (its members
            # are described by ConsumerGroupDescribe).
            state = "Empty" if gid in known and group is None else "Dead"
            out.append(m.DescribeGroupsResponseDescribedGroup(
                error_code=NONE, group_id=gid, group_state=state, protocol_type="", protocol_data="",
                members=[]))
            continue
        info = group.describe()
        out.append(m.DescribeGroupsResponseDescribedGroup(
            error_code=NONE, group_id=gid, group_state=info["state"],
            protocol_type=info["protocol_type"], protocol_data=info["protocol"],
            members=[m.DescribeGroupsResponseDescribedGroupMember(
                member_id=mid, group_instance_id=iid, client_id=cid, client_host=host,
                member_metadata=meta, member_assignment=assignment)
                for mid, iid, cid, host, meta, assignment in info["members"]]))
    if header.api_version >= 3 and req.include_authorized_operations:
        for described in out:
            if described.error_code == NONE:
                described.authorized_operations = authorized_operations(
                    broker, conn, GROUP_RESOURCE, described.group_id)
    return m.DescribeGroupsResponse(throttle_time_ms=0, groups=out)


def delete_groups(broker, conn, header, req):
    """DeleteGroups: an Empty (or Dead) group goes with its committed offsets; a share
    group with its share-partitions' state; NON_EMPTY_GROUP while it has members."""
    known = _all_groups(broker)
    shares = shares_of(broker)
    results = []
    for gid in req.groups_names:
        group = known.get(gid, False)
        share = shares.group(gid, create=False)
        if not allowed(broker, conn, Operation.DELETE, GROUP_RESOURCE, gid):
            err = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif group is False and share is None:
            err = ErrorCode.GROUP_ID_NOT_FOUND
        elif group not in (None, False) and group.describe()["state"] not in ("Empty", "Dead"):
            err = ErrorCode.NON_EMPTY_GROUP
        else:
            try:
                if share is not None:
                    shares.delete_group(gid)
                if group is not False:
                    broker.store.coordinator.delete_group(gid)
                err = NONE
            except GroupError as exc:
                err = exc.code
            except Exception as exc:            # noqa: BLE001
                err = error_code(exc)[0]
        results.append(m.DeleteGroupsResponseDeletableGroupResult(group_id=gid, error_code=err))
    return m.DeleteGroupsResponse(throttle_time_ms=0, results=results)


def _subscribed_topics(info: dict) -> set[str] | None:
    """The topics a consumer group's members subscribe to (their ConsumerProtocolSubscription
    for the chosen protocol); None when some cannot be read: then every topic counts as
    subscribed, as Kafka's ClassicGroup.isSubscribedToTopic."""
    from pylog.coordinator.bridge import decode_subscription
    topics: set[str] = set()
    try:
        for member in info["members"]:
            topics |= decode_subscription(member[4])
    except Exception:                           # noqa: BLE001 - unreadable: all subscribed
        return None
    return topics


def offset_delete(broker, conn, header, req):
    """Kafka's OffsetDelete (kafka-consumer-groups --delete-offsets): an Empty group's
    offsets go; a live consumer group keeps those of topics it subscribes to
    (GROUP_SUBSCRIBED_TO_TOPIC per partition); a live group of another protocol type is
    NON_EMPTY_GROUP; an unknown or dead one GROUP_ID_NOT_FOUND; a partition that does not
    exist UNKNOWN_TOPIC_OR_PARTITION."""
    group = _all_groups(broker).get(req.group_id, False)
    info = group.describe() if group else {"state": "Empty", "protocol_type": "consumer"}
    if group is False or info["state"] == "Dead":
        return m.OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND, throttle_time_ms=0)
    subscribed: set[str] | None = set()
    if isinstance(group, ConsumerProtocolGroup):
        subscribed = group.subscribed_topics()
    elif info["state"] != "Empty":
        if info["protocol_type"] != "consumer":
            return m.OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP, throttle_time_ms=0)
        subscribed = _subscribed_topics(info)
    store = broker.store
    topics, deleting = [], []
    for t in req.topics:
        count = store.partition_count(t.name)
        parts = []
        for p in t.partitions:
            if count is None or not 0 <= p.partition_index < count:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif subscribed is None or t.name in subscribed:
                err = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                err = NONE
                deleting.append((t.name, p.partition_index))
            parts.append(m.OffsetDeleteResponseOffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=err))
        topics.append(m.OffsetDeleteResponseOffsetDeleteResponseTopic(name=t.name, partitions=parts))
    if deleting:
        try:
            store.coordinator.delete_offsets(req.group_id, deleting)
        except Exception as exc:                # noqa: BLE001
            return m.OffsetDeleteResponse(error_code=error_code(exc)[0], throttle_time_ms=0)
    return m.OffsetDeleteResponse(error_code=NONE, throttle_time_ms=0, topics=topics)
