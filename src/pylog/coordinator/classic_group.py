"""Kafka's classic group membership protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup).

The protocol remote Kafka clients speak (Kafka's ``ClassicGroup``): the broker keeps
members, generations and the chosen protocol; the *leader client* computes the
assignment and hands it back in SyncGroup; member metadata and assignments are opaque
bytes. States, as Kafka's:

- ``Empty``: no members (committed offsets may remain);
- ``PreparingRebalance``: waiting for every known member to (re)join, until the rebalance
  timeout; an empty group's first rebalance waits ``group.initial.rebalance.delay.ms`` for
  more members;
- ``CompletingRebalance``: joined, waiting for the leader's SyncGroup;
- ``Stable``: assignments handed out; members heartbeat;
- ``Dead``: deleted.

Threads: every call blocks its caller (one connection thread of the broker) on the
group's condition; :meth:`ClassicGroup.tick` (the coordinator's timer) completes
rebalances whose deadline passed and evicts members whose session expired. Errors are
Kafka's codes, returned, not raised: the broker puts them in responses.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

__all__ = ["ClassicGroup", "Member", "JoinResult", "errors"]

log = logging.getLogger(__name__)


class errors:  # noqa: N801 - a namespace of Kafka error codes
    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    GROUP_ID_NOT_FOUND = 69
    NON_EMPTY_GROUP = 68
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81


EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    joined: bool = False            # has (re)joined the rebalance in progress

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[Member] = field(default_factory=list)   # the leader's only


class ClassicGroup:
    """One group's membership. Every method is thread-safe."""

    def __init__(self, group_id: str, initial_delay_ms: int) -> None:
        self.group_id = group_id
        self.cond = threading.Condition()
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.pending: dict[str, float] = {}          # member ids handed out (MEMBER_ID_REQUIRED)
        self._initial_delay_ms = initial_delay_ms
        self._deadline = 0.0                           # of the rebalance in progress
        self._initial = False                         # the rebalance started from Empty
        self._results: dict[str, JoinResult] = {}

    # ================================================================ join

    def join(self, member_id: str, client_id: str, client_host: str, protocol_type: str,
             protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
             require_known_member: bool, group_instance_id: str | None, wait_s: float) -> JoinResult:
        with self.cond:
            if self.state == DEAD:
                return JoinResult(errors.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
            if not protocols or (self.members and protocol_type != self.protocol_type) or \
                    (self.members and not self._common_protocols({n for n, _ in protocols})):
                return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            if not member_id:
                member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
                if require_known_member:
                    # KIP-394: the client rejoins with this id; until then it is pending.
                    self.pending[member_id] = time.monotonic() + session_timeout_ms / 1000
                    return JoinResult(errors.MEMBER_ID_REQUIRED, member_id=member_id)
            elif member_id not in self.members and member_id not in self.pending:
                return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)
            self.pending.pop(member_id, None)
            member = self.members.get(member_id)
            if member is not None and member.protocols == list(protocols) and (
                    self.state == COMPLETING or (self.state == STABLE and member_id != self.leader)):
                # Kafka: a rejoin with unchanged metadata (a retry, or a follower that
                # rejoins) gets the current generation back; no new rebalance.
                member.last_heartbeat = time.monotonic()
                return self._result_for(member)
            if member is None:
                member = self.members[member_id] = Member(
                    member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                    protocol_type, list(protocols), group_instance_id)
                self.protocol_type = protocol_type
            else:
                member.protocols = list(protocols)
                member.session_timeout_ms = session_timeout_ms
                member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_heartbeat = time.monotonic()
            if self.state != PREPARING:
                self._prepare_rebalance(f"member {member_id} joined")
            member.joined = True
            self._results.pop(member_id, None)
            self._maybe_complete()
            deadline = time.monotonic() + wait_s
            while member_id not in self._results:
                left = deadline - time.monotonic()
                if left <= 0 or self.state == DEAD:
                    return JoinResult(errors.REBALANCE_IN_PROGRESS, member_id=member_id)
                self.cond.wait(min(left, 0.1))
                self._maybe_complete()
            return self._results.pop(member_id)

    def _common_protocols(self, offered: set[str]) -> list[str]:
        common = set(offered)
        for m in self.members.values():
            common &= {n for n, _ in m.protocols}
        return sorted(common)

    def _prepare_rebalance(self, reason: str) -> None:
        now = time.monotonic()
        first = self.state == EMPTY
        log.info("preparing to rebalance group %s in state %s with old generation %d (%s)",
                 self.group_id, self.state, self.generation, reason)
        self.state = PREPARING
        self._initial = first
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        if first:
            # Kafka's InitialDelayedJoin: wait a little for the rest of a starting group.
            self._deadline = now + min(self._initial_delay_ms / 1000, timeout)
        else:
            self._deadline = now + timeout
        for m in self.members.values():
            m.joined = False
        self._results.clear()
        self.cond.notify_all()

    def _maybe_complete(self) -> None:
        """Completes the rebalance in progress when every member has joined (and an initial
        delay has passed) or its deadline has; the lock is held."""
        if self.state != PREPARING:
            return
        now = time.monotonic()
        everyone = all(m.joined for m in self.members.values())
        # An initial rebalance always waits its delay; later ones end when all have joined.
        if now < self._deadline and (self._initial or not everyone):
            return
        for mid in [mid for mid, m in self.members.items() if not m.joined]:
            log.info("group %s: member %s did not rejoin in time: removed", self.group_id, mid)
            del self.members[mid]
        self.generation += 1
        if not self.members:
            self.state, self.protocol, self.leader, self.protocol_type = EMPTY, None, None, None
            self.cond.notify_all()
            return
        self.protocol = self._choose_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.state = COMPLETING
        log.info("group %s: generation %d with %d members (protocol %s, leader %s)",
                 self.group_id, self.generation, len(self.members), self.protocol, self.leader)
        for m in self.members.values():
            m.assignment = b""
            m.last_heartbeat = now
            self._results[m.member_id] = self._result_for(m)
        self.cond.notify_all()

    def _result_for(self, m: Member) -> JoinResult:
        return JoinResult(errors.NONE, self.generation, self.protocol_type, self.protocol, self.leader,
                          m.member_id, list(self.members.values()) if m.member_id == self.leader else [])

    def _choose_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that all support."""
        first = [n for n, _ in next(iter(self.members.values())).protocols]
        common = self._common_protocols(set(first))
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        # Most votes; a tie goes to the first member's preference.
        return max(votes, key=lambda n: (votes[n], -first.index(n)))

    # ================================================================ sync

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes],
             wait_s: float) -> tuple[int, bytes, str | None, str | None]:
        """(error, assignment, protocol type, protocol) for a member's SyncGroup."""
        with self.cond:
            error = self._check_member(member_id, generation)
            if error:
                return error, b"", None, None
            if self.state == PREPARING:
                return errors.REBALANCE_IN_PROGRESS, b"", None, None
            member = self.members[member_id]
            member.last_heartbeat = time.monotonic()
            if self.state == COMPLETING and member_id == self.leader:
                for mid, m in self.members.items():
                    m.assignment = bytes(assignments.get(mid, b""))
                self.state = STABLE
                self.cond.notify_all()
            deadline = time.monotonic() + wait_s
            while self.state == COMPLETING and self.generation == generation:
                left = deadline - time.monotonic()
                if left <= 0:
                    return errors.REBALANCE_IN_PROGRESS, b"", None, None
                self.cond.wait(min(left, 0.1))
            if self.generation != generation or self.state != STABLE or member_id not in self.members:
                return errors.REBALANCE_IN_PROGRESS, b"", None, None
            return errors.NONE, self.members[member_id].assignment, self.protocol_type, self.protocol

    def _check_member(self, member_id: str, generation: int) -> int:
        if self.state == DEAD or member_id not in self.members:
            return errors.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return errors.ILLEGAL_GENERATION
        return errors.NONE

    # =========================================================== heartbeat

    def heartbeat(self, member_id: str, generation: int) -> int:
        with self.cond:
            if self.state == DEAD or member_id not in self.members:
                return errors.UNKNOWN_MEMBER_ID
            self.members[member_id].last_heartbeat = time.monotonic()
            if self.state == PREPARING:
                return errors.REBALANCE_IN_PROGRESS
            if generation != self.generation:
                return errors.ILLEGAL_GENERATION
            return errors.NONE

    def leave(self, member_id: str) -> int:
        with self.cond:
            if member_id in self.pending:
                del self.pending[member_id]
                return errors.NONE
            if member_id not in self.members:
                return errors.UNKNOWN_MEMBER_ID
            self._remove(member_id, "left the group")
            return errors.NONE

    def _remove(self, member_id: str, reason: str) -> None:
        del self.members[member_id]
        if self.leader == member_id:
            self.leader = None
        if self.state in (STABLE, COMPLETING):
            self._prepare_rebalance(f"member {member_id} {reason}")
        self._maybe_complete()
        self.cond.notify_all()

    def check_commit(self, member_id: str, generation: int) -> int:
        """The error for an OffsetCommit from (member, generation); simple commits
        (generation -1) are allowed only while the group has no members."""
        with self.cond:
            if generation < 0:
                return errors.NONE if not self.members else errors.ILLEGAL_GENERATION
            error = self._check_member(member_id, generation)
            if error:
                return error
            if self.state == PREPARING:
                return errors.REBALANCE_IN_PROGRESS
            self.members[member_id].last_heartbeat = time.monotonic()
            return errors.NONE

    # ============================================================== timer

    def tick(self) -> None:
        """Evicts members whose session expired; completes due rebalances."""
        with self.cond:
            now = time.monotonic()
            for mid, until in list(self.pending.items()):
                if until < now:
                    del self.pending[mid]
            for mid, m in list(self.members.items()):
                # A member waiting in a rebalance is not expired while the rebalance runs.
                if self.state == PREPARING and m.joined:
                    continue
                if now - m.last_heartbeat > m.session_timeout_ms / 1000:
                    self._remove(mid, "session timed out")
            self._maybe_complete()

    def mark_dead(self) -> None:
        with self.cond:
            self.state = DEAD
            self.members.clear()
            self.cond.notify_all()

    def describe(self) -> dict:
        with self.cond:
            return {"state": self.state, "protocol_type": self.protocol_type or "",
                    "protocol": self.protocol or "", "generation": self.generation,
                    "members": [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.metadata(self.protocol or ""), m.assignment)
                                for m in self.members.values()]}
