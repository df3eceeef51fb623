"""Kafka's answers in three corners (each measured against Kafka 4.1): a long poll on a
topic that is deleted meanwhile, offset metadata above ``offset.metadata.max.bytes``,
and SASL requests on a listener without SASL. Raw requests through pylog's protocol
client and real clients (confluent-kafka, kafka-python) against one broker."""

from __future__ import annotations

import threading
import time

import pytest

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .conftest import parked
from .process import wait_until

UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_SASL_STATE = 34


# ==================================================== long poll, topic deleted

@pytest.mark.parametrize("how", ["DeleteTopics", "store.delete_topic"])
def test_a_long_poll_on_a_deleted_topic_answers_at_once(served, how):
    """The parked fetch completes when the topic goes, with UNKNOWN_TOPIC_OR_PARTITION for
    its partition and the other partition's answer as it is (it waited its whole
    max_wait_ms with error 0 before)."""
    doomed, kept = served.topic(), served.topic()
    request = m.FetchRequest(replica_id=-1, max_wait_ms=20_000, min_bytes=1, max_bytes=1 << 20,
                             topics=[m.FetchRequestFetchTopic(topic=t, partitions=[
                                 m.FetchRequestFetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=1 << 16)])
                                     for t in (doomed, kept)])
    answer = {}

    def long_poll():
        with ProtocolClient(served.bootstrap) as client:
            start = time.monotonic()
            answer["body"] = client.request(1, request, 12)
            answer["seconds"] = time.monotonic() - start

    poller = threading.Thread(target=long_poll)
    poller.start()
    assert wait_until(lambda: parked(served.broker) == 1)
    assert poller.is_alive()                                    # parked
    if how == "DeleteTopics":
        with ProtocolClient(served.bootstrap) as admin:
            deleted = admin.request(20, m.DeleteTopicsRequest(topic_names=[doomed], timeout_ms=5000), 4)
            assert deleted.responses[0].error_code == 0
    else:
        served.store.delete_topic(doomed)
    poller.join(15)
    assert not poller.is_alive()
    assert answer["seconds"] < 5
    errors = {t.topic: t.partitions[0].error_code for t in answer["body"].responses}
    assert errors == {doomed: UNKNOWN_TOPIC_OR_PARTITION, kept: 0}


# ==================================================== offset metadata size

def _commit(client, topic: str, version: int, metadata: list[str]):
    request = m.OffsetCommitRequest(
        group_id=f"g-{topic}-{version}", generation_id_or_member_epoch=-1, member_id="",
        retention_time_ms=-1, topics=[m.OffsetCommitRequestOffsetCommitRequestTopic(
            name=topic, partitions=[m.OffsetCommitRequestOffsetCommitRequestPartition(
                partition_index=p, committed_offset=p + 1, committed_metadata=md)
                for p, md in enumerate(metadata)])])
    answer = client.request(8, request, version)
    return [(p.partition_index, p.error_code) for t in answer.topics for p in t.partitions]


@pytest.mark.parametrize("version", [2, 8])
def test_offset_metadata_above_the_limit_is_refused_for_its_partition(served, version):
    """offset.metadata.max.bytes (4096 characters): 4097 gets OFFSET_METADATA_TOO_LARGE
    and is not committed; 4096 beside it commits (as Kafka 4.1 answers)."""
    topic = served.topic(partitions=2)
    with ProtocolClient(served.bootstrap) as client:
        assert _commit(client, topic, version, ["x" * 4097, "y" * 4096]) == \
            [(0, OFFSET_METADATA_TOO_LARGE), (1, 0)]
        fetched = client.request(9, m.OffsetFetchRequest(
            group_id=f"g-{topic}-{version}", topics=[m.OffsetFetchRequestOffsetFetchRequestTopic(
                name=topic, partition_indexes=[0, 1])]), 5)
    assert [(p.partition_index, p.committed_offset, len(p.metadata or ""))
            for p in fetched.topics[0].partitions] == [(0, -1, 0), (1, 2, 4096)]


