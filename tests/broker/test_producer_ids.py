"""InitProducerId never takes a producer id on the client's word.

Kafka's TransactionCoordinator.handleInitProducerId answers a request without a
transactional id with a fresh producer id at epoch 0, whatever id and epoch the request
names (KIP-360's fields only matter to a transactional producer); an id and epoch where
only one of them is -1 is INVALID_REQUEST. A Produce that carries an id the broker never
handed out is refused, so no id is ever used by two clients.
"""

from __future__ import annotations

import threading

from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.record import encode_batch


def init_producer_id(client: ProtocolClient, pid: int = -1, epoch: int = -1):
    return client.request(22, m.InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=pid, producer_epoch=epoch))


def batch(values: list[bytes], pid: int, epoch: int, seq: int = 0) -> bytes:
    return encode_batch(values, None, 1000, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq)


def test_two_clients_naming_one_producer_id_each_get_a_fresh_one(served):
    topic = served.topic()
    with ProtocolClient(served.bootstrap) as a, ProtocolClient(served.bootstrap) as b:
        first = init_producer_id(a)
        assert (first.error_code, first.producer_epoch) == (0, 0)
        # Both name the first one's id and epoch (a KIP-360 re-initialisation), then send
        # a batch with the same sequences: each batch is written, neither is taken for the
        # other's retry (acknowledged at its offset, its records never stored).
        got = [init_producer_id(c, first.producer_id, first.producer_epoch) for c in (a, b)]
        answers = [c.produce(topic, 0, batch([b"%s-%d" % (name, i) for i in range(10)],
                                             r.producer_id, r.producer_epoch))
                   for c, r, name in ((a, got[0], b"a"), (b, got[1], b"b"))]
        assert [(r.error_code, r.base_offset) for r in answers] == [(0, 0), (0, 10)]
        # Each got a fresh id at epoch 0, never the id it named.
        assert [(r.error_code, r.producer_epoch) for r in got] == [(0, 0), (0, 0)]
        assert len({first.producer_id, got[0].producer_id, got[1].producer_id}) == 3
        # Only one of an id and an epoch: Kafka's INVALID_REQUEST.
        assert init_producer_id(a, -1, 0).error_code == 42
        assert init_producer_id(a, first.producer_id, -1).error_code == 42
    values = [r.value for r in served.store.log(topic, 0).read(0, 1 << 20).records()]
    assert values == [b"a-%d" % i for i in range(10)] + [b"b-%d" % i for i in range(10)]


def test_a_stranger_cannot_fence_a_live_confluent_kafka_producer(served):
    from confluent_kafka import Producer
    topic = served.topic()
    failed, delivered = [], []
    lock = threading.Lock()

    def report(err, msg):
        with lock:
            (failed if err else delivered).append(err or msg.offset())

    producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "retries": 5})
    for i in range(200):
        producer.produce(topic, b"live-%d" % i, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    (pid,) = served.store.log(topic, 0).producer_state.producers
    epoch = served.store.log(topic, 0).producer_state.producers[pid].epoch
    with ProtocolClient(served.bootstrap) as stranger:
        answer = init_producer_id(stranger, pid, epoch)      # names the live producer's id
        assert answer.error_code == 0
        written = stranger.produce(topic, 0, batch([b"stranger"], answer.producer_id,
                                                   answer.producer_epoch))
        assert written.error_code == 0
    for i in range(200, 400):
        producer.produce(topic, b"live-%d" % i, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert failed == [] and len(delivered) == 400
    assert answer.producer_id != pid
    values = [r.value for r in served.store.log(topic, 0).read(0, 1 << 30).records()]
    assert [v for v in values if v.startswith(b"live-")] == [b"live-%d" % i for i in range(400)]
    assert values.count(b"stranger") == 1


def test_an_id_the_broker_never_handed_out_cannot_be_squatted(served):
    topic = served.topic()
    future = 10**12
    with ProtocolClient(served.bootstrap) as client:
        answer = init_producer_id(client, future, 0)
        assert answer.error_code == 0 and answer.producer_id < future
        refused = client.produce(topic, 0, batch([b"squat"], future, 0))
        assert refused.error_code == 49            # INVALID_PRODUCER_ID_MAPPING
        assert "never handed out" in refused.error_message
        ok = client.produce(topic, 0, batch([b"mine"], answer.producer_id, 0))
        assert (ok.error_code, ok.base_offset) == (0, 0)
    assert [r.value for r in served.store.log(topic, 0).read(0).records()] == [b"mine"]
