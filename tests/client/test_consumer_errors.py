"""The Consumer keeps Kafka's semantics when something goes wrong (issue 13,
items 6, 9 and 10)."""

import pytest

from pylog import Consumer, TopicPartition, records
from pylog.errors import OffsetOutOfRangeError


def fill(store, topic, n, partitions=1):
    store.create_topic(topic, partitions)
    for p in range(partitions):
        store.log(topic, p).append(records.encode_batch([b"%d" % i for i in range(n)]))


def offsets(consumer, polls=5):
    got = []
    for _ in range(polls):
        got += [r.offset for r in consumer.poll(0.05)]
    return got


@pytest.mark.parametrize("reset, expected", [("earliest", list(range(11))), ("latest", [])])
def test_seek_past_the_log_end_resets_by_auto_offset_reset(store, reset, expected):
    """seek(tp, 100) with the log end at 11 made poll return nothing, kept the position
    at 100 and silently skipped records 11-99 once they arrived."""
    fill(store, "t", 11)
    tp = TopicPartition("t", 0)
    with Consumer(store, auto_offset_reset=reset) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 100)
        assert offsets(consumer) == expected
        assert consumer.position(tp) == 11
        store.log("t", 0).append(records.encode_batch([b"new"]))
        assert offsets(consumer) == [11]


def test_seek_past_the_log_end_raises_when_reset_is_none(store):
    fill(store, "t", 11)
    tp = TopicPartition("t", 0)
    with Consumer(store, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 100)
        with pytest.raises(OffsetOutOfRangeError,
                           match=r"t-0: position 100 is out of range \[0, 11\]") as caught:
            consumer.poll(0.1)
        assert caught.value.topic_partition == ("t", 0)


@pytest.mark.parametrize("arrow", [False, True])
def test_the_position_moves_past_control_batches(store, arrow):
    """A fetch that returned only a control batch made no progress: the consumer
    stayed at its offset for ever."""
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append(records.encode_batch([b"a"]))
    log.append(records.encode_control_batch("commit", producer_id=7, producer_epoch=0),
               origin="coordinator")
    tp = TopicPartition("t", 0)

    def poll():
        if arrow:
            return consumer.poll_arrow(0.2).column("offset").to_pylist()
        return [r.offset for r in consumer.poll(0.2)]
    with Consumer(store, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1)                       # at the control batch, the last one
        assert poll() == []
        assert consumer.position(tp) == 2          # moved past it
        log.append(records.encode_batch([b"b"]))
        assert poll() == [2]
        assert consumer.position(tp) == 3


def test_offsets_for_times_rejects_negative_timestamps(store):
    fill(store, "t", 3)
    with Consumer(store) as consumer:
        with pytest.raises(ValueError, match="non-negative int"):
            consumer.offsets_for_times({TopicPartition("t", 0): -5})


def test_partitions_are_ints(store):
    fill(store, "t", 1, partitions=2)
    for bad in (True, 1.0, "0"):
        with pytest.raises(TypeError, match="partition must be an int"):
            store.log("t", bad)
    with Consumer(store) as consumer:
        with pytest.raises(TypeError, match="partition must be an int"):
            consumer.assign([("t", "0")])


def test_close_after_the_store_closed_or_the_topic_was_deleted(store, tmp_path):
    fill(store, "t", 3)
    consumer = Consumer(store, group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["t"])
    assert len(offsets(consumer, 2)) == 3
    store.delete_topic("t")
    consumer.close()                                     # no error, and closed
    with pytest.raises(RuntimeError, match="closed"):
        consumer.poll(0)
    fill(store, "u", 3)
    manual = Consumer(store, auto_offset_reset="earliest")
    manual.assign([TopicPartition("u", 0)])
    assert len(offsets(manual, 2)) == 3
    store.close()
    manual.close()
    with pytest.raises(RuntimeError, match="closed"):
        manual.poll(0)


def test_deleting_one_subscribed_topic_leaves_the_others_flowing(store):
    """A consumer subscribed to [a, b] raised UnknownTopicOrPartitionError on every poll
    after a was deleted, and b's records were no longer delivered (issue 13, item 7)."""
    fill(store, "a", 3)
    fill(store, "b", 3)
    with Consumer(store, group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["a", "b"])
        assert len(offsets(consumer)) == 6
        store.delete_topic("a")
        store.log("b", 0).append(records.encode_batch([b"more"]))
        assert offsets(consumer) == [3]
        assert consumer.assignment() == {TopicPartition("b", 0)}


def test_a_recreated_topic_is_read_from_its_start(store):
    """The group kept the deleted topic's in-memory position (5): after the topic was
    recreated and 8 records written, only offsets 5-7 came back (issue 13, item 8)."""
    fill(store, "t", 5)
    with Consumer(store, group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["t"])
        assert len(offsets(consumer)) == 5
        consumer.commit()
        store.delete_topic("t")
        assert store.committed("g", "t", 0) is None
        fill(store, "t", 8)
        got = offsets(consumer, 10)
        assert got == list(range(8))


def test_offsets_of_another_type_and_out_of_range_are_named(store):
    """read("0") and seek(tp, "5") raised a bare "'<' not supported between instances
    of 'str' and 'int'" (and seek took 5.0); a Log's OffsetOutOfRangeError named only
    its dir, not the partition and the valid range."""
    import numpy as np

    fill(store, "t", 11)
    log = store.log("t", 0)
    with pytest.raises(TypeError, match="offset must be an int, not str '0'"):
        log.read("0")
    assert log.read(np.int64(3)).batches()                  # numpy's ints are ints
    with pytest.raises(OffsetOutOfRangeError,
                       match=r"^t-0: offset 99 is out of range \[0, 11\]") as caught:
        log.read(99)
    assert caught.value.topic_partition == ("t", 0) and caught.value.log_end_offset == 11
    with pytest.raises(OffsetOutOfRangeError, match=r"^t-0: cannot move the log start offset"):
        log.advance_log_start_offset(12)
    tp = TopicPartition("t", 0)
    with Consumer(store) as consumer:
        consumer.assign([tp])
        for bad, name in (("5", "str '5'"), (5.0, "float 5.0"), (True, "bool True")):
            with pytest.raises(TypeError, match=f"offset must be an int, not {name}"):
                consumer.seek(tp, bad)
        with pytest.raises(ValueError, match="must not be a negative number"):
            consumer.seek(tp, -1)
        consumer.seek(tp, np.int64(4))
        assert consumer.position(tp) == 4
