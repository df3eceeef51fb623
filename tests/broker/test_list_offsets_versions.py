"""ListOffsets 7-9 and DescribeCluster 0-2 answered as Kafka 4.1's broker answers them
(measured against it with the same requests: tests/kafka_reference has the broker; the
table below is its answer): -3 the record with the largest timestamp (KIP-734), -4 the
local log start (v8, KIP-405), -5 the last tiered offset (v9, KIP-1005; -1 without tiered
storage), each UNSUPPORTED_VERSION below its version."""

from __future__ import annotations

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.record import encode_batch

# (version, timestamp) -> (error, timestamp, offset, leader epoch), Kafka 4.1's answers
# for three records with timestamps 1005, 1004, 1003.
KAFKA = {
    (7, -1): (0, -1, 3, 0), (7, -2): (0, -1, 0, 0), (7, -3): (0, 1005, 0, 0),
    (7, -4): (35, -1, -1, -1), (7, -5): (35, -1, -1, -1),
    (8, -1): (0, -1, 3, 0), (8, -2): (0, -1, 0, 0), (8, -3): (0, 1005, 0, 0),
    (8, -4): (0, -1, 0, 0), (8, -5): (35, -1, -1, -1),
    (9, -1): (0, -1, 3, 0), (9, -2): (0, -1, 0, 0), (9, -3): (0, 1005, 0, 0),
    (9, -4): (0, -1, 0, 0), (9, -5): (0, -1, -1, -1),
}


def test_list_offsets_special_timestamps_as_kafka(served):
    topic = served.topic(1)
    with ProtocolClient(served.bootstrap) as c:
        assert c.versions[2] == (1, 9) and c.versions[60] == (0, 2)
        for i in range(3):
            assert c.produce(topic, 0, encode_batch([b"v%d" % i], timestamps=[1005 - i]),
                             acks=1).error_code == 0
        got = {}
        for v, ts in KAFKA:
            r = c.request(2, m.ListOffsetsRequest(replica_id=-1, topics=[
                m.ListOffsetsRequestListOffsetsTopic(name=topic, partitions=[
                    m.ListOffsetsRequestListOffsetsPartition(
                        partition_index=0, timestamp=ts, current_leader_epoch=-1)])]), v)
            p = r.topics[0].partitions[0]
            got[(v, ts)] = (p.error_code, p.timestamp, p.offset, p.leader_epoch)
    assert got == KAFKA


def test_describe_cluster_v2(served):
    with ProtocolClient(served.bootstrap) as c:
        r = c.request(60, m.DescribeClusterRequest(endpoint_type=1, include_fenced_brokers=True), 2)
    assert r.error_code == 0 and r.endpoint_type == 1
    assert [(b.broker_id, b.port, b.is_fenced) for b in r.brokers] == \
        [(served.broker.node_id, served.broker.address[1], False)]
