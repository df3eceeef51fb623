"""Producer against a real store: futures, ordering, durability, back-pressure."""

import concurrent.futures
import hashlib
import threading
import time

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pylog
from log_support import all_records

from pylog import Producer, RecordMetadata
from pylog._core.producer import ProducerBatch
from pylog.client.partitioner import RoundRobinPartitioner, key_partition, partition_keys
from pylog.record import encode_batch
from pylog.errors import (
    ConfigError,
    InvalidTimestampError,
    KafkaTimeoutError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
)


def read_all(store, topic, partition):
    return all_records(store.log(topic, partition))


def test_send_returns_metadata_and_keeps_order(store):
    store.create_topic("t", 3)
    with Producer(store, linger_ms=1) as producer:
        futures = [producer.send("t", b"v%d" % i, key=b"k%d" % (i % 5)) for i in range(300)]
        producer.flush()
        metas = [f.result(5) for f in futures]
    assert all(isinstance(m, RecordMetadata) and m.topic == "t" for m in metas)
    for i, m in enumerate(metas):
        assert m.partition == key_partition(b"k%d" % (i % 5), 3)
        assert m.serialized_value_size == len(b"v%d" % i)
    for p in range(3):
        mine = [(m.offset, i) for i, m in enumerate(metas) if m.partition == p]
        assert [o for o, _ in mine] == list(range(len(mine)))          # dense, in send order
        stored = read_all(store, "t", p)
        assert [r.value for r in stored] == [b"v%d" % i for _, i in mine]


def test_acks_all_completes_after_fsync(store):
    store.create_topic("d", 1)
    with Producer(store, acks="all", linger_ms=0) as producer:
        meta = producer.send("d", b"x").result(5)
        assert store.log("d", 0).recovery_point > meta.offset
    with Producer(store, acks="1", linger_ms=0) as producer:
        meta = producer.send("d", b"y").result(5)
        assert store.log("d", 0).log_end_offset > meta.offset


def test_callback_and_record_too_large(store):
    store.create_topic("c", 1)
    seen = []
    with Producer(store, max_request_size=1000) as producer:
        producer.send("c", b"ok", callback=lambda m, e: seen.append((m, e))).result(5)
        failed = producer.send("c", b"x" * 2000, callback=lambda m, e: seen.append((m, e)))
        with pytest.raises(MessageTooLargeError, match=r"larger than max.request.size \(1000\)"):
            failed.result(1)
    assert seen[0][0].offset == 0 and seen[0][1] is None
    assert seen[1][0] is None and isinstance(seen[1][1], MessageTooLargeError)
    assert store.log("c", 0).log_end_offset == 1


def test_unknown_topic_and_partition(tmp_path):
    with pylog.open(str(tmp_path), auto_create_topics_enable=False) as store:
        store.create_topic("u", 2)
        with Producer(store) as producer:
            with pytest.raises(UnknownTopicOrPartitionError, match="auto.create.topics.enable is false"):
                producer.send("nope", b"x")
            with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0..1, not 5"):
                producer.send("u", b"x", partition=5).result(1)
        assert store.list_topics() == ["u"]


def test_a_first_send_creates_its_topic(tmp_path):
    """auto.create.topics.enable (default true, as Kafka's) was accepted and did nothing
    (issue 13, item 5)."""
    with pylog.open(str(tmp_path), num_partitions=3) as store:
        with Producer(store) as producer:
            assert producer.send("fresh", b"x", key=b"k").result(5).topic == "fresh"
        assert store.describe_topic("fresh").partitions[2].partition == 2


def test_bad_config_names_the_key(store):
    with pytest.raises(ConfigError, match="linger.mss"):
        Producer(store, **{"linger.mss": 5})
    with pytest.raises(ConfigError, match="acks"):
        Producer(store, acks="2")
    with pytest.raises(ConfigError, match="requires acks = all"):
        Producer(store, acks="1", enable_idempotence=True)


@pytest.mark.parametrize("given, expected", [(1, "1"), (0, "0"), (-1, "all"), ("all", "all"),
                                             ("-1", "all"), ("1", "1")])
