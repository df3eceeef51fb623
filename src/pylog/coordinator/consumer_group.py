"""A group of the consumer rebalance protocol (KIP-848): Kafka's ``ConsumerGroup`` with the
reconciliation of its ``CurrentAssignmentBuilder``, driven by ConsumerGroupHeartbeat.

The coordinator, not a leader member, assigns. Three epochs order everything:

- the **group epoch** grows whenever the membership, a subscription or the partition
  count of a subscribed topic changes;
- the **assignment epoch** is the group epoch the *target assignment* was computed at
  (by the server-side assignor, assignors.py); it catches up on the next heartbeat;
- each member's **member epoch** is the assignment epoch it has reconciled to.

A member moves towards its target on its own heartbeats, never stopping the others:
partitions it must give up are first *revoked* (it stays at its epoch, state
UNREVOKED_PARTITIONS, until a heartbeat reports it no longer owns them); partitions it
gains are handed over only once no other member holds them (UNRELEASED_PARTITIONS until
then). Invariant: a partition is in at most one member's ``assigned`` or ``revoking`` set
(``_owner`` maps it to that member), so no partition is owned by two members at once.

Members leave with epoch -1; a static member (instance id) with -2 keeps its partitions
for its session so that a restart with the same instance id takes them back without a
rebalance. A member whose session (``group.consumer.session.timeout.ms``) lapses, or that
does not revoke within its rebalance timeout, is fenced: removed, its partitions freed.

Membership persists as Kafka's does, in ``__consumer_offsets`` (group_records.py): after
each heartbeat or deadline that changed it, the group hands the records of what changed
(group epoch, assignment epoch, and each changed member's metadata, target and current
assignment; tombstones for a removed member) to its writer, the coordinator, which appends
those that differ from what it last wrote. A broker restarted (even by kill -9) rebuilds
the group from them (:meth:`ConsumerProtocolGroup.restore`): members heartbeating at their
epoch go on with their partitions, no rebalance; members that never come back are fenced
when their session, counted again from the restart, lapses.

Thread safety: every public method takes ``lock``; timer callbacks too.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pylog.errors import ErrorCode, PylogError

from .assignors import ASSIGNORS, Assignment
from .group_records import (
    CONSUMER_CURRENT_ASSIGNMENT,
    CONSUMER_GROUP_METADATA,
    CONSUMER_MEMBER_METADATA,
    CONSUMER_TARGET_MEMBER,
    CONSUMER_TARGET_METADATA,
    CurrentAssignment,
    MemberMetadata,
    decode_assignment_epoch,
    decode_current_assignment,
    decode_group_epoch,
    decode_group_key,
    decode_member_metadata,
    decode_target_member,
    encode_assignment_epoch,
    encode_current_assignment,
    encode_group_epoch,
    encode_member_metadata,
    encode_target_member,
    group_key,
    member_key,
    metadata_hash,
)
from .timer import DeadlineTimer, TimerHandle

__all__ = ["ConsumerProtocolGroup", "GroupError", "HeartbeatResult", "TopicsView",
           "LEAVE_GROUP_EPOCH", "LEAVE_GROUP_STATIC_EPOCH"]

log = logging.getLogger(__name__)

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2

STABLE, UNREVOKED, UNRELEASED = "STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"
#: Kafka's ConsumerGroupState names, as ConsumerGroupDescribe and ListGroups report them.
EMPTY, ASSIGNING, RECONCILING, GROUP_STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"


#: The Kafka error codes this protocol answers with (pylog.error_codes, generated).
codes = ErrorCode


class GroupError(PylogError):
    """A group request refused: Kafka's error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class TopicsView:
    """The store's topics as the group sees them at one heartbeat."""
    epoch: int                                  # the store's topic epoch
    partitions_of: Callable[[str], int | None]
    names: Callable[[], Iterable[str]]          # every non-internal topic (regexes)


@dataclass(slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    #: topic -> partitions, or None when the response carries no assignment.
    assignment: dict[str, set[int]] | None


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300000
    epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    assigned: dict[str, set[int]] = field(default_factory=dict)
    revoking: dict[str, set[int]] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)     # its subscription, resolved
    topics_epoch: int = -1                            # the store's topic epoch of `topics`
    session: TimerHandle | None = None
    revocation_deadline: TimerHandle | None = None


