"""A group member that speaks raw group requests on its own connection (pylog's protocol
client), for tests that must pick the exact request: member ids, generations, instance
ids, versions, and requests left parked while others are sent.

Real clients (librdkafka, Kafka's Java consumer) retry and rejoin on their own; these
members do exactly what a test says and report the error code Kafka's broker would put
in the response.
"""

from __future__ import annotations

from pylog.coordinator.bridge import encode_subscription
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82


class RawMember:
    def __init__(self, bootstrap: str, group: str, instance: str | None = None,
                 session_ms: int = 10_000, rebalance_ms: int = 10_000, topics=("t",),
                 client_id: str = "raw") -> None:
        self.client = ProtocolClient(bootstrap, client_id=client_id)
        self.group = group
        self.instance = instance
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.protocols = [("range", encode_subscription(list(topics)))]
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list = []

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RawMember:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ============================================================= join

    def join_request(self, member_id: str | None = None):
        return m.JoinGroupRequest(
            group_id=self.group, session_timeout_ms=self.session_ms,
            rebalance_timeout_ms=self.rebalance_ms,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance, protocol_type="consumer",
            protocols=[m.JoinGroupRequestJoinGroupRequestProtocol(name=n, metadata=md)
                       for n, md in self.protocols])

    def send_join(self, member_id: str | None = None, version: int | None = None):
        """Sends a JoinGroup without waiting: (correlation, version) for finish_join."""
        return self.client.send(11, self.join_request(member_id), version)

    def finish_join(self, sent):
        response = self.client.receive(11, sent[1], sent[0])
        self._joined(response)
        return response

    def _joined(self, response) -> None:
        if response.member_id and response.error_code in (0, MEMBER_ID_REQUIRED):
            self.member_id = response.member_id
        if response.error_code == 0:
            self.generation = response.generation_id
            self.leader = response.leader
            self.members = response.members

    def join(self, version: int | None = None):
        """JoinGroup, rejoining once with the id a MEMBER_ID_REQUIRED answer hands out."""
        response = self.finish_join(self.send_join(version=version))
        if response.error_code == MEMBER_ID_REQUIRED:
            response = self.finish_join(self.send_join(version=version))
        return response

    # ============================================================= sync

    def send_sync(self, assignments: dict[str, bytes] | None = None, generation: int | None = None):
        return self.client.send(14, m.SyncGroupRequest(
            group_id=self.group, generation_id=self.generation if generation is None else generation,
            member_id=self.member_id, group_instance_id=self.instance,
            protocol_type="consumer", protocol_name="range",
            assignments=[m.SyncGroupRequestSyncGroupRequestAssignment(member_id=k, assignment=v)
                         for k, v in (assignments or {}).items()]))

    def finish_sync(self, sent):
        return self.client.receive(14, sent[1], sent[0])

    def sync(self, assignments: dict[str, bytes] | None = None, generation: int | None = None):
        return self.finish_sync(self.send_sync(assignments, generation))

    def join_and_sync(self, assignment: bytes = b"\x00\x00mine"):
        """Joins and syncs (as the leader, giving every member `assignment`); the error."""
        joined = self.join()
        if joined.error_code:
            return joined.error_code
        plan = {mem.member_id: assignment for mem in joined.members} if self.leader == self.member_id else {}
        return self.sync(plan).error_code

    # ======================================================= the others

    def heartbeat(self, generation: int | None = None, member_id: str | None = None) -> int:
        return self.client.request(12, m.HeartbeatRequest(
            group_id=self.group, generation_id=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance)).error_code

    def commit(self, topic: str, offset: int, generation: int | None = None,
               member_id: str | None = None, instance: str | None | bool = False,
               version: int | None = None) -> int:
        """OffsetCommit of partition 0 of `topic`; the partition's error code. `instance`
        False: this member's own instance id."""
        response = self.client.request(8, m.OffsetCommitRequest(
            group_id=self.group,
            generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance if instance is False else instance,
            topics=[m.OffsetCommitRequestOffsetCommitRequestTopic(name=topic, partitions=[
                m.OffsetCommitRequestOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset)])]), version)
        return response.topics[0].partitions[0].error_code

    def leave(self, member_id: str | None = None, instance: str | None | bool = False):
        """LeaveGroup v3+ for one member; (top-level error, the member's error)."""
        response = self.client.request(13, m.LeaveGroupRequest(
            group_id=self.group, members=[m.LeaveGroupRequestMemberIdentity(
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance if instance is False else instance)]))
        return response.error_code, response.members[0].error_code

    def describe(self):
        return self.client.request(15, m.DescribeGroupsRequest(groups=[self.group])).groups[0]

    def delete_group(self) -> int:
        return self.client.request(42, m.DeleteGroupsRequest(groups_names=[self.group])).results[0].error_code