def test_acks_accepts_kafkas_forms(store, given, expected):
    """Kafka's clients take acks as 1, -1, 0 or "all" (kafka-python users pass ints)."""
    with Producer(store, acks=given) as producer:
        assert producer.config["acks"] == expected
        assert producer.config["enable.idempotence"] == (expected == "all")


def test_acks_rejects_other_values(store):
    for bad in (2, True, 1.5, "one"):
        with pytest.raises(ConfigError, match="acks"):
            Producer(store, acks=bad)


def test_linger_batches_records_then_sends(store):
    store.create_topic("l", 1)
    with Producer(store, linger_ms=300, batch_size=1 << 20) as producer:
        first = producer.send("l", b"a")
        second = producer.send("l", b"b")
        time.sleep(0.05)
        assert not first.done()                      # still lingering
        assert second.result(5).offset == 1
        batches = list(store.log("l", 0).read(0).batches())
        assert len(batches) == 1 and batches[0].records_count == 2   # one batch


def test_futures_work_with_concurrent_futures_wait(store):
    store.create_topic("w", 2)
    with Producer(store, linger_ms=20) as producer:
        futures = [producer.send("w", b"%d" % i) for i in range(50)]
        done, not_done = concurrent.futures.wait(futures, timeout=10)
        assert len(done) == 50 and not not_done
        assert sorted(f.result().offset for f in concurrent.futures.as_completed(futures) if
                      f.result().partition == futures[0].result().partition)[0] == 0


def test_buffer_memory_blocks_then_times_out(store):
    store.create_topic("b", 1)
    log = store.log("b", 0)
    producer = Producer(store, buffer_memory=20_000, max_block_ms=200, linger_ms=0, batch_size=1000)
    log._lock.acquire()                # the sender's append waits on the real log lock
    sent = 0
    try:
        with pytest.raises(KafkaTimeoutError, match=r"buffer.memory \(20000\) is full"):
            for _ in range(1000):
                producer.send("b", b"x" * 100)
                sent += 1
    finally:
        log._lock.release()
    producer.flush(10)
    assert 100 < sent < 1000
    assert log.log_end_offset == sent          # every accepted record, none of the refused one
    producer.close()


