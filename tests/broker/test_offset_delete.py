"""OffsetDelete (API 47) with a live group, as Kafka's coordinator answers it: offsets of
a topic its members subscribe to stay (GROUP_SUBSCRIBED_TO_TOPIC), the others go; a
partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION. (The Empty-group path and
kafka-consumer-groups --delete-offsets: tests/kafka_reference/test_kafka_tools.py.)"""

from __future__ import annotations

from pylog.protocol import messages as m

from .group_client import RawMember

GROUP_SUBSCRIBED_TO_TOPIC = 86
UNKNOWN_TOPIC_OR_PARTITION = 3


def test_offset_delete_keeps_subscribed_topics_of_a_live_group(served):
    read, other = served.topic(1), served.topic(1)
    served.store.commit_offsets("live", {(read, 0): 3, (other, 0): 4})
    with RawMember(served.bootstrap, "live", topics=(read,)) as member:
        assert member.join_and_sync() == 0
        resp = member.client.request(47, m.OffsetDeleteRequest(group_id="live", topics=[
            m.OffsetDeleteRequestOffsetDeleteRequestTopic(name=t, partitions=[
                m.OffsetDeleteRequestOffsetDeleteRequestPartition(partition_index=p)
                for p in ps]) for t, ps in ((read, [0]), (other, [0, 7]))]), 0)
    assert resp.error_code == 0
    assert {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions} \
        == {(read, 0): GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): 0,
            (other, 7): UNKNOWN_TOPIC_OR_PARTITION}
    assert served.store.committed("live", read, 0) == 3
    assert served.store.committed("live", other, 0) is None
