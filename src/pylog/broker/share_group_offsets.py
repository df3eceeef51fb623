"""Share groups' offset admin APIs (KIP-932), as Kafka 4.1's Admin sends them
(``listShareGroupOffsets``, ``alterShareGroupOffsets``, ``deleteShareGroupOffsets``;
``kafka-share-groups.sh --describe --offsets``, ``--reset-offsets``, ``--delete-offsets``):

- DescribeShareGroupOffsets: each share-partition's start offset (SPSO), for the topics
  named or (Topics null) every share-partition the group keeps state for; a partition
  without state answers StartOffset -1, as Kafka's share coordinator answers an
  uninitialized one;
- AlterShareGroupOffsets: share-partitions start over at the given offsets (every record
  from there AVAILABLE, none delivered yet); creates the group if there is none;
- DeleteShareGroupOffsets: forgets the state of whole topics (the next fetch starts at
  ``share.auto.offset.reset`` again).

Alter and delete need an empty group (NON_EMPTY_GROUP otherwise: a member could hold
records of the window replaced), as Kafka's group coordinator checks; alter's group-level
errors are repeated on each partition (Kafka 4.1's Admin reads only those). A group id held by
a classic or consumer group, or no group at all (describe, delete), is GROUP_ID_NOT_FOUND.
Authorization as Kafka's KafkaApis: describe needs DESCRIBE on the group and each topic,
alter READ on both, delete DELETE on the group and READ on each topic.
"""

from __future__ import annotations

from pylog.common.acl import Operation
from pylog.errors import ErrorCode
from pylog.protocol import messages as m

from .admin import topic_ids
from .authorizer import TOPIC, allowed
from .authorizer import GROUP as GROUP_RESOURCE
from .errors import error_code
from .share_groups import not_share_group, shares_of

__all__ = ["describe_share_group_offsets", "alter_share_group_offsets",
           "delete_share_group_offsets"]

#: The start offset of a share-partition with no state (Kafka's UNINITIALIZED_START_OFFSET).
UNINITIALIZED = -1
_NO_TOPIC_ID = bytes(16)


def _partition_exists(broker, topic: str, partition: int) -> bool:
    count = broker.store.partition_count(topic)
    return count is not None and 0 <= partition < count


def _leader_epoch(broker, topic: str, partition: int) -> int:
    try:
        return broker.store.log(topic, partition).leader_epoch
    except Exception:                           # noqa: BLE001 - a partition gone: unknown
        return -1


def _group_missing(broker, group_id: str) -> tuple[int, str]:
    if not_share_group(broker, group_id):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."


# ================================================== DescribeShareGroupOffsets

def describe_share_group_offsets(broker, conn, header, req):
    shares = shares_of(broker)
    ids = topic_ids(broker)
    out = []
    for g in req.groups:
        described = m.DescribeShareGroupOffsetsResponseDescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, topics=[])
        out.append(described)
        if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, g.group_id):
            described.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            described.error_message = "Group authorization failed."
            continue
        group = shares.group(g.group_id, create=False)
        if group is None:
            described.error_code, described.error_message = _group_missing(broker, g.group_id)
            continue
        offsets = group.start_offsets()
        if g.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                if allowed(broker, conn, Operation.DESCRIBE, TOPIC, topic):
                    wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        for topic, partitions in wanted.items():
            may = allowed(broker, conn, Operation.DESCRIBE, TOPIC, topic)
            parts = []
            for p in partitions:
                part = m.DescribeShareGroupOffsetsResponseDescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=UNINITIALIZED, leader_epoch=-1,
                    error_code=ErrorCode.NONE)
                if not may:
                    part.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    part.error_message = "Topic authorization failed."
                elif not _partition_exists(broker, topic, p):
                    part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    part.error_message = f"Partition {topic}-{p} does not exist."
                else:
                    part.start_offset = offsets.get((topic, p), UNINITIALIZED)
                    part.leader_epoch = _leader_epoch(broker, topic, p)
                parts.append(part)
            described.topics.append(
                m.DescribeShareGroupOffsetsResponseDescribeShareGroupOffsetsResponseTopic(
                    topic_name=topic, topic_id=ids.by_name.get(topic, _NO_TOPIC_ID), partitions=parts))
    return m.DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=out)