def test_written_records_leave_buffer_memory_before_their_fsync(store):
    """acks=all: a round's bytes leave buffer.memory once written, so send()
    keeps filling it while the fsync runs on the flusher thread; the futures
    still complete only after the fsync."""
    store.create_topic("w", 1)
    log = store.log("w", 0)
    producer = Producer(store, acks="all", buffer_memory=40_000, max_block_ms=5_000,
                        linger_ms=60_000, batch_size=16_384)
    log._flush_lock.acquire()          # every fsync of this log waits (the real lock)
    try:
        # 60 kB: more than buffer.memory, less than it plus the three full
        # batches the sender may hold written-and-unsynced (one round being
        # fsynced, one queued, one appended and waiting to be queued).
        futures = [producer.send("w", b"x" * 100) for _ in range(500)]
        deadline = time.monotonic() + 5
        while log.log_end_offset < 3 * (16_384 // 121) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.log_end_offset >= 3 * (16_384 // 121)   # written past buffer.memory...
        assert log.recovery_point == 0
        assert not any(f.done() for f in futures)          # ...and none acknowledged unsynced
    finally:
        log._flush_lock.release()
    producer.flush(10)
    assert [f.result(0).offset for f in futures] == list(range(500))
    assert log.recovery_point == 500
    producer.close()


def test_one_flush_per_log_covers_its_last_append(store):
    """The fsync of a round reaches each log's last append, even when another
    flush already covered an earlier append of that log (group commit must not
    stop at the first offset)."""
    store.create_topic("g", 1)
    log = store.log("g", 0)
    with Producer(store, acks="all") as producer:
        first = log.append(encode_batch([b"a"]))
        log.flush()                                       # covers `first` only
        second = log.append(encode_batch([b"b"]))
        errors = producer._flush_logs([([], log, first), ([], log, second)])
    assert errors == {id(log): None}
    assert log.recovery_point == second.last_offset + 1


def test_close_delivers_pending(store):
    store.create_topic("p", 1)
    producer = Producer(store, linger_ms=10_000, batch_size=1 << 20)
    futures = [producer.send("p", b"%d" % i) for i in range(100)]
    producer.close()
    assert [f.result(0).offset for f in futures] == list(range(100))
    with pytest.raises(RuntimeError, match="closed"):
        producer.send("p", b"late")


def test_sticky_partitioning_for_null_keys(store):
    store.create_topic("s", 4)
    with Producer(store, batch_size=2000, linger_ms=1000) as producer:
        metas = [producer.send("s", b"x" * 100) for _ in range(100)]
        producer.flush()
        parts = [f.result().partition for f in metas]
    runs = [p for i, p in enumerate(parts) if i == 0 or parts[i - 1] != p]
    assert 3 <= len(runs) <= 10            # switches every ~batch.size bytes, not per record
    assert all(a != b for a, b in zip(runs, runs[1:]))


def test_custom_partitioners(store):
    store.create_topic("r", 3)
    with Producer(store, partitioner=RoundRobinPartitioner()) as producer:
        parts = [producer.send("r", b"x", key=b"same").result(5).partition for _ in range(6)]
    assert parts == [0, 1, 2, 0, 1, 2]
    with Producer(store, partitioner=lambda topic, key, value, n: n - 1) as producer:
        assert producer.send("r", b"x").result(5).partition == 2


def test_send_batch_lists_and_arrow(store):
    store.create_topic("sb", 4)
    values = [b"value-%d" % i for i in range(10_000)]
    keys = [b"key-%d" % (i % 97) for i in range(10_000)]
    with Producer(store, max_request_size=64 * 1024) as producer:
        result = producer.send_batch("sb", values, keys).result(10)
        arrow_result = producer.send_batch("sb", pa.array(values), pa.array(keys)).result(10)
    assert result.count == 10_000
    expected_parts = [key_partition(k, 4) for k in keys]
    assert result.partitions.tolist() == expected_parts
    assert arrow_result.partitions.tolist() == expected_parts
    for p in range(4):
        stored = read_all(store, "sb", p)
        rows = [i for i, q in enumerate(expected_parts) if q == p]
        assert [r.value for r in stored] == [values[i] for i in rows] * 2    # both calls, in order
        offsets = result.offsets[[i for i in rows]]
        assert offsets.tolist() == list(range(len(rows)))


def test_send_batch_names_a_record_above_max_request_size_and_writes_nothing(store):
    """A call cut into chunks (above max.request.size) with one record that cannot
    fit any request fails whole, naming that record; an empty call, with keys or
    without, is an empty result."""
    store.create_topic("cut", 3)
    values = [b"v" * 100] * 50
    values[37] = b"x" * 2000
    keys = [b"k%d" % i for i in range(50)]
    with Producer(store, max_request_size=1000) as producer:
        with pytest.raises(MessageTooLargeError,
                           match=r"record 37 is 2\d\d\d bytes when serialized, larger than "
                                 r"max.request.size \(1000\)"):
            producer.send_batch("cut", values, keys)
        with pytest.raises(MessageTooLargeError, match="record 37 "):
            producer.send_batch("cut", pa.array(values), pa.array(keys))
        assert producer.send_batch("cut", [], []).result(5).count == 0
        assert producer.send_batch("cut", []).result(5).count == 0
        del values[37], keys[37]
        result = producer.send_batch("cut", values, keys).result(10)
    assert result.count == 49
    assert sum(len(read_all(store, "cut", p)) for p in range(3)) == 49


@pytest.mark.parametrize("path", ["small", "general", "arrow"])
def test_send_batch_bigger_than_the_topic_allows_is_cut_into_batches_that_fit(store, path):
    """A send_batch call larger than the topic's segment.bytes raised
    RecordListTooLargeError, and one larger than its max.message.bytes failed
    with MessageTooLargeError, though every record fits: Kafka's producer sends
    batches that fit (and splits one refused as too large). The call's chunks
    are cut to fit max.request.size and the topic's max.message.bytes and
    segment.bytes, on each of send_batch's paths: the common call in one C call
    (lists, no timestamps), the general one (timestamps), Arrow columns."""
    store.create_topic("seg", 2, {"segment.bytes": 20_000})
    store.create_topic("mmb", 1, {"max.message.bytes": 3000})
    values = [b"%04d-" % i + b"v" * 995 for i in range(100)]      # ~100 KB in all
    keys = [b"k%d" % (i % 7) for i in range(100)]

    def send(topic, values, keys=None):
        if path == "arrow":
            return producer.send_batch(topic, pa.array(values),
                                       None if keys is None else pa.array(keys))
        timestamps = None if path == "small" else list(range(1000, 1000 + len(values)))
        return producer.send_batch(topic, values, keys, timestamps)

    with Producer(store, linger_ms=0) as producer:
        result = send("seg", values, keys).result(10)
        small = [b"y%02d" % i + b"y" * 97 for i in range(50)]
        assert send("mmb", small).result(10).offsets.tolist() == list(range(50))
    assert result.count == 100
    parts = result.partitions.tolist()
    for p in range(2):
        log = store.log("seg", p)
        assert [r.value for r in read_all(store, "seg", p)] == \
            [v for v, q in zip(values, parts) if q == p]
        assert len(log.segments) >= 2
        assert all(b.size_in_bytes <= 20_000 for b in log.read(0, 1 << 30).batches())
    assert [r.value for r in read_all(store, "mmb", 0)] == small
    assert all(b.size_in_bytes <= 3000 for b in store.log("mmb", 0).read(0, 1 << 30).batches())


def test_send_batch_names_a_record_above_the_topics_limits_and_writes_nothing(store):
    """A record that no batch the topic accepts can hold fails the call before
    anything is written, naming the record and the limit: max.message.bytes
    (MessageTooLargeError, Kafka's MESSAGE_TOO_LARGE) or segment.bytes
    (RecordListTooLargeError, Kafka's RECORD_LIST_TOO_LARGE)."""
    from pylog.errors import RecordListTooLargeError

    store.create_topic("mmb", 1, {"max.message.bytes": 3000})
    store.create_topic("seg", 1, {"segment.bytes": 3000, "max.message.bytes": 5000})
    values = [b"v" * 100] * 30
    values[7] = b"x" * 4000
    with Producer(store, linger_ms=0) as producer:
        with pytest.raises(MessageTooLargeError,
                           match=r"record 7 is 40\d\d bytes when serialized, larger than "
                                 r"max.message.bytes \(3000\) of topic 'mmb'"):
            producer.send_batch("mmb", values)
        with pytest.raises(RecordListTooLargeError,
                           match=r"record 7 is 40\d\d bytes when serialized, larger than "
                                 r"segment.bytes \(3000\) of topic 'seg'"):
            producer.send_batch("seg", values, timestamps=[5] * 30)
        assert producer.send_batch("mmb", [b"after"]).result(5).offsets.tolist() == [0]
    assert store.log("seg", 0).log_end_offset == 0


def test_send_batch_big_chunks_queue_and_overlap_but_keep_every_record_in_place(store):
    """A call whose partition chunks are big queues all but its last chunk for the
    sender (encoding overlaps appending) and appends the last itself; with Kafka's
    defaults (idempotent, acks=all) every record lands where murmur2 puts it, in
    order, at the offsets the result reports, across two calls."""
    store.create_topic("big", 4)
    values = [hashlib.sha256(b"%d" % i).digest() * 3 for i in range(20_000)]   # 96 B
    keys = [b"user-%d" % (i % 1000) for i in range(20_000)]
    with Producer(store) as producer:
        first = producer.send_batch("big", values, keys)
        second = producer.send_batch("big", values, keys)
        results = [first.result(30), second.result(30)]
    parts = [key_partition(k, 4) for k in keys]
    for p in range(4):
        rows = [i for i, q in enumerate(parts) if q == p]
        stored = read_all(store, "big", p)
        assert [r.value for r in stored] == [values[i] for i in rows] * 2
        assert [r.offset for r in stored] == list(range(2 * len(rows)))
        for call, result in enumerate(results):
            assert result.offsets[rows].tolist() == \
                list(range(call * len(rows), (call + 1) * len(rows)))
    assert all(r.partitions.tolist() == parts for r in results)


def test_plan_chunks_groups_rows_stably_and_cuts_at_the_limit():
    """Rows come out grouped by partition in their original order; -1 (a null key)
    goes to the given partition; each partition's rows are cut where the next
    row would pass the limit."""
    import numpy as np

    from pylog._core.producer import plan_chunks
    parts = np.array([2, 0, -1, 2, 1, 0, -1], dtype=np.int32)
    sizes = np.array([10, 20, 30, 40, 50, 60, 70], dtype=np.int64)
    order, chunks, too_large = plan_chunks(parts, sizes, 1, 3, 1000)
    assert order.tolist() == [1, 5, 2, 4, 6, 0, 3] and too_large == -1
    assert chunks == [(0, 0, 2, 80), (1, 2, 5, 150), (2, 5, 7, 50)]
    # Partition 1 holds rows 2, 4, 6 (30, 50, 70): 80 fits, 150 does not.
    order, chunks, _ = plan_chunks(parts, sizes, 1, 3, 80)
    assert chunks == [(0, 0, 2, 80), (1, 2, 4, 80), (1, 4, 5, 70), (2, 5, 7, 50)]
    # No partitions: every row, in order, to the given one.
    order, chunks, _ = plan_chunks(None, sizes, 2, 3, 100)
    assert order.tolist() == list(range(7))
    assert chunks == [(2, 0, 4, 100), (2, 4, 5, 50), (2, 5, 6, 60), (2, 6, 7, 70)]
    # A row above the limit alone is named, and nothing is planned.
    assert plan_chunks(parts, sizes, 1, 3, 65)[1:] == ([], 6)
    assert plan_chunks(None, sizes[:0], 0, 3, 10)[1:] == ([], -1)
    with pytest.raises(ValueError, match="null_partition 3"):
        plan_chunks(parts, sizes, 3, 3, 100)
    with pytest.raises(ValueError, match="6 partitions for 7 sizes"):
        plan_chunks(parts[:6], sizes, 0, 3, 100)
    with pytest.raises(ValueError, match="record size -5 at row 1 is negative"):
        plan_chunks(None, np.array([1, -5, 2], dtype=np.int64), 0, 3, 100)
    # Many one-row chunks: every row its own chunk, none lost.
    ones = np.full(10_000, 7, dtype=np.int64)
    order, chunks, _ = plan_chunks(np.zeros(10_000, dtype=np.int32), ones, 0, 3, 7)
    assert chunks == [(0, i, i + 1, 7) for i in range(10_000)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 60)), max_size=80),
       st.integers(1, 150), st.integers(0, 5))
