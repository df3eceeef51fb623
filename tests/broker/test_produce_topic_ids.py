"""Produce v13 (KIP-516): topics named by id. A known id appends to its topic and the
answer names the topic by the same id; an id no topic has (or a deleted topic's) gets
UNKNOWN_TOPIC_ID in each of its partitions; a Produce naming a topic without an id goes
as v12 (as Kafka's producer chooses)."""

from __future__ import annotations

from pylog.broker.admin import topic_id_bytes
from pylog.errors import ErrorCode
from pylog.protocol import messages as m
from pylog.protocol.api_keys import ApiKey
from pylog.protocol.client import ProtocolClient
from pylog.record import encode_batch


def produce_by_id(client, topic_ids_partitions, records, version=13):
    req = m.ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
        m.ProduceRequestTopicProduceData(topic_id=tid, partition_data=[
            m.ProduceRequestPartitionProduceData(index=p, records=records)])
        for tid, p in topic_ids_partitions])
    return client.request(ApiKey.PRODUCE, req, version)


def test_produce_v13_names_topics_by_id(served):
    name = served.topic(2)
    tid = topic_id_bytes(served.store.describe_topic(name).topic_id)
    bogus = bytes(15) + b"\x07"
    with ProtocolClient(served.bootstrap) as c:
        assert c.version(ApiKey.PRODUCE) == 13
        resp = produce_by_id(c, [(tid, 1), (bogus, 0)], encode_batch([b"by-id"]))
        answers = {(bytes(t.topic_id), p.index): (p.error_code, p.base_offset)
                   for t in resp.responses for p in t.partition_responses}
        assert answers == {(tid, 1): (0, 0), (bogus, 0): (ErrorCode.UNKNOWN_TOPIC_ID, -1)}
        assert [r.value for r in served.store.log(name, 1).read(0).records()] == [b"by-id"]
        # By name: the client sends v12 (v13 has no names).
        assert c.produce(name, 0, encode_batch([b"by-name"])).error_code == 0
        assert [r.value for r in served.store.log(name, 0).read(0).records()] == [b"by-name"]
        # A topic deleted and created again has a new id: the old one is unknown.
        served.store.delete_topic(name)
        served.store.create_topic(name, 2)
        again = produce_by_id(c, [(tid, 0)], encode_batch([b"late"]))
        assert again.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        assert served.store.log(name, 0).log_end_offset == 0