# ===================================================== AlterShareGroupOffsets

def alter_share_group_offsets(broker, conn, header, req):
    ids = topic_ids(broker)

    def fail(code: int, message: str):
        # The group's error at the top, as Kafka's broker answers it, and on every
        # partition too: Kafka 4.1's Admin reads only the partitions' errors (and reports
        # a top-level NON_EMPTY_GROUP alone as success), later Admins the top-level one.
        return m.AlterShareGroupOffsetsResponse(
            throttle_time_ms=0, error_code=code, error_message=message, responses=[
                m.AlterShareGroupOffsetsResponseAlterShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, topic_id=ids.by_name.get(t.topic_name, _NO_TOPIC_ID),
                    partitions=[m.AlterShareGroupOffsetsResponseAlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=code, error_message=message)
                        for p in t.partitions])
                for t in req.topics])

    gid = req.group_id
    if not gid or not gid.strip():
        return fail(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, gid):
        return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if not_share_group(broker, gid):
        return fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
    shares = shares_of(broker)
    group = shares.group(gid)
    responses = []
    with group.lock:
        if group.members:
            return fail(ErrorCode.NON_EMPTY_GROUP, f"Share group {gid} is not empty: its offsets "
                                                   f"can be altered only while it has no member.")
        for t in req.topics:
            may = allowed(broker, conn, Operation.READ, TOPIC, t.topic_name)
            parts = []
            for p in t.partitions:
                code, message = ErrorCode.NONE, None
                if not may:
                    code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
                elif not _partition_exists(broker, t.topic_name, p.partition_index):
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    message = f"Partition {t.topic_name}-{p.partition_index} does not exist."
                elif p.start_offset < 0:
                    code = ErrorCode.INVALID_REQUEST
                    message = f"start offset {p.start_offset} is negative"
                else:
                    try:
                        group.alter_start_offset(t.topic_name, p.partition_index, p.start_offset)
                    except Exception as exc:    # noqa: BLE001 - answered per partition
                        code, message = error_code(exc)[0], str(exc)
                parts.append(m.AlterShareGroupOffsetsResponseAlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=code, error_message=message))
            responses.append(m.AlterShareGroupOffsetsResponseAlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name, topic_id=ids.by_name.get(t.topic_name, _NO_TOPIC_ID),
                partitions=parts))
    return m.AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                            responses=responses)


# ==================================================== DeleteShareGroupOffsets

def delete_share_group_offsets(broker, conn, header, req):
    def fail(code: int, message: str):
        return m.DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code,
                                                 error_message=message, responses=[])

    gid = req.group_id
    if not gid or not gid.strip():
        return fail(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if not allowed(broker, conn, Operation.DELETE, GROUP_RESOURCE, gid):
        return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    group = shares_of(broker).group(gid, create=False)
    if group is None:
        return fail(*_group_missing(broker, gid))
    ids = topic_ids(broker)
    responses, deleting = [], []
    with group.lock:
        if group.members:
            return fail(ErrorCode.NON_EMPTY_GROUP, f"Share group {gid} is not empty: its offsets "
                                                   f"can be deleted only while it has no member.")
        for t in req.topics:
            topic = m.DeleteShareGroupOffsetsResponseDeleteShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name, topic_id=ids.by_name.get(t.topic_name, _NO_TOPIC_ID),
                error_code=ErrorCode.NONE)
            if not allowed(broker, conn, Operation.READ, TOPIC, t.topic_name):
                topic.error_code, topic.error_message = (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                         "Topic authorization failed.")
            elif broker.store.partition_count(t.topic_name) is None:
                topic.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topic.error_message = f"Topic {t.topic_name} does not exist."
            else:
                deleting.append(t.topic_name)
            responses.append(topic)
        if deleting:
            try:
                group.delete_topic_state(set(deleting))
            except Exception as exc:            # noqa: BLE001
                return fail(error_code(exc)[0], str(exc))
    return m.DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                             responses=responses)
