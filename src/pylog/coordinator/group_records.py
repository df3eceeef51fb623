"""Group membership records of ``__consumer_offsets``, in Kafka's coordinator schemas
(docs/FORMAT.md, section 11; Kafka's ``kafka-group-coordinator`` jar,
``common/message/*Key.json`` / ``*Value.json``).

A key is ``int16 type | fields``, non-flexible (``string``: int16 length, UTF-8); the
type is the schema's ``apiKey``. A value is ``int16 version | fields``; every value here
but GroupMetadataValue is flexible (compact strings and arrays, uvarint length + 1;
uuid: 16 bytes; each struct ends with its tagged fields). A null value deletes the key.

======================================  ====  =====================================
record                                  type  key fields
======================================  ====  =====================================
GroupMetadata (classic group)              2  group
ConsumerGroupMetadata                      3  group
ConsumerGroupMemberMetadata                5  group, member
ConsumerGroupTargetAssignmentMetadata      6  group
ConsumerGroupTargetAssignmentMember        7  group, member
ConsumerGroupCurrentMemberAssignment       8  group, member
ShareGroupMemberMetadata                  10  group, member
ShareGroupMetadata                        11  group
ShareGroupTargetAssignmentMetadata        12  group
ShareGroupTargetAssignmentMember          13  group, member
ShareGroupCurrentMemberAssignment         14  group, member
======================================  ====  =====================================

Topics are named by topic id in assignments: the encoders take ``{topic id: partitions}``
and the decoders return the same; the coordinator maps ids to names (a topic deleted
since has an id no name maps to, and its partitions are dropped).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

from pylog.common.varint import uvarint_bytes
from pylog.errors import CorruptRecordError

from .offsets import _Reader, _string

__all__ = [
    "GROUP_METADATA", "CONSUMER_GROUP_METADATA", "CONSUMER_MEMBER_METADATA",
    "CONSUMER_TARGET_METADATA", "CONSUMER_TARGET_MEMBER", "CONSUMER_CURRENT_ASSIGNMENT",
    "SHARE_MEMBER_METADATA", "SHARE_GROUP_METADATA", "SHARE_TARGET_METADATA",
    "SHARE_TARGET_MEMBER", "SHARE_CURRENT_ASSIGNMENT", "MEMBER_STATES", "MEMBER_STATE_NAMES",
    "group_key", "member_key", "decode_group_key", "ClassicGroupRecord", "ClassicMemberRecord",
    "encode_classic_group", "decode_classic_group", "MemberMetadata", "encode_member_metadata",
    "decode_member_metadata", "encode_group_epoch", "decode_group_epoch",
    "encode_assignment_epoch", "decode_assignment_epoch", "encode_target_member",
    "decode_target_member", "CurrentAssignment", "encode_current_assignment",
    "decode_current_assignment", "metadata_hash",
]

GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_MEMBER_METADATA = 5
CONSUMER_TARGET_METADATA = 6
CONSUMER_TARGET_MEMBER = 7
CONSUMER_CURRENT_ASSIGNMENT = 8
SHARE_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_TARGET_METADATA = 12
SHARE_TARGET_MEMBER = 13
SHARE_CURRENT_ASSIGNMENT = 14

#: The key types naming a member as well as the group.
_MEMBER_KEYS = {CONSUMER_MEMBER_METADATA, CONSUMER_TARGET_MEMBER, CONSUMER_CURRENT_ASSIGNMENT,
                SHARE_MEMBER_METADATA, SHARE_TARGET_MEMBER, SHARE_CURRENT_ASSIGNMENT}
_GROUP_KEYS = {GROUP_METADATA, CONSUMER_GROUP_METADATA, CONSUMER_TARGET_METADATA,
               SHARE_GROUP_METADATA, SHARE_TARGET_METADATA}

#: Kafka's MemberState values (org.apache.kafka.coordinator.group.modern.MemberState).
MEMBER_STATES = {"STABLE": 0, "UNREVOKED_PARTITIONS": 1, "UNRELEASED_PARTITIONS": 2, "UNKNOWN": 127}
MEMBER_STATE_NAMES = {v: k for k, v in MEMBER_STATES.items()}

#: GroupMetadataValue version written (Kafka 4.x writes 3: non-flexible, with
#: currentStateTimestamp and groupInstanceId); 0-4 are read.
CLASSIC_VALUE_VERSION = 3

Assignment = dict[bytes, list[int]]       # topic id (16 bytes) -> partitions


# ----------------------------------------------------------------- keys

def group_key(kind: int, group: str) -> bytes:
    return struct.pack(">h", kind) + _string(group)


def member_key(kind: int, group: str, member: str) -> bytes:
    return struct.pack(">h", kind) + _string(group) + _string(member)


def decode_group_key(data: bytes) -> tuple[int, str, str | None] | None:
    """(type, group, member or None) of a group record's key; None for the other records
    of ``__consumer_offsets`` (offset commits, types pylog does not keep)."""
    r = _Reader(data, "__consumer_offsets key")
    kind = r.int16()
    if kind in _GROUP_KEYS:
        return kind, r.string(), None
    if kind in _MEMBER_KEYS:
        return kind, r.string(), r.string()
    return None


# ------------------------------------------------------- flexible values

def _cstr(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode("utf-8")
    return uvarint_bytes(len(raw) + 1) + raw


def _nullable_cstr(r: _Reader) -> str | None:
    n = r.uvarint() - 1
    return None if n < 0 else r.take(n).decode("utf-8")


def _carray(items: list[bytes]) -> bytes:
    return uvarint_bytes(len(items) + 1) + b"".join(items)


def _array_len(r: _Reader) -> int:
    return max(r.uvarint() - 1, 0)


_NO_TAGS = b"\x00"


def _version(r: _Reader, what: str, highest: int = 0) -> int:
    version = r.int16()
    if not 0 <= version <= highest:
        raise CorruptRecordError(f"{what} has unknown version {version}")
    return version


def _topic_partitions(assignment: Assignment) -> bytes:
    return _carray([tid + _carray([struct.pack(">i", p) for p in sorted(ps)]) + _NO_TAGS
                    for tid, ps in sorted(assignment.items()) if ps])


def _read_topic_partitions(r: _Reader) -> Assignment:
    out: Assignment = {}
    for _ in range(_array_len(r)):
        tid = r.take(16)
        out[tid] = [r.int32() for _ in range(_array_len(r))]
        r.skip_tagged_fields()
    return out


# ------------------------------------------------- classic: GroupMetadata

@dataclass(slots=True)
class ClassicMemberRecord:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class ClassicGroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[ClassicMemberRecord] = field(default_factory=list)


def _nullable_string(text: str | None) -> bytes:
    return b"\xff\xff" if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + bytes(data)


def encode_classic_group(g: ClassicGroupRecord) -> bytes:
    """GroupMetadataValue version 3."""
    out = [struct.pack(">h", CLASSIC_VALUE_VERSION), _string(g.protocol_type),
           struct.pack(">i", g.generation), _nullable_string(g.protocol),
           _nullable_string(g.leader), struct.pack(">q", g.state_timestamp),
           struct.pack(">i", len(g.members))]
    for m in g.members:
        out += [_string(m.member_id), _nullable_string(m.instance_id), _string(m.client_id),
                _string(m.client_host), struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(out)


def decode_classic_group(data: bytes) -> ClassicGroupRecord:
    """GroupMetadataValue of versions 0-4."""
    r = _Reader(data, "GroupMetadataValue")
    v = _version(r, "GroupMetadataValue", 4)
    flex = v >= 4

    def string() -> str | None:
        if flex:
            return _nullable_cstr(r)
        n = r.int16()
        return None if n < 0 else r.take(n).decode("utf-8")

    def blob() -> bytes:
        n = r.uvarint() - 1 if flex else r.int32()
        return b"" if n < 0 else r.take(n)

    protocol_type = string() or ""
    generation = r.int32()
    protocol, leader = string(), string()
    timestamp = r.int64() if v >= 2 else -1
    count = _array_len(r) if flex else r.int32()
    members = []
    for _ in range(max(count, 0)):
        member_id = string() or ""
        instance_id = string() if v >= 3 else None
        client_id, client_host = string() or "", string() or ""
        rebalance = r.int32() if v >= 1 else -1
        session = r.int32()
        subscription, assignment = blob(), blob()
        if flex:
            r.skip_tagged_fields()
        members.append(ClassicMemberRecord(member_id, instance_id, client_id, client_host,
                                           rebalance if rebalance >= 0 else session, session,
                                           subscription, assignment))
    if flex:
        r.skip_tagged_fields()
    return ClassicGroupRecord(protocol_type, generation, protocol, leader, timestamp, members)


# ----------------------------------- consumer (KIP-848) and share groups

@dataclass(slots=True)
class MemberMetadata:
    """ConsumerGroupMemberMetadataValue (a share member's has rack, client and
    subscribed names only)."""
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None


def encode_member_metadata(m: MemberMetadata, share: bool = False) -> bytes:
    names = _carray([_cstr(n) for n in sorted(m.subscribed_names)])
    if share:
        return (b"\x00\x00" + _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
                + names + _NO_TAGS)
    return (b"\x00\x00" + _cstr(m.instance_id) + _cstr(m.rack_id) + _cstr(m.client_id)
            + _cstr(m.client_host) + names + _cstr(m.subscribed_regex)
            + struct.pack(">i", m.rebalance_timeout_ms) + _cstr(m.server_assignor) + _NO_TAGS)


def decode_member_metadata(data: bytes, share: bool = False) -> MemberMetadata:
    r = _Reader(data, "member metadata value")
    _version(r, "member metadata value")
    m = MemberMetadata()
    if share:
        m.rack_id = _nullable_cstr(r)
        m.client_id, m.client_host = _nullable_cstr(r) or "", _nullable_cstr(r) or ""
        m.subscribed_names = [_nullable_cstr(r) or "" for _ in range(_array_len(r))]
    else:
        m.instance_id, m.rack_id = _nullable_cstr(r), _nullable_cstr(r)
        m.client_id, m.client_host = _nullable_cstr(r) or "", _nullable_cstr(r) or ""
        m.subscribed_names = [_nullable_cstr(r) or "" for _ in range(_array_len(r))]
        m.subscribed_regex = _nullable_cstr(r)
        m.rebalance_timeout_ms = r.int32()
        m.server_assignor = _nullable_cstr(r)
    r.skip_tagged_fields()          # ClassicMemberMetadata (tag 0): a classic member's
    return m


def metadata_hash(partition_counts: dict[str, int]) -> int:
    """The MetadataHash pylog stores (KIP-1101's field): an int64 of the subscribed
    topics' names and partition counts (SHA-256, first 8 bytes). Kafka computes its own
    differently: a Kafka broker reading it sees changed metadata and rebalances once."""
    text = "\n".join(f"{t}\t{n}" for t, n in sorted(partition_counts.items()))
    return struct.unpack(">q", hashlib.sha256(text.encode("utf-8")).digest()[:8])[0]


def encode_group_epoch(epoch: int, hash_: int, share: bool = False) -> bytes:
    """ConsumerGroupMetadataValue (MetadataHash tagged, tag 0) or ShareGroupMetadataValue
    (MetadataHash a plain field)."""
    if share:
        return struct.pack(">hiq", 0, epoch, hash_) + _NO_TAGS
    tagged = b"\x01\x00\x08" + struct.pack(">q", hash_) if hash_ else _NO_TAGS
    return struct.pack(">hi", 0, epoch) + tagged


def decode_group_epoch(data: bytes, share: bool = False) -> tuple[int, int]:
    """(epoch, metadata hash)."""
    r = _Reader(data, "group metadata value")
    _version(r, "group metadata value")
    epoch = r.int32()
    if share:
        return epoch, r.int64()
    hash_ = 0
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        raw = r.take(size)
        if tag == 0 and size == 8:
            hash_ = struct.unpack(">q", raw)[0]
    return epoch, hash_


def encode_assignment_epoch(epoch: int) -> bytes:
    """Consumer/ShareGroupTargetAssignmentMetadataValue."""
    return struct.pack(">hi", 0, epoch) + _NO_TAGS


def decode_assignment_epoch(data: bytes) -> int:
    r = _Reader(data, "target assignment metadata value")
    _version(r, "target assignment metadata value")
    return r.int32()


def encode_target_member(assignment: Assignment) -> bytes:
    """Consumer/ShareGroupTargetAssignmentMemberValue."""
    return b"\x00\x00" + _topic_partitions(assignment) + _NO_TAGS


def decode_target_member(data: bytes) -> Assignment:
    r = _Reader(data, "target assignment member value")
    _version(r, "target assignment member value")
    out = _read_topic_partitions(r)
    r.skip_tagged_fields()
    return out


@dataclass(slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_epoch: int
    state: str                      # a MEMBER_STATES name
    assigned: Assignment
    revoking: Assignment


def encode_current_assignment(c: CurrentAssignment, share: bool = False) -> bytes:
    """ConsumerGroupCurrentMemberAssignmentValue (a share member's has no revoking)."""
    out = (struct.pack(">hiib", 0, c.member_epoch, c.previous_epoch, MEMBER_STATES[c.state])
           + _topic_partitions(c.assigned))
    if not share:
        out += _topic_partitions(c.revoking)
    return out + _NO_TAGS


def decode_current_assignment(data: bytes, share: bool = False) -> CurrentAssignment:
    r = _Reader(data, "current member assignment value")
    _version(r, "current member assignment value")
    epoch, previous = r.int32(), r.int32()
    state = MEMBER_STATE_NAMES.get(r.take(1)[0], "UNKNOWN")
    assigned = _read_topic_partitions(r)
    revoking = {} if share else _read_topic_partitions(r)
    r.skip_tagged_fields()
    return CurrentAssignment(epoch, previous, state, assigned, revoking)
