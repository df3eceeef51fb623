"""The Producer keeps Kafka's semantics when a batch is refused (issue 13, items
1-3): only the offending batch fails, an idempotent partition is never wedged,
and flush()/close() from a send callback do not deadlock."""

import threading

import pytest

from pylog import Producer
from pylog.errors import MessageTooLargeError


def values_of(store, topic, partition=0):
    log = store.log(topic, partition)
    return [r.value for r in log.read(0, 1 << 30).records()] if log.log_end_offset else []


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_refused_record_fails_alone_and_the_partition_goes_on(store, idempotent):
    """After the log refused one record (the topic's max.message.bytes), every later
    send to the partition failed with OutOfOrderSequenceError, and a refused record
    failed every record joined into the same append."""
    store.create_topic("t", 1, {"max.message.bytes": 500})
    config = {} if idempotent else {"acks": "1"}
    with Producer(store, linger_ms=200, batch_size=1, **config) as producer:
        futures = [producer.send("t", b"a"), producer.send("t", b"x" * 2000),
                   producer.send("t", b"b")]
        producer.flush()
        assert futures[0].result(5).offset == 0
        with pytest.raises(MessageTooLargeError):
            futures[1].result(5)
        assert futures[2].result(5).offset == 1
        later = [producer.send("t", b"c%d" % i) for i in range(5)]    # later rounds too
        producer.flush()
        assert [f.result(5).offset for f in later] == [2, 3, 4, 5, 6]
    assert values_of(store, "t") == [b"a", b"b"] + [b"c%d" % i for i in range(5)]


def test_a_refused_send_batch_chunk_does_not_wedge_the_partition(store):
    from pylog.errors import InvalidTimestampError

    store.create_topic("t", 1, {"message.timestamp.before.max.ms": 3_600_000})
    with Producer(store, linger_ms=0) as producer:
        producer.send_batch("t", [b"first"], partition=0).result(5)
        with pytest.raises(InvalidTimestampError):      # stamped 1970: refused by the log
            producer.send_batch("t", [b"y" * 100] * 50, timestamps=[1000] * 50,
                                partition=0).result(5)
        producer.send_batch("t", [b"z"] * 10, partition=0).result(5)
        assert producer.send("t", b"after", partition=0).result(5).offset == 11
    assert values_of(store, "t") == [b"first"] + [b"z"] * 10 + [b"after"]


@pytest.mark.parametrize("acks", ["all", "1"])   # callbacks on the flusher / the sender
def test_flush_inside_a_callback_is_refused_and_close_does_not_deadlock(store, acks):
    store.create_topic("t", 1)
    seen = []
    producer = Producer(store, linger_ms=0, acks=acks)

    def on_done(meta, exc):
        try:
            producer.flush()
        except RuntimeError as err:
            seen.append(str(err))
        producer.close(timeout=5)           # behaves as close(timeout=0): no join on itself
        seen.append("closed")
    producer.send("t", b"v", callback=on_done).result(5)
    done = threading.Event()
    threading.Thread(target=lambda: (producer.close(), done.set()), daemon=True).start()
    assert done.wait(10), "close() after a close() from a callback hung"
    assert "invocation inside a callback is not permitted" in seen[0] and seen[1] == "closed"


def test_keys_follow_a_topic_recreated_with_fewer_partitions(store):
    """After a topic was deleted and re-created with 1 partition instead of 3, keyed
    sends kept hashing over 3 partitions and failed (issue 13, item 4)."""
    store.create_topic("t", 3)
    with Producer(store, linger_ms=0) as producer:
        for i in range(10):
            producer.send("t", b"v", key=b"k%d" % i).result(5)
        store.delete_topic("t")
        store.create_topic("t", 1)
        results = [producer.send("t", b"w", key=b"k%d" % i) for i in range(10)]
        assert {f.result(5).partition for f in results} == {0}
        store.create_partitions("t", 2)
        grown = [producer.send("t", b"x", key=b"k%d" % i).result(5).partition for i in range(20)]
        assert set(grown) == {0, 1}
    assert len(values_of(store, "t", 0)) + len(values_of(store, "t", 1)) == 30


def test_delivery_timeout_expires_batches_that_waited_too_long(store):
    """delivery.timeout.ms was accepted and did nothing (issue 13, item 5)."""
    import time

    from pylog.errors import KafkaTimeoutError

    store.create_topic("t", 1)
    log = store.log("t", 0)
    with Producer(store, linger_ms=0, batch_size=1, delivery_timeout_ms=200) as producer:
        first = producer.send("t", b"first")
        first.result(5)
        with log._lock:                          # the disk stalls: appends wait
            blocked = producer.send("t", b"in-flight")
            time.sleep(0.1)                      # the sender is now waiting on the lock
            late = [producer.send("t", b"late-%d" % i) for i in range(2)]
            time.sleep(0.3)
        assert blocked.result(5).offset == 1
        for f in late:
            with pytest.raises(KafkaTimeoutError, match="delivery.timeout.ms"):
                f.result(5)
        assert producer.send("t", b"after").result(5).offset == 2   # not wedged
    assert values_of(store, "t") == [b"first", b"in-flight", b"after"]