def test_plan_chunks_matches_a_reference_plan(rows, limit, null_partition):
    """The C plan against the same plan written plainly in Python."""
    import numpy as np

    from pylog._core.producer import plan_chunks
    parts = np.array([p for p, _ in rows], dtype=np.int32)
    sizes = np.array([s for _, s in rows], dtype=np.int64)
    order, chunks, too_large = plan_chunks(parts, sizes, null_partition, 6, limit)
    big = [i for i, (_, s) in enumerate(rows) if s > limit]
    grouped = {p: [i for i, (q, _) in enumerate(rows) if (null_partition if q < 0 else q) == p]
               for p in range(6)}
    if big:
        # The first too-large row in plan order (partition by partition).
        first = next(i for p in range(6) for i in grouped[p] if rows[i][1] > limit)
        assert (chunks, too_large) == ([], first)
        return
    expected, start = [], 0
    for p in range(6):
        run, run_bytes, run_start = [], 0, start
        for i in grouped[p]:
            if run and run_bytes + rows[i][1] > limit:
                expected.append((p, run_start, run_start + len(run), run_bytes))
                run_start += len(run)
                run, run_bytes = [], 0
            run.append(i)
            run_bytes += rows[i][1]
        if run:
            expected.append((p, run_start, run_start + len(run), run_bytes))
        start += len(grouped[p])
    assert order.tolist() == [i for p in range(6) for i in grouped[p]]
    assert (chunks, too_large) == (expected, -1)