def _copy(a: Mapping[str, Iterable[int]]) -> dict[str, set[int]]:
    return {t: set(ps) for t, ps in a.items() if ps}


def _intersects(a: Mapping[str, set[int]], b: Mapping[str, set[int]]) -> bool:
    return any(a[t] & b[t] for t in a.keys() & b.keys())


def _is_subset(a: Mapping[str, set[int]], b: Mapping[str, set[int]]) -> bool:
    return all(ps <= b.get(t, set()) for t, ps in a.items())


class ConsumerProtocolGroup:
    """One group of the consumer protocol. ``heartbeat`` is ConsumerGroupHeartbeat."""

    protocol_type = "consumer"

    def __init__(self, group_id: str, timer: DeadlineTimer, assignors: list[str],
                 session_timeout_ms: int, heartbeat_interval_ms: int, max_size: int = 2**31 - 1) -> None:
        self.group_id = group_id
        self.lock = threading.RLock()
        self.timer = timer
        self.assignors = assignors or ["uniform"]
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.static: dict[str, str] = {}                   # instance id -> member id
        self.target: Assignment = {}
        self._owner: dict[tuple[str, int], str] = {}       # partition -> the member holding it
        self._subscribed_counts: dict[str, int] = {}       # subscribed topic -> partitions
        self._metadata_hash = metadata_hash({})
        #: A restored group's stored MetadataHash until its subscriptions are resolved.
        self._restored_hash: int | None = None
        self.dead = False
        # Persistence (attach_persistence): the writer of records, a topic's id; what
        # changed since the last write (members' ids, or everything).
        self._write: Callable[[dict[bytes, bytes | None], bool], bool] | None = None
        self._topic_id: Callable[[str], bytes | None] = lambda topic: None
        self._dirty: set[str] = set()
        self._dirty_all = False

    # ============================================================== heartbeat

    def heartbeat(self, member_id: str, member_epoch: int, *, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int,
                  subscribed_names: list[str] | None, subscribed_regex: str | None,
                  server_assignor: str | None, owned: dict[str, set[int]] | None,
                  client_id: str, client_host: str, topics: TopicsView) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat (validated by the caller as Kafka's
        throwIfConsumerGroupHeartbeatRequestIsInvalid). Raises GroupError."""
        with self.lock:
            if self.dead:
                raise GroupError(codes.GROUP_ID_NOT_FOUND, f"Consumer group {self.group_id} not found.")
            try:
                return self._heartbeat(member_id, member_epoch, instance_id, rack_id,
                                       rebalance_timeout_ms, subscribed_names, subscribed_regex,
                                       server_assignor, owned, client_id, client_host, topics)
            finally:
                self._persist()

    def _heartbeat(self, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                   subscribed_names, subscribed_regex, server_assignor, owned, client_id,
                   client_host, topics) -> HeartbeatResult:
        # The caller holds the lock.
        if member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            return self._leave(member_id, member_epoch, instance_id)
        if server_assignor is not None and server_assignor not in self.assignors:
            raise GroupError(codes.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {server_assignor} is not supported. Supported "
                             f"assignors: {', '.join(self.assignors)}.")
        if subscribed_regex is not None:
            try:
                re.compile(subscribed_regex)
            except re.error as exc:
                raise GroupError(codes.INVALID_REQUEST,
                                 f"SubscribedTopicRegex {subscribed_regex!r} is invalid: {exc}") from None
        changed = False
        if member_epoch == 0:
            member_id = member_id or uuid.uuid4().hex[:22]
            member, changed = self._joining(member_id, instance_id)
        else:
            member = self._existing(member_id, member_epoch, instance_id, owned)
        self._dirty.add(member.member_id)
        before = _copy(member.assigned)
        # The fields a heartbeat leaves null keep their values (incremental requests).
        if subscribed_names is not None and sorted(subscribed_names) != sorted(member.subscribed_names):
            member.subscribed_names, changed = list(subscribed_names), True
        if subscribed_regex is not None and (subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex, changed = subscribed_regex or None, True
        if server_assignor is not None:
            member.server_assignor = server_assignor
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id, client_host
        if changed:
            member.topics_epoch = -1
        self._refresh_subscriptions(topics, force=changed)
        if self.group_epoch > self.assignment_epoch:
            self._compute_target(topics)
        self._reconcile(member, owned)
        self._schedule_session(member)
        full = member_epoch == 0 or (rebalance_timeout_ms != -1 and subscribed_names is not None
                                     and owned is not None)
        send = full or member.assigned != before
        return HeartbeatResult(member.member_id, member.epoch,
                               _copy(member.assigned) if send else None)

    def _joining(self, member_id: str, instance_id: str | None) -> tuple[Member, bool]:
        """The member joining (epoch 0): new, a rejoin of a known id (its old holdings are
        released: it lost them), or a static member replacing its instance's previous one."""
        if instance_id is not None:
            old_id = self.static.get(instance_id)
            if old_id is not None and old_id != member_id:
                old = self.members[old_id]
                if old.epoch != LEAVE_GROUP_STATIC_EPOCH:
                    raise GroupError(codes.UNRELEASED_INSTANCE_ID,
                                     f"Static member {old_id} with instance id {instance_id} "
                                     f"cannot be replaced because it has not left the group.")
                # The new member takes the old one's place and target assignment: no rebalance.
                target = self.target.get(old_id)
                self._remove(old)
                member = Member(member_id, instance_id=instance_id,
                                subscribed_names=list(old.subscribed_names),
                                subscribed_regex=old.subscribed_regex,
                                server_assignor=old.server_assignor,
                                rebalance_timeout_ms=old.rebalance_timeout_ms)
                self.members[member_id] = member
                self.static[instance_id] = member_id
                if target is not None:
                    self.target[member_id] = target
                return member, False
        member = self.members.get(member_id)
        if member is not None:
            self._release_all(member)
            member.epoch, member.previous_epoch, member.state = 0, -1, STABLE
            if instance_id is not None:
                member.instance_id = instance_id
                self.static[instance_id] = member_id
            return member, False
        if len(self.members) >= self.max_size:
            raise GroupError(codes.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        member = self.members[member_id] = Member(member_id, instance_id=instance_id)
        if instance_id is not None:
            self.static[instance_id] = member_id
        return member, True

    def _existing(self, member_id: str, epoch: int, instance_id: str | None,
                  owned: dict[str, set[int]] | None) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(codes.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {self.group_id}.")
        if instance_id is not None and self.static.get(instance_id) != member_id:
            raise GroupError(codes.FENCED_INSTANCE_ID,
                             f"Static member {member_id} with instance id {instance_id} was fenced "
                             f"by another member.")
        if epoch > member.epoch:
            raise GroupError(codes.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a greater member epoch ({epoch}) "
                             f"than the one known by the group coordinator ({member.epoch}). "
                             f"The member must abandon all its partitions and rejoin.")
        if epoch < member.epoch:
            # The response that bumped its epoch may have been lost: the previous epoch is
            # accepted with owned partitions inside the current assignment.
            if epoch != member.previous_epoch or owned is None or not _is_subset(owned, member.assigned):
                raise GroupError(codes.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch ({epoch}) "
                                 f"than the one known by the group coordinator ({member.epoch}). "
                                 f"The member must abandon all its partitions and rejoin.")
        return member

    def _leave(self, member_id: str, epoch: int, instance_id: str | None) -> HeartbeatResult:
        member = self.members.get(member_id)
        if instance_id is not None and member is None:
            found = self.static.get(instance_id)
            member = self.members.get(found) if found else None
        if member is None:
            raise GroupError(codes.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {self.group_id}.")
        self._dirty.add(member.member_id)
        if epoch == LEAVE_GROUP_STATIC_EPOCH and member.instance_id is not None:
            # It keeps its partitions for its session, for the restart with its instance id.
            member.epoch = LEAVE_GROUP_STATIC_EPOCH
            self._cancel_revocation(member)
            self._schedule_session(member)
            log.info("group %s: static member %s (%s) left temporarily", self.group_id,
                     member.member_id, member.instance_id)
        else:
            log.info("group %s: member %s left", self.group_id, member.member_id)
            self._remove(member)
            self.group_epoch += 1
        return HeartbeatResult(member.member_id, epoch, None)

    # ======================================================= subscriptions

    def _resolve(self, member: Member, topics: TopicsView) -> set[str]:
        if member.topics_epoch != topics.epoch:
            wanted = {t for t in member.subscribed_names if topics.partitions_of(t)}
            if member.subscribed_regex:
                pattern = re.compile(member.subscribed_regex)
                wanted |= {t for t in topics.names() if pattern.fullmatch(t)}
            member.topics, member.topics_epoch = wanted, topics.epoch
        return member.topics

    def _refresh_subscriptions(self, topics: TopicsView, force: bool) -> None:
        """Bumps the group epoch when a subscription or a subscribed topic's partition
        count changed (Kafka compares the subscription metadata)."""
        subscribed = set().union(*(self._resolve(m, topics) for m in self.members.values())) \
            if self.members else set()
        counts = {t: topics.partitions_of(t) or 0 for t in subscribed}
        restored, self._restored_hash = self._restored_hash, None
        if not force and restored is not None and metadata_hash(counts) == restored:
            self._subscribed_counts = counts        # as stored before the restart
        elif force or counts != self._subscribed_counts:
            self._subscribed_counts = counts
            self._metadata_hash = metadata_hash(counts)
            self.group_epoch += 1

    def subscribed_topics(self) -> set[str]:
        """The topics some member subscribes to (as of its last heartbeat)."""
        with self.lock:
            return set().union(*(m.topics for m in self.members.values()))

    # ======================================================= assignment

    def assignor_name(self) -> str:
        """The assignor most members ask for, else the first configured."""
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        return asked.most_common(1)[0][0] if asked else self.assignors[0]

    def _compute_target(self, topics: TopicsView) -> None:
        subscriptions = {mid: self._resolve(m, topics) for mid, m in self.members.items()}
        counts = {t: n for t, n in self._subscribed_counts.items() if n}
        self.target = ASSIGNORS[self.assignor_name()](subscriptions, counts, self.target)
        self.assignment_epoch = self.group_epoch
        self._dirty_all = True

    def _reconcile(self, member: Member, owned: dict[str, set[int]] | None) -> None:
        if member.state == UNREVOKED:
            if owned is None or _intersects(owned, member.revoking):
                return                      # it still holds what it must give up
            self._release(member, member.revoking)
            member.revoking = {}
            member.state = STABLE
            self._cancel_revocation(member)
            self._next_assignment(member, owned)
        elif member.state == UNRELEASED or member.epoch != self.assignment_epoch:
            self._next_assignment(member, owned)

    def _next_assignment(self, member: Member, owned: dict[str, set[int]] | None) -> None:
        target = self.target.get(member.member_id, {})
        kept, revoke, pending = {}, {}, {}
        for topic in member.assigned.keys() | target.keys():
            current, wanted = member.assigned.get(topic, set()), target.get(topic, set())
            if current & wanted:
                kept[topic] = current & wanted
            if current - wanted:
                revoke[topic] = current - wanted
            if wanted - current:
                pending[topic] = wanted - current
        if revoke and (owned is None or _intersects(owned, revoke)):
            # Revoke first: same epoch, it keeps only `kept` until it reports the rest gone.
            member.assigned, member.revoking, member.state = kept, revoke, UNREVOKED
            self._schedule_revocation(member)
            return
        self._release(member, revoke)
        unreleased = False
        for topic, parts in pending.items():
            for p in parts:
                holder = self._owner.get((topic, p))
                if holder is None or holder == member.member_id:
                    kept.setdefault(topic, set()).add(p)
                    self._owner[(topic, p)] = member.member_id
                else:
                    unreleased = True
        member.assigned = kept
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.state = UNRELEASED if unreleased else STABLE

    def _release(self, member: Member, parts: Mapping[str, set[int]]) -> None:
        for topic, ps in parts.items():
            for p in ps:
                if self._owner.get((topic, p)) == member.member_id:
                    del self._owner[(topic, p)]

    def _release_all(self, member: Member) -> None:
        self._release(member, member.assigned)
        self._release(member, member.revoking)
        member.assigned, member.revoking = {}, {}
        self._cancel_revocation(member)

    def _remove(self, member: Member) -> None:
        self._dirty.add(member.member_id)
        self._release_all(member)
        self.timer.cancel(member.session)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]

    # ======================================================= deadlines

    def _schedule_session(self, member: Member) -> None:
        self.timer.cancel(member.session)
        handle: TimerHandle | None = None

        def expired() -> None:
            with self.lock:
                if member.session is handle and self.members.get(member.member_id) is member:
                    log.info("group %s: member %s's session expired: fenced", self.group_id,
                             member.member_id)
                    self._remove(member)
                    self.group_epoch += 1
                    self._persist()

        handle = member.session = self.timer.call_later(self.session_timeout_ms / 1000, expired)

    def _schedule_revocation(self, member: Member) -> None:
        if member.revocation_deadline is not None:
            return
        handle: TimerHandle | None = None
        epoch = member.epoch

        def expired() -> None:
            with self.lock:
                if (member.revocation_deadline is handle and member.state == UNREVOKED
                        and member.epoch == epoch and self.members.get(member.member_id) is member):
                    log.info("group %s: member %s did not revoke its partitions within its "
                             "rebalance timeout: fenced", self.group_id, member.member_id)
                    self._remove(member)
                    self.group_epoch += 1
                    self._persist()

        handle = member.revocation_deadline = self.timer.call_later(
            member.rebalance_timeout_ms / 1000, expired)

    def _cancel_revocation(self, member: Member) -> None:
        self.timer.cancel(member.revocation_deadline)
        member.revocation_deadline = None

    # ======================================================= persistence

    def attach_persistence(self, write: Callable[[dict[bytes, bytes | None], bool], bool],
                           topic_id: Callable[[str], bytes | None]) -> None:
        """From now on every change is handed to ``write(records, full)``: records are
        ``{key: value or None}`` of ``__consumer_offsets``; `full` says they are the whole
        group (keys of the group absent from them are gone); it returns False if it could
        not store them. `topic_id` gives a topic's 16-byte id, None for a topic gone."""
        with self.lock:
            self._write, self._topic_id = write, topic_id
            self._dirty_all = True
            self._persist()

    def _ids(self, assignment: Mapping[str, set[int]]) -> dict[bytes, list[int]]:
        out = {}
        for topic, parts in assignment.items():
            tid = self._topic_id(topic)
            if tid is not None and parts:
                out[tid] = sorted(parts)
        return out

    def _member_records(self, member_id: str) -> dict[bytes, bytes | None]:
        g = self.group_id
        keys = (member_key(CONSUMER_MEMBER_METADATA, g, member_id),
                member_key(CONSUMER_TARGET_MEMBER, g, member_id),
                member_key(CONSUMER_CURRENT_ASSIGNMENT, g, member_id))
        m = self.members.get(member_id)
        if m is None:
            return dict.fromkeys(keys)          # tombstones: the member is gone
        target = self.target.get(member_id)
        return {
            keys[0]: encode_member_metadata(MemberMetadata(
                m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_names,
                m.subscribed_regex, m.rebalance_timeout_ms, m.server_assignor)),
            keys[1]: None if target is None else encode_target_member(self._ids(target)),
            keys[2]: encode_current_assignment(CurrentAssignment(
                m.epoch, m.previous_epoch, m.state, self._ids(m.assigned), self._ids(m.revoking))),
        }

    def _persist(self) -> None:
        """Hands what changed since the last call to the writer (the caller holds the
        lock). The writer skips records equal to those it last wrote, so a heartbeat that
        changed nothing writes nothing."""
        if self._write is None or self.dead:
            return
        full, dirty = self._dirty_all, self._dirty
        self._dirty_all, self._dirty = False, set()
        g = self.group_id
        records: dict[bytes, bytes | None] = {
            group_key(CONSUMER_GROUP_METADATA, g): encode_group_epoch(self.group_epoch,
                                                                      self._metadata_hash),
            group_key(CONSUMER_TARGET_METADATA, g): encode_assignment_epoch(self.assignment_epoch),
        }
        for member_id in (self.members if full else dirty):
            records.update(self._member_records(member_id))
        if not self._write(records, full):
            self._dirty_all = True          # the append failed: everything at the next change

    def restore(self, records: Mapping[bytes, bytes], names: Mapping[bytes, str],
                topics: TopicsView) -> None:
        """Rebuilds the group from its records as last written (``{key: value}``; `names`
        maps topic ids to names: a topic gone since loses its partitions). Each member's
        session starts now; a member that was revoking gets its rebalance timeout again."""
        def named(assignment) -> dict[str, set[int]]:
            return {names[tid]: set(ps) for tid, ps in assignment.items() if tid in names and ps}

        by_kind: dict[int, dict[str | None, bytes]] = {}
        for key, value in records.items():
            parsed = decode_group_key(key)
            if parsed is not None:
                by_kind.setdefault(parsed[0], {})[parsed[2]] = value
        with self.lock:
            stored = by_kind.get(CONSUMER_GROUP_METADATA, {}).get(None)
            self.group_epoch, stored_hash = decode_group_epoch(stored) if stored else (0, 0)
            target_meta = by_kind.get(CONSUMER_TARGET_METADATA, {}).get(None)
            self.assignment_epoch = decode_assignment_epoch(target_meta) if target_meta else 0
            targets = by_kind.get(CONSUMER_TARGET_MEMBER, {})
            currents = by_kind.get(CONSUMER_CURRENT_ASSIGNMENT, {})
            for member_id, raw in sorted(by_kind.get(CONSUMER_MEMBER_METADATA, {}).items()):
                meta = decode_member_metadata(raw)
                m = Member(member_id, instance_id=meta.instance_id, rack_id=meta.rack_id,
                           client_id=meta.client_id, client_host=meta.client_host,
                           subscribed_names=list(meta.subscribed_names),
                           subscribed_regex=meta.subscribed_regex,
                           server_assignor=meta.server_assignor,
                           rebalance_timeout_ms=meta.rebalance_timeout_ms
                           if meta.rebalance_timeout_ms >= 0 else 300000)
                if member_id in currents:
                    current = decode_current_assignment(currents[member_id])
                    m.epoch, m.previous_epoch = current.member_epoch, current.previous_epoch
                    m.state = current.state if current.state in (STABLE, UNREVOKED, UNRELEASED) \
                        else STABLE
                    m.assigned, m.revoking = named(current.assigned), named(current.revoking)
                    for part_map in (m.assigned, m.revoking):
                        for topic, parts in part_map.items():
                            for p in parts:
                                self._owner[(topic, p)] = member_id
                self.members[member_id] = m
                if m.instance_id is not None:
                    self.static[m.instance_id] = member_id
                if member_id in targets:
                    self.target[member_id] = named(decode_target_member(targets[member_id]))
            self._metadata_hash = self._restored_hash = stored_hash
            self._refresh_subscriptions(topics, force=False)
            for m in self.members.values():
                self._schedule_session(m)
                if m.state == UNREVOKED:
                    self._schedule_revocation(m)

    # ======================================================= offsets, admin

    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int) -> int:
        """The error for an OffsetCommit (Kafka's ConsumerGroup.validateOffsetCommit):
        from outside the group only while it is empty; else a member at its epoch, with
        OffsetCommit v9+ (which carries the member epoch)."""
        with self.lock:
            if member_epoch < 0 and not self.members:
                return 0
            member = self.members.get(member_id)
            if member is None:
                return codes.UNKNOWN_MEMBER_ID
            if api_version < 9:
                return codes.UNSUPPORTED_VERSION
            if member_epoch != member.epoch:
                return codes.STALE_MEMBER_EPOCH
            return 0

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ names a member: it must be one, at its epoch."""
        with self.lock:
            if member_epoch < 0 and member_id is None:
                return 0
            member = self.members.get(member_id or "")
            if member is None:
                return codes.UNKNOWN_MEMBER_ID
            if member_epoch != member.epoch:
                return codes.STALE_MEMBER_EPOCH
            return 0

    def state(self) -> str:
        with self.lock:
            if self.dead:
                return DEAD
            if not self.members:
                return EMPTY
            if self.group_epoch != self.assignment_epoch:
                return ASSIGNING
            if any(m.epoch != self.assignment_epoch or m.state != STABLE
                   for m in self.members.values() if m.epoch != LEAVE_GROUP_STATIC_EPOCH):
                return RECONCILING
            return GROUP_STABLE

    def is_empty(self) -> bool:
        with self.lock:
            return not self.members

    def describe(self) -> dict:
        """The classic-protocol view (ListGroups, DeleteGroups): state and protocol type;
        members are described by ConsumerGroupDescribe only."""
        return {"state": self.state(), "protocol_type": self.protocol_type, "protocol": "",
                "generation": self.group_epoch, "members": []}

    def describe_members(self) -> list[dict]:
        with self.lock:
            return [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                     "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                     "subscribed_topic_names": sorted(m.subscribed_names),
                     "subscribed_topic_regex": m.subscribed_regex,
                     "assignment": _copy(m.assigned),
                     "target_assignment": _copy(self.target.get(m.member_id, {}))}
                    for m in self.members.values()]

    def owners(self) -> dict[tuple[str, int], str]:
        """partition -> the member holding it (assigned or being revoked)."""
        with self.lock:
            return dict(self._owner)

    def mark_dead(self) -> None:
        with self.lock:
            for member in list(self.members.values()):
                self._remove(member)
            self.dead = True
