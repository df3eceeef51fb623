"""Kafka's classic group membership protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup).

The protocol remote Kafka clients speak (Kafka's ``ClassicGroup`` and the classic half of
its ``GroupMetadataManager``): the broker keeps members, generations and the chosen
protocol; the *leader client* computes the assignment and hands it back in SyncGroup;
member metadata and assignments are opaque bytes. States, as Kafka's:

- ``Empty``: no members (committed offsets may remain);
- ``PreparingRebalance``: waiting for every known member to (re)join, until the rebalance
  timeout; an empty group's first rebalance waits ``group.initial.rebalance.delay.ms``
  for more members (again while new ones keep coming, up to the rebalance timeout);
- ``CompletingRebalance``: joined, waiting for the leader's SyncGroup;
- ``Stable``: assignments handed out; members heartbeat;
- ``Dead``: deleted.

Static membership (KIP-345): a member with a ``group.instance.id`` that joins with no
member id takes over the instance's member id; the old id is fenced (FENCED_INSTANCE_ID,
82, on its next request, and at once for a request it has parked), and in a Stable group
whose protocol does not change the member gets its assignment back with no rebalance.
A static member that misses a rebalance stays in the group; its session expiry or an
explicit LeaveGroup removes it.

Persistence, as Kafka's: whenever the group reaches Stable (the leader's assignment) or
Empty, or a static member is replaced while Stable, its GroupMetadata record (generation,
protocol, leader, members with their subscription and assignment; group_records.py) goes
to its writer, the coordinator, which appends it to ``__consumer_offsets``. A restarted
broker rebuilds the group from the last one (:meth:`ClassicGroup.restore`): Stable with
those members, whose sessions count from the restart, so members heartbeating with their
generation go on without a rebalance.

Nothing here blocks. A JoinGroup or SyncGroup that must wait for the other members
parks a callback (Kafka's DelayedJoin/DelayedSync futures): ``respond(result)`` is
called exactly once, at once or when the rebalance gets there, from whichever thread
moved the group (a request's, or the timer's). The broker's handlers turn it into an
asyncio future: a parked request costs no thread. Deadlines (sessions, rebalance and
sync timeouts, the initial delay, pending member ids) are callbacks on a
:class:`~pylog.coordinator.timer.DeadlineTimer`, each at its exact time. Every method
is thread-safe (one lock per group); callbacks run under it, so they must only hand
the result on (``call_soon_threadsafe``, an Event). Errors are Kafka's codes, returned
or passed on, not raised: the broker puts them in responses.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from pylog.errors import ErrorCode

from .group_records import (
    GROUP_METADATA,
    ClassicGroupRecord,
    ClassicMemberRecord,
    encode_classic_group,
    group_key,
)
from .timer import DeadlineTimer, TimerHandle

__all__ = ["ClassicGroup", "Member", "JoinResult", "SyncResult", "errors",
           "NEW_MEMBER_JOIN_TIMEOUT_MS"]

log = logging.getLogger(__name__)

#: The name this module's callers knew Kafka's codes by: the one table, ErrorCode.
errors = ErrorCode

#: Kafka's bound on a new member's first JoinGroup (GroupCoordinator's
#: NewMemberJoinTimeoutMs): a client that disconnects while parked and rejoins with a
#: fresh id must not leave a defunct member waiting forever.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000



EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[Member] = field(default_factory=list)   # the leader's only


class SyncResult(NamedTuple):
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


Respond = Callable[[object], None]


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
    is_new: bool = False                    # joined, no generation yet (new-member timeout)
    join_waiter: Respond | None = None      # a parked JoinGroup
    sync_waiter: Respond | None = None      # a parked SyncGroup

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def names(self) -> set[str]:
        return {n for n, _ in self.protocols}

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's rule at a session deadline: a member parked in a rebalance is alive;
        a new one (its first join not answered yet) is not, nor is an idle one."""
        return not self.is_new and (self.join_waiter is not None or self.sync_waiter is not None)


