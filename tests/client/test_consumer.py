"""Consumer against a real store: positions, commits, waiting, groups."""

import re
import threading
import time

import pytest

import pylog
from pylog import Consumer, ConsumerRecord, Producer, TopicPartition
from pylog.errors import NoOffsetForPartitionError


def fill(store, topic, partitions, per_partition, prefix=b""):
    with Producer(store, linger_ms=0) as producer:
        for p in range(partitions):
            producer.send_batch(topic, [prefix + b"%d-%d" % (p, i) for i in range(per_partition)],
                                partition=p, timestamps=[1000 + i for i in range(per_partition)]
                                ).result(10)


def drain(consumer, expected, timeout=10):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.poll(0.2)
    return got


def test_assign_poll_position_seek(store):
    store.create_topic("a", 2)
    fill(store, "a", 2, 100)
    c = Consumer(store, auto_offset_reset="earliest", max_poll_records=30)
    c.assign([("a", 0), TopicPartition("a", 1)])
    first = c.poll(1)
    assert len(first) == 30 and isinstance(first[0], ConsumerRecord)
    got = first + drain(c, 170)
    assert sorted((r.partition, r.offset) for r in got) == [(p, i) for p in range(2) for i in range(100)]
    assert all(r.value == b"%d-%d" % (r.partition, r.offset) for r in got)
    assert c.position(("a", 0)) == 100
    c.seek(("a", 0), 42)
    again = c.poll(1, max_records=1)
    assert (again[0].partition, again[0].offset) in ((0, 42),) or again[0].partition == 1
    c.seek_to_beginning()
    assert c.position(("a", 1)) == 0
    c.seek_to_end([("a", 1)])
    assert c.position(("a", 1)) == 100
    c.close()


def test_auto_offset_reset(store):
    store.create_topic("r", 1)
    fill(store, "r", 1, 10)
    latest = Consumer(store, auto_offset_reset="latest")
    latest.assign([("r", 0)])
    assert latest.poll(0) == [] and latest.position(("r", 0)) == 10
    none = Consumer(store, auto_offset_reset="none", group_id="g")
    none.assign([("r", 0)])
    with pytest.raises(NoOffsetForPartitionError, match="auto.offset.reset is none"):
        none.poll(0)


def test_poll_waits_for_an_append_without_busy_looping(store):
    store.create_topic("w", 1)
    c = Consumer(store, auto_offset_reset="earliest")
    c.assign([("w", 0)])
    assert c.poll(0) == []

    def later():
        time.sleep(0.3)
        with Producer(store, linger_ms=0) as p:
            p.send("w", b"hello").result(5)
    threading.Thread(target=later).start()
    started = time.monotonic()
    cpu = time.thread_time()
    got = c.poll(10)
    waited, spent = time.monotonic() - started, time.thread_time() - cpu
    assert [r.value for r in got] == [b"hello"]
    assert 0.25 < waited < 5                       # woken by the append, not the timeout
    assert spent < 0.1 * waited, f"poll used {spent:.3f} s of CPU while waiting {waited:.3f} s"
    c.close()


def test_poll_timeout_with_nothing_to_read_sleeps(store):
    store.create_topic("idle", 2)
    c = Consumer(store, "idle", group_id="g", auto_offset_reset="earliest")
    c.poll(0)
    started, cpu = time.monotonic(), time.thread_time()
    assert c.poll(0.5) == []
    waited, spent = time.monotonic() - started, time.thread_time() - cpu
    assert 0.45 < waited < 3 and spent < 0.05, (waited, spent)
    c.close()