def test_plan_rows_agrees_with_the_pass_per_column_functions():
    """send_batch's one-pass plan gives each record's size and partition as the
    separate passes do, and hands any column it cannot read in C back (None)."""
    import numpy as np

    from pylog._core.producer import column_lengths, plan_rows
    values = [b"v" * (i % 7) if i % 5 else None for i in range(300)]
    keys = [b"key-%d" % i if i % 3 else None for i in range(300)]
    sizes, parts, total = plan_rows(values, keys, 6, 21)
    expected = column_lengths(values) + column_lengths(keys) + 21
    assert sizes.tolist() == expected.tolist() and total == int(expected.sum())
    assert parts.tolist() == partition_keys(keys, 6).tolist()
    assert parts.dtype == np.int32 and -1 in parts.tolist()
    assert plan_rows(values, keys, 0, 21)[1] is None          # sizes only
    assert plan_rows(values, None, 6, 21)[0].tolist() == (column_lengths(values) + 21).tolist()
    assert [len(x) for x in plan_rows([], [], 6, 21)[:2]] == [0, 0]
    for other in ([bytearray(b"x")] + values[1:], tuple(values), pa.array(values)):
        assert plan_rows(other, keys, 6, 21) is None
    assert plan_rows(values, ["text"] + keys[1:], 6, 21) is None


