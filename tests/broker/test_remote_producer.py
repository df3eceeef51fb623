"""pylog's RemoteProducer (the console producer's and Spark sink's remote mode) against a
real broker: a batch refused as too large is split as Kafka's producer splits one."""

from __future__ import annotations

import os

import pytest

from pylog.protocol.client import ProtocolError
from pylog.record import encode_batch
from pylog.remote import RemoteProducer, leaders


def test_a_refused_batch_is_split_and_only_the_record_too_large_fails(served):
    """Records of 10 B, 2,000 B and 10 B in one batch to a topic with max.message.bytes
    1000: the broker refused the batch (MESSAGE_TOO_LARGE) and nothing was written.
    Kafka's producer splits it and fails only the large record."""
    topic = served.topic(1, **{"max.message.bytes": 1000})
    _, where = leaders(served.bootstrap, [topic])
    values = [b"a" * 10, os.urandom(2000), b"b" * 10, b"c" * 10]     # incompressible
    with RemoteProducer(where) as producer:
        with pytest.raises(ProtocolError) as caught:
            producer.send(topic, 0, encode_batch(values, [b"k"] * 4, 1000, compression="gzip"), 4)
        assert caught.value.code == 10 and "Produce of 1 records" in str(caught.value)
        producer.send(topic, 0, encode_batch([b"after"], None, 1001), 1)
    written = list(served.store.log(topic, 0).read(0).records())
    assert [(r.offset, r.key, r.value, r.timestamp) for r in written] == [
        (0, b"k", b"a" * 10, 1000), (1, b"k", b"b" * 10, 1000), (2, b"k", b"c" * 10, 1000),
        (3, None, b"after", 1001)]
