"""Client behaviours Kafka users rely on, each shown to work and to be able to fail
(issue 14, item 4): auto-commit, pause/resume, asynchronous commits,
unsubscribe, retention overtaking a position, fetch size limits, acks=0,
compression end to end, partitioner.ignore.keys."""

import struct
import threading
import time

import pytest

from pylog import Consumer, Producer, TopicPartition, records
from pylog.errors import OffsetOutOfRangeError


def fill(store, topic, partition, count, size=100, prefix=b""):
    store.log(topic, partition).append(
        records.encode_batch([prefix + b"%06d" % i + b"." * (size - 6 - len(prefix))
                              for i in range(count)]))


def drain(consumer, want, timeout=5.0, **poll):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.poll(0.05, **poll)
    return got


# ---------------------------------------------------------------- auto-commit

def test_auto_commit_is_on_by_default_and_commits_every_interval(store):
    store.create_topic("a", 1)
    fill(store, "a", 0, 10)
    c = Consumer(store, "a", group_id="auto", auto_offset_reset="earliest",
                 auto_commit_interval_ms=200)
    assert len(drain(c, 10)) == 10
    assert store.committed("auto", "a", 0) is None            # the interval has not passed
    time.sleep(0.25)
    c.poll(0)                                                  # the next poll commits
    assert store.committed("auto", "a", 0) == 10
    fill(store, "a", 0, 5)
    assert len(drain(c, 5)) == 5
    c.close()                                                  # and so does close()
    assert store.committed("auto", "a", 0) == 15


def test_auto_commit_off_commits_nothing(store):
    store.create_topic("a", 1)
    fill(store, "a", 0, 10)
    c = Consumer(store, "a", group_id="manual", auto_offset_reset="earliest",
                 enable_auto_commit=False, auto_commit_interval_ms=1)
    assert len(drain(c, 10)) == 10
    time.sleep(0.01)
    c.poll(0)
    c.close()
    assert store.committed("manual", "a", 0) is None


# -------------------------------------------------------------- pause/resume

def test_pause_stops_fetching_a_partition_and_resume_continues_where_it_was(store):
    store.create_topic("p", 2)
    for p in range(2):
        fill(store, "p", p, 20)
    c = Consumer(store, auto_offset_reset="earliest", max_poll_records=5)
    c.assign([("p", 0), ("p", 1)])
    first = c.poll(0)
    c.pause(("p", 0))
    assert c.paused() == {TopicPartition("p", 0)}
    paused_position = c.position(("p", 0))
    while_paused = drain(c, 40 - len(first), timeout=0.5)
    assert {r.partition for r in while_paused} == {1}
    assert c.position(("p", 0)) == paused_position
    c.resume(("p", 0))
    assert c.paused() == set()
    rest = drain(c, 40)
    assert [r.offset for r in rest] == list(range(paused_position, 20))
    assert sorted((r.partition, r.offset) for r in first + while_paused + rest) == \
        [(p, o) for p in range(2) for o in range(20)]
    c.close()


# -------------------------------------------------------- asynchronous commit

def test_asynchronous_commits_are_stored_in_order_and_call_back(store):
    store.create_topic("c", 1)
    fill(store, "c", 0, 1)
    c = Consumer(store, group_id="async", enable_auto_commit=False)
    done = []
    called = threading.Event()

    def callback(offsets, exc):
        done.append((offsets, exc))
        if len(done) == 200:
            called.set()

    for offset in range(1, 201):
        c.commit({("c", 0): offset}, asynchronous=True, callback=callback)
    assert called.wait(10)
    assert [o[TopicPartition("c", 0)] for o, _ in done] == list(range(1, 201))
    assert all(exc is None for _, exc in done)
    assert store.committed("async", "c", 0) == 200
    c.commit({("c", 0): 300}, asynchronous=True)
    c.commit({("c", 0): 301})                  # synchronous: after the asynchronous one
    assert store.committed("async", "c", 0) == 301
    c.close()


def test_a_failed_asynchronous_commit_reaches_its_callback(store):
    c = Consumer(store, group_id="async-fail", enable_auto_commit=False)
    got = []
    c.commit({("no-such-topic", 0): 1}, asynchronous=True, callback=lambda o, e: got.append(e))
    c.close()                                   # waits for the commit thread
    assert len(got) == 1 and "no such partition" in str(got[0])


# ---------------------------------------------------------------- unsubscribe

def test_unsubscribe_leaves_the_group_and_hands_over_the_partitions(store):
    store.create_topic("u", 4)
    for p in range(4):
        fill(store, "u", p, 10)
    a = Consumer(store, "u", group_id="g", auto_offset_reset="earliest")
    b = Consumer(store, "u", group_id="g", auto_offset_reset="earliest")
    assert len(a.assignment()) == 2 and len(b.assignment()) == 2
    got_a = drain(a, 20)
    assert len(got_a) == 20
    a.unsubscribe()
    assert a.assignment() == set() and a.subscription() == set()
    assert a.poll(0) == []
    assert len(b.assignment()) == 4
    got_b = drain(b, 20)
    # a's positions were committed on leaving: b reads only b's own partitions' records.
    assert sorted((r.partition, r.offset) for r in got_a + got_b) == \
        [(p, o) for p in range(4) for o in range(10)]
    assert b.poll(0.1) == []
    a.close()
    b.close()


