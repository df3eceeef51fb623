"""A small blocking Kafka protocol client: pylog's own, for its tools.

One connection to one broker (pylog is a single node; for a Kafka cluster, use a full
client such as confluent-kafka). It negotiates versions with ApiVersions and speaks the
generated messages directly, so callers get raw record batches: ``fetch`` returns the
bytes of whole batches as the broker sent them, ready for pylog's C decoder
(``pylog.record.decode_arrow``), with no per-record Python on the way.

Used by the broker's tests, and meant for the CLI's ``--bootstrap-server`` forms, Spark's
remote mode and ``pylog perf --bootstrap-server``.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct

from pylog.errors import ErrorCode, ProtocolError

from . import messages as m
from .codec import ZERO_UUID
from .api import SUPPORTED, decode_response, encode_request
from .api_keys import ApiKey

__all__ = ["ProtocolClient", "ProtocolError"]

_i32 = struct.Struct(">i")


class ProtocolClient:
    """``ProtocolClient("127.0.0.1:9092")``: requests and responses over one socket;
    ``ssl_context`` (an ``ssl.SSLContext`` for clients) speaks TLS to an SSL or SASL_SSL
    listener. ``authenticate(client)`` runs after ApiVersions, before anything else (a
    SASL exchange: pylog.remote.sasl.SaslLogin)."""

    def __init__(self, bootstrap: str, client_id: str = "pylog", timeout: float = 30.0,
                 authenticate=None, ssl_context: ssl.SSLContext | None = None) -> None:
        host, _, port = bootstrap.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"bootstrap server {bootstrap!r} is not host:port")
        host = host.strip("[]") or "127.0.0.1"
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        except OSError as exc:
            # "Connection refused" alone does not say where: the same error, naming it.
            raise type(exc)(exc.errno, f"cannot connect to {host}:{port}: "
                                       f"{exc.strerror or exc}") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:       # an SSL listener: TLS first (checks the broker's name)
            try:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host or "127.0.0.1")
            except BaseException:
                self.sock.close()
                raise
        self.client_id = client_id
        self._ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {18: (0, 0)}
        try:
            response = self.request(ApiKey.API_VERSIONS, m.ApiVersionsRequest(), version=0)
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            if authenticate is not None:
                authenticate(self)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> ProtocolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self, api_key: int) -> int:
        """The newest version both sides speak."""
        lo, hi = self.versions[api_key]
        ours = SUPPORTED.get(api_key, m.REQUESTS[api_key].VERSIONS)
        v = min(hi, ours[1])
        if v < max(lo, ours[0]):
            raise ProtocolError(ErrorCode.UNSUPPORTED_VERSION, f"no common version of API {api_key}")
        return v

    # ================================================================ wire

    def send(self, api_key: int, body, version: int | None = None) -> tuple[int, int]:
        """Sends a request without waiting; returns (correlation id, version). A Produce
        that names a topic without its id goes as v12 at most (v13+ names topics by id
        only), as Kafka's producer chooses."""
        if version is None:
            version = self.version(api_key)
            if api_key == ApiKey.PRODUCE and version >= 13 and \
                    any(t.topic_id == ZERO_UUID for t in body.topic_data):
                version = 12
        correlation = next(self._ids)
        self.sock.sendall(encode_request(api_key, version, correlation, self.client_id, body))
        return correlation, version

    def receive(self, api_key: int, version: int, correlation: int):
        got, body = decode_response(api_key, version, self.receive_frame())
        if got != correlation:
            raise ProtocolError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                f"response {got} arrived for request {correlation}")
        return body

    def receive_frame(self) -> bytearray:
        """The next response, undecoded: its bytes after the size prefix."""
        return self._recv(_i32.unpack(self._recv(4))[0])

    def request(self, api_key: int, body, version: int | None = None):
        correlation, version = self.send(api_key, body, version)
        return self.receive(api_key, version, correlation)

    def _recv(self, n: int) -> bytearray:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return buf

    # ============================================================ helpers

    def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False):
        req = m.MetadataRequest(topics=None if topics is None else
                                [m.MetadataRequestMetadataRequestTopic(name=t) for t in topics],
                                allow_auto_topic_creation=allow_auto_create)
        return self.request(ApiKey.METADATA, req)

    def produce(self, topic: str, partition: int, records: bytes, acks: int = -1,
                version: int | None = None, transactional_id: str | None = None,
                topic_id=ZERO_UUID):
        """Appends record batches; returns the partition's response (base_offset, error).
        With `topic_id` (the topic's 16-byte id) the request names the topic by id (v13+)."""
        req = m.ProduceRequest(acks=acks, timeout_ms=30000, transactional_id=transactional_id,
                               topic_data=[m.ProduceRequestTopicProduceData(
            name=topic, topic_id=topic_id, partition_data=[m.ProduceRequestPartitionProduceData(index=partition,
                                                                              records=records)])])
        if acks == 0:
            self.send(ApiKey.PRODUCE, req, version)
            return None
        return self.request(ApiKey.PRODUCE, req, version).responses[0].partition_responses[0]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              max_wait_ms: int = 0, min_bytes: int = 1, isolation_level: int = 0):
        """One partition's FetchResponse partition data; ``records`` holds raw batches
        (the last one may be partial, as Kafka allows). ``isolation_level`` 1 is
        read_committed: records below the last stable offset, and the aborted
        transactions among them in ``aborted_transactions`` (producer_id, first_offset),
        which ``decode_arrow(aborted_transactions=...)`` skips."""
        req = m.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                             max_bytes=max_bytes, isolation_level=isolation_level, session_id=0,
                             session_epoch=-1,
                             topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[
                                 m.FetchRequestFetchPartition(partition=partition, fetch_offset=offset,
                                                              partition_max_bytes=max_bytes,
                                                              current_leader_epoch=-1,
                                                              log_start_offset=-1)])])
        # v12 at most: 13+ names topics by id, which would take a Metadata round trip.
        version = min(self.version(ApiKey.FETCH), 12)
        return self.request(ApiKey.FETCH, req, version).responses[0].partitions[0]

    def list_offset(self, topic: str, partition: int, timestamp: int,
                    isolation_level: int = 0) -> int:
        """ListOffsets: -2 earliest, -1 latest (the last stable offset with
        ``isolation_level`` 1, read_committed), or the first offset at or after `timestamp`."""
        req = m.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level,
                                   topics=[m.ListOffsetsRequestListOffsetsTopic(
            name=topic, partitions=[m.ListOffsetsRequestListOffsetsPartition(
                partition_index=partition, timestamp=timestamp)])])
        part = self.request(ApiKey.LIST_OFFSETS, req).topics[0].partitions[0]
        if part.error_code:
            raise ProtocolError(part.error_code, f"ListOffsets {topic}-{partition}")
        return part.offset
