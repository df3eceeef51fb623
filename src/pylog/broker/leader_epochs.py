"""OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends, from each
partition's leader-epoch cache (pylog.storage.leader_epochs).

Kafka's Java consumer asks it before it resumes from a committed offset (and after a
leader change): the epoch of the last record it saw, and the end offset of that epoch;
an end offset below its position means the log was truncated under it (it resets, or
raises LogTruncationException). The current leader epoch a client names is checked as
Kafka's Partition does: older than the partition's is FENCED_LEADER_EPOCH, newer is
UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from pylog.errors import ErrorCode
from pylog.protocol import messages as m

from .errors import RequestError, error_code

__all__ = ["offset_for_leader_epoch", "check_current_leader_epoch"]


def check_current_leader_epoch(log, current: int) -> None:
    """Raises RequestError unless `current` is -1 (not given) or the log's leader epoch."""
    if current == -1 or current == log.leader_epoch:
        return
    if current < log.leader_epoch:
        raise RequestError(ErrorCode.FENCED_LEADER_EPOCH,
                           f"leader epoch {current} is older than the partition's "
                           f"{log.leader_epoch}")
    raise RequestError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                       f"leader epoch {current} is newer than the partition's {log.leader_epoch}")


def offset_for_leader_epoch(broker, conn, header, req):
    topics = []
    for topic in req.topics:
        parts = []
        for p in topic.partitions:
            resp = m.OffsetForLeaderEpochResponseEpochEndOffset(partition=p.partition,
                                                                leader_epoch=-1, end_offset=-1)
            try:
                log = broker.store.log(topic.topic, p.partition)
                check_current_leader_epoch(log, p.current_leader_epoch)
                resp.leader_epoch, resp.end_offset = log.leader_epochs.end_offset_for(
                    p.leader_epoch, log.log_end_offset)
            except Exception as exc:            # noqa: BLE001 - answered per partition
                resp.error_code = error_code(exc)[0]
            parts.append(resp)
        topics.append(m.OffsetForLeaderEpochResponseOffsetForLeaderTopicResult(
            topic=topic.topic, partitions=parts))
    return m.OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