def test_send_batch_of_other_bytes_like_and_null_columns(store):
    """Columns plan_rows hands back (bytearrays, memoryviews, a tuple) take the
    general path to the same records and partitions; a str key is refused."""
    store.create_topic("mixed", 3)
    values = [bytearray(b"a"), memoryview(b"bc"), None, b"d"] * 25
    keys = (b"k1", None, b"k3", b"k4") * 25
    with Producer(store) as producer:
        result = producer.send_batch("mixed", values, keys).result(10)
        with pytest.raises(TypeError, match="a key is bytes"):
            producer.send_batch("mixed", [b"x"], ["text"])
    assert result.partitions.tolist()[0::4] == [key_partition(b"k1", 3)] * 25
    stored = {p: read_all(store, "mixed", p) for p in range(3)}
    for i in (0, 1, 3):
        p = int(result.partitions[i])
        record = stored[p][int(result.offsets[i])]
        assert record.value == bytes(values[i]) and record.key == keys[i]
    assert sum(len(v) for v in stored.values()) == 100


def test_send_batch_after_send_keeps_partition_order(store):
    store.create_topic("o", 1)
    with Producer(store, linger_ms=10_000, batch_size=1 << 20) as producer:
        first = producer.send("o", b"first")
        producer.send_batch("o", [b"a", b"b"]).result(5)
        assert first.result(5).offset == 0
    assert [r.value for r in read_all(store, "o", 0)] == [b"first", b"a", b"b"]


def test_concurrent_producers_and_consumers_no_loss_no_duplicates(store):
    """4 producer threads and 2 consumers of one group run together; a checksum
    of everything sent equals one of everything received, and per-partition
    order holds for each producer's records."""
    from pylog import Consumer
    store.create_topic("n", 4)
    per_thread = 5000
    received: list = []
    lock = threading.Lock()
    done = threading.Event()

    def produce(t):
        with Producer(store, linger_ms=2) as producer:
            for i in range(per_thread):
                producer.send("n", b"%d-%d" % (t, i), key=b"%d" % (i % 13))

    def consume():
        with Consumer(store, "n", group_id="sum", auto_offset_reset="earliest") as c:
            while True:
                got = c.poll(0.05)
                with lock:
                    received.extend(got)
                if done.is_set() and not got:
                    break

    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for th in consumers:
        th.start()
    producers = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
    for th in producers:
        th.start()
    for th in producers:
        th.join()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            if len(received) >= 4 * per_thread:
                break
        time.sleep(0.05)
    done.set()
    for th in consumers:
        th.join()
    sent = sorted(b"%d-%d" % (t, i) for t in range(4) for i in range(per_thread))
    got = sorted(r.value for r in received)
    assert hashlib.sha256(b"\n".join(got)).digest() == hashlib.sha256(b"\n".join(sent)).digest()
    for p in range(4):       # in each partition, each producer's records keep their order
        in_partition = sorted((r.offset, r.value) for r in received if r.partition == p)
        for t in range(4):
            seq = [int(v.split(b"-")[1]) for _, v in in_partition if v.startswith(b"%d-" % t)]
            assert seq == sorted(seq)


