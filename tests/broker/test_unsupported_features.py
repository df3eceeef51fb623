"""Features pylog does not have get answers clients treat as final, never a retriable
error for something that will never appear (docs/COMPATIBILITY.md, Gaps).

Transactions: a transactional producer fails at once (librdkafka and Kafka's Java client
treat TRANSACTIONAL_ID_AUTHORIZATION_FAILED as fatal; COORDINATOR_NOT_AVAILABLE made them
retry until their own timeout). Unknown coordinator types get INVALID_REQUEST, as from Kafka.
"""

from __future__ import annotations

import time

import pytest

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.record import encode_batch

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_REQUEST = 42


def test_confluent_init_transactions_fails_at_once(served):
    import confluent_kafka as ck
    producer = ck.Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "tx-ck"})
    started = time.monotonic()
    with pytest.raises(ck.KafkaException) as raised:
        producer.init_transactions(30)
    elapsed = time.monotonic() - started
    error = raised.value.args[0]
    # Fatal and not retriable: the application stops instead of retrying for ever.
    assert error.fatal() and not error.retriable()
    assert error.code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "pylog does not support transactions" in error.str()
    assert elapsed < 5, elapsed          # measured ~0.1 s; the old answer waited out all 30 s


def test_kafka_python_and_aiokafka_transactional_producers_fail_at_once(served):
    import asyncio

    import aiokafka
    import aiokafka.errors
    import kafka
    import kafka.errors

    async def aio():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=served.bootstrap,
                                             transactional_id="tx-aio")
        try:
            await asyncio.wait_for(producer.start(), 30)
        finally:
            await producer.stop()
    started = time.monotonic()
    with pytest.raises(aiokafka.errors.TransactionalIdAuthorizationFailed):
        asyncio.run(aio())
    producer = kafka.KafkaProducer(bootstrap_servers=served.bootstrap, transactional_id="tx-kp",
                                   max_block_ms=30000)
    try:
        with pytest.raises(kafka.errors.TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(0)
    assert time.monotonic() - started < 10      # measured ~0.2 s for both


@pytest.mark.parametrize("version", [1, 3, 4])
def test_find_coordinator_for_a_transactional_id_is_refused_for_good(served, version):
    with ProtocolClient(served.bootstrap) as client:
        req = m.FindCoordinatorRequest(key="tx-raw", key_type=1, coordinator_keys=["tx-raw"])
        resp = client.request(10, req, version)
        if version >= 4:
            (resp,) = resp.coordinators
        assert resp.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert "pylog does not support transactions" in resp.error_message
        assert resp.node_id == -1


def test_find_coordinator_of_an_unknown_type_is_an_invalid_request(served):
    with ProtocolClient(served.bootstrap) as client:
        for version in (1, 4):
            resp = client.request(10, m.FindCoordinatorRequest(key="g", key_type=2,
                                                               coordinator_keys=["g"]), version)
            if version >= 4:
                (resp,) = resp.coordinators
            assert resp.error_code == INVALID_REQUEST
            assert "coordinator type 2" in resp.error_message


def test_init_producer_id_and_produce_with_a_transactional_id(served):
    topic = served.topic()
    with ProtocolClient(served.bootstrap) as client:
        resp = client.request(22, m.InitProducerIdRequest(transactional_id="tx-raw",
                                                          transaction_timeout_ms=60000))
        assert resp.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert (resp.producer_id, resp.producer_epoch) == (-1, -1)
        # An idempotent producer (no transactional id) still gets its id.
        resp = client.request(22, m.InitProducerIdRequest(transactional_id=None,
                                                          transaction_timeout_ms=60000))
        assert resp.error_code == 0 and resp.producer_id >= 0
        req = m.ProduceRequest(transactional_id="tx-raw", acks=-1, timeout_ms=30000, topic_data=[
            m.ProduceRequestTopicProduceData(name=topic, partition_data=[
                m.ProduceRequestPartitionProduceData(index=0, records=encode_batch([b"v"]))])])
        (part,) = client.request(0, req).responses[0].partition_responses
        assert part.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert "pylog does not support transactions" in part.error_message
    assert served.store.log(topic, 0).log_end_offset == 0


def test_delete_topics_by_an_unknown_topic_id_is_unknown_topic_id(served):
    """Kafka's UNKNOWN_TOPIC_ID (100), not UNKNOWN_TOPIC_OR_PARTITION, which clients
    treat as retriable metadata staleness."""
    with ProtocolClient(served.bootstrap) as client:
        req = m.DeleteTopicsRequest(timeout_ms=30000, topics=[
            m.DeleteTopicsRequestDeleteTopicState(name=None, topic_id=b"\x01" * 16)])
        (res,) = client.request(20, req, 6).responses
        assert (res.error_code, res.error_message) == (100, "no topic has that topic id")
