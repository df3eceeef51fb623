"""Committed offsets expire after ``offsets.retention.minutes`` (KIP-211), by Kafka's
rules (GroupMetadata.removeExpiredOffsets), checked every
``offsets.retention.check.interval.ms``:

- an Empty group (its members all left): every offset, once the retention has passed
  since the group became Empty;
- a group known only by its offsets (a "simple" consumer that commits without joining,
  or a group from before a restart: pylog keeps no membership across one): each offset
  once the retention has passed since it was committed;
- a Stable consumer group: offsets of topics its members do not subscribe to, once the
  retention has passed since they were committed;
- any other group (rebalancing, or a protocol type other than ``consumer``): none;
- a group of the consumer protocol (KIP-848; Kafka's ConsumerGroup expires by commit
  time): offsets of topics its members do not subscribe to (all, once it is empty),
  once the retention has passed since they were committed.

An Empty group left with no offsets is deleted (Kafka's Dead), as DeleteGroups would.
"""

from __future__ import annotations

import logging

__all__ = ["expire_offsets"]

log = logging.getLogger(__name__)


def expire_offsets(coordinator, now_ms: int, retention_ms: int) -> int:
    """Tombstones the expired offsets of every group; returns how many."""
    from .bridge import decode_subscription
    classic = {g.group_id: g for g in coordinator.classic_groups()}
    consumer = {g.group_id: g for g in coordinator.consumer_groups_of_protocol()}
    expired_total = 0
    for group_id in coordinator.consumer_groups():
        offsets = coordinator.committed_offsets(group_id)
        group = classic.get(group_id)
        info = group.describe() if group is not None else None
        if group_id in consumer:
            subscribed = consumer[group_id].subscribed_topics()
            expired = [tp for tp, o in offsets.items() if tp[0] not in subscribed
                       and now_ms - o.commit_timestamp >= retention_ms]
        elif info is None:
            expired = [tp for tp, o in offsets.items() if now_ms - o.commit_timestamp >= retention_ms]
        elif info["state"] == "Empty":
            expired = list(offsets) if now_ms - group.empty_since_ms >= retention_ms else []
        elif info["state"] == "Stable" and info["protocol_type"] == "consumer":
            try:
                subscribed = set().union(*(decode_subscription(mem[4]) for mem in info["members"]))
            except Exception:                   # noqa: BLE001 - unreadable: keep everything
                continue
            expired = [tp for tp, o in offsets.items() if tp[0] not in subscribed
                       and now_ms - o.commit_timestamp >= retention_ms]
        else:
            expired = []
        if not expired:
            continue
        try:
            coordinator.delete_offsets(group_id, expired)
        except Exception as exc:                # noqa: BLE001 - a task must not raise
            log.warning("could not expire offsets of group %s: %s", group_id, exc)
            continue
        expired_total += len(expired)
        log.info("group %s: %d committed offsets expired (offsets.retention.minutes)",
                 group_id, len(expired))
        if group is not None and info["state"] == "Empty" and \
                not coordinator.committed_offsets(group_id):
            coordinator.delete_group(group_id)
        elif group_id in consumer and consumer[group_id].is_empty() and \
                not coordinator.committed_offsets(group_id):
            coordinator.delete_group(group_id)
    return expired_total