def test_idempotent_producer_stamps_ids_and_sequences(store):
    store.create_topic("i", 2)
    with Producer(store, linger_ms=0, batch_size=200) as p1, Producer(store, linger_ms=0) as p2:
        for i in range(200):
            p1.send("i", b"%d" % i, key=b"%d" % (i % 7))
        p1.send_batch("i", [b"x"] * 50, partition=1).result(5)
        p2.send("i", b"other", partition=0).result(5)
        p1.flush()
    for partition in range(2):
        batches = list(store.log("i", partition).read(0, 1 << 30).batches())
        ids = {b.producer_id for b in batches}
        assert len(ids) == 2 - partition and -1 not in ids       # p2 wrote to partition 0 only
        mine = [b for b in batches if b.producer_id == min(ids)]
        expected = 0
        for b in mine:                                  # consecutive sequences per partition
            assert b.base_sequence == expected
            expected += b.records_count


def test_idempotence_off_when_acks_is_not_all(store):
    store.create_topic("na", 1)
    with Producer(store, acks="1", linger_ms=0) as producer:
        producer.send("na", b"x").result(5)
    assert next(iter(store.log("na", 0).read(0).batches())).producer_id == -1


def test_retried_batch_after_store_restart_is_not_duplicated(tmp_path):
    """The bytes an idempotent producer wrote, appended again after the store
    restarted (a retry whose acknowledgement was lost), land only once."""
    import pylog
    path = str(tmp_path / "data")
    store = pylog.open(path)
    store.create_topic("rt", 1)
    with Producer(store, linger_ms=0) as producer:
        for i in range(10):
            producer.send("rt", b"%d" % i).result(5)
    log = store.log("rt", 0)
    last = list(log.read(0, 1 << 20).batches())[-1]
    retry_bytes = bytes(last.raw)
    end = log.log_end_offset
    store.close()
    store = pylog.open(path)
    info = store.log("rt", 0).append(retry_bytes)
    assert (info.first_offset, store.log("rt", 0).log_end_offset) == (last.base_offset, end)
    store.close()


def test_idempotent_send_and_send_batch_race_under_back_pressure(store):
    """send() and send_batch() from two threads into one partition with a small
    buffer.memory: sequences must still reach the log in order (no
    OutOfOrderSequenceError), and every record lands once."""
    store.create_topic("race", 1)
    producer = Producer(store, buffer_memory=24 * 1024, max_request_size=16 * 1024,
                        linger_ms=0, batch_size=200)
    errors = []

    def singles():
        futures = [producer.send("race", b"s%d" % i) for i in range(3000)]
        errors.extend(f.exception(30) for f in futures if f.exception(30) is not None)

    def batches():
        for i in range(20):
            try:
                producer.send_batch("race", [b"b%d-%d" % (i, j) for j in range(300)]).result(30)
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=singles), threading.Thread(target=batches)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    producer.close()
    assert errors == []
    assert len(read_all(store, "race", 0)) == 3000 + 20 * 300


@settings(max_examples=150, deadline=None)
@given(records=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)),
                                  st.one_of(st.none(), st.binary(max_size=40)),
                                  st.integers(-1, 2**63 - 1)), min_size=1, max_size=150),
       compression=st.sampled_from(["none", "lz4", "zstd"]),
       ids=st.sampled_from([(-1, -1, -1), (7, 3, 2**31 - 5)]),
       odd=st.sampled_from([None, "bytearray", "headers"]))
def test_a_sealed_batch_encodes_to_encode_batchs_bytes(records, compression, ids, odd):
    """The sender encodes its batches in place (ProducerBatch.encode: the record
    lists and the batch's timestamp array read without copies); the bytes are
    encode_batch's, also when an item or headers send it down encode_batch."""
    batch = ProducerBatch("t", 0)
    for value, key, ts in records:
        batch.add(bytearray(value) if odd == "bytearray" and value else value, key, ts)
    if odd == "headers":
        batch.headers = [[("h", b"x")]] + [None] * (len(records) - 1)
    pid, epoch, seq = ids
    batch.base_sequence = seq
    expected = encode_batch(batch.values, batch.keys, [ts for _, _, ts in records],
                            batch.headers, compression=compression, producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq)
    assert batch.encode(compression, pid, epoch) == expected


def test_a_sealed_batch_with_a_bad_timestamp_fails_as_encode_batch_does():
    batch = ProducerBatch("t", 0)
    batch.add(b"a", None, 5)
    batch.add(b"b", None, -7)
    with pytest.raises(InvalidTimestampError, match=r"timestamps\[1\] = -7 is invalid"):
        batch.encode("none", -1, -1)
