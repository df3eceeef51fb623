"""Share groups' APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and
ShareAcknowledge.

The group and its share-partitions are :mod:`pylog.coordinator.share_group`; this module
validates requests as Kafka's broker does, converts topic ids (the protocol names topics by
id) to names and back, keeps the members' share sessions (ShareSessionEpoch: 0 opens a
session, -1 closes it and releases what the member holds, anything else must be the
session's next epoch: INVALID_SHARE_SESSION_EPOCH, or SHARE_SESSION_NOT_FOUND without one),
and reads the records a ShareFetch acquires.

A ShareFetch first applies its piggybacked acknowledgements, then acquires, per partition
of the session, the available records from the share-partition's first available offset
(at most MaxRecords in all, at most MaxBytes of batches), and answers the batches read with
the AcquiredRecords ranges (the client delivers only those offsets). With nothing acquired
it waits, up to MaxWaitMs, for an append to one of the partitions (as Fetch does) or
an acknowledgement or release in the group (records available again). Every
change of share-partition state is on disk before the answer (share_group.py).
With an authorizer: READ on the group, and READ on each topic (TOPIC_AUTHORIZATION_FAILED
per partition), as Kafka checks.
"""

from __future__ import annotations

import asyncio

from pylog.common.acl import Operation
from pylog.coordinator.consumer_group import GroupError
from pylog.coordinator.share_group import ShareSession, share_coordinator
from pylog.coordinator.share_partition import AcknowledgeError
from pylog.errors import ErrorCode
from pylog.protocol import messages as m

from .admin import topic_ids
from .authorizer import TOPIC, allowed, authorized_operations
from .authorizer import GROUP as GROUP_RESOURCE
from .data_plane import Waker
from .errors import error_code

__all__ = ["share_group_heartbeat", "share_group_describe", "share_fetch", "share_acknowledge",
           "shares_of", "not_share_group"]

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_INT32_MAX = 2**31 - 1


def shares_of(broker):
    """The store's ShareCoordinator with this broker's ``group.share.*`` defaults."""
    coordinator = share_coordinator(broker.store)
    cfg = broker.server_config
    coordinator.configure({
        "share.session.timeout.ms": cfg["group.share.session.timeout.ms"],
        "share.heartbeat.interval.ms": cfg["group.share.heartbeat.interval.ms"],
        "share.record.lock.duration.ms": cfg["group.share.record.lock.duration.ms"],
        "share.delivery.count.limit": cfg["group.share.delivery.count.limit"]})
    coordinator.max_in_flight = cfg["group.share.partition.max.record.locks"]
    return coordinator


def not_share_group(broker, group_id: str) -> bool:
    """Whether a classic or consumer-protocol group holds `group_id` (a group id is of one
    type, as Kafka keeps it)."""
    coordinator = broker.store.coordinator
    other = coordinator.consumer_group(group_id)
    if other is not None and not other.is_empty():
        return True
    classic = coordinator.classic_group(group_id, create=False)
    return classic is not None and bool(classic.members)


