"""Features pylog does not have get answers clients treat as final, never a retriable
error for something that will never appear (docs/COMPATIBILITY.md, Gaps).

Unknown coordinator types get INVALID_REQUEST, as from Kafka. (Transactions are served
since the transaction coordinator: tests/broker/test_transactions.py.)
"""

from __future__ import annotations

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

INVALID_REQUEST = 42


def test_find_coordinator_of_an_unknown_type_is_an_invalid_request(served):
    with ProtocolClient(served.bootstrap) as client:
        for version in (1, 4):
            resp = client.request(10, m.FindCoordinatorRequest(key="g", key_type=2,
                                                               coordinator_keys=["g"]), version)
            if version >= 4:
                (resp,) = resp.coordinators
            assert resp.error_code == INVALID_REQUEST
            assert "coordinator type 2" in resp.error_message


def test_delete_topics_by_an_unknown_topic_id_is_unknown_topic_id(served):
    """Kafka's UNKNOWN_TOPIC_ID (100), not UNKNOWN_TOPIC_OR_PARTITION, which clients
    treat as retriable metadata staleness."""
    with ProtocolClient(served.bootstrap) as client:
        req = m.DeleteTopicsRequest(timeout_ms=30000, topics=[
            m.DeleteTopicsRequestDeleteTopicState(name=None, topic_id=b"\x01" * 16)])
        (res,) = client.request(20, req, 6).responses
        assert (res.error_code, res.error_message) == (100, "no topic has that topic id")
