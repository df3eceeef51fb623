"""In-process consumer groups: members of one ``group.id`` share partitions.

A group lives in one process; the store's GroupCoordinator keeps one per group id. Members join with
their subscription; every join and leave is a *rebalance*: a new generation
whose assignment is computed by the first assignor all members support
(``range`` or ``roundrobin``, Kafka's RangeAssignor and RoundRobinAssignor).

Positions are kept by the group, not the members, so a partition moves to
its new owner at exactly the position its old owner reached. A member's
poll snapshots (generation, its partitions, their positions) under the group
lock, reads without it, and commits the new positions only for partitions
it still owns in the same generation; records read from a partition that
was reassigned meanwhile are dropped, so no record is handed to two members.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

from pylog.common.topic_partition import TopicPartition

__all__ = ["ConsumerGroup", "range_assign", "roundrobin_assign"]


def range_assign(members: dict[str, set[str]], partitions: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, consecutive ranges of partitions to the
    members (sorted by id) subscribed to it; the first members get one extra."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(subscribed))
        start = 0
        for i, member in enumerate(subscribed):
            count = per + (1 if i < extra else 0)
            out[member] += [TopicPartition(topic, p) for p in range(start, start + count)]
            start += count
    return out


def roundrobin_assign(members: dict[str, set[str]], partitions: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RoundRobinAssignor: all partitions in (topic, partition) order dealt
    to the members (sorted by id) in turn, skipping members not subscribed."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = sorted(members)
    i = 0
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            for _ in range(len(order)):
                member = order[i % len(order)]
                i += 1
                if topic in members[member]:
                    out[member].append(TopicPartition(topic, p))
                    break
    return out


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}


def _assign_subset(members: dict[str, set[str]], allowed) -> dict[str, list[TopicPartition]]:
    """The partitions of `allowed` dealt round-robin to the members subscribed to each
    (the process's share of a group it shares with remote clients)."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp in sorted(allowed):
        candidates = sorted((len(out[m]), m) for m, topics in members.items() if tp.topic in topics)
        if candidates:
            out[candidates[0][1]].append(tp)
    return out


class ConsumerGroup:
    """One group's members, generation, assignment and positions."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.lock = threading.RLock()
        self.generation = 0
        self.members: dict[str, tuple[list[str] | re.Pattern, tuple[str, ...]]] = {}
        self.assignment: dict[str, list[TopicPartition]] = {}
        self.positions: dict[TopicPartition, int] = {}
        self.topic_epoch = -1         # the store's topic epoch of the last rebalance
        # The partitions this process may hand out, when remote Kafka clients share the
        # group (set by the GroupBridge, bridge.py); None: every subscribed partition.
        self.allowed: set[TopicPartition] | None = None
        self._next_member = 0

    def join(self, subscription: list[str] | re.Pattern, strategies: tuple[str, ...],
             topics: Iterable[str], partitions_of) -> str:
        with self.lock:
            member = f"{self.group_id}-member-{self._next_member}"
            self._next_member += 1
            self.members[member] = (subscription, strategies)
            self.rebalance(topics, partitions_of)
            return member

    def leave(self, member: str, topics: Iterable[str], partitions_of) -> None:
        with self.lock:
            if self.members.pop(member, None) is not None:
                self.assignment.pop(member, None)
                self.rebalance(topics, partitions_of)

    def _wanted(self, topics: list[str]) -> dict[str, set[str]]:
        wanted: dict[str, set[str]] = {}
        for member, (subscription, _) in self.members.items():
            if isinstance(subscription, re.Pattern):
                wanted[member] = {t for t in topics if subscription.fullmatch(t)
                                  and not t.startswith("__")}
            else:
                wanted[member] = set(subscription)
        return wanted

    def subscribed_topics(self, topics: Iterable[str]) -> set[str]:
        """The topics some member subscribes to (lock held)."""
        return set().union(*self._wanted(list(topics)).values()) if self.members else set()

    def rebalance(self, topics: Iterable[str], partitions_of) -> None:
        """A new generation (lock held): every subscribed partition to exactly one member
        (of ``allowed`` only, when remote clients share the group)."""
        topics = list(topics)
        wanted = self._wanted(topics)
        if self.allowed is not None:
            self.assignment = _assign_subset(wanted, self.allowed)
            self.generation += 1
            return
        counts = {t: partitions_of(t) for t in set().union(*wanted.values())} if wanted else {}
        counts = {t: n for t, n in counts.items() if n}
        common = [s for s in next(iter(self.members.values()))[1]
                  if all(s in strategies for _, strategies in self.members.values())] \
            if self.members else ["range"]
        if not common:
            raise ValueError(f"group {self.group_id!r}: the members support no common "
                             f"partition.assignment.strategy")
        self.assignment = ASSIGNORS[common[0]](wanted, counts) if wanted else {}
        self.generation += 1