# ------------------------------------------- retention overtaking a position

@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_retention_overtaking_a_position_resets_it(store, reset):
    store.create_topic("r", 1, {"segment.bytes": 2000, "retention.bytes": 4000})
    log = store.log("r", 0)
    for _ in range(10):
        fill(store, "r", 0, 5, size=100)
    c = Consumer(store, auto_offset_reset=reset)
    c.assign([("r", 0)])
    c.seek(("r", 0), 3)
    log.apply_retention()
    assert log.log_start_offset > 3
    if reset == "none":
        with pytest.raises(OffsetOutOfRangeError, match="out of range"):
            c.poll(0)
    else:
        got = drain(c, 1, timeout=0.5)
        expected = log.log_start_offset if reset == "earliest" else log.log_end_offset
        if reset == "earliest":
            assert got[0].offset == expected
        else:
            assert got == [] and c.position(("r", 0)) == expected
    c.close()


# ---------------------------------------------------------- fetch size limits

def batch_sizes(store, topic, partition):
    """Sizes of the partition's batches, read from the bytes (length field + 12)."""
    data = store.log(topic, partition).read(0, 1 << 30).read()
    sizes, at = [], 0
    while at < len(data):
        sizes.append(struct.unpack_from(">i", data, at + 8)[0] + 12)
        at += sizes[-1]
    return sizes


def test_max_partition_fetch_bytes_and_fetch_max_bytes_bound_a_poll(store):
    store.create_topic("f", 3)
    for p in range(3):
        for _ in range(10):
            fill(store, "f", p, 10, size=100)     # 10 batches of ~1.1 KB per partition
    size = batch_sizes(store, "f", 0)[0]
    c = Consumer(store, auto_offset_reset="earliest", max_partition_fetch_bytes=3 * size,
                 fetch_max_bytes=100 * size)
    c.assign([("f", p) for p in range(3)])
    got = c.poll(0)
    per_partition = {p: sum(r.partition == p for r in got) for p in range(3)}
    assert per_partition == {0: 30, 1: 30, 2: 30}         # 3 whole batches of each partition
    c.close()
    c = Consumer(store, auto_offset_reset="earliest", max_partition_fetch_bytes=100 * size,
                 fetch_max_bytes=4 * size)
    c.assign([("f", p) for p in range(3)])
    assert len(c.poll(0)) == 40                            # 4 batches in all
    c.close()
    # At least one batch, however small the limits (as Kafka, so a consumer never stalls).
    c = Consumer(store, auto_offset_reset="earliest", max_partition_fetch_bytes=1, fetch_max_bytes=1)
    c.assign([("f", 0)])
    assert len(c.poll(0)) == 10
    c.close()


# ------------------------------------------------------------------- producer

def test_acks_0_and_1_deliver_without_waiting_for_a_sync(store):
    store.create_topic("k", 1)
    for acks in (0, "0", 1):
        with Producer(store, acks=acks, linger_ms=0) as p:
            meta = p.send("k", b"v-%s" % str(acks).encode(), key=b"x").result(5)
        assert meta.partition == 0
    assert [r.value for r in store.log("k", 0).read_records(0)] == [b"v-0", b"v-0", b"v-1"]


@pytest.mark.parametrize("codec, code", [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)])
def test_compression_type_reaches_the_stored_batches(store, codec, code):
    store.create_topic("z", 1)
    values = [b"record %d " % i * 20 for i in range(500)]
    with Producer(store, compression_type=codec, linger_ms=50) as p:
        for v in values:
            p.send("z", v)
    data = store.log("z", 0).read(0, 1 << 30).read()
    at, codecs = 0, set()
    while at < len(data):
        codecs.add(struct.unpack_from(">h", data, at + 21)[0] & 7)   # attributes, bits 0-2
        at += struct.unpack_from(">i", data, at + 8)[0] + 12
    assert codecs == {code}
    assert len(data) < sum(map(len, values)) // 3
    with Consumer(store, auto_offset_reset="earliest") as c:
        c.assign([("z", 0)])
        assert [r.value for r in drain(c, 500)] == values


def test_partitioner_ignore_keys_spreads_one_key_over_partitions(store):
    store.create_topic("i", 4)
    for ignore, name in ((False, "by-key"), (True, "sticky")):
        with Producer(store, partitioner_ignore_keys=ignore, batch_size=200, linger_ms=0) as p:
            partitions = {p.send("i", b"x" * 50, key=b"same").result(5).partition
                          for _ in range(200)}
        if ignore:
            assert len(partitions) > 1, name          # sticky: a new partition per batch
        else:
            assert len(partitions) == 1, name
