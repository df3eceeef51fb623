"""Client quotas on `pylog serve` (KIP-13/55/124/219/257): AlterClientQuotas and
DescribeClientQuotas with Kafka's entities and defaults, a producer over its
producer_byte_rate gets throttle_time_ms and its throughput converges to the quota
(within a wide margin) while another client id is not slowed, a consumer over its
consumer_byte_rate gets an empty throttled fetch, request_percentage throttles; quotas
survive kill -9. Kafka's kafka-configs.sh: tests/kafka_reference/test_acl_tools.py."""

from __future__ import annotations

import time
import uuid

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess

ck = pytest.importorskip("confluent_kafka")

#: Short quota windows: a rate measured over 3 s converges within a test's seconds.
WINDOWS = ("quota.window.num=3", "quota.window.size.seconds=1")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = ServeProcess(str(tmp_path_factory.mktemp("quotas")), *WINDOWS)
    yield process
    process.stop()


def alter(bootstrap: str, entity: dict, ops: dict, validate_only: bool = False):
    """AlterClientQuotas of one entity ({type: name or None for the default}); ops
    {key: value, or None to remove}. Returns the entry's (error code, message)."""
    with ProtocolClient(bootstrap) as client:
        answer = client.request(49, m.AlterClientQuotasRequest(validate_only=validate_only, entries=[
            m.AlterClientQuotasRequestEntryData(
                entity=[m.AlterClientQuotasRequestEntityData(entity_type=t, entity_name=n)
                        for t, n in entity.items()],
                ops=[m.AlterClientQuotasRequestOpData(key=k, value=v or 0.0, remove=v is None)
                     for k, v in ops.items()])]))
    return answer.entries[0].error_code, answer.entries[0].error_message


def describe(bootstrap: str, components=(), strict=False) -> dict:
    with ProtocolClient(bootstrap) as client:
        answer = client.request(48, m.DescribeClientQuotasRequest(strict=strict, components=[
            m.DescribeClientQuotasRequestComponentData(entity_type=t, match_type=mt, match=n)
            for t, mt, n in components]))
    assert answer.error_code == 0, answer.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in answer.entries}


def test_alter_and_describe_with_defaults_and_filters(broker):
    b = broker.bootstrap
    cid = "d-" + uuid.uuid4().hex[:6]
    assert alter(b, {"client-id": cid}, {"producer_byte_rate": 5000.0}) == (0, None)
    assert alter(b, {"user": "alice", "client-id": None}, {"consumer_byte_rate": 7000.0,
                                                          "request_percentage": 50.0}) == (0, None)
    assert describe(b, [("client-id", 0, cid)], strict=True) == {
        (("client-id", cid),): {"producer_byte_rate": 5000.0}}
    # match type 1: the default client id (with any user: not strict).
    assert describe(b, [("client-id", 1, None)]) == {
        (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 7000.0,
                                                   "request_percentage": 50.0}}
    assert alter(b, {"user": "alice", "client-id": None}, {"request_percentage": None}) == (0, None)
    assert describe(b, [("user", 0, "alice")]) == {
        (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 7000.0}}
    # Bad inputs: Kafka's INVALID_REQUEST, naming the problem; nothing stored.
    code, message = alter(b, {"client-id": cid}, {"producer_byte_rate": 1.5})
    assert code == 42 and "whole number" in message
    code, message = alter(b, {"client-id": cid}, {"producer_rate": 10.0})
    assert code == 42 and "producer_rate" in message
    code, message = alter(b, {"group": "x"}, {"producer_byte_rate": 10.0})
    assert code == 42 and "Unhandled client quota entity type: group" in message
    assert alter(b, {"client-id": cid}, {"producer_byte_rate": 1.0}, validate_only=True) == (0, None)
    assert describe(b, [("client-id", 0, cid)])[(("client-id", cid),)] == {"producer_byte_rate": 5000.0}
    alter(b, {"client-id": cid}, {"producer_byte_rate": None})
    alter(b, {"user": "alice", "client-id": None}, {"consumer_byte_rate": None})
    assert describe(b, [("client-id", 0, cid)]) == {}