def test_real_clients_get_offset_metadata_too_large(served):
    topic = served.topic()
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": f"ck-{topic}",
                         "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1, "m" * 5000)], asynchronous=False)
        assert "OFFSET_METADATA_TOO_LARGE" in str(raised.value) or \
            raised.value.args[0].code() == OFFSET_METADATA_TOO_LARGE
        committed = consumer.commit(offsets=[TopicPartition(topic, 0, 1, "m" * 100)], asynchronous=False)
        assert committed[0].error is None
    finally:
        consumer.close()

    import kafka
    from kafka.errors import OffsetMetadataTooLargeError
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition
    consumer = kafka.KafkaConsumer(bootstrap_servers=served.bootstrap, group_id=f"kp-{topic}",
                                   enable_auto_commit=False)
    try:
        with pytest.raises(OffsetMetadataTooLargeError):
            consumer.commit({KTopicPartition(topic, 0): OffsetAndMetadata(1, "k" * 4097, -1)})
    finally:
        consumer.close()


# ==================================================== SASL without SASL

def test_sasl_requests_get_illegal_sasl_state_and_the_connection_stays(served):
    """Kafka 4.1 on a PLAINTEXT listener lists SaslHandshake 0-1 and SaslAuthenticate 0-2
    in ApiVersions and answers both ILLEGAL_SASL_STATE, the connection open."""
    with ProtocolClient(served.bootstrap) as client:
        versions = client.request(18, m.ApiVersionsRequest(client_software_name="p",
                                                           client_software_version="1"), 3)
        listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert listed[17] == (0, 1) and listed[36] == (0, 2)
        for version in (0, 1):
            answer = client.request(17, m.SaslHandshakeRequest(mechanism="PLAIN"), version)
            assert (answer.error_code, answer.mechanisms) == (ILLEGAL_SASL_STATE, [])
        for version in (0, 1, 2):
            answer = client.request(36, m.SaslAuthenticateRequest(auth_bytes=b"\0user\0pw"), version)
            assert answer.error_code == ILLEGAL_SASL_STATE
            assert answer.error_message == \
                "SaslAuthenticate request received after successful authentication"
        assert client.metadata().brokers                    # still the same connection


def test_a_client_configured_for_sasl_is_told_why(served):
    """librdkafka set up for SASL/PLAIN: its handshake is answered, and it reports
    Kafka's error instead of a connection closed under it."""
    from confluent_kafka.admin import AdminClient
    errors = []
    admin = AdminClient({"bootstrap.servers": served.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
                         "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    del admin                                       # stops its reconnects
    # librdkafka's text for ILLEGAL_SASL_STATE (a closed connection reads "Disconnected").
    assert any("handshake failed: Broker: Request not valid in current SASL state" in e.str()
               for e in errors), [e.str() for e in errors]


def test_offset_metadata_max_bytes_stays_within_what_is_stored(tmp_path):
    """__consumer_offsets keeps metadata with an int16 length (Kafka's STRING): a limit
    whose longest string might not fit (8191 characters of 4 bytes) is refused, as the
    commit answered INVALID_REQUEST past 32767 bytes otherwise."""
    import pylog
    from pylog.errors import ConfigError
    with pylog.open(tmp_path) as store:
        with pytest.raises(ConfigError, match="offset.metadata.max.bytes"):
            pylog.Broker(store, listen="127.0.0.1:0", config={"offset.metadata.max.bytes": 100000})
        with pylog.Broker(store, listen="127.0.0.1:0", config={"offset.metadata.max.bytes": 8191}) as broker:
            store.create_topic("t", 1)
            with ProtocolClient(broker.bootstrap_servers) as client:
                assert _commit(client, "t", 8, ["\U0001F600" * 8191]) == [(0, 0)]
                assert _commit(client, "t", 8, ["x" * 8192]) == [(0, OFFSET_METADATA_TOO_LARGE)]
