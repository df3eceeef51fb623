"""Request and response headers, framing, and the API versions pylog speaks.

A Kafka request on the wire is ``int32 size`` + request header + body; a response
is ``int32 size`` + response header + body. Header versions follow the body's:
request header v2 / response header v1 for flexible versions, v1 / v0 otherwise,
except that an ApiVersions response always has header v0 (KIP-511: a client that
sent a version the broker does not know must still read the error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pylog.errors import ErrorCode

from . import messages as m
from .api_keys import ApiKey
from .codec import Reader, Writer

__all__ = ["API_NAMES", "SUPPORTED", "UNADVERTISED", "SUPPORTED_FEATURES", "FINALIZED_FEATURES",
           "FINALIZED_FEATURES_EPOCH", "RequestHeader", "decode_request", "encode_request",
           "unsupported_version_response",
           "frame_response", "decode_response", "is_flexible"]

_i32 = struct.Struct(">i")

#: API key -> Kafka's name (ApiKeys.java).
API_NAMES = {cls.API_KEY: name[:-len("Request")] for name, cls in
             ((c.__name__, c) for c in m.REQUESTS.values())}

#: The versions pylog's broker advertises, per API key: every client of
#: ../shared/reference/kafka-protocol.md picks its newest path inside these. The
#: minimums stay low for aiokafka (JoinGroup 0-5 ...). Fetch >= 4 keeps every consumer on
#: v2 record batches (what pylog stores; older fetches would need down-conversion). Produce starts at 0: librdkafka 2.0
#: (Debian's kcat) compresses with gzip, snappy or lz4 only if the broker lists Produce v0
#: (measured: with a minimum of 1 it sends those uncompressed); v0-2 carry magic 0/1
#: message sets, which Log.append up-converts, as Kafka does. SaslHandshake and
#: SaslAuthenticate are listed because Kafka lists them on a PLAINTEXT listener too
#: (measured: Kafka 4.1 lists 17: 0-1 and 36: 0-2 and answers both ILLEGAL_SASL_STATE).
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (0, 13),     # Produce (10: KIP-951 tags, unset on one node; 12: transactions v2; 13: topic ids, KIP-516)
    1: (4, 18),     # Fetch (7+: sessions, KIP-227; 13+: topics by id)
    2: (1, 9),      # ListOffsets (7: max timestamp, KIP-734; 8: -4, KIP-405; 9: -5, KIP-1005)
    3: (0, 12),     # Metadata
    8: (2, 9),      # OffsetCommit (9: member epochs of the consumer protocol, KIP-848)
    9: (1, 9),      # OffsetFetch (9: member id and epoch, KIP-848)
    10: (0, 4),     # FindCoordinator
    11: (0, 7),     # JoinGroup
    12: (0, 4),     # Heartbeat
    13: (0, 4),     # LeaveGroup
    14: (0, 5),     # SyncGroup
    15: (0, 5),     # DescribeGroups
    16: (0, 5),     # ListGroups (5: TypesFilter and GroupType, KIP-848: classic, consumer, share)
    17: (0, 1),     # SaslHandshake (ILLEGAL_SASL_STATE on a PLAINTEXT listener, as Kafka)
    18: (0, 4),     # ApiVersions (4: supported features from 0 listed, KIP-1022)
    19: (0, 7),     # CreateTopics
    20: (0, 6),     # DeleteTopics
    21: (0, 2),     # DeleteRecords
    22: (0, 5),     # InitProducerId (5: may answer TRANSACTION_ABORTABLE; 6+: KIP-939 2PC)
    23: (2, 4),     # OffsetForLeaderEpoch (0-1 removed in Kafka 4.0; 3+: consumers)
    24: (0, 5),     # AddPartitionsToTxn (4+: batched, verify_only)
    25: (0, 4),     # AddOffsetsToTxn
    26: (0, 5),     # EndTxn (5: transactions v2, the epoch bumped and answered)
    27: (1, 1),     # WriteTxnMarkers (ABORT from Kafka's tools; the coordinator writes its own)
    28: (0, 5),     # TxnOffsetCommit (5: transactions v2, the group added implicitly)
    32: (0, 4),     # DescribeConfigs
    33: (0, 2),     # AlterConfigs
    36: (0, 2),     # SaslAuthenticate (ILLEGAL_SASL_STATE on a PLAINTEXT listener, as Kafka)
    37: (0, 3),     # CreatePartitions
    42: (0, 2),     # DeleteGroups
    44: (0, 1),     # IncrementalAlterConfigs
    47: (0, 0),     # OffsetDelete
    50: (0, 0),     # DescribeUserScramCredentials
    51: (0, 0),     # AlterUserScramCredentials
    60: (0, 2),     # DescribeCluster
    29: (1, 3),     # DescribeAcls
    30: (1, 3),     # CreateAcls
    31: (1, 3),     # DeleteAcls
    48: (0, 1),     # DescribeClientQuotas
    49: (0, 1),     # AlterClientQuotas
    61: (0, 0),     # DescribeProducers
    65: (0, 0),     # DescribeTransactions
    66: (0, 2),     # ListTransactions
    68: (0, 1),     # ConsumerGroupHeartbeat (KIP-848; 1: regex subscriptions, client member ids)
    69: (0, 1),     # ConsumerGroupDescribe
    34: (1, 2),     # AlterReplicaLogDirs (KIP-113; 0 removed in Kafka 4.0)
    35: (1, 4),     # DescribeLogDirs (0 removed in Kafka 4.0; 4: total and usable bytes)
    45: (0, 1),     # AlterPartitionReassignments (one broker: only [node.id])
    46: (0, 0),     # ListPartitionReassignments (none is ever ongoing)
    76: (1, 1),     # ShareGroupHeartbeat (KIP-932; 0 was Kafka 4.0's early access)
    77: (1, 1),     # ShareGroupDescribe
    78: (1, 1),     # ShareFetch
    79: (1, 1),     # ShareAcknowledge
    90: (0, 0),     # DescribeShareGroupOffsets (KIP-932's admin APIs, Kafka 4.1's v0)
    91: (0, 0),     # AlterShareGroupOffsets
    92: (0, 0),     # DeleteShareGroupOffsets
}

#: The features ApiVersions (v3+) lists, name -> (min, max) supported and the finalized
#: level, as Kafka 4.1's broker answers ``transaction.version`` (measured: supported 0-2,
#: finalized 2): Kafka 4 clients then use transactions v2 (Produce v12 adds partitions,
#: EndTxn v5 bumps the epoch). Kafka's other features (metadata.version, group.version,
#: ...) name things pylog does not do and are not listed.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {"transaction.version": (0, 2)}
FINALIZED_FEATURES: dict[str, int] = {"transaction.version": 2}
#: The epoch of the finalized features (Kafka: the metadata offset they were set at):
#: pylog's never change. A client keeps the features of the highest epoch it saw, from -1.
FINALIZED_FEATURES_EPOCH = 1

#: APIs answered but left out of ApiVersions, as Kafka's broker does: the client telemetry
#: APIs (KIP-714) of a broker without a metrics plugin (measured, Kafka 4.1: not listed;
#: a GetTelemetrySubscriptions sent anyway gets an empty subscription).
UNADVERTISED: dict[int, tuple[int, int]] = {
    71: (0, 0),     # GetTelemetrySubscriptions
    72: (0, 0),     # PushTelemetry
}

API_VERSIONS_KEY = ApiKey.API_VERSIONS


def is_flexible(api_key: int, version: int) -> bool:
    flex = m.REQUESTS[api_key].FLEXIBLE
    return flex is not None and version >= flex


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request(frame, max_elements: int | None = None) -> tuple[RequestHeader, object | None, str | None]:
    """Parses one request frame (without its size prefix).

    Returns (header, body, problem): body is None and problem names why when the API or
    version is not supported (the caller answers with UNSUPPORTED_VERSION where Kafka
    does). Raises MalformedMessageError for a header or body that does not parse, and
    TooManyElementsError (one) when its arrays hold more than `max_elements` elements.
    """
    r = Reader(frame, max_elements=max_elements)
    api_key, api_version, correlation_id = r.int16(), r.int16(), r.int32()
    client_id = r.string(False, True)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    cls = m.REQUESTS.get(api_key)
    supported = SUPPORTED.get(api_key) or UNADVERTISED.get(api_key)
    if cls is None or supported is None:
        return header, None, f"unknown or unsupported API key {api_key}"
    lo, hi = supported
    if not lo <= api_version <= hi:
        return header, None, (f"{API_NAMES[api_key]} version {api_version} is not supported "
                              f"(this broker speaks {lo}-{hi})")
    if is_flexible(api_key, api_version):
        r.skip_tagged_fields()
    # Bytes after the last field are ignored, as Kafka's broker does: librdkafka 2.16 sends
    # three of them after its "all topics" Metadata v12 request (measured).
    return header, cls.read(r, api_version), None


def unsupported_version_response(header: RequestHeader, frame, max_elements: int | None = None):
    """The answer to a request of an API pylog speaks at a version it does not, where
    Kafka's messages have a place for the error: a top-level ``error_code`` (e.g. Fetch
    7+), or each partition of a Produce. None where there is none (the caller closes the
    connection, as Kafka's broker does for a request it cannot answer). A Produce is
    decoded to answer it: within `max_elements`, as decode_request."""
    req_cls, resp_cls = m.REQUESTS.get(header.api_key), m.RESPONSES.get(header.api_key)
    if req_cls is None or resp_cls is None or \
            not resp_cls.VERSIONS[0] <= header.api_version <= resp_cls.VERSIONS[1]:
        return None
    version = header.api_version
    fields = {f[0]: f[3] for f in resp_cls._SCHEMA}
    if "error_code" in fields and fields["error_code"][0] <= version <= fields["error_code"][1]:
        return resp_cls(error_code=ErrorCode.UNSUPPORTED_VERSION)
    if header.api_key == ApiKey.PRODUCE:  # the error goes in every partition
        r = Reader(frame, max_elements=max_elements)
        r.int16(), r.int16(), r.int32(), r.string(False, True)
        if is_flexible(0, version):
            r.skip_tagged_fields()
        request = req_cls.read(r, version)
        return resp_cls(responses=[m.ProduceResponseTopicProduceResponse(
            name=t.name, topic_id=t.topic_id,       # v13+: topics by id
            partition_responses=[m.ProduceResponsePartitionProduceResponse(
                index=p.index, error_code=ErrorCode.UNSUPPORTED_VERSION) for p in t.partition_data])
            for t in request.topic_data])
    return None


def frame_response(header: RequestHeader, body, version: int | None = None) -> list:
    """The response to `header` as parts (bytes and file regions), size prefix included."""
    version = header.api_version if version is None else version
    w = Writer()
    w.int32(0)                              # the size, patched below
    w.int32(header.correlation_id)
    if header.api_key != API_VERSIONS_KEY and is_flexible(header.api_key, version):
        w.empty_tagged_fields()
    body.write(w, version)
    parts = w.parts()
    _i32.pack_into(parts[0], 0, w.size() - 4)
    return parts


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body) -> bytes:
    """A whole request frame (size prefix included): pylog's own protocol client and tests."""
    w = Writer()
    w.int32(0)
    w.int16(api_key)
    w.int16(version)
    w.int32(correlation_id)
    w.string(client_id, False)
    if is_flexible(api_key, version):
        w.empty_tagged_fields()
    body.write(w, version)
    data = bytearray(w.getvalue())
    _i32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, version: int, frame) -> tuple[int, object]:
    """(correlation id, body) of one response frame (without its size prefix)."""
    r = Reader(frame)
    correlation_id = r.int32()
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, version):
        r.skip_tagged_fields()
    return correlation_id, m.RESPONSES[api_key].read(r, version)