def _produce(bootstrap: str, client_id: str, topic: str, total: int, throttles: list) -> float:
    """Seconds a confluent-kafka producer takes to deliver `total` bytes in 10 KB records."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                            "batch.size": 65536, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    value = b"x" * 10_000
    delivered = []
    started = time.monotonic()
    for _ in range(total // len(value)):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, msg: delivered.append(err))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - started
    producer.poll(0.1)                          # the last throttle callbacks
    assert len(delivered) == total // len(value) and not any(delivered)
    return elapsed


def test_producer_over_its_byte_rate_is_throttled_to_the_quota_and_others_are_not(broker):
    b = broker.bootstrap
    topic = "q-" + uuid.uuid4().hex[:6]
    quota = 250_000                                    # bytes/s
    slow, fast = "slow-" + topic, "fast-" + topic
    assert alter(b, {"client-id": slow}, {"producer_byte_rate": float(quota)}) == (0, None)
    total = 1_000_000
    throttles: list = []
    elapsed = _produce(b, slow, topic, total, throttles)
    rate = total / elapsed
    print(f"quota {quota} B/s: throttled producer {rate:.0f} B/s over {elapsed:.1f} s, "
          f"throttle_time_ms up to {max(throttles or [0])}")
    # The first windows' allowance (span >= window.num - 1 windows) lets ~0.4 MB through
    # unthrottled; after it the rate is held to the quota. Wide margins for a loaded CI.
    assert rate < 2.0 * quota, f"{rate:.0f} B/s is not held near the quota {quota} B/s"
    assert rate > 0.3 * quota, f"{rate:.0f} B/s: throttled far below the quota {quota} B/s"
    assert throttles and max(throttles) > 0
    unthrottled: list = []
    fast_elapsed = _produce(b, fast, topic, total, unthrottled)
    assert unthrottled == [] or max(unthrottled) == 0
    print(f"unthrottled client id: {total / fast_elapsed:.0f} B/s")
    assert fast_elapsed < elapsed / 2, (fast_elapsed, elapsed)


def test_consumer_over_its_byte_rate_gets_an_empty_throttled_fetch(broker):
    b = broker.bootstrap
    topic = "c-" + uuid.uuid4().hex[:6]
    with ProtocolClient(b) as client:
        client.metadata([topic], allow_auto_create=True)
        for _ in range(20):
            assert client.produce(topic, 0, pylog.records.encode_batch([b"y" * 5_000])).error_code == 0
    cid = "consumer-" + topic
    assert alter(b, {"client-id": cid}, {"consumer_byte_rate": 10_000.0}) == (0, None)
    with ProtocolClient(b, client_id=cid) as consumer:
        # One answer carries at most the quota over the full windows less one (20 KB).
        first = consumer.request(1, _fetch(topic, 0), 12)
        size = first.responses[0].partitions[0].records
        assert first.throttle_time_ms == 0 and 5_000 < len(size) <= 20_000
        second = consumer.request(1, _fetch(topic, 0), 12)    # over the rate: answered empty
        assert second.throttle_time_ms > 0 and second.responses == []
    with ProtocolClient(b, client_id="other-" + topic) as other:   # another client id: no quota
        answer = other.request(1, _fetch(topic, 0), 12)
        assert answer.throttle_time_ms == 0 and answer.responses[0].partitions[0].records


def _fetch(topic: str, offset: int) -> m.FetchRequest:
    return m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                          isolation_level=0, session_id=0, session_epoch=-1,
                          topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[
                              m.FetchRequestFetchPartition(partition=0, fetch_offset=offset,
                                                           partition_max_bytes=1 << 20,
                                                           current_leader_epoch=-1,
                                                           log_start_offset=-1)])])


def test_request_percentage_throttles_and_mutes_a_busy_client(broker):
    cid = "busy-" + uuid.uuid4().hex[:6]
    assert alter(broker.bootstrap, {"client-id": cid}, {"request_percentage": 0.001}) == (0, None)
    with ProtocolClient(broker.bootstrap, client_id=cid) as client:
        throttle = client.metadata(None).throttle_time_ms
        assert throttle > 0
        # KIP-219: the answer came at once; the broker then reads nothing from the
        # connection for throttle_time_ms, so the next request waits that long.
        started = time.monotonic()
        client.metadata(None)
        assert time.monotonic() - started >= 0.5 * throttle / 1000


def test_quotas_survive_kill_9(tmp_path):
    data = str(tmp_path / "data")
    broker = ServeProcess(data, *WINDOWS)
    try:
        assert alter(broker.bootstrap, {"user": None}, {"producer_byte_rate": 1024.0}) == (0, None)
        broker.kill()
    finally:
        broker.stop()
    broker = ServeProcess(data, *WINDOWS)
    try:
        assert describe(broker.bootstrap) == {(("user", None),): {"producer_byte_rate": 1024.0}}
    finally:
        broker.stop()