def _invalid_heartbeat(req) -> str | None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid: the problem, or None."""
    if not req.group_id.strip():
        return "GroupId can't be empty."
    if not req.member_id.strip():
        return "MemberId can't be empty."
    if req.rack_id is not None and not req.rack_id.strip():
        return "RackId can't be empty."
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
    elif req.member_epoch < FINAL_EPOCH:
        return "MemberEpoch is invalid."
    return None


def share_group_heartbeat(broker, conn, header, req):
    response = m.ShareGroupHeartbeatResponse(throttle_time_ms=0)

    def fail(code: int, message: str | None):
        response.error_code, response.error_message = code, message
        return response

    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    problem = _invalid_heartbeat(req)
    if problem:
        return fail(ErrorCode.INVALID_REQUEST, problem)
    if req.subscribed_topic_names and any(
            not allowed(broker, conn, Operation.DESCRIBE, TOPIC, t) for t in req.subscribed_topic_names):
        return fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    if not_share_group(broker, req.group_id):
        return fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.")
    shares = shares_of(broker)
    store = broker.store
    group = shares.group(req.group_id, create=req.member_epoch == 0)
    try:
        if group is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {req.group_id}.")
        result = group.heartbeat(req.member_id, req.member_epoch, req.subscribed_topic_names,
                                 store.partition_count, rack_id=req.rack_id,
                                 client_id=header.client_id or "", client_host=conn.host)
        interval = group.config("share.heartbeat.interval.ms")
    except GroupError as exc:
        return fail(exc.code, exc.message)
    response.member_id = result.member_id
    response.member_epoch = result.member_epoch
    response.heartbeat_interval_ms = interval
    if result.assignment is not None:
        ids = topic_ids(broker)
        response.assignment = m.ShareGroupHeartbeatResponseAssignment(topic_partitions=[
            m.ShareGroupHeartbeatResponseTopicPartitions(topic_id=ids.by_name[t], partitions=list(ps))
            for t, ps in sorted(result.assignment.items()) if t in ids.by_name])
    return response


def share_group_describe(broker, conn, header, req):
    shares = shares_of(broker)
    ids = topic_ids(broker)
    out = []
    for gid in req.group_ids:
        described = m.ShareGroupDescribeResponseDescribedGroup(group_id=gid, members=[])
        out.append(described)
        if not allowed(broker, conn, Operation.DESCRIBE, GROUP_RESOURCE, gid):
            described.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            described.error_message = "Group authorization failed."
            continue
        group = shares.group(gid, create=False)
        if group is None:
            described.error_code = ErrorCode.GROUP_ID_NOT_FOUND
            described.error_message = (f"Group {gid} is not a share group."
                                       if not_share_group(broker, gid) else f"Group {gid} not found.")
            continue
        with group.lock:
            described.group_state = group.state()
            described.group_epoch = described.assignment_epoch = group.group_epoch
            described.assignor_name = "simple"
            members = list(group.members.values())
            described.members = [m.ShareGroupDescribeResponseMember(
                member_id=mem.member_id, rack_id=mem.rack_id, member_epoch=mem.member_epoch,
                client_id=mem.client_id, client_host=mem.client_host,
                subscribed_topic_names=list(mem.subscribed),
                assignment=m.ShareGroupDescribeResponseAssignment(topic_partitions=[
                    m.ShareGroupDescribeResponseTopicPartitions(
                        topic_id=ids.by_name[t], topic_name=t, partitions=list(ps))
                    for t, ps in sorted(mem.assignment.items()) if t in ids.by_name]))
                for mem in members]
        if req.include_authorized_operations:
            described.authorized_operations = authorized_operations(broker, conn, GROUP_RESOURCE, gid)
    return m.ShareGroupDescribeResponse(throttle_time_ms=0, groups=out)


# ================================================================= sessions

def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _INT32_MAX else epoch + 1


def _session(shares, group_id: str, member_id: str, epoch: int, opening_allowed: bool,
             limit: int = 2000):
    """The member's share session for a request of `epoch` (moved to its next epoch), or
    (code, message) refusing it. Epoch -1 answers the session (removed) or None. At most
    `limit` sessions (``group.share.max.share.sessions``)."""
    key = (group_id, member_id)
    session = shares.sessions.get(key)
    if epoch == INITIAL_EPOCH:
        if not opening_allowed:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session."
        if session is None and len(shares.sessions) >= limit:
            # Full: the sessions of clients that are not members of their group (never
            # joined, or removed) go first; members' sessions are kept.
            for stale in [k for k in list(shares.sessions) if not _is_member(shares, *k)]:
                shares.sessions.pop(stale, None)
            if len(shares.sessions) >= limit:
                return (ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                        f"The broker holds {limit} share sessions (group.share.max.share.sessions).")
        session = shares.sessions[key] = ShareSession(_next_epoch(epoch))
        return session
    if session is None:
        return ErrorCode.SHARE_SESSION_NOT_FOUND, f"No share session for member {member_id}."
    if epoch == FINAL_EPOCH:
        shares.sessions.pop(key, None)
        return session
    if epoch != session.epoch:
        return (ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                f"Share session epoch {epoch} is not the expected {session.epoch}.")
    session.epoch = _next_epoch(epoch)
    return session


def _is_member(shares, group_id: str, member_id: str) -> bool:
    group = shares.group(group_id, create=False)
    return group is not None and group.is_member(member_id)


def _apply_acks(broker, conn, group, member_id: str, topics, names) -> dict:
    """Applies each partition's acknowledgement batches: (topic id, partition) -> (error
    code, message) for every partition that carried any."""
    results = {}
    for t in topics:
        tid = bytes(t.topic_id)
        name = names.get(tid)
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            key = (tid, p.partition_index)
            if name is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_ID, "no topic has that topic id")
                continue
            if not allowed(broker, conn, Operation.READ, TOPIC, name):
                results[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
                continue
            batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                       for b in p.acknowledgement_batches]
            try:
                log = broker.store.log(name, p.partition_index)
                with group.lock:
                    sp = group.share_partition(name, p.partition_index, log)
                    group.acknowledge(member_id, sp, batches)
                results[key] = (ErrorCode.NONE, None)
            except AcknowledgeError as exc:
                results[key] = (exc.code, exc.message)
            except Exception as exc:            # noqa: BLE001 - answered per partition
                results[key] = (error_code(exc)[0], str(exc))
    return results


# =============================================================== ShareFetch

class _ShareFetch:
    """One ShareFetch: its session's partitions resolved to logs, its acknowledgements'
    results; :meth:`build` acquires and reads (again on each wake-up)."""

    def __init__(self, broker, conn, req) -> None:
        self.broker = broker
        self.conn = conn
        self.req = req
        self.shares = shares_of(broker)
        self.group = None
        self.acks: dict = {}
        self.logs: dict = {}                # (topic id, partition) -> (name, Log or error code)
        self.error: tuple[int, str] | None = None
        self.final = False

    def prepare(self) -> None:
        """Checks the request, moves the session, applies the acknowledgements."""
        req, broker = self.req, self.broker
        if not req.group_id or not req.group_id.strip():
            self.error = (ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
            return
        if not req.member_id or not req.member_id.strip():
            self.error = (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
            return
        if not allowed(broker, self.conn, Operation.READ, GROUP_RESOURCE, req.group_id):
            self.error = (ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
            return
        self.final = req.share_session_epoch == FINAL_EPOCH
        session = _session(self.shares, req.group_id, req.member_id, req.share_session_epoch, True,
                           broker.server_config["group.share.max.share.sessions"])
        if isinstance(session, tuple):
            self.error = session
            return
        names = topic_ids(broker).by_id
        self.group = self.shares.group(req.group_id)
        self.acks = _apply_acks(broker, self.conn, self.group, req.member_id, req.topics, names)
        if self.final:
            self.group.release_member(req.member_id)
            return
        for t in req.forgotten_topics_data:
            for p in t.partitions:
                session.partitions.discard((bytes(t.topic_id), p))
        for t in req.topics:
            for p in t.partitions:
                session.partitions.add((bytes(t.topic_id), p.partition_index))
        # From a different partition each fetch (the session's epoch turns it), so that
        # MaxRecords taken by the first partitions does not starve the last ones.
        order = sorted(session.partitions)
        turn = session.epoch % len(order) if order else 0
        for tid, p in order[turn:] + order[:turn]:
            name = names.get(tid)
            if name is None:
                self.logs[(tid, p)] = (None, ErrorCode.UNKNOWN_TOPIC_ID)
            elif not allowed(broker, self.conn, Operation.READ, TOPIC, name):
                self.logs[(tid, p)] = (name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                try:
                    self.logs[(tid, p)] = (name, broker.store.log(name, p))
                except Exception as exc:        # noqa: BLE001 - answered per partition
                    self.logs[(tid, p)] = (name, error_code(exc)[0])

    def first_build(self):
        """prepare() and build() with one write of the group's state for both (the
        acknowledgements and the acquisitions), before the answer."""
        group = self.shares.group(self.req.group_id, create=False) if self.req.group_id else None
        if group is None:                       # (nothing to acknowledge in a new group)
            self.prepare()
            return self.build()
        with group.deferred():
            self.prepare()
            return self.build()

    def response(self, parts: dict | None = None):
        """The ShareFetchResponse with `parts` ((topic id, partition) -> PartitionData)
        and the acknowledgements' results."""
        if self.error is not None:
            return m.ShareFetchResponse(throttle_time_ms=0, error_code=self.error[0],
                                        error_message=self.error[1], responses=[], node_endpoints=[])
        parts = dict(parts or {})
        for key, (code, message) in self.acks.items():
            part = parts.get(key)
            if part is None:
                part = parts[key] = _partition_data(key[1])
            part.acknowledge_error_code, part.acknowledge_error_message = code, message
        by_topic: dict[bytes, list] = {}
        for (tid, _), part in sorted(parts.items()):
            by_topic.setdefault(tid, []).append(part)
        lock_ms = self.group.config("share.record.lock.duration.ms") if self.group else 0
        return m.ShareFetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, acquisition_lock_timeout_ms=lock_ms,
            responses=[m.ShareFetchResponseShareFetchableTopicResponse(topic_id=tid, partitions=ps)
                       for tid, ps in by_topic.items()], node_endpoints=[])

    def build(self):
        """(the response, records acquired): acquires what each partition has available."""
        if self.error is not None or self.final:
            return self.response(), 0
        req, group = self.req, self.group
        budget = min(req.max_bytes, self.broker.server_config["fetch.max.bytes"])
        left = req.max_records if req.max_records > 0 else 500
        total_bytes = 0
        acquired = 0
        parts = {}
        for key, (name, log) in self.logs.items():
            if isinstance(log, int):
                part = parts[key] = _partition_data(key[1])
                part.error_code = log
                continue
            if left <= 0 or total_bytes >= budget:
                break
            try:
                with group.lock:
                    sp = group.share_partition(name, key[1], log)
                    data, ranges = group.acquire_records(req.member_id, sp, log,
                                                         budget - total_bytes, left)
            except Exception as exc:            # noqa: BLE001 - answered per partition
                part = parts[key] = _partition_data(key[1])
                part.error_code, part.error_message = error_code(exc)[0], str(exc)
                continue
            if not ranges:
                continue
            part = parts[key] = _partition_data(key[1])
            part.records = data
            part.acquired_records = [m.ShareFetchResponseAcquiredRecords(
                first_offset=r.first, last_offset=r.last, delivery_count=r.delivery_count)
                for r in ranges]
            n = sum(r.last - r.first + 1 for r in ranges)
            left -= n
            acquired += n
            total_bytes += data.size
        return self.response(parts), acquired


