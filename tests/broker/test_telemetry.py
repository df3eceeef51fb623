"""Client telemetry (KIP-714) as Kafka 4.1's broker without a metrics plugin answers it
(measured): not in ApiVersions, yet GetTelemetrySubscriptions gets an instance id and an
empty subscription, and PushTelemetry is checked and dropped."""

from __future__ import annotations

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

INVALID_REQUEST = 42
UNSUPPORTED_COMPRESSION_TYPE = 76
UNKNOWN_SUBSCRIPTION_ID = 117
TELEMETRY_TOO_LARGE = 118


def test_telemetry_answered_as_kafka_without_a_metrics_plugin(served):
    with ProtocolClient(served.bootstrap) as c:
        assert 71 not in c.versions and 72 not in c.versions
        sub = c.request(71, m.GetTelemetrySubscriptionsRequest(), 0)
        assert sub.error_code == 0 and sub.client_instance_id != bytes(16)
        assert (sub.requested_metrics, sub.push_interval_ms, sub.telemetry_max_bytes,
                sub.accepted_compression_types, sub.delta_temporality) == \
            ([], 300000, 1 << 20, [4, 3, 1, 2], True)
        again = c.request(71, m.GetTelemetrySubscriptionsRequest(
            client_instance_id=sub.client_instance_id), 0)
        assert (again.client_instance_id, again.subscription_id) == \
            (sub.client_instance_id, sub.subscription_id)

        def push(**fields):
            request = {"client_instance_id": sub.client_instance_id,
                       "subscription_id": sub.subscription_id, "metrics": b"m", **fields}
            return c.request(72, m.PushTelemetryRequest(**request), 0).error_code

        assert push(client_instance_id=bytes(16)) == INVALID_REQUEST
        assert push(subscription_id=sub.subscription_id ^ 1) == UNKNOWN_SUBSCRIPTION_ID
        assert push(client_instance_id=b"\x01" * 16) == UNKNOWN_SUBSCRIPTION_ID
        assert push(compression_type=9) == UNSUPPORTED_COMPRESSION_TYPE
        assert push(metrics=b"x" * ((1 << 20) + 1)) == TELEMETRY_TOO_LARGE
        assert push() == 0
        assert push(terminating=True) == 0
        assert push() == UNKNOWN_SUBSCRIPTION_ID        # terminated: forgotten