class _Deadline:
    """A group's deadline on its timer: fn(*args) under the group's lock, unless the
    deadline was replaced or cancelled meanwhile (it may fire while another thread
    replaces it)."""

    __slots__ = ("group", "key", "fn", "args", "handle")

    def __init__(self, group: ClassicGroup, key, fn: Callable[..., None], args: tuple) -> None:
        self.group = group
        self.key = key
        self.fn = fn
        self.args = args
        self.handle: TimerHandle | None = None

    def __call__(self) -> None:
        group = self.group
        with group.lock:
            if group._timers.get(self.key) is self:
                del group._timers[self.key]
                self.fn(*self.args)


class ClassicGroup:
    """One group's membership. Every method is thread-safe; none blocks."""

    def __init__(self, group_id: str, initial_delay_ms: int, timer: DeadlineTimer | None = None) -> None:
        self.group_id = group_id
        self.lock = threading.RLock()
        self.timer = timer or DeadlineTimer("pylog-group-timer")
        self.state = EMPTY
        self.previous_state = EMPTY
        #: When the group last became Empty (ms since the epoch): created Empty, at first.
        self.empty_since_ms = int(time.time() * 1000)
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.static: dict[str, str] = {}            # group.instance.id -> member id
        self.pending: set[str] = set()              # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()         # members yet to SyncGroup this generation
        self.new_member_added = False               # extends the initial rebalance's delay
        self._awaiting_join = 0                     # members with a parked JoinGroup
        self._supported: Counter = Counter()        # protocol name -> members offering it
        self._initial_delay_ms = initial_delay_ms
        self._timers: dict[object, _Deadline] = {}
        self._write: Callable[[dict[bytes, bytes | None], bool], bool] | None = None

    # ============================================================== timers

    def _schedule(self, key, delay_ms: float, fn: Callable[..., None], *args) -> None:
        """Runs fn(*args) (under the lock) after delay_ms, replacing the deadline `key`
        had. (A _Deadline, not a closure: every member holds a session deadline, and each
        object they hold is one more for every full pass of the cyclic collector.)"""
        self._cancel(key)
        deadline = _Deadline(self, key, fn, args)
        deadline.handle = self.timer.call_later(delay_ms / 1000, deadline)
        self._timers[key] = deadline

    def _cancel(self, key) -> None:
        deadline = self._timers.pop(key, None)
        if deadline is not None:
            self.timer.cancel(deadline.handle)

    def _reschedule_heartbeat(self, member: Member, timeout_ms: int | None = None) -> None:
        self._schedule(("session", member.member_id),
                       member.session_timeout_ms if timeout_ms is None else timeout_ms,
                       self._session_expired, member.member_id)

    # =========================================================== waiters

    def _park_join(self, member: Member, respond: Respond | None) -> None:
        if member.join_waiter is not None:
            # A second JoinGroup of one member while its first is parked: the first
            # (a connection the client gave up on) is answered, not left hanging.
            self._answer_join(member, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_waiter = respond
        if respond is not None:
            self._awaiting_join += 1

    def _answer_join(self, member: Member, result: JoinResult) -> bool:
        waiter = member.join_waiter
        if waiter is None:
            return False
        member.join_waiter = None
        self._awaiting_join -= 1
        waiter(result)
        return True

    def _answer_sync(self, member: Member, result: SyncResult) -> bool:
        waiter = member.sync_waiter
        if waiter is None:
            return False
        member.sync_waiter = None
        waiter(result)
        return True

    # ================================================================ join

    def join(self, member_id: str, client_id: str, client_host: str, protocol_type: str,
             protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
             require_known_member: bool, group_instance_id: str | None, respond: Respond) -> None:
        """A JoinGroup; `respond(JoinResult)` is called once, now or when the rebalance
        completes (Kafka's classicGroupJoinToClassicGroup)."""
        protocols = [(n, bytes(md)) for n, md in protocols]
        with self.lock:
            if self.state == DEAD:
                respond(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            elif not self._supports(protocol_type, {n for n, _ in protocols}):
                respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            elif not member_id:
                self._join_new(client_id, client_host, protocol_type, protocols, session_timeout_ms,
                               rebalance_timeout_ms, require_known_member, group_instance_id, respond)
            elif member_id in self.pending and group_instance_id is None:
                self._add_member(member_id, client_id, client_host, protocol_type, protocols,
                                 session_timeout_ms, rebalance_timeout_ms, group_instance_id, respond)
            else:
                self._join_existing(member_id, protocols, session_timeout_ms, rebalance_timeout_ms,
                                    group_instance_id, respond)

    def _join_new(self, client_id, client_host, protocol_type, protocols, session_timeout_ms,
                  rebalance_timeout_ms, require_known_member, group_instance_id, respond) -> None:
        new_id = f"{group_instance_id or client_id or 'member'}-{uuid.uuid4()}"
        if group_instance_id is not None:
            old_id = self.static.get(group_instance_id)
            if old_id is not None:
                self._rejoin_static(group_instance_id, old_id, new_id, protocols, session_timeout_ms,
                                    rebalance_timeout_ms, respond)
            else:
                self._add_member(new_id, client_id, client_host, protocol_type, protocols,
                                 session_timeout_ms, rebalance_timeout_ms, group_instance_id, respond)
        elif require_known_member:
            # KIP-394: the client rejoins with this id; until then it is pending, for a session.
            self.pending.add(new_id)
            self._schedule(("session", new_id), session_timeout_ms, self._session_expired, new_id)
            respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member(new_id, client_id, client_host, protocol_type, protocols,
                             session_timeout_ms, rebalance_timeout_ms, None, respond)

    def _join_existing(self, member_id, protocols, session_timeout_ms, rebalance_timeout_ms,
                       group_instance_id, respond) -> None:
        error = self._validate_member(member_id, group_instance_id)
        if error:
            respond(JoinResult(error, member_id=member_id))
            return
        member = self.members[member_id]
        unchanged = member.protocols == protocols
        if self.state == PREPARING:
            self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, respond)
            self._rebalance_or_complete_join(f"member {member_id} joined during {self.state}")
        elif self.state == COMPLETING and unchanged:
            # A retry (the client lost the first answer): the current generation again.
            respond(self._result_for(member))
        elif self.state == STABLE and unchanged and member_id != self.leader:
            # A follower rejoining with unchanged metadata: the current generation, so it
            # may SyncGroup; the leader's rejoin forces a rebalance (topic changes).
            respond(self._result_for(member))
        elif self.state in (COMPLETING, STABLE):
            self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, respond)
            self._rebalance_or_complete_join(
                f"{'leader' if member_id == self.leader else 'member'} {member_id} rejoined"
                f"{'' if unchanged else ' with new metadata'}")
        else:
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _add_member(self, member_id, client_id, client_host, protocol_type, protocols,
                    session_timeout_ms, rebalance_timeout_ms, group_instance_id, respond) -> None:
        member = Member(member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                        protocol_type, protocols, group_instance_id, is_new=True)
        if self.state == PREPARING and self.previous_state == EMPTY:
            self.new_member_added = True
        if group_instance_id is not None:
            self.static[group_instance_id] = member_id
        if not self.members:
            self.protocol_type = protocol_type
        if self.leader is None:
            self.leader = member_id
        self.members[member_id] = member
        self._supported.update(member.names())
        self.pending.discard(member_id)
        self._park_join(member, respond)
        # A new member cannot heartbeat before its first answer: it gets Kafka's
        # new-member join timeout instead of its session.
        self._reschedule_heartbeat(member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._rebalance_or_complete_join(
            f"member {member_id} joined" + (f" (group.instance.id {group_instance_id})"
                                            if group_instance_id is not None else ""))

    def _update_member(self, member: Member, protocols, session_timeout_ms, rebalance_timeout_ms,
                       respond: Respond | None) -> None:
        self._supported.subtract(member.names())
        member.protocols = protocols
        self._supported.update(member.names())
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        self._park_join(member, respond)

    def _rejoin_static(self, instance_id: str, old_id: str, new_id: str, protocols, session_timeout_ms,
                       rebalance_timeout_ms, respond) -> None:
        """A known group.instance.id joins with no member id (a restart): it replaces its
        old member id (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin)."""
        log.info("group %s: static member %s rejoins in state %s: member %s replaces %s",
                 self.group_id, instance_id, self.state, new_id, old_id)
        current_leader = self.leader
        member = self._replace_static_member(instance_id, old_id, new_id)
        self._reschedule_heartbeat(member)
        self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, respond)
        if self.state == STABLE:
            if self.protocol == self._choose_protocol():
                # Its assignment is kept: no rebalance. It is told the leader it knew, so
                # even a replaced leader syncs as a follower and takes its assignment back.
                self._answer_join(member, JoinResult(ErrorCode.NONE, self.generation, self.protocol_type,
                                                     self.protocol, current_leader or "", new_id))
                self._persist()
            else:
                self._rebalance_or_complete_join(
                    f"static member {instance_id} rejoined with a protocol that changes the group's")
        elif self.state == COMPLETING:
            # The leader may have been sent the old id: rebalance, or the new id gets nothing.
            self._prepare_rebalance(f"static member {instance_id} rejoined as {new_id}")
        else:
            self._complete_join_if_ready()

    def _replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        old = self.members.pop(old_id)
        self._cancel(("session", old_id))
        # Fence the old id at once if it has a request parked.
        self._answer_join(old, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        self._answer_sync(old, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        new = Member(new_id, old.client_id, old.client_host, old.session_timeout_ms,
                     old.rebalance_timeout_ms, old.protocol_type, old.protocols, instance_id,
                     assignment=old.assignment)
        self.members[new_id] = new
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static[instance_id] = new_id
        return new

    # ========================================================== rebalance

    def _rebalance_or_complete_join(self, reason: str) -> None:
        if self.state in (EMPTY, STABLE, COMPLETING):
            self._prepare_rebalance(reason)
        else:
            self._complete_join_if_ready()

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state == COMPLETING:
            # Parked SyncGroups learn that the generation they synced is gone.
            self._propagate_assignment(ErrorCode.REBALANCE_IN_PROGRESS, reset=True)
        self._remove_sync_expiration()
        initial = self.state == EMPTY
        log.info("preparing to rebalance group %s in state %s with old generation %d (%s)",
                 self.group_id, self.state, self.generation, reason)
        if initial:
            # Kafka's InitialDelayedJoin: wait a little for the rest of a starting group.
            delay = self._initial_delay_ms
            remaining = max(self._rebalance_timeout_ms() - delay, 0)
            self._schedule("join", delay, self._initial_delay_passed, delay, remaining)
        self._transition(PREPARING)
        if not initial:
            if self._all_joined():
                self._complete_join()
            else:
                self._schedule("join", self._rebalance_timeout_ms(), self._complete_join)

    def _initial_delay_passed(self, delay: int, remaining: int) -> None:
        if self.new_member_added and remaining:
            # Members are still arriving: wait again (never past the rebalance timeout).
            self.new_member_added = False
            next_delay = min(self._initial_delay_ms, remaining)
            next_remaining = max(remaining - delay, 0)
            self._schedule("join", next_delay, self._initial_delay_passed, next_delay, next_remaining)
        else:
            self._complete_join()

    def _complete_join_if_ready(self) -> None:
        """Completes the join phase once every member has rejoined (never an initial
        rebalance's, which waits its delay)."""
        if self.state == PREPARING and self.previous_state != EMPTY and self._all_joined():
            self._complete_join()

    def _all_joined(self) -> bool:
        return len(self.members) == self._awaiting_join and not self.pending

    def _complete_join(self) -> None:
        """The join phase ends: dynamic members that did not rejoin are dropped (static
        ones stay), the next generation starts, every parked JoinGroup is answered."""
        self._cancel("join")
        if self.state != PREPARING:
            return
        laggards = [mid for mid, m in self.members.items()
                    if m.join_waiter is None and m.group_instance_id is None]
        for mid in laggards:
            self._remove(mid)
        if laggards:
            log.info("group %s: removed members that did not rejoin in time: %s", self.group_id, laggards)
        if not self._elect_joined_leader() and self.members:
            log.error("group %s could not complete its rebalance: no member rejoined", self.group_id)
            self._schedule("join", self._rebalance_timeout_ms(), self._complete_join)
            return
        self.generation += 1
        self.pending_sync.clear()
        if not self.members:
            self.protocol = None
            self._transition(EMPTY)
            log.info("group %s with generation %d is now empty", self.group_id, self.generation)
            return
        self.protocol = self._choose_protocol()
        self._transition(COMPLETING)
        log.info("group %s: generation %d with %d members (protocol %s, leader %s)",
                 self.group_id, self.generation, len(self.members), self.protocol, self.leader)
        for m in list(self.members.values()):
            self._answer_join(m, self._result_for(m))
            self._reschedule_heartbeat(m)
            m.is_new = False
            self.pending_sync.add(m.member_id)
        self._schedule("sync", self._rebalance_timeout_ms(), self._sync_expired, self.generation)

    def _elect_joined_leader(self) -> bool:
        """Keeps the leader if it rejoined, else picks a member that did; False if none did."""
        if self.leader is None:
            return False
        if self.members[self.leader].join_waiter is not None:
            return True
        for mid, m in self.members.items():
            if m.join_waiter is not None:
                log.info("group %s: leader %s did not rejoin in time; %s leads",
                         self.group_id, self.leader, mid)
                self.leader = mid
                return True
        return False

    def _transition(self, state: str) -> None:
        self.previous_state, self.state = self.state, state
        if state == EMPTY:              # Kafka's currentStateTimestamp, for offset expiry
            self.empty_since_ms = int(time.time() * 1000)
        if state in (STABLE, EMPTY):
            self._persist()

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _result_for(self, m: Member) -> JoinResult:
        # The leader gets the members as they are now (copies: the answer is read on
        # another thread, after the lock is released).
        members = [copy.copy(x) for x in self.members.values()] if m.member_id == self.leader else []
        return JoinResult(ErrorCode.NONE, self.generation, self.protocol_type, self.protocol,
                          self.leader or "", m.member_id, members)

    def _supports(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's supportsProtocols: some offered protocol every member supports (counted,
        not searched: a join into a group of thousands costs no walk over them)."""
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(
            self._supported[n] == len(self.members) for n in names)

    def _choose_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that all support."""
        members = list(self.members.values())
        first = [n for n, _ in members[0].protocols]
        common = {n for n in first if self._supported[n] == len(members)}
        votes: dict[str, int] = {}
        for m in members:
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        # Most votes; a tie goes to the first member's preference.
        return max(votes, key=lambda n: (votes[n], -first.index(n)))

    # ================================================================ sync

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes], respond: Respond,
             group_instance_id: str | None = None, protocol_type: str | None = None,
             protocol: str | None = None) -> None:
        """A SyncGroup; `respond(SyncResult)` is called once: now, or when the leader's
        assignment arrives (or a rebalance makes it moot)."""
        with self.lock:
            error = self._validate_sync(member_id, generation, group_instance_id, protocol_type, protocol)
            if error:
                respond(SyncResult(error))
            elif self.state == PREPARING:
                respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            elif self.state == COMPLETING:
                member = self.members[member_id]
                if member.sync_waiter is not None:
                    self._answer_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                member.sync_waiter = respond
                self._synced(member_id)
                if member_id == self.leader:
                    log.info("group %s: assignment from leader %s for generation %d", self.group_id,
                             member_id, self.generation)
                    for mid, m in self.members.items():
                        m.assignment = bytes(assignments.get(mid, b""))
                    self._propagate_assignment(ErrorCode.NONE)
                    self._transition(STABLE)
            else:                                          # Stable: the assignment it has
                self._synced(member_id)
                respond(SyncResult(ErrorCode.NONE, self.members[member_id].assignment, self.protocol_type,
                                   self.protocol))

    def _validate_sync(self, member_id, generation, group_instance_id, protocol_type, protocol) -> int:
        error = self._validate_generation(member_id, group_instance_id, generation)
        if error:
            return error
        if (protocol_type is not None and self.protocol_type is not None and protocol_type != self.protocol_type) or \
                (protocol is not None and self.protocol is not None and protocol != self.protocol):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _propagate_assignment(self, error: int, reset: bool = False) -> None:
        for m in self.members.values():
            if reset:
                m.assignment = b""
            ok = error == ErrorCode.NONE
            if self._answer_sync(m, SyncResult(error, m.assignment, self.protocol_type if ok else None,
                                               self.protocol if ok else None)):
                # Its session counts from the answer (it was parked: it could not heartbeat).
                self._reschedule_heartbeat(m)

    def _synced(self, member_id: str) -> None:
        self.pending_sync.discard(member_id)
        if self.state in (DEAD, EMPTY, PREPARING) or not self.pending_sync:
            self._cancel("sync")

    def _remove_sync_expiration(self) -> None:
        self.pending_sync.clear()
        self._cancel("sync")

    def _sync_expired(self, generation: int) -> None:
        """Members that did not SyncGroup within the rebalance timeout are removed."""
        if generation != self.generation or self.state not in (COMPLETING, STABLE) or not self.pending_sync:
            return
        late = sorted(self.pending_sync)
        for mid in late:
            self._remove(mid)
        log.info("group %s: removed members that did not sync in time: %s", self.group_id, late)
        self._prepare_rebalance(f"removing {late} on pending sync request expiration")

    # ============================================= heartbeat, leave, commit

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's validateMember: a static member must be the instance's current id."""
        if group_instance_id is not None:
            current = self.static.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("group %s: member %s of group.instance.id %s is fenced by %s",
                         self.group_id, member_id, group_instance_id, current)
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _validate_generation(self, member_id: str, group_instance_id: str | None,
                             generation: int) -> int:
        """SyncGroup's and Heartbeat's first checks, in Kafka's order: a live group, a
        current member (:meth:`_validate_member`), of the current generation."""
        if self.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def heartbeat(self, member_id: str, generation: int, group_instance_id: str | None = None) -> int:
        with self.lock:
            error = self._validate_generation(member_id, group_instance_id, generation)
            if error:
                return error
            if self.state == EMPTY:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._reschedule_heartbeat(self.members[member_id])
            return ErrorCode.REBALANCE_IN_PROGRESS if self.state == PREPARING else ErrorCode.NONE

    def leave(self, member_id: str, group_instance_id: str | None = None) -> int:
        """LeaveGroup of one member (v0-2, and the in-process bridge)."""
        top, each = self.leave_members([(member_id, group_instance_id)])
        return top or each[0]

    def leave_members(self, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """LeaveGroup v3+: (top-level error, one error per (member id, instance id)). An
        empty member id with an instance id removes that static member (an admin's
        removeMembersFromConsumerGroup)."""
        with self.lock:
            if self.state == DEAD:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
            out = []
            for member_id, instance_id in members:
                if not member_id:
                    current = self.static.get(instance_id) if instance_id is not None else None
                    if current is None:
                        out.append(ErrorCode.UNKNOWN_MEMBER_ID)
                        continue
                    member_id = current
                elif member_id in self.pending:
                    self.pending.discard(member_id)
                    self._cancel(("session", member_id))
                    out.append(ErrorCode.NONE)
                    continue
                else:
                    error = self._validate_member(member_id, instance_id)
                    if error:
                        out.append(error)
                        continue
                log.info("group %s: member %s left the group", self.group_id, member_id)
                self._remove(member_id)
                out.append(ErrorCode.NONE)
            if ErrorCode.NONE in out:
                if self.state in (STABLE, COMPLETING):
                    self._rebalance_or_complete_join("members left the group")
                elif self.state == PREPARING:
                    self._complete_join_if_ready()
            return ErrorCode.NONE, out

    def check_commit(self, member_id: str, generation: int, group_instance_id: str | None = None) -> int:
        """The error for an OffsetCommit from (member, generation), Kafka's
        ClassicGroup.validateOffsetCommit: generation -1 from a non-member (an admin, a
        consumer without group management) only while the group is empty; otherwise a
        current member of the current generation, not while its assignment is pending."""
        with self.lock:
            if self.state == DEAD:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            if generation < 0 and self.state == EMPTY:
                return ErrorCode.NONE
            if generation >= 0 or member_id or group_instance_id is not None:
                error = self._validate_member(member_id, group_instance_id)
                if error:
                    return error
                if generation != self.generation:
                    return ErrorCode.ILLEGAL_GENERATION
            elif self.state != EMPTY:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if self.state == COMPLETING:
                return ErrorCode.REBALANCE_IN_PROGRESS
            if self.state in (STABLE, PREPARING):
                self._reschedule_heartbeat(self.members[member_id])    # a commit keeps the session
            return ErrorCode.NONE

    # ============================================================ sessions

    def _session_expired(self, member_id: str) -> None:
        if self.state == DEAD:
            return
        if member_id in self.pending:
            log.info("group %s: pending member %s expired", self.group_id, member_id)
            self.pending.discard(member_id)
            if self.state == PREPARING and self._all_joined():
                self._complete_join()
            return
        member = self.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s's session expired: removed", self.group_id, member_id)
        self._remove(member_id)
        if self.state in (STABLE, COMPLETING):
            self._rebalance_or_complete_join(f"member {member_id}'s session expired")
        elif self.state == PREPARING and self._all_joined():
            self._complete_join()

    def _remove(self, member_id: str) -> None:
        """Drops a member; a request it has parked is answered UNKNOWN_MEMBER_ID (the
        client rejoins if it is still there)."""
        member = self.members.pop(member_id, None)
        self._cancel(("session", member_id))
        if member is not None:
            self._supported.subtract(member.names())
            if member.join_waiter is not None:
                self._awaiting_join -= 1
                waiter, member.join_waiter = member.join_waiter, None
                waiter(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=""))
            self._answer_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            if member.group_instance_id is not None and self.static.get(member.group_instance_id) == member_id:
                del self.static[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending.discard(member_id)
        self.pending_sync.discard(member_id)

    # ============================================================ the rest

    def mark_dead(self) -> None:
        """The group is deleted (it had no members): its deadlines are cancelled."""
        with self.lock:
            for mid in list(self.members):
                self._remove(mid)
            for key in list(self._timers):
                self._cancel(key)
            self.pending.clear()
            self._transition(DEAD)

    def describe(self) -> dict:
        with self.lock:
            return {"state": self.state, "protocol_type": self.protocol_type or "",
                    "protocol": self.protocol or "", "generation": self.generation,
                    "members": [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.metadata(self.protocol or ""), m.assignment)
                                for m in self.members.values()]}

    # ========================================================= persistence

    def attach_persistence(self, write: Callable[[dict[bytes, bytes | None], bool], bool]) -> None:
        """From now on the group's GroupMetadata record goes to ``write(records, full)``
        whenever it reaches Stable or Empty."""
        with self.lock:
            self._write = write

    def _persist(self) -> None:
        # The caller holds the lock. Only Stable and Empty are stored, as Kafka's.
        if self._write is None or self.state not in (STABLE, EMPTY):
            return
        protocol = self.protocol or ""
        record = ClassicGroupRecord(
            self.protocol_type or "", self.generation, self.protocol, self.leader,
            self.empty_since_ms if self.state == EMPTY else int(time.time() * 1000),
            [ClassicMemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.rebalance_timeout_ms, m.session_timeout_ms,
                                 m.metadata(protocol), m.assignment)
             for m in self.members.values()])
        self._write({group_key(GROUP_METADATA, self.group_id): encode_classic_group(record)}, True)

    def restore(self, record: ClassicGroupRecord) -> None:
        """Rebuilds the group from its stored GroupMetadata: Stable with its members (each
        offering the group's protocol with its stored subscription), or Empty. Every
        member's session starts now."""
        with self.lock:
            self.generation = record.generation
            self.protocol_type = record.protocol_type or None
            self.protocol = record.protocol
            if not record.members or record.protocol is None:
                self.state = self.previous_state = EMPTY
                if record.state_timestamp >= 0:
                    self.empty_since_ms = record.state_timestamp
                return
            for r in record.members:
                member = Member(r.member_id, r.client_id, r.client_host, r.session_timeout_ms,
                                r.rebalance_timeout_ms, record.protocol_type,
                                [(record.protocol, r.subscription)], r.instance_id,
                                assignment=r.assignment)
                self.members[r.member_id] = member
                self._supported.update(member.names())
                if r.instance_id is not None:
                    self.static[r.instance_id] = r.member_id
                self._reschedule_heartbeat(member)
            self.leader = record.leader if record.leader in self.members else next(iter(self.members))
            self.state = self.previous_state = STABLE

    # ================================================ blocking convenience

    def join_blocking(self, wait_s: float, **request) -> JoinResult:
        """join() for a caller that has a thread to spend (the in-process bridge): waits
        up to `wait_s` for the answer (REBALANCE_IN_PROGRESS after that)."""
        return _wait(lambda respond: self.join(respond=respond, **request), wait_s,
                     JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=request.get("member_id", "")))

    def sync_blocking(self, member_id: str, generation: int, assignments: dict[str, bytes],
                      wait_s: float) -> SyncResult:
        return _wait(lambda respond: self.sync(member_id, generation, assignments, respond), wait_s,
                     SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))


def _wait(start: Callable[[Respond], None], wait_s: float, timed_out):
    done = threading.Event()
    box: list = []

    def respond(result) -> None:
        box.append(result)
        done.set()
    start(respond)
    return box[0] if done.wait(wait_s) else timed_out
