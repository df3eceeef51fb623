"""Consumer groups at a broker: what kafka-consumer-groups.sh asks of its AdminClient
(list, describe with members and assignments, committed offsets, reset, delete) over
Kafka's wire protocol, against ``pylog serve`` or a Kafka cluster.

Group requests go to the group's coordinator (FindCoordinator); ListGroups asks every
broker of the cluster. Offsets are committed as a client outside the group (generation
-1, no member id), which a coordinator accepts only while the group has no members
(Kafka's tool refuses to reset an active group for the same reason).
"""

from __future__ import annotations

from dataclasses import dataclass

from pylog.protocol import ApiKey
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient, ProtocolError

from .security import PLAINTEXT, ClientSecurity

__all__ = ["GroupMember", "GroupDescription", "RemoteGroups"]



@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]     # its assignment (consumer protocol)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str                                  # Empty, Stable, PreparingRebalance, Dead, ...
    members: tuple[GroupMember, ...]


def _assignment(data) -> list[tuple[str, int]]:
    """A consumer-protocol assignment (version:int16 + ConsumerProtocolAssignment)."""
    if not data or len(data) < 2:
        return []
    version = min(int.from_bytes(data[:2], "big", signed=True), 3)
    decoded = m.ConsumerProtocolAssignment.decode(memoryview(data)[2:], version)
    return [(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions]


def _pinned(client: ProtocolClient, api_key: int, newest: int) -> int:
    """The newest version both sides speak, at most `newest` (the request shapes used here)."""
    return min(client.version(api_key), newest)


class RemoteGroups:
    """``with RemoteGroups("host:port") as groups: groups.describe("g")``."""

    def __init__(self, bootstrap: str, client_id: str = "pylog-consumer-groups",
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap.split(",")[0].strip()
        self.client_id = client_id
        self.security = security
        self._clients: dict[str, ProtocolClient] = {}

    def __enter__(self) -> RemoteGroups:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, address: str) -> ProtocolClient:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self.security.connect(address, self.client_id)
        return client

    def _coordinator(self, group: str) -> ProtocolClient:
        client = self._client(self.bootstrap)
        v = _pinned(client, ApiKey.FIND_COORDINATOR, 3)
        found = client.request(ApiKey.FIND_COORDINATOR, m.FindCoordinatorRequest(key=group, key_type=0), v)
        if found.error_code:
            raise ProtocolError(found.error_code, f"FindCoordinator for group {group!r}")
        return self._client(f"{found.host}:{found.port}")

    def list(self) -> dict[str, str]:
        """group id -> state, from every broker of the cluster."""
        seed = self._client(self.bootstrap)
        brokers = [f"{b.host}:{b.port}" for b in seed.metadata([]).brokers] or [self.bootstrap]
        out: dict[str, str] = {}
        for address in brokers:
            response = self._client(address).request(ApiKey.LIST_GROUPS, m.ListGroupsRequest())
            if response.error_code:
                raise ProtocolError(response.error_code, f"ListGroups at {address}")
            for g in response.groups:
                out[g.group_id] = g.group_state or ""
        return dict(sorted(out.items()))

    def describe(self, group: str) -> GroupDescription:
        d = self._coordinator(group).request(ApiKey.DESCRIBE_GROUPS,
                                             m.DescribeGroupsRequest(groups=[group])).groups[0]
        if d.error_code:
            raise ProtocolError(d.error_code, f"DescribeGroups {group!r}")
        members = []
        for member in d.members:
            assigned = _assignment(member.member_assignment) if d.protocol_type == "consumer" else []
            members.append(GroupMember(member.member_id, member.client_id, member.client_host,
                                       tuple(sorted(assigned))))
        return GroupDescription(d.group_id, d.group_state, tuple(members))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group ((topic, partition) -> offset)."""
        client = self._coordinator(group)
        v = _pinned(client, ApiKey.OFFSET_FETCH, 7)       # v8+ batches groups: not needed here
        response = client.request(ApiKey.OFFSET_FETCH, m.OffsetFetchRequest(group_id=group, topics=None), v)
        if response.error_code:
            raise ProtocolError(response.error_code, f"OffsetFetch {group!r}")
        out = {}
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise ProtocolError(p.error_code, f"OffsetFetch {group!r} {t.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
        return out

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commits `offsets` from outside the group (it must have no members)."""
        by_topic: dict[str, list] = {}
        for (topic, p), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(m.OffsetCommitRequestOffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_leader_epoch=-1,
                commit_timestamp=-1, committed_metadata=""))
        client = self._coordinator(group)
        v = _pinned(client, ApiKey.OFFSET_COMMIT, 7)
        response = client.request(ApiKey.OFFSET_COMMIT, m.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            retention_time_ms=-1, topics=[m.OffsetCommitRequestOffsetCommitRequestTopic(
                name=t, partitions=ps) for t, ps in by_topic.items()]), v)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise ProtocolError(p.error_code, f"OffsetCommit {group!r} {t.name}-{p.partition_index}")

    def delete(self, group: str) -> None:
        result = self._coordinator(group).request(
            ApiKey.DELETE_GROUPS, m.DeleteGroupsRequest(groups_names=[group])).results[0]
        if result.error_code:
            raise ProtocolError(result.error_code, f"DeleteGroups {group!r}")
