"""The server-side assignors of the consumer rebalance protocol (KIP-848): ``uniform`` and
``range``, as Kafka's group coordinator names them (``group.consumer.assignors``).

An assignor maps the members' subscriptions to a *target assignment*: every partition of
a subscribed topic to exactly one member subscribed to it. It is a pure function of

- ``subscriptions``: member id -> the topics it subscribes to (that exist);
- ``partitions``: topic -> its partition count;
- ``previous``: the last target assignment (member id -> topic -> partitions),

and returns the new one in the same shape (every member present, possibly empty). The
coordinator moves members towards it one revocation at a time (consumer_group.py).

``uniform`` (Kafka's default, UniformAssignor) spreads the partitions so member counts
differ by at most one among members with the same subscription, keeping each partition
where it was whenever that stays balanced (sticky: a member joining takes partitions
from the most loaded, nobody else moves). ``range`` (RangeAssignor) gives each member,
per topic, a contiguous range of partitions in member-id order (co-partitioned topics
land together), keeping a partition with its previous owner when that owner's quota
for the topic allows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["ASSIGNORS", "Assignment", "range_assign", "uniform_assign"]

#: member id -> topic -> partitions
Assignment = dict[str, dict[str, set[int]]]


def _empty(subscriptions: Mapping[str, set[str]]) -> Assignment:
    return {member: {} for member in subscriptions}


def uniform_assign(subscriptions: Mapping[str, set[str]], partitions: Mapping[str, int],
                   previous: Mapping[str, Mapping[str, set[int]]]) -> Assignment:
    """Balanced and sticky: previous owners keep their partitions, unowned ones go to the
    least loaded eligible member, then partitions move one at a time from a member to an
    eligible one holding at least two fewer until no such move remains."""
    out = _empty(subscriptions)
    load = {member: 0 for member in subscriptions}
    owner: dict[tuple[str, int], str] = {}
    # 1. Stickiness: a partition stays with its previous owner if still subscribed.
    for member in sorted(previous):
        if member not in out:
            continue
        for topic, parts in previous[member].items():
            if topic not in subscriptions[member] or topic not in partitions:
                continue
            for p in parts:
                if p < partitions[topic] and (topic, p) not in owner:
                    owner[(topic, p)] = member
                    out[member].setdefault(topic, set()).add(p)
                    load[member] += 1
    # 2. Unowned partitions to the least loaded member subscribed to the topic.
    eligible = {t: sorted(m for m, topics in subscriptions.items() if t in topics)
                for t in partitions}
    for topic in sorted(partitions):
        if not eligible[topic]:
            continue
        for p in range(partitions[topic]):
            if (topic, p) in owner:
                continue
            member = min(eligible[topic], key=lambda m: (load[m], m))
            owner[(topic, p)] = member
            out[member].setdefault(topic, set()).add(p)
            load[member] += 1
    # 3. Balance: a move from a member to an eligible one with at least two fewer
    # partitions lowers the spread; repeat until none exists. Each move strictly
    # decreases the sum of squared loads, so this ends.
    moved = True
    while moved:
        moved = False
        for giver in sorted(load, key=lambda m: (-load[m], m)):
            for topic in sorted(out[giver]):
                takers = [m for m in eligible[topic] if load[m] + 1 < load[giver]]
                if not takers or not out[giver][topic]:
                    continue
                taker = min(takers, key=lambda m: (load[m], m))
                p = max(out[giver][topic])
                out[giver][topic].discard(p)
                if not out[giver][topic]:
                    del out[giver][topic]
                out[taker].setdefault(topic, set()).add(p)
                load[giver] -= 1
                load[taker] += 1
                moved = True
                break
            if moved:
                break
    return out


def range_assign(subscriptions: Mapping[str, set[str]], partitions: Mapping[str, int],
                 previous: Mapping[str, Mapping[str, set[int]]]) -> Assignment:
    """Per topic, the members subscribed to it (sorted by id) get ``n // k`` partitions
    each and the first ``n % k`` one more; a member keeps the partitions it had up to its
    quota, the rest are dealt in partition order to the members below theirs."""
    out = _empty(subscriptions)
    for topic in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(members))
        quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(members)}
        taken: set[int] = set()
        for m in members:
            kept = sorted(p for p in previous.get(m, {}).get(topic, ()) if p < n)[:quota[m]]
            if kept:
                out[m][topic] = set(kept)
                taken.update(kept)
        free = iter(p for p in range(n) if p not in taken)
        for m in members:
            need = quota[m] - len(out[m].get(topic, ()))
            for _ in range(need):
                out[m].setdefault(topic, set()).add(next(free))
    return out


#: name -> assignor, the names Kafka's ConsumerGroupPartitionAssignor.name() gives.
ASSIGNORS: dict[str, Callable[..., Assignment]] = {"uniform": uniform_assign, "range": range_assign}