def _partition_data(partition: int):
    return m.ShareFetchResponsePartitionData(
        partition_index=partition, records=b"", acquired_records=[],
        current_leader=m.ShareFetchResponseLeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))


async def share_fetch(broker, conn, header, req):
    """ShareFetch, on the event loop: acknowledgements, acquisition and reads run in the
    broker's I/O pool (each state change is fsynced); with nothing acquired it parks until
    an append to a partition of the session, MaxWaitMs, or shutdown."""
    loop = asyncio.get_running_loop()
    pool = broker._io_pool
    fetch = _ShareFetch(broker, conn, req)
    response, acquired = await loop.run_in_executor(pool, fetch.first_build)
    if acquired or req.max_wait_ms <= 0 or fetch.error is not None or fetch.final \
            or broker.stopping:
        return response
    deadline = loop.time() + req.max_wait_ms / 1000
    event = asyncio.Event()
    waker = Waker(loop, event)
    logs = [lg for _, lg in fetch.logs.values() if not isinstance(lg, int)]
    for lg in logs:
        lg.add_listener(waker)
    # Another member's acknowledgement or release frees records too (Kafka completes a
    # delayed share fetch then as well): the group wakes the fetch.
    group = fetch.group
    if group is not None:
        group.add_waiter(waker)
    broker.park(event)
    try:
        # A lock that expires frees records too: look again at least once a second.
        while not broker.stopping:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(event.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass
            event.clear()
            response, acquired = await loop.run_in_executor(pool, fetch.build)
            if acquired:
                break
    finally:
        broker.unpark(event)
        for lg in logs:
            lg.remove_listener(waker)
        if group is not None:
            group.remove_waiter(waker)
    return response


# ========================================================== ShareAcknowledge

def share_acknowledge(broker, conn, header, req):
    def fail(code: int, message: str):
        return m.ShareAcknowledgeResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                          responses=[], node_endpoints=[])

    if not req.group_id or not req.group_id.strip():
        return fail(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if not req.member_id or not req.member_id.strip():
        return fail(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if not allowed(broker, conn, Operation.READ, GROUP_RESOURCE, req.group_id):
        return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    shares = shares_of(broker)
    session = _session(shares, req.group_id, req.member_id, req.share_session_epoch, False)
    if isinstance(session, tuple):
        return fail(*session)
    group = shares.group(req.group_id)
    acks = _apply_acks(broker, conn, group, req.member_id, req.topics, topic_ids(broker).by_id)
    if req.share_session_epoch == FINAL_EPOCH:
        group.release_member(req.member_id)
    by_topic: dict[bytes, list] = {}
    for (tid, p), (code, message) in sorted(acks.items()):
        by_topic.setdefault(tid, []).append(m.ShareAcknowledgeResponsePartitionData(
            partition_index=p, error_code=code, error_message=message,
            current_leader=m.ShareAcknowledgeResponseLeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)))
    return m.ShareAcknowledgeResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, node_endpoints=[],
        responses=[m.ShareAcknowledgeResponseShareAcknowledgeTopicResponse(topic_id=tid, partitions=ps)
                   for tid, ps in by_topic.items()])
