"""Client telemetry (KIP-714) as Kafka's broker answers it without a metrics plugin.

Kafka 4.1 leaves GetTelemetrySubscriptions and PushTelemetry out of ApiVersions when no
metrics reporter receives client metrics, so clients do not send them; one that does
anyway (measured) gets a client instance id and an empty subscription (no metrics
requested, push interval 300000 ms, telemetry_max_bytes 1 MiB, zstd, lz4, gzip and
snappy accepted), and its pushes are checked (Kafka's ClientMetricsManager) and dropped:
INVALID_REQUEST without a client instance id, UNKNOWN_SUBSCRIPTION_ID for an instance or
subscription the broker did not hand out, TELEMETRY_TOO_LARGE above telemetry_max_bytes,
UNSUPPORTED_COMPRESSION_TYPE for a codec not accepted.

The broker remembers at most CLIENT_INSTANCES instances (the least recently seen goes
first; Kafka bounds its cache the same way).
"""

from __future__ import annotations

import uuid
import zlib
from collections import OrderedDict

from pylog.errors import ErrorCode
from pylog.protocol import messages as m
from pylog.protocol.codec import ZERO_UUID
from pylog.compression import GZIP, LZ4, SNAPPY, ZSTD
from pylog.compression import NONE as NO_COMPRESSION

from .errors import NONE

__all__ = ["get_telemetry_subscriptions", "push_telemetry", "TelemetryClients"]

PUSH_INTERVAL_MS = 300_000
TELEMETRY_MAX_BYTES = 1 << 20
ACCEPTED_COMPRESSION = [ZSTD, LZ4, GZIP, SNAPPY]     # Kafka's order
CLIENT_INSTANCES = 16384


class TelemetryClients:
    """client instance id -> the subscription id handed to it (bounded, LRU)."""

    def __init__(self) -> None:
        self._ids: OrderedDict[bytes, int] = OrderedDict()

    def subscribe(self, instance: bytes) -> int:
        # An empty subscription: its id depends on the instance only (Kafka hashes the
        # subscription with the instance id).
        sid = int.from_bytes(zlib.crc32(instance).to_bytes(4, "big"), "big", signed=True)
        self._ids[instance] = sid
        self._ids.move_to_end(instance)
        while len(self._ids) > CLIENT_INSTANCES:
            self._ids.popitem(last=False)
        return sid

    def subscription(self, instance: bytes) -> int | None:
        return self._ids.get(instance)

    def forget(self, instance: bytes) -> None:
        self._ids.pop(instance, None)


def get_telemetry_subscriptions(broker, conn, header, req):
    instance = req.client_instance_id
    if instance == ZERO_UUID:
        instance = uuid.uuid4().bytes
    return m.GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=NONE, client_instance_id=instance,
        subscription_id=broker.telemetry.subscribe(instance),
        accepted_compression_types=list(ACCEPTED_COMPRESSION), push_interval_ms=PUSH_INTERVAL_MS,
        telemetry_max_bytes=TELEMETRY_MAX_BYTES, delta_temporality=True, requested_metrics=[])


def push_telemetry(broker, conn, header, req):
    clients: TelemetryClients = broker.telemetry
    instance = req.client_instance_id
    if instance == ZERO_UUID:
        error = ErrorCode.INVALID_REQUEST
    elif clients.subscription(instance) != req.subscription_id:
        error = ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    elif req.compression_type != NO_COMPRESSION and req.compression_type not in ACCEPTED_COMPRESSION:
        error = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    elif len(req.metrics or b"") > TELEMETRY_MAX_BYTES:
        error = ErrorCode.TELEMETRY_TOO_LARGE
    else:
        error = NONE                # no metrics plugin: the metrics are dropped
        if req.terminating:
            clients.forget(instance)
    return m.PushTelemetryResponse(throttle_time_ms=0, error_code=error)