def test_configs_that_would_do_nothing_are_refused(store):
    from pylog import Consumer
    from pylog.errors import ConfigError

    with pytest.raises(ConfigError, match="fetch.min.bytes = 1024: pylog's in-process consumer"):
        Consumer(store, fetch_min_bytes=1024)
    with pytest.raises(ConfigError, match="delivery.timeout.ms = 1 must be at least linger.ms"):
        Producer(store, linger_ms=5, delivery_timeout_ms=1)


def test_a_batch_larger_than_the_topic_allows_is_split(store):
    """Kafka's producer splits a batch the broker refuses as too large and sends the
    halves; so does pylog's, keeping the records' offsets consecutive."""
    store.create_topic("t", 1, {"max.message.bytes": 300})
    with Producer(store, linger_ms=100) as producer:
        futures = [producer.send("t", b"r%02d-" % i + b"x" * 40) for i in range(20)]
        producer.flush()
        assert [f.result(5).offset for f in futures] == list(range(20))
        assert producer.send("t", b"after").result(5).offset == 20    # sequences intact
    batches = store.log("t", 0).read(0, 1 << 20).batches()
    assert len(batches) > 1 and all(b.size_in_bytes <= 300 for b in batches)


@pytest.mark.parametrize("limit", ["max.message.bytes", "segment.bytes"])
@pytest.mark.parametrize("idempotent", [True, False])
def test_a_split_batch_fails_only_its_record_too_large(store, idempotent, limit):
    """Three records of 10 B, 2,000 B and 10 B in one linger window to a topic with
    max.message.bytes 1000 all failed with MessageTooLargeError; Kafka's producer
    splits the batch (RecordAccumulator.splitAndReenqueue) and fails only the large
    record, so the other two are written, and later sends are not wedged. A batch
    over segment.bytes (RecordListTooLargeError) is split the same way."""
    from pylog.errors import RecordListTooLargeError

    error = MessageTooLargeError if limit == "max.message.bytes" else RecordListTooLargeError
    store.create_topic("t", 1, {limit: 1000})
    config = {} if idempotent else {"acks": "1"}
    seen = []
    with Producer(store, linger_ms=200, **config) as producer:
        futures = [producer.send("t", b"a" * 10),
                   producer.send("t", b"x" * 2000, callback=lambda m, e: seen.append((m, e))),
                   producer.send("t", b"b" * 10)]
        producer.flush()
        assert type(seen[0][1]) is error and seen[0][0] is None
        assert futures[0].result(5).offset == 0
        with pytest.raises(error, match=f"{limit} \\(1000\\)"):
            futures[1].result(5)
        assert isinstance(futures[1].exception(5), error)
        assert futures[2].result(5).offset == 1
        assert futures[2].result(5).serialized_value_size == 10
        later = [producer.send("t", b"c%d" % i) for i in range(3)]
        producer.flush()
        assert [f.result(5).offset for f in later] == [2, 3, 4]
    assert values_of(store, "t") == [b"a" * 10, b"b" * 10, b"c0", b"c1", b"c2"]


def test_a_timestamp_no_int64_holds_is_named_and_nothing_is_written(store):
    """timestamps=[2**63] raised a bare "OverflowError: Python int too large to convert
    to C long", on every path that takes timestamps."""
    from pylog.errors import InvalidTimestampError
    from pylog.record import encode_batch

    store.create_topic("t", 1)
    log = store.log("t", 0)
    big = 2**63
    with pytest.raises(InvalidTimestampError, match=f"timestamps\\[0\\] = {big} is invalid"):
        log.append_records([b"x"], timestamps=[big])
    with pytest.raises(InvalidTimestampError, match=f"timestamps\\[1\\] = {-big - 1} is inv"):
        encode_batch([b"x", b"y"], None, [5, -big - 1])
    with pytest.raises(InvalidTimestampError, match=f"timestamps\\[2\\] = {big}"):
        encode_batch([b"x"] * 3, None, (1, 2, big))                 # numpy's conversion
    with pytest.raises(InvalidTimestampError, match=f"timestamp = {big} is invalid"):
        encode_batch([b"x"], None, big)
    with Producer(store, linger_ms=0) as producer:
        with pytest.raises(InvalidTimestampError, match=f"timestamp = {big} is invalid"):
            producer.send("t", b"x", timestamp=big)
        with pytest.raises(InvalidTimestampError, match=f"timestamps\\[1\\] = {big} is inv"):
            producer.send_batch("t", [b"x", b"y"], timestamps=[1, big])
        assert producer.send("t", b"ok", timestamp=(1 << 63) - 1).result(5).offset == 0
    assert log.log_end_offset == 1