def test_commit_and_committed_survive_restart(tmp_path):
    path = str(tmp_path / "data")
    store = pylog.open(path)
    store.create_topic("c", 1)
    fill(store, "c", 1, 50)
    c = Consumer(store, group_id="grp", auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([("c", 0)])
    drain(c, 50)
    c.commit()
    assert c.committed(("c", 0)) == 50
    c.commit({("c", 0): 20})
    c.close()
    store.close()
    store = pylog.open(path)
    c = Consumer(store, group_id="grp", auto_offset_reset="earliest")
    c.assign([("c", 0)])
    assert c.committed(("c", 0)) == 20
    assert c.poll(1)[0].offset == 20                  # resumes at the committed offset
    c.close()
    store.close()


def test_offsets_for_times(store):
    store.create_topic("t", 1)
    fill(store, "t", 1, 100)
    c = Consumer(store)
    found = c.offsets_for_times({("t", 0): 1050})
    assert found[TopicPartition("t", 0)].offset == 50
    assert c.offsets_for_times({("t", 0): 99_999})[TopicPartition("t", 0)] is None


def test_poll_arrow_matches_poll(store):
    store.create_topic("arrow", 2)
    fill(store, "arrow", 2, 300)
    a = Consumer(store, auto_offset_reset="earliest", max_poll_records=10_000)
    a.assign([("arrow", 0), ("arrow", 1)])
    b = Consumer(store, auto_offset_reset="earliest", max_poll_records=10_000)
    b.assign([("arrow", 0), ("arrow", 1)])
    rb = a.poll_arrow(1)
    records = drain(b, 600)
    assert rb.num_rows == 600
    table = sorted(zip(rb.column("partition").to_pylist(), rb.column("offset").to_pylist(),
                       rb.column("value").to_pylist()))
    assert table == sorted((r.partition, r.offset, r.value) for r in records)
    assert set(rb.column("topic").to_pylist()) == {"arrow"}
    empty = a.poll_arrow(0)
    assert empty.num_rows == 0
    assert rb.schema == empty.schema and rb.schema.names[:3] == ["topic", "partition", "offset"]


def test_poll_arrow_names_each_rows_topic_across_topics(store):
    """The topic column is a dictionary over the polled topics; each row's entry
    names the topic its partition belongs to."""
    for name in ("beta", "alpha"):
        store.create_topic(name, 1)
        fill(store, name, 1, 50, prefix=name.encode())
    c = Consumer(store, auto_offset_reset="earliest", max_poll_records=10_000)
    c.assign([("beta", 0), ("alpha", 0)])
    got = []
    deadline = time.monotonic() + 10
    while sum(rb.num_rows for rb in got) < 100 and time.monotonic() < deadline:
        got.append(c.poll_arrow(1))
    rows = [(t, v) for rb in got
            for t, v in zip(rb.column("topic").to_pylist(), rb.column("value").to_pylist())]
    assert len(rows) == 100 and all(v.startswith(t.encode()) for t, v in rows)
    assert {t for t, _ in rows} == {"alpha", "beta"}


def test_poll_arrow_of_one_partition_at_a_time_names_it_at_every_size(store):
    """A poll of one partition takes its topic and partition columns from columns
    made once for that partition and sliced: polls of growing and shrinking sizes,
    alternating between partitions of two topics, name the right ones every time."""
    store.create_topic("one", 2)
    store.create_topic("two", 1)
    fill(store, "one", 2, 3000, prefix=b"one")
    fill(store, "two", 1, 3000, prefix=b"two")
    consumers = {}
    for topic, partition in (("one", 0), ("one", 1), ("two", 0)):
        c = consumers[(topic, partition)] = Consumer(store, auto_offset_reset="earliest")
        c.assign([(topic, partition)])
    seen = {tp: 0 for tp in consumers}
    for size in (3, 1500, 7, 1200, 1, 250):
        for (topic, partition), c in consumers.items():
            rb = c.poll_arrow(5, max_records=size)
            assert 0 < rb.num_rows <= size
            assert rb.column("topic").to_pylist() == [topic] * rb.num_rows
            assert rb.column("partition").to_pylist() == [partition] * rb.num_rows
            assert rb.column("offset").to_pylist() == list(range(seen[(topic, partition)],
                                                                 seen[(topic, partition)] + rb.num_rows))
            assert all(v.startswith(topic.encode()) for v in rb.column("value").to_pylist())
            rb.validate(full=True)
            seen[(topic, partition)] += rb.num_rows
    for c in consumers.values():
        c.close()


def test_group_shares_partitions_and_rebalances(store):
    store.create_topic("g", 6)
    c1 = Consumer(store, "g", group_id="grp", auto_offset_reset="earliest")
    assert c1.assignment() == {TopicPartition("g", p) for p in range(6)}
    c2 = Consumer(store, "g", group_id="grp", auto_offset_reset="earliest")
    a1, a2 = c1.assignment(), c2.assignment()
    assert a1 | a2 == {TopicPartition("g", p) for p in range(6)} and not a1 & a2
    assert len(a1) == len(a2) == 3
    c3 = Consumer(store, "g", group_id="grp", partition_assignment_strategy="range")
    assert sorted(len(c.assignment()) for c in (c1, c2, c3)) == [2, 2, 2]
    c2.close()
    assert c1.assignment() | c3.assignment() == {TopicPartition("g", p) for p in range(6)}
    c1.close()
    c3.close()


def test_group_roundrobin_across_topics(store):
    store.create_topic("x", 2)
    store.create_topic("y", 2)
    c1 = Consumer(store, group_id="rr", partition_assignment_strategy="roundrobin")
    c1.subscribe(re.compile("x|y"))
    c2 = Consumer(store, group_id="rr", partition_assignment_strategy="roundrobin")
    c2.subscribe(["x", "y"])
    assert c1.assignment() == {TopicPartition("x", 0), TopicPartition("y", 0)}
    assert c2.assignment() == {TopicPartition("x", 1), TopicPartition("y", 1)}


def test_group_members_consume_everything_exactly_once(store):
    """Consumers join and leave while producing continues: every record is
    delivered to exactly one member."""
    store.create_topic("e", 4)
    total = 8000
    received = []
    lock = threading.Lock()
    stop = threading.Event()

    left = []

    def member(lifetime):
        c = Consumer(store, "e", group_id="exactly", auto_offset_reset="earliest")
        deadline = time.monotonic() + lifetime
        while time.monotonic() < deadline and not stop.is_set():
            got = c.poll(0.05)
            with lock:
                received.extend((r.partition, r.offset) for r in got)
        c.close()
        left.append(time.monotonic())

    threads = [threading.Thread(target=member, args=(t,)) for t in (30, 0.6, 1.2, 30)]
    for th in threads:
        th.start()
    late = threading.Thread(target=member, args=(30,))
    with Producer(store, linger_ms=1) as producer:
        for i in range(total):              # paced over ~2 s, members come and go meanwhile
            producer.send("e", b"%d" % i, key=b"%d" % i)
            if i % 200 == 199:
                time.sleep(0.05)
            if i == total // 2:
                late.start()                # a fifth member joins halfway
        producer.flush()
    produced_until = time.monotonic()
    threads.append(late)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with lock:
            if len(received) >= total:
                break
        time.sleep(0.05)
    stop.set()
    for th in threads:
        th.join()
    assert len(left) == 5
    assert sorted(left)[1] < produced_until        # two members left while records kept coming
    assert len(received) == total
    assert len(set(received)) == total                 # no duplicates


def test_poll_arrow_skips_records_before_the_position_and_control_batches(store):
    from pylog import records
    store.create_topic("s", 2)
    for p in range(2):
        store.log("s", p).append(records.encode_batch([b"%d-%d" % (p, i) for i in range(10)]))
    # A control batch (commit marker) in partition 1: offsets are no longer one per row.
    store.log("s", 1).append(records.encode_control_batch("commit", producer_id=1, producer_epoch=0),
                             origin="coordinator")
    store.log("s", 1).append(records.encode_batch([b"1-%d" % i for i in range(11, 15)]))
    c = Consumer(store, auto_offset_reset="earliest", max_poll_records=7)
    c.assign([("s", 0), ("s", 1)])
    c.seek(("s", 0), 5)                       # the middle of partition 0's only batch
    c.seek(("s", 1), 8)
    got = []
    while True:
        rb = c.poll_arrow(0)
        if rb.num_rows == 0:
            break
        assert rb.num_rows <= 7
        got += list(zip(rb.column("partition").to_pylist(), rb.column("offset").to_pylist(),
                        rb.column("value").to_pylist()))
    assert sorted(got) == sorted([(0, o, b"0-%d" % o) for o in range(5, 10)] +
                                 [(1, o, b"1-%d" % o) for o in (8, 9, 11, 12, 13, 14)])
    c.close()
